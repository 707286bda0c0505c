"""An import rule import-linter's own contract types cannot state, for ``make lint``: an allow-list.

A ``forbidden`` contract names what a package may not import, so anything new passes unnoticed; an
``allowed`` contract names all it may import. ``pyproject.toml`` registers it
(``contract_types``); its options:

    source_modules     the packages held to the list (each with its submodules)
    allowed_modules    what they may import besides each other (each with its submodules)
    standard_library   true: any module of Python's standard library too (``sys.stdlib_module_names``)
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


class AllowedImportsContract(Contract):
    """Every module under ``source_modules`` imports only what the contract allows."""

    type_name = "allowed"

    source_modules = fields.ListField(subfield=fields.ModuleField())
    allowed_modules = fields.ListField(subfield=fields.ModuleField(), required=False)
    standard_library = fields.BooleanField(required=False, default=False)

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources = _with_descendants(graph, _names(self.source_modules))
        allowed = _names(self.allowed_modules or [])
        stdlib = sys.stdlib_module_names if self.standard_library else frozenset()
        found = [
            (importer, imported, _lines(graph, importer, imported))
            for importer in sorted(sources)
            for imported in sorted(graph.find_modules_directly_imported_by(importer))
            if imported not in sources
            and not _within(imported, allowed)
            and imported.split(".")[0] not in stdlib
        ]
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, imported, lines in check.metadata["found"]:
            output.print_error(f"{importer} -> {imported} (l.{lines}) is not among the allowed imports")
            output.new_line()


def _names(modules: Any) -> list[str]:
    return [m.name for m in modules]


def _with_descendants(graph: ImportGraph, names: Iterable[str]) -> set[str]:
    found: set[str] = set()
    for name in names:
        found |= {name, *graph.find_descendants(name)}
    return found


def _within(module: str, packages: Iterable[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _lines(graph: ImportGraph, importer: str, imported: str) -> str:
    details = graph.get_import_details(importer=importer, imported=imported)
    return ", ".join(str(d["line_number"]) for d in details) or "?"
