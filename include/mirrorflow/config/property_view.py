"""``PropertyView``: one scope of an mm2.properties file as an immutable mapping, with typed getters
that name the key as written when a value is invalid, and with secrets masked in its repr."""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from mirrorflow.errors import ConfigError

_INTEGER = re.compile(r"[+-]?[0-9]+")
_REFERENCE = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*")
_LIST_SEPARATOR = re.compile(r"\s*,\s*")
# Values of such keys are masked in repr() so that configs can be logged.
_SECRET_KEY = re.compile(r"password|secret|jaas\.config|keystore\.key", re.IGNORECASE)
# A replication factor of -1 asks the brokers for theirs (default.replication.factor), as Kafka's
# CreateTopics does (KIP-464) and MM2 and Strimzi's examples write it.
BROKER_DEFAULT_RF = -1


def shown(key: str, value: str) -> str:
    """A value as error messages show it: masked, as in a view's repr(), where the key holds a secret."""
    return "******" if _SECRET_KEY.search(key) else repr(value)


def checked_bool(written: str, value: str) -> bool:
    """``true`` or ``false`` in any case, as Kafka's ConfigDef; anything else is an error naming the
    key as ``written``."""
    if value.lower() not in ("true", "false"):
        raise ConfigError(f"expected true or false, got {shown(written, value)}", key=written)
    return value.lower() == "true"


def checked_whole_number(written: str, value: str, *, zero_allowed: bool, example: int | None) -> int:
    """A whole number of at least 1 (0 with ``zero_allowed``); anything else is an error naming the
    key as ``written``, suggesting ``example`` if given."""
    if not _INTEGER.fullmatch(value) or int(value) < (0 if zero_allowed else 1):
        kind = "whole number of at least 0" if zero_allowed else "positive whole number"
        suggestion = "" if example is None else f"; set e.g. {example}"
        raise ConfigError(f"expected a {kind}, got {shown(written, value)}{suggestion}", key=written)
    return int(value)


def checked_replication_factor(written: str, value: str, *, example: int) -> int:
    """A replication factor: a whole number of at least 1, or ``BROKER_DEFAULT_RF``; anything else
    is an error naming the key as ``written``."""
    if _INTEGER.fullmatch(value) and (int(value) >= 1 or int(value) == BROKER_DEFAULT_RF):
        return int(value)
    raise ConfigError(
        f"expected a positive whole number, or {BROKER_DEFAULT_RF} for the brokers' "
        f"default.replication.factor, got {shown(written, value)}; set e.g. {example}",
        key=written,
    )


def checked_integer(written: str, value: str) -> int:
    """Any whole number, negative ones too (a Java ``long`` such as Connect's ``-1``: no limit)."""
    if not _INTEGER.fullmatch(value):
        raise ConfigError(f"expected a whole number, got {shown(written, value)}", key=written)
    return int(value)


def load_reference(reference: str, key: str) -> Any:
    """The callable ``reference`` (``module.path:attribute``, as ``get_reference`` checked it)
    names; one that cannot be imported or called is a ``ConfigError`` naming ``key``."""
    module_name, _, attribute = reference.partition(":")
    try:
        found: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"cannot load {reference!r}: {exc}; put its module on the PYTHONPATH of every Airflow "
            "component and Spark executor (e.g. in plugins/ or include/, or spark.submit.pyFiles)",
            key=key,
        ) from exc
    if not callable(found):
        raise ConfigError(f"{reference!r} is not callable", key=key)
    return found


