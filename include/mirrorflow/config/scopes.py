"""An mm2.properties file's keys sorted into MirrorMaker 2's scopes, prefixes stripped: top level,
``<alias>.*`` (one cluster's client settings) and ``<source>-><target>.*`` (one flow).

Invariants: a key belongs to the longest alias it starts with, so ``eu.west`` beats ``eu``; a flow
key names two different aliases that ``clusters`` lists; flows come out in ``clusters`` order
whatever the order of the file; this product's settings are never per cluster, and their names
are checked as the file is split (``key_classes.check_setting``), before any value is read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mirrorflow.config.key_classes import check_setting
from mirrorflow.config.keys import PROJECT_PREFIX
from mirrorflow.config.property_view import PropertyView
from mirrorflow.errors import ConfigError

FLOW_ARROW = "->"


def cluster_aliases(raw: Mapping[str, str]) -> tuple[str, ...]:
    """The aliases ``clusters`` lists: at least one, each once."""
    aliases = PropertyView.layered([("", raw)]).get_list("clusters", ())
    if not aliases:
        raise ConfigError(
            "no clusters; list the cluster aliases, e.g. `clusters = primary, backup`", key="clusters"
        )
    if "" in aliases or len(set(aliases)) != len(aliases):
        raise ConfigError(
            f"empty or repeated alias in {', '.join(aliases)}; list each cluster once", key="clusters"
        )
    return aliases


def split_scopes(
    raw: Mapping[str, str], aliases: Sequence[str]
) -> tuple[dict[str, str], dict[str, dict[str, str]], dict[tuple[str, str], dict[str, str]]]:
    """Sort keys into top level, ``<alias>.*`` and ``<src>-><tgt>.*`` (prefixes stripped).

    Flows come out in ``clusters`` order (source, then target) whatever the order of the file.
    """
    top: dict[str, str] = {}
    by_cluster: dict[str, dict[str, str]] = {}
    found: dict[tuple[str, str], dict[str, str]] = {}
    for key, value in raw.items():
        if FLOW_ARROW in key:
            source, target, setting = _parse_flow_key(key, aliases)
            check_setting(key, setting, top_level=False)
            found.setdefault((source, target), {})[setting] = value
        elif alias := _alias_of(key, aliases):
            setting = key[len(alias) + 1 :]
            if setting.startswith(PROJECT_PREFIX):
                raise ConfigError(
                    "mirrorflow settings are not per cluster; set them at top level or per flow "
                    f"(`<source>-><target>.{setting}`)",
                    key=key,
                )
            by_cluster.setdefault(alias, {})[setting] = value
        else:
            check_setting(key, key, top_level=True)
            top[key] = value
    by_flow = {(s, t): found[(s, t)] for s in aliases for t in aliases if (s, t) in found}
    return top, by_cluster, by_flow


def _alias_of(key: str, aliases: Sequence[str]) -> str | None:
    """The alias ``key`` is scoped to; the longest wins, so ``eu.west`` beats ``eu``."""
    matching = [alias for alias in aliases if key.startswith(f"{alias}.")]
    return max(matching, key=len) if matching else None


def _parse_flow_key(key: str, aliases: Sequence[str]) -> tuple[str, str, str]:
    source, rest = key.split(FLOW_ARROW, 1)
    target = _alias_of(rest, aliases)
    known = ", ".join(aliases)
    if source not in aliases or target is None:
        unknown = source if source not in aliases else rest.split(".", 1)[0]
        raise ConfigError(
            f"flow keys look like `<source>-><target>.<setting>` with both aliases listed in clusters "
            f"({known}), but {unknown!r} is not; add it to clusters or fix the alias",
            key=key,
        )
    if source == target:
        raise ConfigError(f"a flow from {source!r} to itself is not possible; remove the key", key=key)
    return source, target, rest[len(target) + 1 :]
