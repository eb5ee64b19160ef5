"""``python -m devinspect``: the environment report for bug reports (``--json`` for machines)."""

import sys

from .environment import main

sys.exit(main())
