"""Airflow's trigger form from a DAG's param table (name -> default, JSON schema, description)."""

from __future__ import annotations

from airflow.sdk import Param

from mirrorflow.config.run_options import ParamTable


def trigger_form(table: ParamTable) -> dict[str, Param]:
    return {
        name: Param(default, description=description, **schema)
        for name, (default, schema, description) in table.items()
    }
