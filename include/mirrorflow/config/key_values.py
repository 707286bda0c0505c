"""A typed key's value, read by its row of the key table (``config.keys``): the row's kind says what
the value must be (``bool``; ``int``, a whole number of at least 0; ``pos``, at least 1; ``rf``,
at least 1 or -1), its
default what an absent key means, its choices what it may be. The model and DR mode read their
typed keys, MM2's and this product's, through here, so that no default or bound is stated twice.

Invariant: a value read is of its row's kind, or a ``ConfigError`` naming the key as written
(``PropertyView``'s getters); a name the table lacks is a mistake in the code (``KeyError``).
"""

from __future__ import annotations

from mirrorflow.config.keys import FLOW_KEYS, Key
from mirrorflow.config.property_view import PropertyView
from mirrorflow.config.setting_keys import FLOW_SETTINGS

_ROWS: dict[str, Key] = {row.name: row for row in (*FLOW_KEYS, *FLOW_SETTINGS)}


def default(name: str) -> str:
    """The row's default as written in the table."""
    return _ROWS[name].default


def default_number(name: str) -> int:
    return int(_ROWS[name].default)


def default_flag(name: str) -> bool:
    return _ROWS[name].default == "true"


def number(props: PropertyView, name: str) -> int:
    """A whole number of at least 1 (``pos``) or 0 (``int``), or a replication factor (``rf``);
    the row's default when absent."""
    row = _ROWS[name]
    if row.kind == "rf":
        return props.get_replication_factor(name, int(row.default))
    return props.get_positive_int(name, int(row.default), zero_allowed=row.kind == "int")


def optional_number(props: PropertyView, name: str) -> int | None:
    """A number whose row has no default: None when absent or empty."""
    return props.get_optional_int(name, zero_allowed=_ROWS[name].kind == "int")


def flag(props: PropertyView, name: str) -> bool:
    """``true`` or ``false`` in any case; the row's default when absent."""
    return props.get_bool(name, default_flag(name))


def choice(props: PropertyView, name: str) -> str:
    """One of the row's choices in any case; the first, its default, when absent."""
    return props.get_choice(name, _ROWS[name].choices)
