"""``python -m mirrorflow.store``: inspect and repair the offsets table (see ``mirrorflow.store.cli``)."""

import sys

from mirrorflow.store.cli import main

sys.exit(main())
