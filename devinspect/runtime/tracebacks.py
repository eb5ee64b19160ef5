"""Tracebacks without devinspect's own frames: an error leaving a checked cell, or raised
by the simulated device, is drawn as it would be without devinspect.

Drawing as the shell does needs the shell: the IPython layer registers its drawer
(:func:`register_drawer`) when the extension loads; without one, nothing is changed.
"""

from __future__ import annotations

import sys
import types
from typing import Callable

from .own_code import is_own_file

#: Draws ``(exc, tb)`` as the shell draws a traceback; registered by the IPython layer.
_drawers: list[Callable[[BaseException, types.TracebackType | None], list[str]]] = []


def register_drawer(draw: Callable[[BaseException, types.TracebackType | None], list[str]]) -> None:
    """Let tidied tracebacks be drawn by ``draw`` (the shell's own traceback formatter)."""
    if draw not in _drawers:
        _drawers.append(draw)


def unregister_drawer(draw: Callable[[BaseException, types.TracebackType | None], list[str]]) -> None:
    if draw in _drawers:
        _drawers.remove(draw)


#: Callables that drop a shell's own references to the last error (IPython keeps it in its
#: traceback formatter and in the last execution result): the IPython layer registers one when
#: the extension loads, and every release of the last error (:mod:`devinspect.actions`) runs them.
error_holders: list[Callable[[], None]] = []


def ends_in_own_frames(tb: types.TracebackType | None) -> bool:
    """Whether the innermost frame of a traceback is devinspect's (the check, the simulated device)."""
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    return last is not None and is_own_file(last.tb_frame.f_code.co_filename)


#: PyTorch's Python dispatch plumbing between a call and a Python kernel (a GPU has C++ there).
_DISPATCH_FILES = ("/torch/overrides.py", "/torch/_ops.py", "/torch/utils/_pytree.py", "/torch/_tensor.py",
                   "/torch/utils/_python_dispatch.py")


def is_dispatch_plumbing(filename: str) -> bool:
    return filename.replace("\\", "/").endswith(_DISPATCH_FILES)


def _reentered(entries: list, i: int) -> int:
    """The position of the entry where the call at entry ``i`` ran again, having handed itself to
    a torch-function mode (only PyTorch's overrides between, devinspect's frames already gone); 0 if none."""
    code = entries[i].tb_frame.f_code
    for j in range(i + 1, len(entries)):
        if entries[j].tb_frame.f_code is code:
            return j if j > i + 1 else 0
        if not entries[j].tb_frame.f_code.co_filename.replace("\\", "/").endswith("/torch/overrides.py"):
            return 0
    return 0


def without_own_frames(tb: types.TracebackType | None, body_file: str | None = None,
                       kernel: bool = False) -> types.TracebackType | None:
    """The same traceback with devinspect's frames left out (rebuilt; the original is untouched).

    With ``body_file`` (a checked cell's compiled file name), the frames between the
    shell's entry frame and the checked body (the call of the cell magic, IPython's
    magic machinery) go too, so the traceback has the shape of a plain cell's.
    """
    entries = []
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    start = 0
    if body_file is not None:
        body = next((i for i, e in enumerate(entries) if e.tb_frame.f_code.co_filename == body_file
                     and e.tb_frame.f_code.co_name == "<module>"), None)
        if body is not None and body > 0:
            entries = entries[:1] + entries[body:]  # the shell's entry frame, then the body on
    if kernel:
        # Everything from the dispatch into the simulated device's kernel on goes, as on a GPU.
        first_own = next((i for i, e in enumerate(entries) if i > start and is_own_file(e.tb_frame.f_code.co_filename)),
                         None)
        if first_own is not None:
            cut = first_own
            while cut - 1 > start and is_dispatch_plumbing(entries[cut - 1].tb_frame.f_code.co_filename):
                cut -= 1
            entries = entries[:cut]
    kept = [e for i, e in enumerate(entries) if i == start or not is_own_file(e.tb_frame.f_code.co_filename)]
    if body_file is not None:
        # A Tensor method that hands itself to the check's mode (t.backward() -> handle_torch_function
        # -> the check -> t.backward() again) shows once, where it ran, as in a plain cell.
        dropped: set[int] = set()
        for i in range(len(kept)):
            again = _reentered(kept, i)
            if again:
                dropped.update(range(i, again))
        kept = [e for i, e in enumerate(kept) if i not in dropped]
    rebuilt = None
    for e in reversed(kept):
        rebuilt = types.TracebackType(rebuilt, e.tb_frame, e.tb_lasti, e.tb_lineno)
    return rebuilt


class _RenderWithoutOwnFrames:
    """IPython's own traceback, drawn without devinspect's frames (its ``_render_traceback_`` hook).

    IPython hides frames marked ``__tracebackhide__`` except the innermost one; when
    that one is devinspect's (an error raised by a C++ op called from the check, or
    by the simulated device), this renders the traceback a plain cell would show.
    It holds no reference to its exception (the two would keep each other, and the
    error's frames, alive until the cyclic collector runs, so an error the user catches
    would hold its memory longer than without devinspect): IPython sets ``sys.last_value``
    to the error it draws before it asks for this, which is how it is found. It draws
    once; later drawings (``%tb``) are IPython's usual ones.
    """

    def __init__(self, body_file: str | None = None, kernel: bool = False):
        self.body_file = body_file
        self.kernel = kernel

    def __call__(self) -> list[str]:
        exc = sys.__dict__.get("last_value")
        try:
            mine = object.__getattribute__(exc, "__dict__").get("_render_traceback_") is self
        except Exception:
            mine = False
        if not mine:
            raise RuntimeError("not the error being drawn")  # IPython then draws its usual traceback
        try:
            exc.__dict__.pop("_render_traceback_", None)
        except Exception:
            pass
        if not _drawers:
            raise RuntimeError("no drawer")  # IPython then draws its usual traceback
        return _drawers[-1](exc, without_own_frames(exc.__traceback__, self.body_file, self.kernel))


def tidy_traceback(exc: BaseException, body_file: str | None = None, kernel: bool = False) -> None:
    """Let IPython show ``exc`` as it would without devinspect.

    Without ``body_file``: only when devinspect's frames are the innermost ones (IPython
    hides them elsewhere). With it (an error leaving a checked cell): always, shaped as
    a plain cell's traceback. With ``kernel`` (an error of the simulated device's kernels):
    always, ending where a GPU's traceback ends, at the last frame before PyTorch's
    dispatch (a GPU kernel raises from C++). Does nothing to an exception that renders itself.
    """
    try:
        if "_render_traceback_" in exc.__dict__ or hasattr(type(exc), "_render_traceback_"):
            current = exc.__dict__.get("_render_traceback_")
            if type(current) is _RenderWithoutOwnFrames:
                current.body_file = body_file or current.body_file
                current.kernel = current.kernel or kernel
            return
        if not _drawers or (body_file is None and not kernel and not ends_in_own_frames(exc.__traceback__)):
            return
        exc._render_traceback_ = _RenderWithoutOwnFrames(body_file, kernel)  # type: ignore[attr-defined]
    except Exception:  # only ever a nicer traceback, never a failure
        pass
