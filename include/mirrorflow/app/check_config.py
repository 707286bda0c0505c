"""``python -m mirrorflow check-config FILE``: what a config file means before any run. It prints each
enabled flow with its resolved settings, what this product does with every key of the file
(honoured, no effect, refused: ``mirrorflow.config.keys``), and, where the source cluster answers,
the topics the flow would mirror now; two flows that would write one remote topic (as the sources'
topics stand) make it exit 1, naming them. Writes nothing anywhere."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from mirrorflow.app.remote_topics import select_topics
from mirrorflow.config.keys import Treatment
from mirrorflow.config.model import FlowConfig, MirrorConfig, load_config
from mirrorflow.config.property_view import BROKER_DEFAULT_RF
from mirrorflow.config.state import one_machine_advice
from mirrorflow.config.strimzi import secrets_folder, to_properties
from mirrorflow.errors import ConfigError, MirrorError
from mirrorflow.kafka.admin import ClusterAdmin


def describe(config: MirrorConfig, out: TextIO, *, topics: bool) -> bool:
    """The report, without the cluster reads when ``topics`` is False; whether it found the config
    sound (no two flows would write one remote topic, as the sources' topics stand now)."""
    print(f"config {config.path}: clusters {', '.join(config.clusters)}", file=out)
    chosen_by = config.state_dir_chosen_by or "the default, in Airflow's home"
    print(f"state folder {config.state_dir} ({chosen_by})", file=out)
    advice = one_machine_advice(config.state_dir_chosen_by, config.offsets_db_url)
    if advice:
        print(f"  {advice}", file=out)
    if not config.flows:
        print("no enabled flow: enable one with `<source>-><target>.enabled = true`", file=out)
    writers: dict[tuple[str, str], list[str]] = {}
    for flow in config.flows:
        _flow(flow, out)
        if topics:
            for remote in _topics(flow, out):
                writers.setdefault((flow.target.alias, remote), []).append(flow.name)
    shared = {where: flows for where, flows in writers.items() if len(flows) > 1}
    for (cluster, remote), flows in sorted(shared.items()):
        print(
            f"error: flows {' and '.join(flows)} would all write topic {remote} on cluster {cluster}: each "
            "would stop at the others' records as someone else's. Exclude the topic from all of them but "
            "one (`<flow>.topics.exclude`), or use DefaultReplicationPolicy",
            file=out,
        )
    print("keys:", file=out)
    width = max(len(t.value) for t in Treatment)
    for use in sorted(config.keys, key=lambda u: (list(Treatment).index(u.treatment), u.written)):
        print(f"  {use.treatment.value:<{width}}  {use.written}: {use.note}", file=out)
    return not shared


def _flow(flow: FlowConfig, out: TextIO) -> None:
    settings, policy = flow.settings, flow.replication_policy
    lines = {
        "DAGs": ", ".join(flow.dag_ids),
        "mode": f"dr, windows of {flow.dr.window_seconds} s" if flow.dr else "batch",
        "source": f"{flow.source.alias} ({flow.source.bootstrap_servers})",
        "target": f"{flow.target.alias} ({flow.target.bootstrap_servers})",
        "topics": ", ".join(flow.topics),
        "topics.exclude": ", ".join(flow.topics_exclude),
        "groups": ", ".join(flow.groups),
        "groups.exclude": ", ".join(flow.groups_exclude),
        "remote topic of t": policy.format_remote_topic(flow.source.alias, "t"),
        "replication factors (remote topics; offset syncs, checkpoints, heartbeats)": (
            f"{_rf(flow.replication_factor)}; "
            + ", ".join(
                _rf(rf)
                for rf in (
                    flow.offset_syncs_topic_replication_factor,
                    flow.checkpoints_topic_replication_factor,
                    flow.heartbeats_topic_replication_factor,
                )
            )
        ),
        "checkpoints, group offset sync, heartbeats, offset syncs": ", ".join(
            "on" if on else "off"
            for on in (
                flow.emit_checkpoints,
                flow.sync_group_offsets,
                flow.emit_heartbeats,
                flow.emit_offset_syncs,
            )
        ),
        "reverse checkpoints": (
            f"on, through {flow.opposite}'s batch log" if settings.reverse_checkpoints else "off"
        ),
        "topic configs, ACLs synced": ", ".join(
            "yes" if on else "no" for on in (flow.sync_topic_configs, flow.sync_topic_acls)
        ),
        "schedule": settings.schedule or "none (manual runs)",
        "Spark": f"connection {settings.spark_conn_id}, deploy mode {settings.spark_deploy_mode}",
        "records per partition per run": str(settings.max_records_per_partition),
        "on source data loss": settings.on_source_data_loss,
    }
    print(f"flow {flow.name}", file=out)
    for name, value in lines.items():
        print(f"  {name}: {value}", file=out)


def _rf(replication_factor: int) -> str:
    return "broker default" if replication_factor == BROKER_DEFAULT_RF else str(replication_factor)


def _topics(flow: FlowConfig, out: TextIO) -> list[str]:
    """Print the topics ``flow`` would mirror now (its source asked); their remote topics."""
    try:
        with ClusterAdmin(flow.source) as source:
            selected = select_topics(flow, source)
    except MirrorError as error:
        print(f"  topics it would mirror now: unknown, {error}", file=out)
        return []
    listed = ", ".join(f"{t} ({d.partitions} partitions)" for t, d in sorted(selected.items()))
    print(f"  topics it would mirror now: {listed or 'none'}", file=out)
    return [flow.replication_policy.format_remote_topic(flow.source.alias, t) for t in selected]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mirrorflow check-config", description=__doc__)
    parser.add_argument("file", help="the mm2.properties file")
    parser.add_argument(
        "--no-topics", action="store_true", help="do not ask the source clusters which topics they hold"
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(args.file)
    except ConfigError as error:
        print(f"invalid config: {error}", file=sys.stderr)
        return 1
    return 0 if describe(config, sys.stdout, topics=not args.no_topics) else 1


def strimzi_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mirrorflow strimzi-to-properties",
        description="Print the mm2.properties a Strimzi KafkaMirrorMaker2 resource means.",
    )
    parser.add_argument("file", help="the KafkaMirrorMaker2 YAML")
    parser.add_argument(
        "--secrets", help="the folder of Kubernetes secrets, one folder per secret (default: env "
        "MIRROR_SECRETS_DIR, else secrets/ beside the file)"
    )  # fmt: skip
    args = parser.parse_args(argv)
    path = Path(args.file).absolute()
    secrets = Path(args.secrets).absolute() if args.secrets else secrets_folder(path.parent, os.environ)
    try:
        print(to_properties(path.read_text(encoding="utf-8"), str(path), secrets), end="")
    except (ConfigError, OSError) as error:
        print(f"invalid resource: {error}", file=sys.stderr)
        return 1
    return 0
