"""Which schemas travel with a flow's records, under which subjects, in which order.

A mirrored topic's subjects are TopicNameStrategy's, ``<topic>-key`` and ``<topic>-value``; on the
target they are named after the remote topic (``<remote topic>-key``, ``<remote topic>-value``), as
the replication policy names it. A schema's references name other subjects (a Protobuf import, an
Avro named type): those travel too, under the same names (renamed only where they are a mirrored
topic's own subject), registered before the schema that refers to them.

Invariants: every version of a synced subject is registered in version order, each after the
versions it refers to; a reference cycle is an error naming the subjects on it; the plan is a pure
function of the source versions it is given, so a retry registers the same schemas in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from mirrorflow.errors import ConfigError

SIDES = ("key", "value")


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


def topic_subjects(
    topics: Iterable[str], remote: Callable[[str], str], selected: Callable[[str], bool]
) -> dict[str, str]:
    """Source subject -> target subject of each side of each topic that ``selected`` keeps."""
    return {
        f"{topic}-{side}": f"{remote(topic)}-{side}"
        for topic in topics
        for side in SIDES
        if selected(f"{topic}-{side}")
    }


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
