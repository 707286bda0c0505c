"""The JSON documents a run's steps hand each other through the offsets database (plan, copy result,
window summary, verify plan and result: ``store.run_documents``), each with a format marker that is
checked when it is read back.

Invariant: a document is either read whole, with the marker its reader expects, or refused with a
``PlanError`` naming the document, what is wrong and how to make it again: a step never acts on a
half or foreign document. ``Document`` keeps it for every kind of document: each states its marker,
its words and how it is built from its JSON object, and reads and writes the same way.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any, ClassVar, Self, TypeVar

from mirrorflow.errors import PlanError

T = TypeVar("T")


def dump(marker: tuple[str, object], body: Mapping[str, Any]) -> str:
    """``body`` as JSON text with ``marker`` (key, value) first."""
    return json.dumps({marker[0]: marker[1], **body}, indent=1)


def load(
    text: str,
    marker: tuple[str, object],
    build: Callable[[dict[str, Any]], T],
    *,
    what: str,
    source: str,
    remedy: str,
) -> T:
    """``build`` applied to the document in ``text`` once its ``marker`` matched; any defect (not
    JSON, another marker, a missing or mistyped field) is a ``PlanError``:
    ``<source>: not a valid <what> (<defect>); <remedy>``."""
    key, expected = marker
    try:
        raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ValueError("not a JSON object")
        if raw.get(key) != expected:
            raise ValueError(f"{what} {key.replace('_', ' ')} {raw.get(key)!r}, expected {expected!r}")
        return build(raw)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise PlanError(f"{source}: not a valid {what} ({exc}); {remedy}") from exc


class Document(ABC):
    """A document a run's steps hand each other: a frozen dataclass whose fields are its JSON object,
    written after its format ``marker`` (key, value) and read back whole or refused (``load``).

    Each kind states its ``marker``, the words of its errors (``what`` it is, the ``default_source``
    a message names when its reader names none, the ``remedy``) and ``_build``, how it is made from
    its JSON object.
    """

    marker: ClassVar[tuple[str, object]]
    what: ClassVar[str]
    default_source: ClassVar[str]
    remedy: ClassVar[str]
    # Set by @dataclass on each kind: ``to_json`` writes its fields.
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def to_json(self) -> str:
        return dump(self.marker, asdict(self))

    @classmethod
    def from_json(cls, text: str, source: str | None = None) -> Self:
        """The document in ``text``, read from ``source`` (what messages name it by), or a
        ``PlanError``: ``<source>: not a valid <what> (<defect>); <remedy>``."""
        return load(
            text,
            cls.marker,
            cls._build,
            what=cls.what,
            source=cls.default_source if source is None else source,
            remedy=cls.remedy,
        )

    @classmethod
    @abstractmethod
    def _build(cls, raw: dict[str, Any]) -> Self:
        """The document from its JSON object (the marker included, already checked); a missing or
        mistyped field raises ``KeyError``, ``TypeError`` or ``ValueError``."""
