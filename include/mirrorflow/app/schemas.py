"""Schemas travel with the data: a plan's subjects synced from the source registry to the target's,
and the map of schema ids its copy applies (``core.schema_ids``).

Invariants:
- The sync runs after the plan read the source's ends: a record in the planned range was produced
  after its serializer registered its schema at the source, so its schema is among those read.
- It reads every version of each subject that the flow's strategies give a side of a mirrored topic
  not declared plain (``core.schema_sync``), whatever ``subjects.include``/``.exclude`` say: the map
  knows every id those subjects hold, synced or left out, so that a record carrying one is refused
  on a framed side when left out, and on an undeclared side always, never passed on unmapped.
- Every version of each selected subject is registered on the target, in version order, each after
  the subject versions it refers to; registering a schema a subject already holds changes nothing,
  so a retried plan task syncs again safely.
- A source id maps to exactly one target id; two target ids for one source id is a
  ``TargetStateError`` naming both subjects, never a guess.
- Heartbeats topics are MM2's, never in the wire format: no side of theirs is listed in the map.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import TypeVar

from mirrorflow.config.model import FlowConfig
from mirrorflow.config.schemas import FRAMED, PLAIN, SIDES, UNDECLARED
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
    return dataclasses.replace(plan, schema_ids=sync_schemas(flow, remote_names, only_look=only_look))


def sync_schemas(
    flow: FlowConfig, remote_names: Mapping[str, str], *, only_look: bool = False
) -> SchemaIdMap:
    """Sync the subjects of ``remote_names``' topics (source topic -> remote topic) that the source
    registry holds and the flow's schema sync selects; the id map of everything registered.
    ``only_look``: the map of what the target already holds, registering nothing, for a
    verification: it lists no undeclared side (the copy wrote those as they were)."""
    sync = flow.schemas
    assert sync is not None, "a flow without registries syncs no schemas"
    declared = sync.sides(remote_names, flow.replication_policy)
    source, target = Registry(sync.source, "source"), Registry(sync.target, "target")
    read = topic_subjects(
        source.subjects(),
        {t: [s for s, how in sides.items() if how != PLAIN] for t, sides in declared.items()},
        remote_names.__getitem__,
        sync.strategies,
    )
    renamed = {subject: remote for subject, remote in read.items() if sync.selects(subject)}
    versions = {(s, v): source.version(s, v) for s in sorted(read) for v in source.versions(s)}
    wanted = [key for key in versions if key[0] in renamed]
    pending = [(r.subject, r.version) for key in wanted for r in versions[key].references]
    while pending:
        key = pending.pop()
        if key not in versions:
            versions[key] = source.version(*key)
            pending.extend((r.subject, r.version) for r in versions[key].references)
    ids = _register(flow.name, target, renamed, versions, wanted, only_look=only_look)
    log.info(
        "flow %s: %d subjects, %d schemas %s %s",
        flow.name,
        len(renamed),
        len(ids),
        "found in" if only_look else "synced to",
        target.url,
    )
    holders: dict[int, str] = {}
    for version in versions.values():
        holders.setdefault(version.schema_id, version.subject)
    framed, undeclared = (
        [tuple(t for t, sides in declared.items() if sides[side] == how) for side in SIDES]
        for how in (FRAMED, UNDECLARED)
    )
    return SchemaIdMap(
        ids=tuple(sorted(ids.items())),
        held=tuple(sorted(holders.items())),
        subjects=tuple(sorted(renamed)),
        framed_keys=framed[0],
        framed_values=framed[1],
        undeclared_keys=() if only_look else undeclared[0],
        undeclared_values=() if only_look else undeclared[1],
        registry=sync.source.url,
        strategies=sync.strategies,
    )


def _register(
    flow: str,
    target: Registry,
    renamed: Mapping[str, str],
    versions: Mapping[tuple[str, int], SubjectVersion],
    wanted: list[tuple[str, int]],
    *,
    only_look: bool,
) -> dict[int, int]:
    """Register (or, ``only_look``, find) on ``target`` the ``wanted`` versions and what they refer
    to, each under its target subject; source id -> target id of each."""
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
    return {source_id: target_id for source_id, (target_id, _) in ids.items()}
