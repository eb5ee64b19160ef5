"""Warnings raised inside devinspect's frames are reported where they would be without it.

A warning PyTorch raises from C++ (``TORCH_WARN``) is attributed to the innermost Python
frame. Under the check's torch-function mode, or on the simulated device, that frame is
devinspect's own (``mode.py``, ``device.py``) instead of the user's line, so the warning
names the wrong place, and the user's filters (by module, "once per line") and
``catch_warnings(record=True)`` see the wrong module and line.

While :func:`install` is in effect (until its :func:`remove`), a filter at the front of ``warnings.filters`` lets every
warning located in those files reach ``warnings._showwarnmsg``, where it is issued again
(``warn_explicit``) at the frame a plain run would name, with that frame's module, registry
and globals: every filter and registry then acts as without devinspect. The filter list is
changed in place, without bumping the filters' version, so "once" registries kept elsewhere
stay as they were.
"""

from __future__ import annotations

import contextlib
import re
import sys
import types
import warnings
from typing import Any

from .own_code import is_own_file
from .tracebacks import is_dispatch_plumbing

#: The modules whose frames call PyTorch on the user's behalf.
_RELAYING_MODULES = re.compile(r"devinspect\.(observe\.mode|testing\.device)\Z")
_FILTER = ("always", None, Warning, _RELAYING_MODULES, 0)

_users = 0
_shown: Any = None


def _plain_frame(filename: str, lineno: int | None) -> types.FrameType | None:
    """The frame a plain run would attribute a warning located at ``filename:lineno`` to.

    That is the caller of the relaying frame, past PyTorch's dispatch plumbing; where the
    relaying frame ran again a Python function that handed itself to a mode (``F.softmax``),
    that function's own frame stands for the call, so its caller is the place.
    """
    frame = sys._getframe(2)
    inner = None
    while frame is not None and not (frame.f_code.co_filename == filename and frame.f_lineno == lineno):
        inner, frame = frame, frame.f_back
    if frame is None:
        return None
    outer = frame.f_back
    while outer is not None and (is_own_file(outer.f_code.co_filename)
                                 or is_dispatch_plumbing(outer.f_code.co_filename)):
        outer = outer.f_back
    if outer is not None and inner is not None and outer.f_code is inner.f_code:
        outer = outer.f_back
    return outer


def _show_or_relocate(message: warnings.WarningMessage) -> None:
    if is_own_file(message.filename or ""):
        frame = _plain_frame(message.filename, message.lineno)
        if frame is not None:
            # As Python does for a warning raised from C: the frame's module and registry, and no
            # loader asked for the source line (``__main__`` of ``python -c`` has none).
            module_globals = frame.f_globals
            try:
                warnings.warn_explicit(
                    message.message, message.category, frame.f_code.co_filename, frame.f_lineno,
                    module=module_globals.get("__name__"),
                    registry=module_globals.setdefault("__warningregistry__", {}), source=message.source,
                )
                return
            except Warning:
                raise  # the user's "error" filter: raised where a plain run raises it
            except Exception:  # a registry or module that is not what Python expects
                pass
    _shown(message)


def install() -> None:
    """Start relocating (counted: each call needs its :func:`remove`)."""
    global _users, _shown
    _users += 1
    if _users > 1 or not hasattr(warnings, "_showwarnmsg"):
        return
    _shown = warnings._showwarnmsg
    warnings._showwarnmsg = _show_or_relocate
    keep_first()


def keep_first() -> None:
    """Put the relaying filter back in front of the filters in use, where ``catch_warnings`` swapped
    the list or a later ``simplefilter`` went before it (a user's filters then act on the relocated
    warning, as they would have on the original)."""
    filters = warnings.filters
    if _shown is None or (filters and filters[0] is _FILTER):
        return
    with contextlib.suppress(ValueError):
        filters.remove(_FILTER)
    filters.insert(0, _FILTER)


def remove() -> None:
    global _users, _shown
    if _users == 0:
        return
    _users -= 1
    if _users or _shown is None:
        return
    if warnings._showwarnmsg is _show_or_relocate:
        warnings._showwarnmsg = _shown
    _shown = None
    with contextlib.suppress(ValueError):
        warnings.filters.remove(_FILTER)

