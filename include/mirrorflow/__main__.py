"""``python -m mirrorflow check-config FILE`` (see ``mirrorflow.app.check_config``) and
``python -m mirrorflow strimzi-to-properties FILE``: a Strimzi ``KafkaMirrorMaker2`` as the
``mm2.properties`` it means (``mirrorflow.config.strimzi``)."""

from __future__ import annotations

import sys

from mirrorflow.app.check_config import main, strimzi_main

_COMMANDS = {"check-config": main, "strimzi-to-properties": strimzi_main}

if __name__ == "__main__":
    command = _COMMANDS.get(sys.argv[1] if len(sys.argv) > 1 else "")
    if command is None:
        sys.exit(f"usage: python -m mirrorflow {{{','.join(_COMMANDS)}}} FILE")
    sys.exit(command(sys.argv[2:]))
