"""The JSON documents a run's steps hand each other through the offsets database (plan, copy result,
window summary, verify plan and result: ``store.run_documents``), each with a format marker that is
checked when it is read back.

Invariant: a document is either read whole, with the marker its reader expects, or refused with a
``PlanError`` naming the document, what is wrong and how to make it again: a step never acts on a
half or foreign document.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

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