class PropertyView(Mapping[str, str]):
    """Immutable effective properties of one scope, with typed accessors.

    Each value remembers the key it was written under in the file (``written_as``), so that errors
    name what the user must edit, e.g. ``primary->backup.topics`` rather than ``topics``.
    """

    __slots__ = ("_entries",)

    _entries: Mapping[str, tuple[str, str]]

    def __init__(self, entries: Mapping[str, tuple[str, str]] | None = None) -> None:
        """``entries``: key -> (value, key as written)."""
        object.__setattr__(self, "_entries", MappingProxyType(dict(entries or {})))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    @classmethod
    def layered(cls, layers: Iterable[tuple[str, Mapping[str, str]]]) -> PropertyView:
        """Merge ``(prefix as written, properties with the prefix stripped)`` layers, lowest first."""
        return cls({key: (value, prefix + key) for prefix, props in layers for key, value in props.items()})

    def __getitem__(self, key: str) -> str:
        return self._entries[key][0]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __hash__(self) -> int:
        # Consistent with Mapping equality (values only), so frozen dataclasses holding views hash.
        return hash(frozenset(self.items()))

    def __repr__(self) -> str:
        shown = {key: "******" if _SECRET_KEY.search(key) else value for key, value in self.items()}
        return f"PropertyView({shown!r})"

    def _shown(self, key: str) -> str:
        return shown(key, self[key])

    def written_as(self, key: str) -> str:
        """The key as written in the file; ``key`` itself when it was not written (a default)."""
        return self._entries[key][1] if key in self._entries else key

    def stripped(self, prefix: str) -> PropertyView:
        """The keys starting with ``prefix``, without it."""
        return PropertyView(
            {key[len(prefix) :]: entry for key, entry in self._entries.items() if key.startswith(prefix)}
        )

    def excluding(self, prefixes: tuple[str, ...]) -> PropertyView:
        return PropertyView(
            {key: entry for key, entry in self._entries.items() if not key.startswith(prefixes)}
        )

    def overlaid(self, other: PropertyView) -> PropertyView:
        """These properties with ``other``'s on top (``other`` wins)."""
        return PropertyView({**self._entries, **other._entries})

    def aliased(self, old: str, new: str) -> PropertyView:
        """``old``'s value (as written under ``old``) as ``new``'s where only ``old`` is set: a
        deprecated name, which the new name overrides where both are set (MM2's rule)."""
        if old not in self._entries or new in self._entries:
            return self
        return PropertyView({**self._entries, new: self._entries[old]})

    def get_required(self, key: str, default: str) -> str:
        """The value, ``default`` when absent; an empty value is an error."""
        value = self.get(key, default)
        if not value:
            raise ConfigError("must not be empty; set a value or remove the key", key=self.written_as(key))
        return value

    def get_bool(self, key: str, default: bool) -> bool:
        """``true`` or ``false`` in any case, as Kafka's ConfigDef (anything else is an error)."""
        value = self.get(key)
        return default if value is None else checked_bool(self.written_as(key), value)

    def get_positive_int(self, key: str, default: int, *, zero_allowed: bool = False) -> int:
        value = self.get(key)
        if value is None:
            return default
        return checked_whole_number(self.written_as(key), value, zero_allowed=zero_allowed, example=default)

    def get_replication_factor(self, key: str, default: int) -> int:
        value = self.get(key)
        if value is None:
            return default
        return checked_replication_factor(self.written_as(key), value, example=default)

    def get_optional_int(self, key: str, *, zero_allowed: bool = False) -> int | None:
        """A whole number (at least 1, or 0 with ``zero_allowed``), or None when absent or empty."""
        return self.get_positive_int(key, 1, zero_allowed=zero_allowed) if self.get(key) else None

    def get_reference(self, key: str) -> str | None:
        """``module.path:attribute`` naming a Python object, or None when absent or empty."""
        value = (self.get(key) or "").strip()
        if not value:
            return None
        if not _REFERENCE.fullmatch(value):
            raise ConfigError(
                f"expected module.path:attribute, got {self._shown(key)}; e.g. my_alerts:notify_on_call",
                key=self.written_as(key),
            )
        return value

    def get_choice(self, key: str, choices: tuple[str, ...]) -> str:
        """One of ``choices`` in any case (the first when absent); anything else is an error."""
        value = self.get(key, choices[0]).strip().lower()
        if value not in choices:
            raise ConfigError(
                f"expected {' or '.join(choices)}, got {self._shown(key)}", key=self.written_as(key)
            )
        return value

    def get_list(self, key: str, default: tuple[str, ...]) -> tuple[str, ...]:
        """Comma-separated items, trimmed, as Kafka's LIST type: an empty value is an empty list."""
        value = self.get(key)
        if value is None:
            return default
        return tuple(_LIST_SEPARATOR.split(value)) if value else ()
