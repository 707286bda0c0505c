"""The verify step of a cutover: does the target hold exactly the records the flow mirrored?

``plan_verification`` makes the verify plan of a flow from its batch log (offsets database) and both
clusters' log starts now, and writes it to the run's folder; the verify job
(``jobs/mirror_verify.py``: ``mirrorflow.copy.spark_verify.verify_ranges``) compares both sides of
every range and writes the result next to it; ``load_verify_result`` hands it to the cutover. What a
verification compares, how the digest is made and what it cannot see: ``mirrorflow.core.verify``.

Imports no pyspark: the plan task runs where pyspark is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mirrorflow.config.model import FlowConfig, MirrorConfig
from mirrorflow.core.plan import read_file, run_dir, write_atomically
from mirrorflow.core.verify import VerifyPlan, VerifyResult, verify_plan
from mirrorflow.errors import PlanError
from mirrorflow.kafka.admin import ClusterAdmin
from mirrorflow.store.offsets_store import OffsetsStore

__all__ = [
    "VerifyFiles",
    "load_verify_plan",
    "load_verify_result",
    "plan_verification",
    "save_verify_result",
    "verify_files",
    "write_verify_plan",
]


@dataclass(frozen=True)
class VerifyFiles:
    plan: Path
    result: Path


def verify_files(config: MirrorConfig, flow: FlowConfig, run_id: str) -> VerifyFiles:
    """The verification's files in the run's folder, next to a copy's plan and result."""
    folder = run_dir(config.state_dir, flow.name, run_id)
    return VerifyFiles(folder / "verify_plan.json", folder / "verify_result.json")


def write_verify_plan(config: MirrorConfig, flow: FlowConfig, plan: VerifyPlan) -> Path:
    """Write ``plan`` for the verify job (atomically); removes an earlier result of the same run,
    which would describe another plan."""
    files = verify_files(config, flow, plan.run_id)
    write_atomically(files.plan, plan.to_json())
    files.result.unlink(missing_ok=True)
    return files.plan


def load_verify_plan(config: MirrorConfig, flow: FlowConfig, run_id: str) -> VerifyPlan:
    path = verify_files(config, flow, run_id).plan
    plan = VerifyPlan.from_json(read_file(path, "verify plan"), str(path))
    plan.check_belongs_to(flow.name, run_id, str(path))
    return plan


def save_verify_result(config: MirrorConfig, flow: FlowConfig, result: VerifyResult) -> Path:
    path = verify_files(config, flow, result.run_id).result
    write_atomically(path, result.to_json())
    return path


def load_verify_result(config: MirrorConfig, flow: FlowConfig, run_id: str) -> VerifyResult:
    """The result of the run's verification; it must be of the plan the run's folder holds now."""
    files = verify_files(config, flow, run_id)
    result = VerifyResult.from_json(read_file(files.result, "verify result"), str(files.result))
    plan = load_verify_plan(config, flow, run_id)
    if (result.flow, result.run_id) != (plan.flow, plan.run_id) or tuple(
        v.range for v in result.partitions
    ) != plan.ranges:
        raise PlanError(f"{files.result} is not the result of {files.plan}; run the verification again")
    return result


def plan_verification(
    config: MirrorConfig, flow_name: str, run_id: str, topics: frozenset[str] = frozenset()
) -> VerifyPlan:
    """Plan the verification of ``flow_name`` from its batch log and both clusters' log starts now,
    and write the plan for the verify job. Read-only on the clusters and the offsets database: it
    needs no lock, and a mirror run may go on meanwhile (what it commits later is not compared)."""
    flow = config.flow(flow_name)
    with OffsetsStore(config.offsets_db_url) as store:
        batches = [b for b in store.batches(flow.name) if not topics or b.topic in topics]
    source_tps = sorted({(b.topic, b.partition) for b in batches})
    target_tps = sorted({(b.remote_topic, b.partition) for b in batches})
    with ClusterAdmin(flow.source) as source, ClusterAdmin(flow.target) as target:
        log_starts = source.earliest_offsets(source_tps)
        target_log_starts = target.earliest_offsets(target_tps)
    plan = verify_plan(flow.name, run_id, batches, log_starts, topics, target_log_starts=target_log_starts)
    write_verify_plan(config, flow, plan)
    return plan
