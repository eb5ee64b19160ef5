"""Which frames are devinspect's own: they are never reported as the user's code, and the
tracebacks and warnings a user sees leave them out."""

from __future__ import annotations

import os

#: devinspect's own package folder (this file is devinspect/runtime/own_code.py).
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def is_own_file(filename: str) -> bool:
    """Whether ``filename`` is part of devinspect (its frames are never reported)."""
    return filename.startswith(PACKAGE_ROOT)
