"""ARCHITECTURE.md's module table names every module of the package: a module added without its
row (what it holds, the invariant it keeps) fails here, and so does a row naming a module that is
gone."""

from __future__ import annotations

import re

from mirrorflow_dev.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "include" / "mirrorflow"
_NAME = re.compile(r"`([a-z_][a-z0-9_.]*)`")


def _modules() -> set[str]:
    return {
        ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    }


def _table_names() -> set[str]:
    """The modules the table's first cells name. A cell may name more than one; a name without a
    package (``schema`` in ``store.offsets_store (+ schema, ...)``) is in the package of the cell's
    first name."""
    names: set[str] = set()
    for line in (REPO_ROOT / "ARCHITECTURE.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        found = _NAME.findall(line.split(" | ")[0])
        package = found[0].rpartition(".")[0]
        names |= {name if "." in name or not package else f"{package}.{name}" for name in found}
    return names


def test_every_module_has_its_row_in_architecture_md() -> None:
    assert sorted(_modules() - _table_names()) == []


def test_every_row_names_a_module_that_exists() -> None:
    assert sorted(_table_names() - _modules()) == []
