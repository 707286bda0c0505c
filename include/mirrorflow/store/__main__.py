"""``python -m mirrorflow.store``: inspect and repair the offsets table (see ``offsets_store.main``)."""

import sys

from mirrorflow.store.offsets_store import main

sys.exit(main())
