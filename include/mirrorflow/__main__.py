"""``python -m mirrorflow check-config FILE``: see ``mirrorflow.app.check_config``."""

from __future__ import annotations

import sys

from mirrorflow.app.check_config import main

if __name__ == "__main__":
    if sys.argv[1:2] != ["check-config"]:
        sys.exit("usage: python -m mirrorflow check-config FILE [--no-topics]")
    sys.exit(main(sys.argv[2:]))
