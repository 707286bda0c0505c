"""The verify step's documents in the offsets database: the plan and the result saved and read back,
a plan's new version dropping the old result, documents of another run or plan refused."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from verify_cases import FLOW, TWO, A, digest

from mirrorflow.app.verify import (
    load_verify_plan,
    load_verify_result,
    save_verify_result,
    write_verify_plan,
)
from mirrorflow.config.model import MirrorConfig, load_config
from mirrorflow.core.verdicts import PartitionVerdict, VerifyResult
from mirrorflow.errors import PlanError
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import find_document, save_document


def _config(folder: Path) -> MirrorConfig:
    path = folder / "mm2.properties"
    path.write_text(
        "clusters = primary, backup\nprimary.bootstrap.servers = 127.0.0.1:1\n"
        f"backup.bootstrap.servers = 127.0.0.1:2\n{FLOW}.enabled = true\n"
        f"mirrorflow.state.dir = {folder / 'state'}\n"
    )
    return load_config(path, env={})


def test_plan_and_result_are_saved_in_the_offsets_database(tmp_path: Path) -> None:
    config = _config(tmp_path)
    flow = config.flow(FLOW)
    result = VerifyResult(FLOW, "r1", tuple(PartitionVerdict(r, digest(A), digest(A)) for r in TWO.ranges))

    with pytest.raises(PlanError) as missing:
        load_verify_plan(config, flow, "r1")
    assert str(missing.value) == (
        "the verify plan of run r1 of flow primary->backup in the offsets database does not exist; re-run "
        "the task that writes it"
    )
    write_verify_plan(config, flow, TWO)
    save_verify_result(config, flow, result)

    assert load_verify_plan(config, flow, "r1") == TWO
    assert load_verify_result(config, flow, "r1") == result
    # A new plan drops the result of the old one.
    write_verify_plan(config, flow, dataclasses.replace(TWO, ranges=TWO.ranges[:1]))
    with OffsetsStore(config.offsets_db_url) as store:
        assert find_document(store, FLOW, "r1", "verify_result") is None


def test_documents_of_another_run_or_plan_are_refused(tmp_path: Path) -> None:
    config = _config(tmp_path)
    flow = config.flow(FLOW)
    with OffsetsStore(config.offsets_db_url) as store:
        save_document(store, FLOW, "r1", "verify_plan", dataclasses.replace(TWO, run_id="r0").to_json())

    with pytest.raises(PlanError, match="belongs to flow 'primary->backup' run 'r0', not flow"):
        load_verify_plan(config, flow, "r1")
    write_verify_plan(config, flow, TWO)
    stale = VerifyResult(FLOW, "r1", (PartitionVerdict(TWO.ranges[0], digest(A), digest(A)),))
    save_verify_result(config, flow, stale)
    with pytest.raises(PlanError, match="is not the result of"):
        load_verify_result(config, flow, "r1")
