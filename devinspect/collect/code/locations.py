"""Where code lives: the user's own lines versus library code, named as IPython names them.

Two rules used everywhere a line or a frame is shown or blamed:

* **Library code** is anything under ``site-packages``/``dist-packages``, the
  standard library, the ``torch`` package and devinspect itself (``<frozen …>``
  modules too), and any package an installer put elsewhere: a folder on ``sys.path``
  that holds the package's ``*.dist-info`` beside it (``pip install --target DIR``, a
  folder of wheels on ``PYTHONPATH``). A fix never edits it, copies and syncs made inside
  it are blamed on the user's line that called it, and its frames in a traceback are not
  the user's.
* **Cells** are named the way IPython's tracebacks name them (``Cell In[3], line 8``)
  once the IPython layer registers how to map a compiled cell's file name to its
  execution count; without IPython, a file is ``path:line``.
"""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
import types
from importlib.util import find_spec
from typing import Callable

from ...model import SourceLine
from ...runtime import PACKAGE_ROOT, is_own_file  # noqa: F401 - a kind of path, read here with the others

_PACKAGE_DIRS = ("site-packages", "dist-packages")


def _torch_root() -> str:
    """torch's package folder, found without importing torch (this module loads with the
    extension, before anything needs torch)."""
    spec = find_spec("torch")
    origin = spec.origin if spec is not None else None
    return os.path.dirname(os.path.abspath(origin)) + os.sep if origin else os.sep + "<no torch>" + os.sep


