"""What this product does with every key of a file, by its row of the key table (``config.keys``):
**honoured**, **no effect** (accepted, and warned about by name with the reason) or **refused** (an
error naming the key as written and what to do); a key no row takes is unknown, an error suggesting
the closest known key. The README's key table is written from the same rows (``markdown``;
``python -m mirrorflow.config.key_classes`` prints it).

Invariants: no key of a loaded config is silently ignored; a refused key set to a value that
changes nothing (its MM2 default, e.g. ``topic.filter.class = ...DefaultTopicFilter``) is accepted;
a typed key (boolean, number) holds a value of its type whatever its class, as MM2's ConfigDef
demands.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from mirrorflow.config.client_keys import (
    CLIENT_KEYS,
    NO_GSSAPI,
    UNLISTED_CLIENT_KEY,
    WORKER_KEY,
    WORKER_STORAGE_KEY,
)
from mirrorflow.config.java_clients import CONNECT_WORKER_KEYS, JAVA_CLIENT_KEYS
from mirrorflow.config.keys import (
    DEPRECATED_ALIASES,
    FLOW_KEYS,
    PROJECT_PREFIX,
    TOP_LEVEL_KEYS,
    H,
    Key,
    N,
    R,
    Treatment,
)
from mirrorflow.config.property_view import (
    checked_bool,
    checked_integer,
    checked_replication_factor,
    checked_whole_number,
    shown,
)
from mirrorflow.config.setting_keys import FLOW_SETTINGS, TOP_LEVEL_SETTINGS
from mirrorflow.errors import ConfigError

log = logging.getLogger(__name__)

_DEPRECATED = "deprecated name of"


@dataclass(frozen=True)
class KeyUse:
    """A key as written in the file, and what this product does with it."""

    written: str
    treatment: Treatment
    note: str


_ROLES = ("consumer.", "producer.", "admin.")
_FLOW_CLIENT_PREFIXES = tuple(
    f"{side}.{kind}." for side in ("source", "target") for kind in ("cluster", *[r[:-1] for r in _ROLES])
)
_TOP_LEVEL_CLIENT = re.compile(r"security\.protocol|ssl\..*|sasl\..*")
_SETTINGS = (*FLOW_SETTINGS, *TOP_LEVEL_SETTINGS)


def client_key(name: str) -> Key | None:
    """What a Java client setting does here; None for a key no Java client has."""
    rule = _rule(name, CLIENT_KEYS)
    if rule is not None:
        return rule
    return replace(UNLISTED_CLIENT_KEY, name=name) if name in JAVA_CLIENT_KEYS else None


def classify(
    top: Mapping[str, str],
    by_cluster: Mapping[str, Mapping[str, str]],
    by_flow: Mapping[tuple[str, str], Mapping[str, str]],
    enabled: Container[tuple[str, str]],
) -> tuple[KeyUse, ...]:
    """Every key of the file by scope (prefixes stripped) with its treatment; warns about keys with
    no effect and deprecated names, raises ``ConfigError`` for a refused, unknown or mistyped key.
    This product's own keys (``mirrorflow.*``) had their names checked as the file was split into
    scopes (``check_setting``), and have their values checked where they are read. The values of a
    flow not ``enabled`` are not checked: MM2 builds nothing from them."""
    uses: list[KeyUse] = []
    for key, value in top.items():
        uses.append(_top_level(key, value))
    for alias, props in by_cluster.items():
        for key, value in props.items():
            uses.append(_cluster_level(f"{alias}.", key, value))
    for (source, target), props in by_flow.items():
        for key, value in props.items():
            uses.append(_flow_level(f"{source}->{target}.", key, value, (source, target) in enabled))
    _warn(uses)
    return tuple(uses)


def _top_level(key: str, value: str) -> KeyUse:
    if key.startswith(PROJECT_PREFIX):
        return _setting_use(key, key)
    rule = _rule(key, TOP_LEVEL_KEYS) or _rule(key, FLOW_KEYS)
    if key == "enabled":
        raise ConfigError("only `<source>-><target>.enabled` enables a flow; set it per flow", key=key)
    if rule is None and _TOP_LEVEL_CLIENT.fullmatch(key):
        rule = client_key(key)
    if rule is None and key in CONNECT_WORKER_KEYS:
        rule = _worker_key(key)
    if rule is None and key.startswith(_ROLES):
        raise ConfigError(
            "client settings of one kind are set per cluster: write `<alias>." + key + "` (or per flow, "
            f"`<source>-><target>.source.{key}` / `target.{key}`)",
            key=key,
        )
    if rule is None:
        alias = DEPRECATED_ALIASES.get(key)
        if alias is not None:
            return _deprecated(key, alias)
        candidates = [*_names(TOP_LEVEL_KEYS), *_names(FLOW_KEYS), *DEPRECATED_ALIASES]
        _unknown(key, key, candidates, "an MM2 setting")
    assert rule is not None
    return _use(key, value, rule)


def _cluster_level(prefix: str, key: str, value: str) -> KeyUse:
    written = prefix + key
    name = key
    for role in _ROLES:
        if key.startswith(role):
            name = key[len(role) :]
            break
    rule = client_key(name)
    if rule is None and name == key and key in CONNECT_WORKER_KEYS:
        rule = _worker_key(key)
    if rule is None and (_rule(key, FLOW_KEYS) or key in DEPRECATED_ALIASES):
        raise ConfigError(
            f"`{key}` is a flow setting, not a cluster's: set it at top level or per flow "
            f"(`<source>-><target>.{key}`)",
            key=written,
        )
    if rule is None:
        known = JAVA_CLIENT_KEYS | (CONNECT_WORKER_KEYS if name == key else frozenset())
        _unknown(written, name, known, "a client setting")
    assert rule is not None
    return _use(written, value, rule)


def _flow_level(prefix: str, key: str, value: str, check: bool) -> KeyUse:
    written = prefix + key
    if key.startswith(PROJECT_PREFIX):
        return _setting_use(written, key)
    for client_prefix in _FLOW_CLIENT_PREFIXES:
        if key.startswith(client_prefix):
            name = key[len(client_prefix) :]
            rule = client_key(name)
            if rule is None:
                _unknown(written, name, JAVA_CLIENT_KEYS, "a client setting")
            assert rule is not None
            return _use(written, value, rule, check)
    if key.startswith(_ROLES):
        raise ConfigError(
            f"say which cluster's clients: `{prefix}source.{key}` or `{prefix}target.{key}`", key=written
        )
    alias = DEPRECATED_ALIASES.get(key)
    if alias is not None:
        return _deprecated(written, alias)
    rule = _rule(key, FLOW_KEYS)
    if rule is None:
        _unknown(written, key, [*_names(FLOW_KEYS), *DEPRECATED_ALIASES], "an MM2 flow setting")
    assert rule is not None
    return _use(written, value, rule, check)


def check_setting(written: str, name: str, *, top_level: bool) -> None:
    """Typo protection for this product's keys (``name``: a ``mirrorflow.*`` key without its flow
    prefix; ``written``: as in the file): an unknown one, or a top-level-only one set per flow, is
    an error naming it. Other keys are left to ``classify``."""
    if not name.startswith(PROJECT_PREFIX) or _setting(name, FLOW_SETTINGS):
        return
    if _setting(name, TOP_LEVEL_SETTINGS):
        if top_level:
            return
        raise ConfigError(
            f"{name} applies to all flows; set it at top level, without a flow prefix", key=written
        )
    # The one prefix's row among them reads mirrorflow.spark.conf.<spark key>.
    known = ", ".join(rule.name.replace("*", "<spark key>") for rule in _SETTINGS)
    raise ConfigError(f"unknown mirrorflow setting; known settings: {known}", key=written)


def _setting(name: str, table: Sequence[Key]) -> Key | None:
    """The row of this product's setting ``name``; a prefix's row (``mirrorflow.spark.conf.*``)
    takes only names with something after the prefix."""
    rule = _rule(name, table)
    return None if rule is None or rule.name == f"{name}*" else rule


def _setting_use(written: str, name: str) -> KeyUse:
    """The use of a setting whose name ``check_setting`` checked."""
    rule = _setting(name, _SETTINGS)
    assert rule is not None
    return KeyUse(written, rule.treatment, rule.note)


def _worker_key(key: str) -> Key:
    """A Connect worker setting (converters and exactly-once support are also connector settings)."""
    return _rule(key, FLOW_KEYS) or replace(WORKER_STORAGE_KEY if "storage" in key else WORKER_KEY, name=key)


def _deprecated(written: str, new: str) -> KeyUse:
    return KeyUse(written, H, f"{_DEPRECATED} `{new}` (MM2 3.x; `{new}` wins where both are set)")


def _use(written: str, value: str, rule: Key, check: bool = True) -> KeyUse:
    """The key's use, after checking the refusals and (``check``) its value's type."""
    if rule.treatment is R and value not in rule.harmless:
        raise ConfigError(rule.note, key=written)
    if not check:
        return KeyUse(written, rule.treatment, rule.note)
    if rule.kind == "bool":
        checked_bool(written, value)
    if rule.kind == "long":
        checked_integer(written, value)
    if rule.kind in ("int", "pos"):
        example = int(rule.default) if rule.default else None
        checked_whole_number(written, value, zero_allowed=rule.kind == "int", example=example)
    if rule.kind == "rf":
        checked_replication_factor(written, value, example=int(rule.default))
    # Java reads the protocol in any case, the mechanism as written.
    chosen = value.upper() if rule.name == "security.protocol" else value
    if rule.choices and chosen not in rule.choices:
        if rule.name == "sasl.mechanism" and value == "GSSAPI":
            raise ConfigError(NO_GSSAPI, key=written)
        raise ConfigError(f"expected {' or '.join(rule.choices)}, got {shown(written, value)}", key=written)
    return KeyUse(written, rule.treatment, rule.note)


def _rule(key: str, table: Sequence[Key]) -> Key | None:
    exact = [k for k in table if k.name == key]
    if exact:
        return exact[0]
    return next((k for k in table if k.name.endswith(".*") and k.matches(key)), None)


def _names(table: Sequence[Key]) -> list[str]:
    return [k.name for k in table if not k.name.endswith(".*")]


# Names from MirrorMaker 1 and other tools that MM2 never read, with what they meant in MM2's words.
_MEANT = {
    "topics.whitelist": "topics",
    "groups.whitelist": "groups",
    "whitelist": "topics",
    "blacklist": "topics.exclude",
}


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``name`` was probably meant to be, if any."""
    if name in _MEANT:
        return _MEANT[name]
    close = difflib.get_close_matches(name, sorted(set(candidates)), n=1, cutoff=0.75)
    return close[0] if close else None


