"""The transform chain does what Connect's transforms of the same names do to records of bytes, keeps
every record's source offset, and names the transform and the offset when a hook fails or breaks its
contract."""

from __future__ import annotations

import dataclasses
import sys
import types
from collections.abc import Iterator

import pytest

from mirrorflow.config.transforms import PredicateConfig, TransformConfig
from mirrorflow.core.schema_ids import SchemaIdMap
from mirrorflow.core.transforms import Chain, Record
from mirrorflow.errors import ConfigError, SchemaIdError, TransformError

HOOKS = "transform_hooks_under_test"


def records(topic: str = "orders", n: int = 5) -> list[Record]:
    return [
        Record(
            topic,
            3,
            10 + i,
            1_700_000_000_000 + i,
            f"k{i}".encode(),
            f"v{i}".encode(),
            (("trace", b"t"), ("h", None)),
        )
        for i in range(n)
    ]


@pytest.fixture(autouse=True)
def hooks() -> Iterator[types.ModuleType]:
    module = types.ModuleType(HOOKS)
    sys.modules[HOOKS] = module
    yield module
    del sys.modules[HOOKS]


def hook(module: types.ModuleType, name: str, function: object) -> TransformConfig:
    setattr(module, name, function)
    return TransformConfig(name, "python", (("function", f"{HOOKS}:{name}"),))


def test_an_empty_chain_changes_nothing() -> None:
    given = records()

    assert not Chain(())
    assert Chain(()).apply(given) == given


def test_drop_headers_and_insert_header_change_only_headers() -> None:
    chain = Chain(
        (
            TransformConfig("strip", "DropHeaders", (("headers", "trace, other"),)),
            TransformConfig(
                "tag", "InsertHeader", (("header", "mirrored-by"), ("value.literal", "mirrorflow"))
            ),
        )
    )

    assert chain.apply(records()) == [
        r._replace(headers=(("h", None), ("mirrored-by", b"mirrorflow"))) for r in records()
    ]


def test_filter_with_a_predicate_drops_the_matching_records_and_negate_the_others() -> None:
    tombstones = [r._replace(value=None) if r.offset % 2 else r for r in records()]
    is_tombstone = PredicateConfig("dead", "RecordIsTombstone")

    dropped = Chain((TransformConfig("f", "Filter", (), is_tombstone),)).apply(tombstones)
    kept = Chain((TransformConfig("f", "Filter", (), is_tombstone, negate=True),)).apply(tombstones)

    assert [r.offset for r in dropped] == [10, 12, 14]
    assert [r.offset for r in kept] == [11, 13]


def test_topic_name_matches_the_whole_name_and_has_header_key_any_header() -> None:
    on_test = PredicateConfig("t", "TopicNameMatches", (("pattern", "test\\..*"),))
    traced = PredicateConfig("h", "HasHeaderKey", (("name", "trace"),))

    assert Chain((TransformConfig("f", "Filter", (), on_test),)).apply(records("test.orders")) == []
    assert Chain((TransformConfig("f", "Filter", (), on_test),)).apply(records("a.test.orders")) == records(
        "a.test.orders"
    )
    assert Chain((TransformConfig("f", "Filter", (), traced),)).apply(records()) == []


def test_a_hook_behind_a_predicate_sees_only_the_chosen_records_and_the_order_is_kept(
    hooks: types.ModuleType,
) -> None:
    seen: list[int] = []

    def drop_even_keys(batch: list[Record]) -> list[Record]:
        seen.extend(r.offset for r in batch)
        return [r._replace(value=b"changed") for r in batch if r.offset != 12]

    odd = PredicateConfig("odd", "HasHeaderKey", (("name", "odd"),))
    given = [r._replace(headers=(("odd", b""),)) if r.offset % 2 else r for r in records()]
    config = dataclasses.replace(hook(hooks, "drop", drop_even_keys), predicate=odd, negate=True)

    out = Chain((config,)).apply(given)

    assert seen == [10, 12, 14]
    assert [(r.offset, r.value) for r in out] == [
        (10, b"changed"),
        (11, b"v1"),
        (13, b"v3"),
        (14, b"changed"),
    ]


def test_a_failing_hook_names_the_transform_and_the_first_record_it_fails_on(hooks: types.ModuleType) -> None:
    def poison(batch: list[Record]) -> list[Record]:
        if any(r.key == b"k3" for r in batch):
            raise ValueError("cannot parse")
        return batch

    with pytest.raises(TransformError) as caught:
        Chain((hook(hooks, "parse", poison),)).apply(records())

    assert str(caught.value) == (
        f"transform parse (python {HOOKS}:parse) failed on orders-3 offset 13: ValueError: cannot parse. "
        "Nothing of that partition from there on was committed; fix the transform (or filter the record out "
        "before it) and run the flow again"
    )


