"""Schemas travel with the data: a plan's subjects synced from the source registry to the target's,
and the map of schema ids its copy applies (``core.schema_ids``).

Invariants:
- The sync runs after the plan read the source's ends: a record in the planned range was produced
  after its serializer registered its schema at the source, so its schema is among those synced.
- Every version of each synced subject is registered on the target, in version order, each after
  the subject versions it refers to (``core.schema_sync``); registering a schema a subject already
  holds changes nothing, so a retried plan task syncs again safely.
- A source id maps to exactly one target id; two target ids for one source id is a
  ``TargetStateError`` naming both subjects, never a guess.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import TypeVar

from mirrorflow.config.model import FlowConfig
from mirrorflow.config.schemas import SchemaSync
from mirrorflow.core.plan import Plan
from mirrorflow.core.schema_ids import SchemaIdMap
from mirrorflow.core.schema_sync import Reference, SubjectVersion, registration_order, topic_subjects
from mirrorflow.core.verify_plan import VerifyPlan
from mirrorflow.errors import TargetStateError
from mirrorflow.kafka.schema_registry import Registry

log = logging.getLogger(__name__)

PlanT = TypeVar("PlanT", Plan, VerifyPlan)


def with_schema_ids(
    flow: FlowConfig, plan: PlanT, remote_names: Mapping[str, str], *, only_look: bool = False
) -> PlanT:
    """``plan`` with the id map of ``flow``'s schema sync (``sync_schemas``) of ``remote_names``'
    topics; as it is when the flow syncs no schemas."""
    if flow.schemas is None:
        return plan
    ids = sync_schemas(flow.name, flow.schemas, remote_names, only_look=only_look)
    return dataclasses.replace(plan, schema_ids=ids)


def sync_schemas(
    flow: str, sync: SchemaSync, remote_names: Mapping[str, str], *, only_look: bool = False
) -> SchemaIdMap:
    """Sync the subjects of ``remote_names``' topics (source topic -> remote topic) that the source
    registry holds and ``sync`` selects; the id map of everything registered. ``only_look``: the
    map of what the target already holds, registering nothing (a verification's)."""
    source, target = Registry(sync.source, "source"), Registry(sync.target, "target")
    held = source.subjects()
    renamed = {
        subject: remote
        for subject, remote in topic_subjects(remote_names, remote_names.__getitem__, sync.selects).items()
        if subject in held
    }
    versions: dict[tuple[str, int], SubjectVersion] = {}
    wanted = [(s, v) for s in sorted(renamed) for v in source.versions(s)]
    pending = list(wanted)
    while pending:
        key = pending.pop()
        if key not in versions:
            versions[key] = source.version(*key)
            pending.extend((r.subject, r.version) for r in versions[key].references)
    ids: dict[int, tuple[int, str]] = {}
    target_versions: dict[tuple[str, int], int] = {}
    for version in registration_order(versions, wanted):
        subject = renamed.get(version.subject, version.subject)
        references = tuple(
            Reference(r.name, renamed.get(r.subject, r.subject), target_versions[(r.subject, r.version)])
            for r in version.references
        )
        target_id, target_versions[version.key] = target.register(
            subject, version, references, only_look=only_look
        )
        earlier = ids.setdefault(version.schema_id, (target_id, subject))
        if earlier[0] != target_id:
            raise TargetStateError(
                f"flow {flow}: source schema id {version.schema_id} is id {earlier[0]} under subject "
                f"{earlier[1]} and id {target_id} under {subject} in the target registry {target.url}: "
                "its records cannot keep one meaning there; make the target registry hold the schema "
                "once (one id for one schema), then run the flow again"
            )
    synced = {s for s, _ in wanted}
    log.info(
        "flow %s: %d subjects, %d schema versions %s %s",
        flow,
        len(synced),
        len(versions),
        "found in" if only_look else "synced to",
        target.url,
    )
    return SchemaIdMap(
        tuple(sorted((s, t) for s, (t, _) in ids.items())),
        tuple(sorted(t for t in remote_names if f"{t}-key" in synced)),
        tuple(sorted(t for t in remote_names if f"{t}-value" in synced)),
    )
