"""The verify step of a cutover: does the target hold exactly the records the flow mirrored?

``plan_verification`` makes the verify plan of a flow from its batch log (offsets database) and both
clusters' log starts now, and writes it to the run's folder; the verify job
(``jobs/mirror_verify.py``: ``mirrorflow.copy.spark_verify.verify_ranges``) compares both sides of
every range and writes the result next to it; ``load_verify_result`` hands it to the cutover. What a
verification compares and what it cannot see: ``mirrorflow.core.verify_plan``; how the digest is
made: ``mirrorflow.core.digest``; what counts as a difference: ``mirrorflow.core.verdicts``.

Imports no pyspark: the plan task runs where pyspark is not installed.
"""

from __future__ import annotations

from mirrorflow.app.schemas import with_schema_ids
from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.core.verdicts import VerifyResult
from mirrorflow.core.verify_plan import (
    CLEANUP_POLICY,
    TIMESTAMP_TYPE,
    VerifyPlan,
    compacts,
    stamps_append_time,
    verify_plan,
)
from mirrorflow.errors import PlanError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.store.offsets_store import OffsetsStore
from mirrorflow.store.run_documents import describe, read_document, save_document

__all__ = [
    "load_verify_plan",
    "load_verify_result",
    "plan_verification",
    "save_verify_result",
    "write_verify_plan",
]


def write_verify_plan(config: MirrorConfig, flow: FlowConfig, plan: VerifyPlan) -> None:
    """Save ``plan`` for the verify job; removes an earlier result of the same run, which would
    describe another plan."""
    with OffsetsStore(config.offsets_db_url) as store:
        save_document(
            store, flow.name, plan.run_id, "verify_plan", plan.to_json(), supersedes=["verify_result"]
        )


def load_verify_plan(config: MirrorConfig, flow: FlowConfig, run_id: str) -> VerifyPlan:
    with OffsetsStore(config.offsets_db_url) as store:
        text = read_document(store, flow.name, run_id, "verify_plan", "verify plan")
    where = describe(flow.name, run_id, "verify plan")
    plan = VerifyPlan.from_json(text, where)
    plan.check_belongs_to(flow.name, run_id, where)
    return plan


def save_verify_result(config: MirrorConfig, flow: FlowConfig, result: VerifyResult) -> None:
    with OffsetsStore(config.offsets_db_url) as store:
        save_document(store, flow.name, result.run_id, "verify_result", result.to_json())


def load_verify_result(config: MirrorConfig, flow: FlowConfig, run_id: str) -> VerifyResult:
    """The result of the run's verification; it must be of the run's verify plan as it is now."""
    with OffsetsStore(config.offsets_db_url) as store:
        text = read_document(store, flow.name, run_id, "verify_result", "verify result")
    result = VerifyResult.from_json(text, describe(flow.name, run_id, "verify result"))
    plan = load_verify_plan(config, flow, run_id)
    if (result.flow, result.run_id) != (plan.flow, plan.run_id) or tuple(
        v.range for v in result.partitions
    ) != plan.ranges:
        raise PlanError(
            f"{describe(flow.name, run_id, 'verify result')} is not the result of the run's verify plan; run "
            "the verification again"
        )
    return result


def plan_verification(
    config: MirrorConfig, flow_name: str, run_id: str, topics: frozenset[str] = frozenset()
) -> VerifyPlan:
    """Plan the verification of ``flow_name`` from its batch log, both clusters' log starts now and
    its topics' configs (which compact, which remote topics stamp LogAppendTime), and write the plan
    for the verify job. Read-only on the clusters and the offsets database: it
    needs no lock, and a mirror run may go on meanwhile (what it commits later is not compared)."""
    flow = config.flow(flow_name)
    with OffsetsStore(config.offsets_db_url) as store:
        batches = [b for b in store.batches(flow.name) if not topics or b.topic in topics]
    source_tps = sorted({(b.topic, b.partition) for b in batches})
    target_tps = sorted({(b.remote_topic, b.partition) for b in batches})
    with ClusterAdmin(flow.source) as source, ClusterAdmin(flow.target) as target:
        log_starts = source.earliest_offsets(source_tps)
        target_log_starts = target.earliest_offsets(target_tps)
        source_configs = source.effective_topic_configs({t for t, _ in source_tps}, [CLEANUP_POLICY])
        target_configs = target.effective_topic_configs(
            {t for t, _ in target_tps}, [CLEANUP_POLICY, TIMESTAMP_TYPE]
        )
    plan = verify_plan(
        flow.name,
        run_id,
        batches,
        log_starts,
        topics,
        target_log_starts=target_log_starts,
        # Either cluster may compact its copy on its own.
        compacted={
            b.topic
            for b in batches
            if compacts(source_configs[b.topic]) or compacts(target_configs[b.remote_topic])
        },
        log_append_time={t for t, configs in target_configs.items() if stamps_append_time(configs)},
    )
    plan = with_schema_ids(flow, plan, {b.topic: b.remote_topic for b in batches}, only_look=True)
    write_verify_plan(config, flow, plan)
    return plan
