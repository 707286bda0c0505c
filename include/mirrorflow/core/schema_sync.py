"""Which schemas travel with a flow's records, under which subjects, in which order.

The subjects of a mirrored topic are those the subject name strategies its serializers use give it
(``config.schemas.STRATEGIES``, Confluent's): TopicNameStrategy's ``<topic>-key`` and
``<topic>-value``, TopicRecordNameStrategy's ``<topic>-<record full name>`` (either side), and
RecordNameStrategy's ``<record full name>``, which names no topic: every such subject of the source
registry belongs to each topic. On the target the first two are named after the remote topic
(``<remote topic>-value``, ``<remote topic>-<record full name>``), as the replication policy names it;
a record's subject keeps its name, as it is every topic's that uses the record. A schema's references
name other subjects (a Protobuf import, an Avro named type): those travel too, under the same names
(renamed only where they are a mirrored topic's own subject), registered before the schema that
refers to them.

Invariants: a record full name is dotted identifiers (Avro's and Protobuf's names, never a hyphen),
so a subject belongs to at most one topic, and which strategy names it is never ambiguous; every
version of a synced subject is registered in version order, each after the versions it refers to; a
reference cycle is an error naming the subjects on it; the plan is a pure function of the source
versions it is given, so a retry registers the same schemas in the same order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from mirrorflow.config.schemas import RECORD_NAME, SIDES, TOPIC_NAME, TOPIC_RECORD_NAME
from mirrorflow.errors import ConfigError

# A record's full name as Avro and Protobuf spell it: dotted identifiers.
_FULL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Reference:
    """A schema's reference: the ``name`` the schema uses for it, and the subject version it means."""

    name: str
    subject: str
    version: int


@dataclass(frozen=True)
class SubjectVersion:
    """One version of a subject in the source registry, as its API returns it."""

    subject: str
    version: int
    schema_id: int
    schema_type: str
    schema: str
    references: tuple[Reference, ...] = ()

    @property
    def key(self) -> tuple[str, int]:
        return self.subject, self.version


def strategy_of(subject: str, topic: str) -> str | None:
    """The strategy under which ``subject`` is one of ``topic``'s subjects, or None."""
    owner, _, name = subject.rpartition("-")
    if owner == topic and name in SIDES:
        return TOPIC_NAME
    if owner == topic and _FULL_NAME.fullmatch(name):
        return TOPIC_RECORD_NAME
    return RECORD_NAME if _FULL_NAME.fullmatch(subject) else None


def topic_subjects(
    held: Iterable[str],
    sides: Mapping[str, Collection[str]],
    remote: Callable[[str], str],
    strategies: Collection[str],
) -> dict[str, str]:
    """Source subject -> target subject of each subject of ``held`` (the source registry's) that one
    of ``strategies`` gives a side of a topic in ``sides`` (source topic -> the sides whose subjects
    count: ``key``, ``value``)."""
    any_side = any(sides.values())
    subjects: dict[str, str] = {}
    for subject in held:
        topic, _, name = subject.rpartition("-")
        if topic in sides and name in SIDES:
            if TOPIC_NAME in strategies and name in sides[topic]:
                subjects[subject] = f"{remote(topic)}-{name}"
        elif topic in sides and _FULL_NAME.fullmatch(name):
            if TOPIC_RECORD_NAME in strategies and sides[topic]:
                subjects[subject] = f"{remote(topic)}-{name}"
        elif RECORD_NAME in strategies and any_side and _FULL_NAME.fullmatch(subject):
            subjects[subject] = subject
    return subjects


def registration_order(
    versions: Mapping[tuple[str, int], SubjectVersion], wanted: Iterable[tuple[str, int]]
) -> list[SubjectVersion]:
    """``wanted`` (subject, version) pairs and everything they refer to, each after what it refers
    to, ``wanted`` in the order given; ``versions`` must hold every one of them."""
    order: list[SubjectVersion] = []
    done: set[tuple[str, int]] = set()

    def visit(key: tuple[str, int], path: tuple[tuple[str, int], ...]) -> None:
        if key in done:
            return
        if key in path:
            cycle = " -> ".join(f"{s} version {v}" for s, v in (*path[path.index(key) :], key))
            raise ConfigError(f"the source registry's schemas refer to each other in a cycle: {cycle}")
        version = versions[key]
        for ref in version.references:
            visit((ref.subject, ref.version), (*path, key))
        done.add(key)
        order.append(version)

    for key in wanted:
        visit(key, ())
    return order
