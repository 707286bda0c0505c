"""The verdicts of a verification: each range compared by digest or record by record, and the
verify result document.

A range compared by digest matches when both sides hold as many records with the same digest
(``core.digest``). A range compared record by record (``VerifyRange.by_record``) is keyed by source
offset, and each source offset is found as one of ``KINDS``: a record on both clusters must be the
same (its ``record_digest``); a source record at an offset the copy wrote nothing from is a
difference (never copied), as is a record that differs. In a compacted range, a record on the
target only was compacted away on the source after it was copied, and one on the source only, at an
offset the copy wrote a record from, was compacted away on the target: an append-only log loses
records from its middle only by compaction (and deletions before a log start are planned around),
so neither is a difference; both are counted and the first few named. In a LogAppendTime range that
does not compact, a record on one side only is a difference there.

Invariant: a result holds a verdict for every range of its plan, in plan order; a range's sides
were each digested whole by one task (a side split over two tasks is refused), and compared record
by record, every source offset counts once.

Pure values, no I/O, no pyspark: the verdicts are judged in the Spark driver and read back where
pyspark is not installed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mirrorflow.core.digest import DIGEST_SCHEME, RecordDigest, SideDigest
from mirrorflow.core.documents import Document
from mirrorflow.core.verify_plan import SIDES, SOURCE, TARGET, VerifyPlan, VerifyRange
from mirrorflow.errors import PlanError

__all__ = [
    "DIFFER",
    "KINDS",
    "NOT_COPIED",
    "ONLY_ON_SOURCE",
    "ONLY_ON_TARGET",
    "SAME",
    "Found",
    "PartitionVerdict",
    "RecordComparison",
    "VerifyResult",
    "verdicts",
]

# How many offsets of each kind of record a comparison names (the first ones, by source offset).
FIRST_OFFSETS = 5
# What a record by record comparison finds at a source offset: the record on both clusters, the
# same or not; on the source only, where the copy wrote none or where it wrote one the target no
# longer holds; on the target only (the source no longer holds it).
SAME, DIFFER, NOT_COPIED, ONLY_ON_SOURCE, ONLY_ON_TARGET = (
    "same",
    "differ",
    "not_copied",
    "only_on_source",
    "only_on_target",
)
KINDS = (SAME, DIFFER, NOT_COPIED, ONLY_ON_SOURCE, ONLY_ON_TARGET)
# The source offset, and the target offset where the copy wrote the record (None: it wrote none).
Place = tuple[int, int | None]


@dataclass(frozen=True)
class Found:
    """How many records of one kind a range holds, and where the first few of them are."""

    records: int = 0
    first: tuple[Place, ...] = ()

    def __add__(self, other: Found) -> Found:
        return Found(self.records + other.records, tuple(sorted({*self.first, *other.first}))[:FIRST_OFFSETS])

    def describe(self) -> str:
        """``source offset 7 (target offset 7), ...``; ``and N more`` past the first few."""
        shown = ", ".join(
            f"source offset {s}" + (f" (target offset {t})" if t is not None else "") for s, t in self.first
        )
        more = self.records - len(self.first)
        return shown + (f" and {more} more" if more else "")


@dataclass(frozen=True)
class RecordComparison:
    """A range compared record by record, keyed by source offset: each of ``KINDS`` found.

    A record on one side only is a difference, but in a compacted range (``compacted``), where it is
    a record that side compacted away after the copy read it: not a difference, counted apart."""

    same: Found = Found()
    differ: Found = Found()
    not_copied: Found = Found()
    only_on_source: Found = Found()
    only_on_target: Found = Found()

    def differences(self, compacted: bool) -> tuple[str, ...]:
        """The kinds found that are differences."""
        kinds = (DIFFER, NOT_COPIED) if compacted else (DIFFER, NOT_COPIED, ONLY_ON_SOURCE, ONLY_ON_TARGET)
        return tuple(k for k in kinds if self.found(k).records)

    def found(self, kind: str) -> Found:
        return {
            SAME: self.same,
            DIFFER: self.differ,
            NOT_COPIED: self.not_copied,
            ONLY_ON_SOURCE: self.only_on_source,
            ONLY_ON_TARGET: self.only_on_target,
        }[kind]

    @property
    def source_records(self) -> int:
        return sum(self.found(k).records for k in (SAME, DIFFER, NOT_COPIED, ONLY_ON_SOURCE))

    @property
    def target_records(self) -> int:
        return sum(self.found(k).records for k in (SAME, DIFFER, ONLY_ON_TARGET))

    def describe(self, compacted: bool) -> str:
        """How many records of each kind, and where the first few are (the same ones: how many)."""
        wording = {
            DIFFER: "differ",
            NOT_COPIED: "on the source were never copied",
            ONLY_ON_SOURCE: "compacted away on the target" if compacted else "missing on the target",
            ONLY_ON_TARGET: (
                "compacted away on the source after they were copied"
                if compacted
                else "missing on the source"
            ),
        }
        parts = [f"{self.same.records} the same on both"]
        for kind, words in wording.items():
            found = self.found(kind)
            if found.records:
                parts.append(f"{found.records} {words}: {found.describe()}")
        return "; ".join(parts)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> RecordComparison:
        return cls(
            **{
                kind: Found(
                    f["records"], tuple((int(s), None if t is None else int(t)) for s, t in f["first"])
                )
                for kind, f in raw.items()
            }
        )


@dataclass(frozen=True)
class PartitionVerdict:
    """One range as each cluster holds it. A range compared record by record has ``records``, and
    its sides' digests are empty (a compacted range's sides need not hold the same records)."""

    range: VerifyRange
    source: SideDigest
    target: SideDigest
    records: RecordComparison | None = None

    @property
    def matches(self) -> bool:
        if self.records is not None:
            return not self.records.differences(self.range.compacted)
        return self.source == self.target

    def describe(self) -> str:
        verdict = "match" if self.matches else "DIFFER"
        if self.records is not None:
            return f"{self.range}: {verdict} record by record ({self.records.describe(self.range.compacted)})"
        return (
            f"{self.range}: {verdict} (source {self.source.records} records {self.source.digest[:16]}, "
            f"target {self.target.records} records {self.target.digest[:16]})"
        )

    def compacted_away(self, kind: str) -> Found:
        """The records of a compacted range only one side holds (``ONLY_ON_SOURCE`` or
        ``ONLY_ON_TARGET``): the other compacted them away after they were copied."""
        return self.records.found(kind) if self.records is not None and self.range.compacted else Found()


@dataclass(frozen=True)
class VerifyResult(Document):
    """A verdict for every range of the plan, in plan order."""

    marker = ("digest_scheme", DIGEST_SCHEME)
    what = default_source = "verify result"
    remedy = "run the verification again"

    flow: str
    run_id: str
    partitions: tuple[PartitionVerdict, ...]

    @property
    def mismatches(self) -> tuple[PartitionVerdict, ...]:
        return tuple(v for v in self.partitions if not v.matches)

    def summary(self) -> str:
        """One line: how many ranges and records were compared, which ranges differ (compared record
        by record: where), and how many records each cluster compacted away on its own."""
        differ = self.mismatches
        line = (
            f"verified flow {self.flow} run {self.run_id}: {len(self.partitions)} ranges, "
            f"{sum(v.source.records for v in self.partitions)} source records, "
            f"{sum(v.target.records for v in self.partitions)} target records, "
            f"{len(self.partitions) - len(differ)} match, {len(differ)} differ"
        )
        if differ:
            shown = "; ".join(v.describe() for v in differ[:3])
            line += f": {shown}" + (f"; and {len(differ) - 3} more" if len(differ) > 3 else "")
        for kind, where in ((ONLY_ON_TARGET, "source"), (ONLY_ON_SOURCE, "target")):
            compacted = [
                (v.range, v.compacted_away(kind)) for v in self.partitions if v.compacted_away(kind).records
            ]
            if compacted:
                total = sum(f.records for _, f in compacted)
                shown = "; ".join(f"{r.topic}-{r.partition} {f.describe()}" for r, f in compacted[:3])
                line += f"; {total} records compacted away on the {where} after they were copied ({shown})"
        return line

    @classmethod
    def _build(cls, raw: dict[str, Any]) -> VerifyResult:
        """Reads results written before compacted ranges were compared record by record too: their
        verdicts have no ``records``."""
        return cls(
            raw["flow"],
            raw["run_id"],
            tuple(
                PartitionVerdict(
                    VerifyRange.from_dict(v["range"]),
                    SideDigest(**v["source"]),
                    SideDigest(**v["target"]),
                    None if v.get("records") is None else RecordComparison.from_dict(v["records"]),
                )
                for v in raw["partitions"]
            ),
        )


def verdicts(
    plan: VerifyPlan, rows: Iterable[Mapping[str, object]], found: Iterable[Mapping[str, Any]] = ()
) -> VerifyResult:
    """The result from the tasks' ``DIGEST_SCHEMA`` rows (ranges compared by digest) and
    ``FOUND_SCHEMA`` rows (ranges compared record by record; both ``core.verify_arrow``). A side of
    a range without a row held no record (the digest of nothing); a side of a range with two digest
    rows was split over two tasks, whose digests cannot be joined: ``PlanError``."""
    digests: dict[tuple[int, int], SideDigest] = {}
    for row in rows:
        key = (int(str(row["side"])), int(str(row["range"])))
        if key in digests:
            raise PlanError(
                f"the {SIDES[key[0]]} records of {plan.ranges[key[1]]} reached two Spark tasks: the "
                "reader split the partition (minPartitions / maxRecordsPerPartition?), so no digest of the "
                "range in order exists"
            )
        digests[key] = SideDigest(int(str(row["records"])), str(row["digest"]))
    compared = _comparisons(plan, found)
    nothing = RecordDigest().result()
    return VerifyResult(
        plan.flow,
        plan.run_id,
        tuple(
            _compared_verdict(r, compared[i])
            if r.by_record
            else PartitionVerdict(r, digests.get((SOURCE, i), nothing), digests.get((TARGET, i), nothing))
            for i, r in enumerate(plan.ranges)
        ),
    )


def _comparisons(plan: VerifyPlan, found: Iterable[Mapping[str, Any]]) -> dict[int, RecordComparison]:
    """Each by-record range's comparison, from the tasks' partial ``FOUND_SCHEMA`` rows."""
    kinds: dict[int, dict[str, Found]] = {i: {} for i, r in enumerate(plan.ranges) if r.by_record}
    for row in found:
        index, kind = int(row["range"]), str(row["kind"])
        if index not in kinds or kind not in KINDS:
            raise PlanError(
                f"the verification found {kind!r} records in range {index}, which it never compares"
            )
        first = tuple(zip(row["first_source"], row["first_target"], strict=True))
        kinds[index][kind] = kinds[index].get(kind, Found()) + Found(int(row["records"]), first)
    return {i: RecordComparison(**k) for i, k in kinds.items()}


def _compared_verdict(r: VerifyRange, compared: RecordComparison) -> PartitionVerdict:
    """A by-record range's verdict: the records each side holds, no digests."""
    return PartitionVerdict(
        r, SideDigest(compared.source_records, ""), SideDigest(compared.target_records, ""), compared
    )
