"""Explaining an error after it happened, from its traceback: no check needs to have run.

A **device mismatch** is decided from the tensors themselves: the failing call and its
operands are read from the traceback (:mod:`devinspect.collect.code.failing_call`) and,
when they sit on more than one device, named and given a fix exactly as ``%%devcheck``
does (:mod:`devinspect.diagnose.errors.mismatch`).

**Other device errors** (a device tensor read as a NumPy array, pinned, used in a DataLoader
worker, or given a generator of another device) are read from the objects involved by
:mod:`devinspect.diagnose.errors.device_errors`, before a mismatch is looked for: their messages name
devices too.

**Out of memory** (``torch.OutOfMemoryError``) is explained by
:mod:`devinspect.diagnose.errors.out_of_memory`.

**Errors a library wraps or re-raises** (torchmetrics' "Encountered different devices …", pyro's
trace adding the sample sites' shapes, a library's own exception class) keep the error they
replace as their ``__cause__`` or ``__context__``: the chain is followed to the error the failing
call raised, and its traceback joined to the outer one, so the user's line stays the cell's
(:func:`chained_errors`). The outer error's own message is never read for it.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Mapping

import torch

from ...collect import (
    Entry,
    Temporary,
    Traced,
    compiled_call,
    failing_call,
    first_line,
    locations,
    says_mismatch,
    traceback_entries,
    type_is_one_of,
)
from ...model import Explanation, Mismatch
from ...runtime import tensor_getters
from .device_errors import explain_device_error
from .mismatch import Failure, diagnose

#: Errors a device mismatch raises (PyTorch's C++ checks raise RuntimeError; a few Python
#: checks raise TypeError or ValueError, indexing IndexError).
_MISMATCH_TYPES = (RuntimeError, TypeError, ValueError, IndexError)


def explain(exc: BaseException | None = None, namespace: Mapping[str, Any] | None = None) -> Explanation:
    """Explain ``exc`` (by default the last uncaught error, ``sys.last_value``).

    A device mismatch gets the failing op, its operands named as you know them and the
    fix; another device error (``.numpy()`` of a device tensor, a DataLoader pinning or
    forking over device tensors, a generator of another device) its cause and fix;
    ``torch.OutOfMemoryError`` gets the device's memory at that moment, the largest
    live tensors by name, what the traceback and output history hold and what
    ``empty_cache()`` would release. Any other error gets an explanation saying so.
    ``namespace`` is where names are looked up (by default the caller's globals).
    Raises ``LookupError`` when there is no error to explain.
    """
    if exc is None:
        exc = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if exc is None:
            raise LookupError("no error to explain: nothing has failed yet (or its traceback was released)")
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    return explanation_of(exc, namespace)


def explanation_of(exc: BaseException, namespace: Mapping[str, Any], *, exclude: Any = ()) -> Explanation:
    """:func:`explain` for a given error and namespace (what the IPython layer calls);
    ``exclude`` names in the namespace are the tools' own, never the user's."""
    error = first_line(exc)
    if isinstance(exc, torch.OutOfMemoryError):
        from .out_of_memory import out_of_memory

        with tensor_getters.reading():
            return Explanation(error, out_of_memory=out_of_memory(exc, namespace, exclude=exclude))
    # The error the failing call raised first, then each library error raised from it, outwards.
    for inner, entries in reversed(chained_errors(exc)):
        device_error = explain_device_error(inner, namespace, entries)
        if device_error is not None:
            return Explanation(error, device_error=device_error)
        mismatch = explain_mismatch(inner, namespace, entries)
        if mismatch is not None:
            return Explanation(error, mismatch=mismatch)
    if says_mismatch(exc):
        # The message says so, but the inputs could not be read (made and dropped on the failing line,
        # or the names that held them now hold others): said, never guessed.
        return Explanation(error, note="the error says its inputs are on different devices, but they could not "
                                       "be read back from the traceback: run the cell again under %%devcheck, "
                                       "which sees them as the call is made")
    return Explanation(error, note="not a device error or an out-of-memory error: devinspect has nothing to add")


#: How many errors of a chain (``__cause__``/``__context__``) are followed.
_CHAIN_LIMIT = 8


def chained_errors(exc: BaseException) -> list[tuple[BaseException, list[Entry]]]:
    """``exc`` and the errors it was raised from or while handling (its ``__cause__``, else its
    ``__context__``), outermost first, each with the frames from the outermost of ``exc``'s
    traceback down to where it was raised: an inner error's traceback starts at the frame that
    caught it, which the outer traceback reaches too; the outer frames before that one lead to it.
    Read through ``BaseException``'s own descriptors (a user class's properties never run)."""
    out: list[tuple[BaseException, list[Entry]]] = []
    seen: set[int] = set()
    outer: list[Entry] = []
    current: Any = exc
    while issubclass(type(current), BaseException) and id(current) not in seen and len(out) < _CHAIN_LIMIT:
        seen.add(id(current))
        own = list(traceback_entries(_TRACEBACK(current)))
        start = next((i for i, e in enumerate(outer) if own and e.frame is own[0].frame), len(outer))
        entries = outer[:start] + own
        out.append((current, entries))
        outer = entries
        current = _CAUSE(current) or _CONTEXT(current)
    return out


_TRACEBACK = BaseException.__dict__["__traceback__"].__get__
_CAUSE = BaseException.__dict__["__cause__"].__get__
_CONTEXT = BaseException.__dict__["__context__"].__get__


def explain_mismatch(exc: BaseException, namespace: Mapping[str, Any],
                     entries: list[Entry] | None = None) -> Mismatch | None:
    """The device mismatch behind ``exc``, or None when its failing call's inputs share one device.
    ``entries``: its frames, when they are more than its own traceback's (an error a library
    re-raised: :func:`chained_errors`)."""
    if not isinstance(exc, _MISMATCH_TYPES) or isinstance(exc, torch.OutOfMemoryError):
        return None
    entries = list(traceback_entries(exc.__traceback__)) if entries is None else entries
    if not entries:
        return None
    with tensor_getters.reading():
        call = failing_call(entries, exc)
        traced = None
        if call is None:
            # torch.compile met the mismatch while tracing: the user's line is in the error itself.
            call = compiled_call(exc, entries)
            if call is None:
                return None
            traced = next((o for o in call.tensors if type_is_one_of(o, (Temporary, Traced))), None)
        users = [e for e in entries if locations.is_user_code(e.frame.f_code)]
        # The outermost frame of the user's own code: a notebook cell's when a cell ran it (a
        # shell installed where no metadata marks it as a library still runs the cell).
        cells = [e for e in users if locations.cell_number(e.frame.f_code.co_filename) is not None]
        cell = (cells or users)[0].frame if users else None
        lines = {id(e.frame): e.lineno for e in entries}

        def source(frame: types.FrameType) -> Any:
            code = frame.f_code
            return locations.source_line(code.co_filename, lines.get(id(frame), frame.f_lineno), code.co_name)

        line = locations.source_line(traced.filename, traced.lineno, traced.function) if traced is not None else None
        failure = Failure(namespace, entries[-1].frame, lambda f: f is cell, source, line=line)
        return diagnose(failure, call.op, call.tensors, call.devices, exc)
