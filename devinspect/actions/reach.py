"""Whether assigning a name reaches the reference the user's code will use.

A tensor that is not a leaf of autograd moves by assignment (``x = x.to(dev)``). Some names
can be assigned without anything changing for the code that holds the tensor: a paused
generator reads its own frame slot, of which ``gen.gi_frame.f_locals`` is a copy (before
Python 3.13); a ``mappingproxy`` and a tuple refuse the assignment. Such a move is not
offered, and the reason is said instead. Everything else is checked after the fact: the
move reads the name back and undoes itself when the name still gives the old tensor.
"""

from __future__ import annotations

import sys
import types
from typing import Any, MutableMapping

from .result import UNKNOWN, NamePath

#: Frame attributes of paused generators, coroutines and async generators.
_PAUSED_FRAMES = {"gi_frame": "generator", "cr_frame": "coroutine", "ag_frame": "async generator"}
#: From Python 3.13 (PEP 667) ``frame.f_locals`` writes through to the frame's own slots.
LOCALS_WRITE_THROUGH = sys.version_info >= (3, 13)


def unreached(namespace: MutableMapping[str, Any], name: str) -> str | None:
    """Why assigning ``name`` would not reach the reference the code uses (None: nothing known
    against it). Reads the path statically: none of the user's code runs."""
    try:
        path = NamePath(name)
    except ValueError:
        return None
    attrs = [key for kind, key in path.steps if kind == "attr"]
    for frame_attr, kind in _PAUSED_FRAMES.items():
        if frame_attr in attrs and "f_locals" in attrs and not LOCALS_WRITE_THROUGH:
            return (f"it is a local of a paused {kind}, which reads its own frame slot: f_locals is a copy of it "
                    f"(before Python 3.13), so assigning there would leave the {kind} with its tensor. Move it "
                    f"where the {kind} makes it, or send the device in")
    if "f_locals" in attrs and not LOCALS_WRITE_THROUGH:
        return ("it is a local of a frame, whose f_locals is a copy of its slots (before Python 3.13): assigning "
                "there reaches nothing")
    holder = path.holder_read_statically(namespace)
    if holder is UNKNOWN:
        return None
    if type(holder) is types.MappingProxyType:
        return ("it is held in a read-only mappingproxy (a class's __dict__, a view a library hands out), which "
                "refuses assignment: move it where its owner keeps it")
    if isinstance(holder, tuple):
        return (f"it is held in a {type(holder).__name__}, which cannot change: move what holds the "
                f"{type(holder).__name__} whole")
    return None
