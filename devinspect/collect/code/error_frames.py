"""Errors that are over but still alive, and the tensors their tracebacks' frames hold.

An error keeps its traceback, and the traceback keeps every frame it passed through with
their locals, so a tensor local to a function that raised stays alive as long as the error
does. In IPython an error is over once its cell has run, yet it lives on in a reference
cycle (its traceback holds IPython's own frame, whose locals hold the cell's result, which
holds the error) until the garbage collector next runs a full pass: with GPU tensors that
is soon a 4 GiB local nobody can name. The last error is also ``sys.last_traceback``; the
ones before it are reached by no name at all.

Such a tensor is named here after the error that holds it: ``<ValueError from Cell In[3],
line 1>:f.hidden`` is the local ``hidden`` of ``f``, in the traceback of the ValueError that
the cell In[3] raised. Errors a name reaches (``saved = e``) are the walk's; errors still
being handled (a frame of theirs is running) are left alone.

Reading is static: frames' locals as dicts, the error's fields through ``BaseException``'s
own descriptors; no user code runs.
"""

from __future__ import annotations

import re
import sys
import types
from typing import Any, Iterable, Iterator

import torch

from ..objects import str_items, type_name
from . import locations
from .call_stack import traceback_locals

_TRACEBACK_OF = BaseException.__dict__["__traceback__"].__get__
_Tensor = torch.Tensor
#: Frames of one traceback looked at (a deep recursion's are not all read).
MAX_FRAMES = 64
#: Items of a list, tuple or dict local looked at for tensors.
MAX_ITEMS = 1000

#: A name given here: ``<ValueError from Cell In[3], line 1>:f.hidden`` (or ``…:f.hidden[2]``).
ERROR_LOCAL = re.compile(r"(<(?P<error>[^<>]+) from (?P<where>[^<>]+)>):(?P<function>[^.]+)\.(?P<local>.+)")


def running_frames() -> set[int]:
    """The ids of every frame running now, on any thread."""
    out = set()
    for frame in sys._current_frames().values():
        while frame is not None:
            out.add(id(frame))
            frame = frame.f_back
    return out


def finished_errors(objects: Iterable[Any], reached: set[int] | frozenset[int] = frozenset()
                    ) -> Iterator[tuple[BaseException, str]]:
    """``(error, "<ValueError from Cell In[3], line 1>")`` for each error among ``objects`` (the
    garbage collector's) that has a traceback, is not in ``reached`` (ids of what names reach)
    and has no frame running."""
    running = running_frames()
    # The last error is sys.last_traceback's: its frames' tensors are named after it.
    last = {id(sys.__dict__.get(name)) for name in ("last_value", "last_exc")}
    for o in objects:
        if not issubclass(type(o), BaseException) or id(o) in reached or id(o) in last:
            continue
        tb = _TRACEBACK_OF(o)
        if type(tb) is not types.TracebackType:
            continue
        levels = []
        while type(tb) is types.TracebackType and len(levels) < MAX_FRAMES:
            levels.append((tb.tb_frame, tb.tb_lineno))
            tb = tb.tb_next
        if any(id(frame) in running for frame, _ in levels):
            continue
        yield o, f"<{type_name(type(o))} from {_where(levels)}>"


def _where(levels: list[tuple[types.FrameType, int]]) -> str:
    """Where the error was raised from, as IPython names it: the outermost frame of a notebook
    cell (``Cell In[3], line 1``), else of the user's code (``train.py:12``)."""
    def line(frame: types.FrameType, lineno: int) -> str:
        return locations.source_line(frame.f_code.co_filename, lineno).where

    for frame, lineno in levels:
        if locations.cell_number(frame.f_code.co_filename) is not None:
            return line(frame, lineno)
    for frame, lineno in levels:
        if locations.is_user_code(frame.f_code) and not locations.is_tool_file(frame.f_code.co_filename):
            return line(frame, lineno)
    return line(*levels[-1])


def error_locals(objects: Iterable[Any], reached: set[int]) -> dict[int, str]:
    """The id of each tensor a local of a finished error's frames holds (itself, or an item of a
    list, tuple or dict it is) -> its name there: ``<ValueError from Cell In[3], line 1>:f.hidden``."""
    out: dict[int, str] = {}
    for error, label in finished_errors(objects, reached):
        for function, key, value in traceback_locals(_TRACEBACK_OF(error), MAX_FRAMES):
            _name_tensors(value, f"{label}:{function}.{key}", out)
    return out


def _name_tensors(value: Any, name: str, out: dict[int, str]) -> None:
    vt = type(value)
    if issubclass(vt, _Tensor):
        out.setdefault(id(value), name)
    elif vt is list or vt is tuple:
        for i, item in enumerate(value[:MAX_ITEMS]):
            if issubclass(type(item), _Tensor):
                out.setdefault(id(item), f"{name}[{i}]")
    elif vt is dict:
        for key, item in str_items(value)[:MAX_ITEMS]:
            if issubclass(type(item), _Tensor):
                out.setdefault(id(item), f"{name}[{key!r}]")


def describe(name: str) -> tuple[str, str] | None:
    """``("hidden in f", "the ValueError from Cell In[3], line 1")``, the local and the error
    whose traceback holds it, for a name given here; None for any other name."""
    m = ERROR_LOCAL.fullmatch(name)
    if m is None:
        return None
    return f"{m['local']} in {m['function']}", f"the {m['error']} from {m['where']}"


def error_of(name: str) -> str | None:
    """``<ValueError from Cell In[3], line 1>`` for a name given here; None for any other name."""
    m = ERROR_LOCAL.fullmatch(name)
    return m.group(1) if m else None
