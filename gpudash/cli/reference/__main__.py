"""``python -m gpudash.cli.reference``: write the reference pages and the man page."""

from __future__ import annotations

import sys

from gpudash.cli.reference import main

sys.exit(main())