def _library_roots() -> tuple[str, ...]:
    roots = {_TORCH_ROOT.rstrip(os.sep), PACKAGE_ROOT.rstrip(os.sep)}
    for key in ("stdlib", "platstdlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(os.path.abspath(path))
    return tuple(sorted(r + os.sep for r in roots))


def _frame_locals_type() -> type:
    return type(sys._getframe().f_locals)  # a function's frame: dict before 3.13, FrameLocalsProxy from 3.13 (PEP 667)


_FRAME_LOCALS_PROXY = _frame_locals_type()


def frame_locals(frame: types.FrameType) -> dict:
    """A frame's local variables as a plain dict, read without running user code.

    Up to 3.12 ``f_locals`` is a dict (the module's globals for a module frame). From 3.13
    a function frame gives a ``FrameLocalsProxy`` that reads the frame's own slots; its
    items are copied into a dict. Anything else (a class body's custom mapping) reads as
    empty: its methods would be user code.
    """
    found = frame.f_locals
    if type(found) is dict:
        return found
    if type(found) is _FRAME_LOCALS_PROXY:
        return dict(found.items())
    return {}


_TORCH_ROOT = _torch_root()
_LIBRARY_ROOTS = _library_roots()
_STDLIB_ROOTS = tuple(os.path.abspath(p) + os.sep for p in
                      {sysconfig.get_paths().get("stdlib"), sysconfig.get_paths().get("platstdlib")} if p)
_library_cache: dict[str, bool] = {}

#: Maps a compiled cell's file name to its execution count (set by the IPython layer).
_cell_numbers: list[Callable[[str], int | None]] = []


def is_library_file(filename: str) -> bool:
    """Whether ``filename`` is library code the user does not edit (see the module docstring)."""
    known = _library_cache.get(filename)
    if known is None:
        if filename.startswith("<"):
            # <frozen importlib._bootstrap>, <string> from library exec; cells are registered below.
            known = filename.startswith("<frozen")
        else:
            parts = filename.replace("\\", "/").split("/")
            known = (any(p in _PACKAGE_DIRS for p in parts) or filename.startswith(_LIBRARY_ROOTS)
                     or filename.startswith(installed_elsewhere()))
        _library_cache[filename] = known
    return known


_installed: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # (sys.path read, the roots found there)


def installed_elsewhere() -> tuple[str, ...]:
    """The top-level packages (``DIR/IPython/``) and modules (``DIR/six.py``) an installer put in a
    folder of ``sys.path`` other than site-packages: those whose ``*.dist-info`` lies in the same
    folder (its ``RECORD`` names them). Read again when ``sys.path`` changes."""
    global _installed
    path = tuple(sys.path)
    if _installed[0] != path:
        roots: set[str] = set()
        for entry in path:
            folder = os.path.abspath(entry or os.curdir)
            if any(p in _PACKAGE_DIRS for p in folder.split(os.sep)) or (folder + os.sep).startswith(_LIBRARY_ROOTS):
                continue
            roots.update(_recorded_tops(folder))
        _installed = (path, tuple(sorted(roots)))
    return _installed[1]


def _recorded_tops(folder: str) -> set[str]:
    try:
        metadata = [n for n in os.listdir(folder) if n.endswith(".dist-info")]
    except OSError:
        return set()
    tops = set()
    for name in metadata:
        try:
            with open(os.path.join(folder, name, "RECORD"), encoding="utf-8") as record:
                lines = record.read().splitlines()
        except OSError:
            continue
        for line in lines:
            top = line.split(",", 1)[0].split("/", 1)
            if top[0] and not top[0].startswith("..") and not top[0].endswith((".dist-info", ".data")) \
                    and top[0] != "__pycache__":
                tops.add(os.path.join(folder, top[0]) + (os.sep if len(top) > 1 else ""))
    return tops


#: Packages of the tools around the user (the shell, the kernel), not of their model.
_TOOL_PACKAGES = ("IPython", "ipykernel", "traitlets", "zmq", "tornado", "jupyter_client", "comm", "debugpy",
                  "ipywidgets", "devinspect")
_tool_cache: dict[str, bool] = {}


def is_tool_file(filename: str) -> bool:
    """Whether ``filename`` belongs to devinspect, IPython, the kernel or the standard library.

    Their frames in a traceback hold the tools' own objects (argument parsers, the
    check itself), never the user's model or data, so they are not walked. Other
    library frames (torch, transformers) hold real activations and are measured.
    """
    known = _tool_cache.get(filename)
    if known is None:
        parts = filename.replace("\\", "/").split("/")
        in_package = next((parts[i + 1] for i, p in enumerate(parts[:-1]) if p in _PACKAGE_DIRS), None)
        stdlib = any(filename.startswith(r) for r in _STDLIB_ROOTS) and in_package is None
        known = (filename.startswith("<frozen") or stdlib or in_package in _TOOL_PACKAGES
                 or filename.startswith(PACKAGE_ROOT))
        _tool_cache[filename] = known
    return known


def package_of(filename: str) -> str:
    """The top-level package a library file belongs to (``torch``, ``transformers``), or ``""``."""
    parts = filename.replace("\\", "/").split("/")
    for i, part in enumerate(parts[:-1]):
        if part in _PACKAGE_DIRS:
            return parts[i + 1].removesuffix(".py")
    if filename.startswith(_TORCH_ROOT):
        return "torch"
    if filename.startswith(PACKAGE_ROOT):
        return "devinspect"
    return "the standard library" if any(filename.startswith(r) for r in _STDLIB_ROOTS) else ""


def is_user_code(code: types.CodeType) -> bool:
    return not is_library_file(code.co_filename)


def register_cell_numbers(lookup: Callable[[str], int | None]) -> None:
    """Let locations name cells: ``lookup(filename)`` returns the execution count, or None."""
    if lookup not in _cell_numbers:
        _cell_numbers.append(lookup)


def unregister_cell_numbers(lookup: Callable[[str], int | None]) -> None:
    if lookup in _cell_numbers:
        _cell_numbers.remove(lookup)


def cell_number(filename: str) -> int | None:
    """The execution count of the cell compiled as ``filename``, when IPython says so."""
    for lookup in _cell_numbers:
        try:
            number = lookup(filename)
        except Exception:  # a name we cannot map is shown as a file
            number = None
        if number is not None:
            return number
    return None


def source_line(filename: str, lineno: int, function: str = "") -> SourceLine:
    """A :class:`SourceLine` with the line's text and, for a notebook cell, its number."""
    text = linecache.getline(filename, lineno).strip()
    return SourceLine(filename, lineno, function, text, cell_number(filename))


def frame_line(frame: types.FrameType) -> SourceLine:
    code = frame.f_code
    return source_line(code.co_filename, frame.f_lineno, code.co_name)


def user_frames(frame: types.FrameType | None) -> list[types.FrameType]:
    """The frames of user code from ``frame`` outwards (innermost first)."""
    out = []
    while frame is not None:
        if is_user_code(frame.f_code):
            out.append(frame)
        frame = frame.f_back
    return out


def caller_frame(depth: int = 1) -> types.FrameType:
    return sys._getframe(depth + 1)


#: Parts of torch that compile code (torch.compile's tracer and backends): their frames are
#: the machinery between a compiled call and the user's code, never where a tensor is.
_MACHINERY = tuple(_TORCH_ROOT + part for part in ("_dynamo", "_inductor", "fx", "_subclasses", "_functorch",
                                                   "_guards.py", "_higher_order_ops", "_prims", "_refs", "_ops.py",
                                                   "utils/_stats.py", "utils/_python_dispatch.py"))


def is_compile_machinery(filename: str) -> bool:
    """Whether ``filename`` is part of ``torch.compile``'s tracer or backends."""
    return filename.startswith(_MACHINERY)
