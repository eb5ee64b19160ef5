"""What the walk reads inside objects it does not walk attribute by attribute.

* A ``types.MappingProxyType`` (a class's ``__dict__``, a read-only view a library hands
  out) over a dict: that dict, found as the proxy's one referent (``gc.get_referents``),
  so no ``items()`` of a mapping runs. Its items are typed ``proxy["key"]``.
* A paused generator, coroutine or async generator: the locals of its suspended frame,
  typed ``gen.gi_frame.f_locals["t"]``. Reading them runs nothing (the frame is not
  executing; up to 3.12 ``f_locals`` copies the frame's slots into its locals dict, from
  3.13 it is a ``FrameLocalsProxy`` over them). A running one (a generator that is
  inspecting its own namespace, or one another thread is running) is left alone.
* numpy and pandas objects: they hold no tensors unless their cells are Python objects,
  which are reported as not inspected (their elements are not walked).
"""

from __future__ import annotations

import gc
import sys
import types
from typing import Any

from ..code import locations
from .container_snapshots import dict_items
from .static_getters import type_name

#: For each paused kind: its type, its frame getter, its "running" getter, and how the frame is
#: typed. Looked up by identity (a dict keyed by the type would hash a user's metaclass).
_PAUSED = tuple((kind, kind.__dict__[f"{prefix}_frame"].__get__, kind.__dict__[f"{prefix}_running"].__get__,
                 f"{prefix}_frame")
                for kind, prefix in ((types.GeneratorType, "gi"), (types.CoroutineType, "cr"),
                                     (types.AsyncGeneratorType, "ag")))


def proxied_dict(proxy: types.MappingProxyType) -> dict | None:
    """The dict (or dict subclass, read through ``dict``'s own methods) a mappingproxy reads;
    None when it reads another kind of mapping (whose methods would be user code)."""
    referents = gc.get_referents(proxy)
    if len(referents) == 1 and issubclass(type(referents[0]), dict):
        return referents[0]
    return None


def paused_frame(o: Any, vt: type) -> tuple[str, types.FrameType] | None:
    """``(frame attribute, frame)`` of a paused generator, coroutine or async generator
    (``("gi_frame", frame)``); None for anything else, or one that is running or finished."""
    found = next((kind for kind in _PAUSED if kind[0] is vt), None)
    if found is None:
        return None
    _, frame_of, running, attribute = found
    frame = frame_of(o)
    if frame is None or running(o):
        return None
    return attribute, frame


def paused_locals(o: Any, vt: type) -> tuple[str, list[tuple[str, Any]]] | None:
    """``(frame attribute, [(local name, value)])`` of a paused generator, coroutine or async
    generator (``("gi_frame", [("t", tensor)])``), as :func:`paused_frame` finds it."""
    paused = paused_frame(o, vt)
    if paused is None:
        return None
    return paused[0], [(k, v) for k, v in dict_items(locations.frame_locals(paused[1])) if type(k) is str]


def foreign_container_note(o: Any, vt: type, module: str) -> str | None:
    """Why a numpy or pandas object is not inspected (an array or frame of Python objects, or a
    class that only claims to be theirs), or None when it holds no Python objects."""
    tname = type_name(vt)
    # Read only through the real classes (a class that merely says it is numpy's runs its own
    # code on every attribute; a subclass may too): anything else is reported, not read.
    numpy, pandas = sys.modules.get("numpy"), sys.modules.get("pandas")
    try:
        if numpy is not None and vt is numpy.__dict__.get("ndarray"):
            return "a numpy array of Python objects: its elements are not inspected" if o.dtype.kind == "O" else None
        if pandas is not None and vt is pandas.__dict__.get("DataFrame"):
            if any(dt.kind == "O" for dt in o.dtypes):
                return "a pandas DataFrame with object columns: its cells are not inspected"
            return None
        if pandas is not None and vt is pandas.__dict__.get("Series"):
            return "a pandas Series of objects: its cells are not inspected" if o.dtype.kind == "O" else None
        if tname in ("ndarray", "DataFrame", "Series"):
            return f"a {tname} of another class than {module}'s: not inspected"
    except Exception:  # one we cannot read is reported as such
        return f"a {tname}: not inspected"
    return None
