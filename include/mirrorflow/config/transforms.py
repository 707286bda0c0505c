"""A flow's transforms and predicates, configured the MM2 (Connect) way and checked at load.

    transforms = dropTrace, dropTests
    transforms.dropTrace.type = org.apache.kafka.connect.transforms.DropHeaders
    transforms.dropTrace.headers = trace-id
    transforms.dropTests.type = org.apache.kafka.connect.transforms.Filter
    transforms.dropTests.predicate = isTest
    predicates = isTest
    predicates.isTest.type = org.apache.kafka.connect.transforms.predicates.HasHeaderKey
    predicates.isTest.name = test

Connect's class names (or their simple names, Connect's plugin aliases) name the built-ins; ``python``
names a hook, ``transforms.<name>.function = module.path:function``. Invariants: every key under
``transforms.`` and ``predicates.`` is read or refused by name (an option a type does not take, a
transform or predicate not listed, a type that would move records between topics); the values are
plain tuples, so a chain travels to Spark's executors as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from mirrorflow.config.property_view import PropertyView
from mirrorflow.errors import ConfigError

_CONNECT = "org.apache.kafka.connect.transforms."
PYTHON = "python"
# Canonical type -> the options it takes (besides type, predicate and negate), required ones first.
TRANSFORM_OPTIONS: Mapping[str, tuple[tuple[str, bool], ...]] = {
    "Filter": (),
    "DropHeaders": (("headers", True),),
    "InsertHeader": (("header", True), ("value.literal", True)),
    PYTHON: (("function", True),),
}
PREDICATE_OPTIONS: Mapping[str, tuple[tuple[str, bool], ...]] = {
    "HasHeaderKey": (("name", True),),
    "TopicNameMatches": (("pattern", True),),
    "RecordIsTombstone": (),
}
_COMMON = ("type", "predicate", "negate")
# Connect's transforms that change what cannot change here, with the reason.
_REFUSED_TYPES: Mapping[str, str] = {
    "RegexRouter": "it renames the topic; remote topic names come from the replication policy",
    "TimestampRouter": "it renames the topic; remote topic names come from the replication policy",
}
_STRUCTURED = (
    "records are copied as bytes, without a schema or converter; to change a value, write a python hook "
    "(transforms.<name>.type = python, transforms.<name>.function = module:function)"
)


@dataclass(frozen=True)
class PredicateConfig:
    """One Connect predicate: ``kind`` is its canonical name, ``options`` its checked options."""

    name: str
    kind: str
    options: tuple[tuple[str, str], ...] = ()

    def option(self, key: str) -> str:
        return dict(self.options)[key]


@dataclass(frozen=True)
class TransformConfig:
    """One transform of a flow's chain, applied where ``predicate`` (negated by ``negate``) holds,
    or to every record without one."""

    name: str
    kind: str
    options: tuple[tuple[str, str], ...] = ()
    predicate: PredicateConfig | None = None
    negate: bool = False

    def option(self, key: str) -> str:
        return dict(self.options)[key]

    @property
    def described(self) -> str:
        """The transform as messages name it, e.g. ``dropTests (Filter)``."""
        detail = f"python {self.option('function')}" if self.kind == PYTHON else self.kind
        return f"{self.name} ({detail})"


def transforms_of(props: PropertyView) -> tuple[TransformConfig, ...]:
    """The flow's chain, in ``transforms`` order; () without transforms."""
    names = props.get_list("transforms", ())
    predicates = {
        name: _predicate(props, name)
        for name in _listed(props, "predicates", props.get_list("predicates", ()))
    }
    _listed(props, "transforms", names)
    chain = tuple(_transform(props, name, predicates) for name in names)
    used = {t.predicate.name for t in chain if t.predicate is not None}
    for name in predicates.keys() - used:
        raise ConfigError(
            f"predicate {name!r} is used by no transform; set transforms.<name>.predicate = {name} or "
            "remove it",
            key=props.written_as("predicates"),
        )
    return chain


