"""What an error explained after the fact says: a device mismatch, another device error
(a device tensor read as a host array, pinned, used in a forked worker, or drawn from a generator
of another device), or device memory running out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .check_report import DeviceError, Mismatch
from .display import Displayed
from .fixes import Fix

#: What keeps a held tensor reachable.
Holder = Literal["namespace", "output history", "last error's traceback", "earlier error's traceback", "unnamed"]


@dataclass(frozen=True, slots=True)
class HeldTensor:
    """A live tensor on the device that ran out, by the name that holds it."""

    name: str
    #: What holds the name: the user's namespace, IPython's output history, the last error's
    #: traceback, an earlier error's traceback (``holder_note`` says which), or nothing but
    #: the garbage collector's list.
    holder: Holder
    dtype: str
    shape: tuple[int, ...] | None
    #: Its storage's bytes, counted once however many names reach it.
    nbytes: int
    #: The items of one list or tuple are one row (``cache[0…15]``): how many, their bytes summed.
    count: int = 1
    #: Which earlier error, for a tensor an earlier error's traceback holds
    #: ("the ValueError from Cell In[3], line 1").
    holder_note: str = ""


@dataclass(frozen=True, slots=True)
class MemoryFigures:
    """A device's memory as the allocator and the driver count it; None where not known."""

    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    #: What the driver has left (``mem_get_info``'s free), and the device's total.
    free_bytes: int | None = None
    total_bytes: int | None = None
    #: How far the allocated figure may be from the exact count: a message rounds it
    #: ("68.1 MiB" is anything within 0.05 MiB of it); 0 for counters read directly.
    rounding_bytes: int = 0


@dataclass(frozen=True)
class OutOfMemory:
    """Device memory when an allocation failed, now, and what can be given back.

    ``at_failure`` comes from the error's own message (PyTorch writes the figures of the
    moment into it); ``now`` is read right after the error, before anything else ran:
    the failed step's temporaries are gone by then (the frames that held them unwound),
    what its traceback's frames hold is still there.
    """

    device: str | None
    requested_bytes: int | None
    at_failure: MemoryFigures
    now: MemoryFigures
    #: What ``empty_cache()`` would return now: cached segments holding nothing.
    releasable_bytes: int | None
    largest: tuple[HeldTensor, ...]
    #: Bytes on the device only the last error's traceback / the output history keep alive.
    traceback_bytes: int
    history_bytes: int
    #: One fix a button each: release history (and the traceback's frames), empty the cache;
    #: the one that frees the most for the request first.
    fixes: tuple[Fix, ...] = ()
    #: The tensors on the device not listed in ``largest``: how many, and their bytes.
    others: int = 0
    others_bytes: int = 0
    #: Bytes on the device held only by the tracebacks of earlier errors no name reaches.
    earlier_errors_bytes: int = 0
    #: What each fix (in the order of ``fixes``) frees on the device for the request: bytes the
    #: failed code would not make again when it runs again (the failed step's own locals would).
    fix_bytes: tuple[int, ...] = ()
    #: The request alone is more than the device holds in all: no release can make it fit.
    exceeds_capacity: bool = False
    #: What would make it fit, when no release can (or all of them together cannot): (what, how).
    advice: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, repr=False)
class Explanation(Displayed):
    """An error explained: ``mismatch`` for a device mismatch, ``device_error`` for another
    device error (:class:`~devinspect.model.check_report.DeviceError`), ``out_of_memory`` when
    device memory ran out; none of them (with ``note`` saying so) for any other error.

    What ``devinspect.explain()`` returns and what a notebook shows under a failed cell.
    """

    error: str
    mismatch: Mismatch | None = None
    out_of_memory: OutOfMemory | None = None
    note: str = ""
    device_error: DeviceError | None = None

    @property
    def kind(self) -> str | None:
        if self.mismatch is not None:
            return "device mismatch"
        if self.device_error is not None:
            return self.device_error.kind
        if self.out_of_memory is not None:
            return "out of memory"
        return None

    @property
    def fixes(self) -> tuple[Fix, ...]:
        if self.mismatch is not None and self.mismatch.fix is not None:
            return (self.mismatch.fix,)
        if self.device_error is not None and self.device_error.fix is not None:
            return (self.device_error.fix,)
        if self.out_of_memory is not None:
            return self.out_of_memory.fixes
        return ()

    def __bool__(self) -> bool:
        return self.kind is not None