@pytest.mark.parametrize(
    ("returned", "problem"),
    [
        (
            lambda b: list(reversed(b)),
            "returned offset 13 out of order or not among the records it was given",
        ),
        (lambda b: [b[0]._replace(offset=99)], "returned offset 99 out of order or not among"),
        (lambda b: [b[0]._replace(partition=0)], "moved offset 10 to orders-0"),
        (
            lambda b: [b[0]._replace(value="text")],
            "returned offset 10 with a key, value or header",
        ),
        (lambda b: [b[0]._replace(headers=[("a", b"")])], "returned offset 10 with a key, value"),
        (lambda b: [("k", "v")], "returned a tuple, not a Record"),
    ],
)
def test_a_hook_that_breaks_the_contract_fails_naming_what_it_did(
    hooks: types.ModuleType, returned: object, problem: str
) -> None:
    with pytest.raises(
        TransformError, match=f"^transform bad \\(python {HOOKS}:bad\\) failed on orders-3: .*{problem}"
    ):
        Chain((hook(hooks, "bad", returned),)).apply(records())


def test_an_unimportable_hook_is_a_config_error_naming_its_key() -> None:
    missing = TransformConfig("gone", "python", (("function", "no_such_module_here:f"),))

    with pytest.raises(
        ConfigError, match=r"^transforms\.gone\.function: cannot load 'no_such_module_here:f'"
    ):
        Chain((missing,))


def _wire(schema: int, payload: bytes) -> bytes:
    return b"\x00" + schema.to_bytes(4, "big") + payload


SCHEMA_IDS = SchemaIdMap(ids=((1, 21), (2, 22)), framed_values=("orders",))


def test_schema_ids_are_mapped_after_the_transforms_on_the_topics_the_map_covers(
    hooks: types.ModuleType,
) -> None:
    seen: list[bytes | None] = []

    def look(batch: list[Record]) -> list[Record]:
        seen.extend(r.value for r in batch)  # the hook sees the source's ids
        return batch

    given = [r._replace(value=_wire(1 + r.offset % 2, b"p")) for r in records()]
    chain = Chain((hook(hooks, "look", look),), SCHEMA_IDS)

    out = chain.apply(given)

    assert seen == [r.value for r in given]
    assert [r.value for r in out] == [_wire(21 + r.offset % 2, b"p") for r in given]
    assert [r.key for r in out] == [r.key for r in given]
    assert chain.changes("orders") and chain.changes("payments")  # a transform changes any topic


def test_without_transforms_only_covered_topics_change() -> None:
    chain = Chain((), SCHEMA_IDS)
    plain = records("payments")

    assert chain and chain.changes("orders") and not chain.changes("payments")
    assert chain.apply(plain) == plain


def test_an_unmapped_schema_id_fails_naming_partition_and_offset_and_the_subjects_holding_it() -> None:
    given = [r._replace(value=_wire(1, b"p")) for r in records()]
    given[2] = given[2]._replace(value=_wire(9, b"p"))
    asked: list[int] = []

    def holders(found: int) -> list[str]:
        asked.append(found)
        return []

    with pytest.raises(SchemaIdError) as caught:
        Chain((), SCHEMA_IDS, holders).apply(given)

    assert asked == [9]
    assert str(caught.value).startswith(
        "orders-3 offset 12: its value carries schema id 9, and no subject of the source registry "
    )
    assert str(caught.value).endswith(". Nothing of that partition from there on was committed")


def test_an_undeclared_side_is_inspected_never_changed() -> None:
    """Keys of orders undeclared: inspected (a key with a held id refused), never changed, and the
    batches of a topic whose sides are all undeclared pass as bytes (``changes`` is false)."""
    ids = SchemaIdMap(ids=((1, 21),), held=((1, "orders-value"),), undeclared_keys=("orders", "payments"))
    chain = Chain((), ids)
    given = [r._replace(key=_wire(5, b"k")) for r in records()]

    assert not chain.changes("orders") and chain.inspects("orders") and not chain.inspects("audit")
    chain.inspect("orders", 3, given)
    assert chain.apply(given) == given
    given[1] = given[1]._replace(key=_wire(1, b"k"))
    with pytest.raises(
        SchemaIdError, match=r"^orders-3 offset 11: its key looks like Confluent's wire format"
    ):
        chain.inspect("orders", 3, given)
