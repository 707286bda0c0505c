"""The README's key tables, generated from the key table: MM2's keys (``mirrorflow.config.keys``,
``client_keys``) and this product's settings (``setting_keys``). ``make readme-keys`` writes each
between its markers; a unit test fails while the README differs."""

from __future__ import annotations

from mirrorflow.config.key_classes import markdown, settings_markdown
from mirrorflow_dev.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
TABLES = {"keys": markdown, "settings": settings_markdown}


def with_table(readme: str) -> str:
    """``readme`` with the current tables between their markers."""
    for name, table in TABLES.items():
        begin, end = f"<!-- {name}:begin -->\n", f"<!-- {name}:end -->\n"
        start, stop = readme.index(begin) + len(begin), readme.index(end)
        readme = readme[:start] + table() + readme[stop:]
    return readme


if __name__ == "__main__":
    README.write_text(with_table(README.read_text()))
