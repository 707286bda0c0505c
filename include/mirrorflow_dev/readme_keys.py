"""The README's key table, generated from ``mirrorflow.config.keys``: ``make readme-keys`` writes it
between its markers; a unit test fails while the two differ."""

from __future__ import annotations

from mirrorflow.config.key_classes import markdown
from mirrorflow_dev.paths import REPO_ROOT

README = REPO_ROOT / "README.md"
BEGIN, END = "<!-- keys:begin -->\n", "<!-- keys:end -->\n"


def with_table(readme: str) -> str:
    """``readme`` with the current table between the markers."""
    start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
    return readme[:start] + markdown() + readme[end:]


if __name__ == "__main__":
    README.write_text(with_table(README.read_text()))
