"""A flow's transforms and predicates load the Connect way, and every key under them is read or
refused by name."""

from __future__ import annotations

import pytest
from config_texts import ONE_FLOW

from mirrorflow.config.model import parse_config
from mirrorflow.config.transforms import PredicateConfig, TransformConfig
from mirrorflow.errors import ConfigError

CONNECT = "org.apache.kafka.connect.transforms."


def chain(lines: str) -> tuple[TransformConfig, ...]:
    return parse_config(ONE_FLOW + lines, env={}).flow("primary->backup").transforms


def test_no_transforms_is_an_empty_chain() -> None:
    assert chain("") == ()


def test_transforms_load_in_order_with_their_options_and_predicates() -> None:
    loaded = chain(
        "transforms = strip, tag, tests\n"
        f"transforms.strip.type = {CONNECT}DropHeaders\n"
        "transforms.strip.headers = trace-id, span-id\n"
        "transforms.tag.type = InsertHeader\n"
        "transforms.tag.header = mirrored-by\n"
        "transforms.tag.value.literal = mirrorflow\n"
        f"transforms.tests.type = {CONNECT}Filter\n"
        "transforms.tests.predicate = isTest\n"
        "transforms.tests.negate = true\n"
        "predicates = isTest\n"
        f"predicates.isTest.type = {CONNECT}predicates.TopicNameMatches\n"
        "predicates.isTest.pattern = test\\\\..*\n"
    )

    assert loaded == (
        TransformConfig("strip", "DropHeaders", (("headers", "trace-id, span-id"),)),
        TransformConfig("tag", "InsertHeader", (("header", "mirrored-by"), ("value.literal", "mirrorflow"))),
        TransformConfig(
            "tests",
            "Filter",
            (),
            PredicateConfig("isTest", "TopicNameMatches", (("pattern", "test\\..*"),)),
            True,
        ),
    )


def test_a_flow_overrides_the_top_level_chain() -> None:
    loaded = chain(
        "transforms = all\ntransforms.all.type = Filter\n"
        "primary->backup.transforms = hook\n"
        "primary->backup.transforms.hook.type = python\n"
        "primary->backup.transforms.hook.function = my_hooks:drop_tests\n"
    )

    assert [(t.name, t.kind) for t in loaded] == [("hook", "python")]
    assert loaded[0].described == "hook (python my_hooks:drop_tests)"


REFUSED = [
    ("transforms = mask\n", "transforms.mask.type: every listed one needs a type; set it"),
    (
        f"transforms = mask\ntransforms.mask.type = {CONNECT}MaskField$Value\n",
        f"transforms.mask.type: {CONNECT}MaskField$Value is not supported (records are copied as bytes, "
        "without a schema or converter; to change a value, write a python hook "
        "(transforms.<name>.type = python, "
        f"transforms.<name>.function = module:function)); supported: {CONNECT}Filter, {CONNECT}DropHeaders, "
        f"{CONNECT}InsertHeader, python",
    ),
    (
        f"transforms = route\ntransforms.route.type = {CONNECT}RegexRouter\n",
        f"transforms.route.type: {CONNECT}RegexRouter is not supported: it renames the topic; remote topic "
        "names come from the replication policy",
    ),
    (
        "transforms = strip\ntransforms.strip.type = DropHeaders\n",
        "transforms.strip.headers: DropHeaders needs this option; set it",
    ),
    (
        "transforms = strip\ntransforms.strip.type = DropHeaders\ntransforms.strip.headers = a\n"
        "transforms.strip.header = b\n",
        "transforms.strip.header: DropHeaders takes no such option "
        "(it takes headers, negate, predicate, type)",
    ),
    (
        "transforms = a\ntransforms.a.type = Filter\ntransforms.b.type = Filter\n",
        "transforms.b.type: 'b' is not listed in transforms (a); add it there or remove the key",
    ),
    (
        "transforms = a, a\ntransforms.a.type = Filter\n",
        "transforms: empty or repeated name in a, a",
    ),
    (
        "transforms = a\ntransforms.a.type = Filter\ntransforms.a.predicate = p\n",
        "transforms.a.predicate: no predicate 'p'; list it in predicates and set its predicates.p.type",
    ),
    (
        "transforms = a\ntransforms.a.type = Filter\ntransforms.a.negate = true\n",
        "transforms.a.negate: negate needs a predicate to negate; set one or remove the key",
    ),
    (
        "transforms = a\ntransforms.a.type = Filter\npredicates = p\npredicates.p.type = RecordIsTombstone\n",
        "predicates: predicate 'p' is used by no transform; set transforms.<name>.predicate = p or remove it",
    ),
    (
        "transforms = a\ntransforms.a.type = Filter\ntransforms.a.predicate = p\npredicates = p\n"
        "predicates.p.type = TopicNameMatches\npredicates.p.pattern = (\n",
        "predicates.p.pattern: not a valid regex: missing ), unterminated subpattern at position 0",
    ),
    (
        "transforms = a\ntransforms.a.type = python\ntransforms.a.function = not a reference\n",
        "transforms.a.function: expected module.path:attribute, got 'not a reference'; e.g. "
        "my_alerts:notify_on_call",
    ),
]


@pytest.mark.parametrize(
    ("lines", "message"), REFUSED, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(REFUSED)]
)
def test_a_bad_transform_key_is_an_error_naming_it(lines: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        chain(lines)

    assert str(caught.value) == message
