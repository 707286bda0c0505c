"""The Grafana dashboard in docs/grafana and the metric names its PromQL queries read."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mirrorflow_dev.paths import REPO_ROOT

DASHBOARD = REPO_ROOT / "docs" / "grafana" / "mirrorflow-dashboard.json"

# PromQL words that are not metric names where they stand outside parentheses' calls.
_KEYWORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "offset",
    "bool",
    "and",
    "or",
    "unless",
}
_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def queries(path: Path = DASHBOARD) -> list[str]:
    """Every PromQL expression of the dashboard: its panels' targets and its query variables'."""
    board: dict[str, Any] = json.loads(path.read_text())
    found = [t["expr"] for p in board["panels"] for t in p["targets"]]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            found.append(variable["query"]["query"])
    return found


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a ``label_values(metric, label)`` variable) reads."""
    variable = re.fullmatch(r"label_values\((\w+),\s*\w+\)", expr)
    if variable:
        return {variable.group(1)}
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # string literals
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # range selectors
    text = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", text)  # grouping labels
    names = set()
    for match in _IDENTIFIER.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group() in _KEYWORDS:
            continue  # a function call or a keyword
        names.add(match.group())
    return names


def exported_names(prom_text: str) -> set[str]:
    """The metric names a Prometheus text file declares."""
    return {line.split()[2] for line in prom_text.splitlines() if line.startswith("# TYPE ")}