def _listed(props: PropertyView, kind: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` after checking them, and that every ``<kind>.<name>.*`` key names a listed one
    (one written at top level, where a flow lists its own, belongs to the top level's list)."""
    if len(set(names)) != len(names) or "" in names:
        raise ConfigError(f"empty or repeated name in {', '.join(names)}", key=props.written_as(kind))
    list_is_the_flows = props.written_as(kind) != kind
    for key in props:
        if list_is_the_flows and props.written_as(key) == key:
            continue
        if key.startswith(f"{kind}.") and key.split(".")[1] not in names:
            raise ConfigError(
                f"{key.split('.')[1]!r} is not listed in {kind} ({', '.join(names) or 'empty'}); add it "
                "there or remove the key",
                key=props.written_as(key),
            )
    return names


def _options(
    props: PropertyView,
    prefix: str,
    kind: str,
    allowed: tuple[tuple[str, bool], ...],
    common: tuple[str, ...],
) -> tuple[tuple[str, str], ...]:
    """The options under ``prefix`` for a type taking ``allowed``: unknown ones and missing
    required ones are errors naming the key."""
    names = {name for name, _ in allowed}
    for key in props:
        if key.startswith(prefix) and key[len(prefix) :] not in names | set(common):
            takes = ", ".join(sorted(names | set(common)))
            raise ConfigError(f"{kind} takes no such option (it takes {takes})", key=props.written_as(key))
    for name, required in allowed:
        if required and not props.get(prefix + name):
            raise ConfigError(f"{kind} needs this option; set it", key=props.written_as(prefix + name))
    return tuple((name, props[prefix + name]) for name, _ in allowed if prefix + name in props)


def _type(props: PropertyView, key: str, known: Mapping[str, object], package: str) -> str:
    """The canonical name of the type in ``key``: Connect's class name or its simple name."""
    written = props.get(key)
    if not written:
        raise ConfigError("every listed one needs a type; set it", key=props.written_as(key))
    simple = written.removeprefix(package) if written.startswith(package) else written
    if simple in known:
        return simple
    if simple.split("$")[0] in _REFUSED_TYPES:
        refused = _REFUSED_TYPES[simple.split("$")[0]]
        raise ConfigError(f"{written} is not supported: {refused}", key=props.written_as(key))
    supported = ", ".join(t if t == PYTHON else package + t for t in known)
    reason = f" ({_STRUCTURED})" if written.startswith(_CONNECT) else ""
    raise ConfigError(
        f"{written} is not supported{reason}; supported: {supported}", key=props.written_as(key)
    )


def _predicate(props: PropertyView, name: str) -> PredicateConfig:
    prefix = f"predicates.{name}."
    kind = _type(props, prefix + "type", PREDICATE_OPTIONS, _CONNECT + "predicates.")
    options = _options(props, prefix, kind, PREDICATE_OPTIONS[kind], ("type",))
    if kind == "TopicNameMatches":
        try:
            re.compile(dict(options)["pattern"])
        except re.error as exc:
            raise ConfigError(f"not a valid regex: {exc}", key=props.written_as(prefix + "pattern")) from exc
    return PredicateConfig(name, kind, options)


def _transform(props: PropertyView, name: str, predicates: Mapping[str, PredicateConfig]) -> TransformConfig:
    prefix = f"transforms.{name}."
    kind = _type(props, prefix + "type", TRANSFORM_OPTIONS, _CONNECT)
    options = _options(props, prefix, kind, TRANSFORM_OPTIONS[kind], _COMMON)
    if kind == PYTHON:
        props.get_reference(prefix + "function")
    if kind == "DropHeaders" and not props.get_list(prefix + "headers", ()):
        raise ConfigError("list at least one header name", key=props.written_as(prefix + "headers"))
    predicate_name = props.get(prefix + "predicate")
    if predicate_name and predicate_name not in predicates:
        raise ConfigError(
            f"no predicate {predicate_name!r}; list it in predicates and set its "
            f"predicates.{predicate_name}.type",
            key=props.written_as(prefix + "predicate"),
        )
    negate = props.get_bool(prefix + "negate", False)
    if negate and not predicate_name:
        raise ConfigError(
            "negate needs a predicate to negate; set one or remove the key",
            key=props.written_as(prefix + "negate"),
        )
    return TransformConfig(
        name, kind, options, predicates[predicate_name] if predicate_name else None, negate
    )
