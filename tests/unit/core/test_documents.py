"""The JSON documents' base: a document is written with its marker first and read back whole, or
refused with a ``PlanError`` in its own words; every kind of document the product hands between
steps keeps its marker and its words."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import pytest

from mirrorflow.core.documents import Document
from mirrorflow.core.plan import CopyResult, Plan
from mirrorflow.core.verdicts import VerifyResult
from mirrorflow.core.verify_plan import VerifyPlan
from mirrorflow.core.window import WindowSummary
from mirrorflow.errors import PlanError


@dataclass(frozen=True)
class Note(Document):
    marker = ("format", 3)
    what, default_source = "note", "the note"
    remedy = "write the note again"

    text: str
    pages: tuple[int, ...] = ()

    @classmethod
    def _build(cls, raw: dict[str, Any]) -> Note:
        return cls(str(raw["text"]), tuple(int(p) for p in raw["pages"]))


NOTE = Note("hello", (1, 2))


def test_a_document_is_its_marker_then_its_fields_and_reads_back_whole() -> None:
    text = NOTE.to_json()

    assert text == json.dumps({"format": 3, "text": "hello", "pages": [1, 2]}, indent=1)
    assert Note.from_json(text) == NOTE
    assert Note.from_json(text).to_json() == text


@pytest.mark.parametrize(
    ("text", "defect"),
    [
        ('{"format": 3, "text": ', "Expecting value: line 1 column 23 (char 22)"),
        ("[]", "not a JSON object"),
        ('{"format": 2, "text": "x", "pages": []}', "note format 2, expected 3"),
        ('{"text": "x", "pages": []}', "note format None, expected 3"),
        ('{"format": 3, "pages": []}', "'text'"),
        ('{"format": 3, "text": "x", "pages": ["one"]}', "invalid literal for int() with base 10: 'one'"),
        ('{"format": 3, "text": "x", "pages": 7}', "'int' object is not iterable"),
    ],
    ids=["truncated", "list", "other-marker", "no-marker", "no-field", "mistyped", "not-a-list"],
)
def test_a_defect_is_refused_naming_the_source_the_document_and_the_remedy(text: str, defect: str) -> None:
    with pytest.raises(PlanError) as caught:
        Note.from_json(text, "notes/1.json")

    assert str(caught.value) == f"notes/1.json: not a valid note ({defect}); write the note again"


def test_without_a_source_a_message_names_the_default_one() -> None:
    with pytest.raises(PlanError, match=r"^the note: not a valid note \(not a JSON object\)"):
        Note.from_json("null")


def test_a_kind_of_document_must_say_how_it_is_built() -> None:
    @dataclass(frozen=True)
    class Unbuilt(Document):
        marker = ("format", 1)
        what = default_source = remedy = "unbuilt"

    with pytest.raises(TypeError, match="abstract method"):
        Unbuilt()  # type: ignore[abstract]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (Plan, "plan: not a valid plan (not a JSON object); re-run the plan task"),
        (CopyResult, "result: not a valid copy result (not a JSON object); re-run the copy task"),
        (
            WindowSummary,
            "window summary: not a valid DR window summary (not a JSON object); re-run the window task",
        ),
        (VerifyPlan, "verify plan: not a valid verify plan (not a JSON object); plan the verification again"),
        (
            VerifyResult,
            "verify result: not a valid verify result (not a JSON object); run the verification again",
        ),
    ],
)
def test_each_kind_of_document_refuses_in_its_own_words(kind: type[Document], message: str) -> None:
    with pytest.raises(PlanError) as caught:
        kind.from_json("[]")

    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("kind", "marker"),
    [
        (Plan, ("version", 1)),
        (CopyResult, ("version", 1)),
        (WindowSummary, ("window_version", 1)),
        (VerifyPlan, ("version", 3)),
        (VerifyResult, ("digest_scheme", "mirrorflow-v1")),
    ],
)
def test_each_kind_of_document_keeps_its_marker(kind: type[Document], marker: tuple[str, object]) -> None:
    key, value = marker
    with pytest.raises(PlanError, match=re.escape(f"{key.replace('_', ' ')} 'other', expected {value!r})")):
        kind.from_json(json.dumps({key: "other"}))