def _unknown(written: str, name: str, candidates: Iterable[str], what: str) -> None:
    """``name``: the key without its scope's and client kind's prefixes, as ``candidates`` are."""
    close = closest(name, candidates)
    hint = f"; did you mean `{written[: len(written) - len(name)]}{close}`?" if close else ""
    raise ConfigError(f"unknown key: not {what} that MM2 or this product knows{hint}", key=written)


def _warn(uses: Sequence[KeyUse]) -> None:
    """One warning per reason, naming its keys as written."""
    by_note: dict[str, list[str]] = {}
    for use in uses:
        if use.treatment is N:
            by_note.setdefault(use.note, []).append(use.written)
        elif use.note.startswith(_DEPRECATED):
            new = use.note.split("`")[1]
            # MM2's own words.
            log.warning(
                "Configuration key %s is deprecated and may be removed in the future. Please update your "
                "configuration to use %s instead.",
                use.written,
                new,
            )
    for note, keys in by_note.items():
        log.warning("no effect here: %s (%s)", ", ".join(sorted(keys)), note)


def settings_markdown() -> str:
    """The README's table of this product's settings: one row per setting, or per run of settings that
    share a note."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    groups: list[list[Key]] = []
    for rule in (*FLOW_SETTINGS, *TOP_LEVEL_SETTINGS):
        if groups and groups[-1][0].note == rule.note:
            groups[-1].append(rule)
        else:
            groups.append([rule])
    for group in groups:
        names = ", ".join(f"`{_written(rule.name)}`" for rule in group)
        defaults = list(dict.fromkeys(_default_shown(rule) for rule in group))
        rows.append(f"| {names} | {', '.join(defaults)} | {group[0].note} |")
    return "\n".join(rows) + "\n"


def _written(name: str) -> str:
    """A key as a user writes it: a prefix rule ``a.b.*`` as ``a.b.<key>``."""
    return name[:-1] + "<key>" if name.endswith(".*") else name


def _default_shown(rule: Key) -> str:
    if rule.shown:
        return rule.shown
    return f"`{rule.default}`" if rule.default else "none"


def markdown() -> str:
    """The README's key table: one row per key (or per group of client keys sharing a note)."""
    rows = ["| key | class | default | what it does, or why not, or what to do |", "|---|---|---|---|"]

    def row(names: Sequence[str], rule: Key) -> None:
        keys = ", ".join(f"`{n}`" for n in names)
        default = f"`{rule.default}`" if rule.default else ""
        rows.append(f"| {keys} | {rule.treatment.value} | {default} | {rule.note} |")

    rows.append("| **top level only** | | | |")
    for rule in TOP_LEVEL_KEYS:
        row([rule.name], rule)
    rows.append("| **every flow (top level) or one flow (`<source>-><target>.<key>`)** | | | |")
    for rule in sorted(FLOW_KEYS, key=lambda k: (list(Treatment).index(k.treatment), k.name)):
        row([rule.name], rule)
    for old, new in DEPRECATED_ALIASES.items():
        rows.append(
            f"| `{old}` | honoured | | {_DEPRECATED} `{new}`, with MM2's warning (MM2 3.x; `{new}` wins "
            "where both are set) |"
        )
    rows.append(
        "| **client settings: `<alias>.<key>`, `<alias>.consumer\\|producer\\|admin.<key>`, a flow's "
        "`source.cluster.<key>`, `target.producer.<key>` etc.; top level: `security.protocol`, `ssl.*`, "
        "`sasl.*` for every cluster** | | | |"
    )
    grouped: dict[tuple[Treatment, str, str], list[str]] = {}
    for rule in CLIENT_KEYS:
        grouped.setdefault((rule.treatment, rule.note, rule.default), []).append(rule.name)
    others = sorted(JAVA_CLIENT_KEYS - {k for k in JAVA_CLIENT_KEYS if _rule(k, CLIENT_KEYS)})
    unlisted = UNLISTED_CLIENT_KEY
    grouped[(unlisted.treatment, unlisted.note, unlisted.default)] = others
    for (treatment, note, default), names in sorted(
        grouped.items(), key=lambda g: list(Treatment).index(g[0][0])
    ):
        row(names, Key(names[0], treatment, note, default))
    rows.append("| **Connect worker settings, top level or `<alias>.<key>`** | | | |")
    worker = sorted(k for k in CONNECT_WORKER_KEYS if not _rule(k, FLOW_KEYS))
    row([k for k in worker if "storage" in k], WORKER_STORAGE_KEY)
    row([k for k in worker if "storage" not in k], WORKER_KEY)
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
