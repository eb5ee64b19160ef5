"""Giving memory back: the allocator's cache, peak counters, garbage, and what IPython's
history and the last error keep alive."""

from __future__ import annotations

import gc
import re
import sys
import traceback
from typing import Any, Iterable, Mapping, MutableMapping

import torch

from ..runtime import error_holders
from .interrupts import atomic, checkpoint
from .result import ActionResult


def ready_devices() -> list[Any]:
    """Accelerators whose allocator counters can be read now (CUDA only if already initialised)."""
    from ..collect import build, read

    return [d for d in build(read(nvml=False)).accelerators if d.state == "ready"]


def _no_allocator_reason() -> str:
    from ..collect import build, read

    snap = build(read(nvml=False))
    if snap.accelerators:
        return snap.accelerators[0].status
    return snap.notes[0] if snap.notes else "no accelerator in this process"


def change_text(label: str, before: int | None, after: int | None) -> str:
    from ..model import human_bytes

    return f"{label} {human_bytes(before)} → {human_bytes(after)}"


@atomic
def empty_cache() -> ActionResult:
    """Return the allocator's cached, unused segments to the driver (``torch.cuda.empty_cache()``).

    Live tensors are untouched; what is released is what ``nvidia-smi`` stops counting.
    The result says how much was released, measured from the reserved counter.
    """
    from ..model import human_bytes

    before = ready_devices()
    if not before:
        return ActionResult(False, f"nothing to release: {_no_allocator_reason()}", idle=True)
    expected = sum(d.releasable_bytes or 0 for d in before)
    from ..collect import accelerator_call

    try:
        if any(d.kind == "cuda" for d in before):
            torch.cuda.empty_cache()
        else:
            accelerator_call(before[0].kind, "empty_cache")
    except Exception as exc:
        return ActionResult(False, f"empty_cache() failed: {type(exc).__name__}: {exc}")
    after = {d.device: d for d in ready_devices()}
    released, changes = 0, []
    for d in before:
        now = after.get(d.device)
        if now is not None and d.reserved_bytes is not None and now.reserved_bytes is not None:
            released += d.reserved_bytes - now.reserved_bytes
            if now.reserved_bytes != d.reserved_bytes or len(before) == 1:
                changes.append(change_text(f"{d.device} reserved", d.reserved_bytes, now.reserved_bytes))
    said = f" ({'; '.join(changes)})" if changes else ""
    return ActionResult(True, f"empty_cache() released {human_bytes(released)} (expected {human_bytes(expected)})"
                        + said, released)


@atomic
def reset_peak_stats() -> ActionResult:
    """Reset the allocator's peak counters (and, on Linux, this process's peak resident memory)."""
    from ..collect import accelerator_call, read_process, reset_process_peak

    changes, lowered = [], 0
    before = ready_devices()
    for d in before:
        try:
            if d.kind == "cuda":
                torch.cuda.reset_peak_memory_stats(d.torch_index)
            else:
                accelerator_call(d.kind, "reset_peak_memory_stats", d.torch_index)
        except Exception as exc:
            return ActionResult(False, f"could not reset the peaks of {d.device}: {type(exc).__name__}: {exc}")
    after = {x.device: x for x in ready_devices()}
    for d in before:
        now = after[d.device]
        lowered += (d.peak_allocated_bytes or 0) - (now.peak_allocated_bytes or 0)
        if not d.peak_reserved_bytes and not d.peak_allocated_bytes and len(before) > 1:
            continue  # a device nothing ever used: nothing to say
        changes.append(change_text(f"{d.device} peak allocated", d.peak_allocated_bytes, now.peak_allocated_bytes))
        changes.append(change_text("peak reserved", d.peak_reserved_bytes, now.peak_reserved_bytes))
    peak_before = read_process().get("peak_rss")
    if reset_process_peak():
        changes.append(change_text("cpu peak resident", peak_before, read_process().get("peak_rss")))
    if not changes:
        return ActionResult(False, f"nothing to reset: {_no_allocator_reason()}")
    return ActionResult(True, "peaks reset: " + "; ".join(changes), lowered)


def _live_tensor_bytes() -> dict[str, int]:
    """Storage bytes of every live tensor per device (each storage once), by a gc walk."""
    from ..collect import scan

    return {t.device: t.storage_bytes for t in scan({}, all_objects=True).devices}


@atomic
def collect_garbage() -> ActionResult:
    """Run ``gc.collect()`` and report the tensor memory it freed, per device."""
    from ..model import human_bytes

    before, allocated_before = _live_tensor_bytes(), {d.device: d.allocated_bytes for d in ready_devices()}
    found = gc.collect()
    after, allocated_after = _live_tensor_bytes(), {d.device: d.allocated_bytes for d in ready_devices()}
    freed = {dev: n - after.get(dev, 0) for dev, n in before.items() if n - after.get(dev, 0) > 0}
    parts = [f"{dev} {human_bytes(n)}" for dev, n in sorted(freed.items())]
    for dev, n in allocated_before.items():
        if allocated_after.get(dev) != n:
            parts.append(change_text(f"{dev} allocated", n, allocated_after.get(dev)))
    total = sum(freed.values())
    what = f"freed {human_bytes(total)} of tensors" + (f" ({'; '.join(parts)})" if parts else "")
    return ActionResult(True, f"gc.collect() found {found} unreachable objects; {what}", total)


_OUT_KEY = re.compile(r"^(?:Out|_oh)\[(\d+)\]")


_NUMBERED = re.compile(r"^_(\d+)$")


@atomic
def release_history(
    namespace: MutableMapping[str, Any],
    displayhook: Any = None,
    hidden: MutableMapping[str, Any] | None = None,
    devices: Iterable[str] | None = None,
    undo: Any = None,
) -> ActionResult:
    """Drop the output-history entries and the tracebacks that keep tensors alive.

    Clears ``Out[N]``/``_N``, ``_``, ``__``, ``___`` entries, ``sys.last_traceback``
    (with ``sys.last_value``), and the frames of earlier errors that no name reaches but
    whose tracebacks live on (``<ValueError from Cell In[3], line 1>:f.hidden``), when
    they hold tensors on ``devices`` (default: any accelerator). In IPython pass the
    shell's ``displayhook`` and ``user_ns_hidden`` (``hidden``): both keep their own
    references to ``_``, ``__``, ``___`` and ``_N``, and IPython updates ``_``
    afterwards only when they agree. Reports the bytes that only these entries held.
    What it released cannot be put back: with ``undo`` (an
    :class:`~devinspect.actions.undo.UndoLog`), it is logged there as a change that stays.
    """
    from ..collect import error_of, scan
    from ..model import device_is_accelerator, human_bytes

    def wanted(device: str) -> bool:
        if devices is None:
            return device_is_accelerator(device)
        return any(device == d or device.split(":")[0] == d for d in devices)

    assigned = _assigned_unders(namespace, displayhook, hidden)
    held = [r for r in scan(namespace, include_hidden=True, all_objects=True).records
            if (r.hidden or error_of(r.name)) and wanted(r.device) and r.root not in assigned]
    if not held:
        return ActionResult(False, "nothing to release: no history entry or traceback holds such tensors", idle=True)
    checkpoint()  # the last point where an interrupt finds nothing changed: what follows cannot be undone
    out_keys: set[int] = set()
    unders: set[str] = set()
    errors: set[str] = set()
    traceback_too = False
    for r in held:
        if r.root == "sys.last_traceback":
            traceback_too = True
        elif (error := error_of(r.name)) is not None:
            errors.add(error)
        elif (m := _OUT_KEY.match(r.name)) or (m := _NUMBERED.match(r.root)):
            out_keys.add(int(m.group(1)))
        elif r.root in ("_", "__", "___"):
            unders.add(r.root)
    freed = sum(r.counted_bytes for r in held)
    allocated_before = {d.device: d.allocated_bytes for d in ready_devices()}
    cleared = _clear_history(namespace, displayhook, hidden if hidden is not None else {}, out_keys, unders)
    if errors:
        cleared.extend(_clear_finished_errors(namespace, errors))
    if traceback_too:
        clear_last_error()
        cleared.append("sys.last_traceback (%debug and %tb no longer see the last error)")
    elif errors:
        gc.collect()  # the errors' tracebacks sit in reference cycles: freed now, not at the next pass
    allocated_after = {d.device: d.allocated_bytes for d in ready_devices()}
    changes = [change_text(f"{dev} allocated", n, allocated_after.get(dev))
               for dev, n in allocated_before.items() if allocated_after.get(dev) != n]
    if undo is not None and cleared:
        undo.add_final(f"{', '.join(cleared)} (released)")
    message = f"released {', '.join(cleared)}: {human_bytes(freed)} of tensors only they held"
    return ActionResult(True, message + (f" ({'; '.join(changes)})" if changes else ""), freed)


def _clear_finished_errors(namespace: Mapping[str, Any], labels: set[str]) -> list[str]:
    """Clear the frames of the errors ``labels`` names (``<ValueError from Cell In[3], line 1>``)
    that are over and that no name reaches: their locals go, the errors keep their messages."""
    from ..collect import finished_errors_no_name_reaches

    cleared = []
    for error, label in finished_errors_no_name_reaches(namespace):
        if label in labels:
            clear_frames(BaseException.__dict__["__traceback__"].__get__(error))
            cleared.append(f"the traceback of the {label[1:-1]}")
    return sorted(set(cleared))


def _assigned_unders(namespace: Mapping[str, Any], displayhook: Any,
                     hidden: Mapping[str, Any] | None) -> set[str]:
    """Which of ``_``, ``__``, ``___`` the user assigned (``_, idx = t.max(0)``): a value that is
    not the one the shell's display hook (or its hidden copy) holds is the user's, and stays."""
    shell_values = displayhook.__dict__ if hasattr(displayhook, "__dict__") else hidden
    if shell_values is None:
        return set()
    return {name for name in ("_", "__", "___")
            if name in namespace and not (name in shell_values and shell_values[name] is namespace[name])}


def _clear_history(namespace: MutableMapping[str, Any], displayhook: Any, hidden: MutableMapping[str, Any],
                   out_keys: set[int], unders: set[str]) -> list[str]:
    cleared = []
    out = namespace.get("Out")
    released: list[Any] = []  # for the identity checks below; freed when this returns
    for key in sorted(out_keys):
        if isinstance(out, dict) and key in out:
            released.append(out.pop(key))
            cleared.append(f"Out[{key}]")
        if f"_{key}" in namespace:
            released.append(namespace.pop(f"_{key}"))
            cleared.append(f"_{key}")
        hidden.pop(f"_{key}", None)
    for name in ("_", "__", "___"):
        # The shell keeps _, __, ___ in three places (namespace, hidden names, displayhook).
        # Clear each copy that is a released entry or the same object as a cleared name,
        # so they keep agreeing (IPython updates _ only then); a value the user assigned stays.
        stores = [namespace, hidden] + ([displayhook.__dict__] if hasattr(displayhook, "__dict__") else [])
        if name in _assigned_unders(namespace, displayhook, hidden):
            stores = stores[1:]  # the user's own value stays; the shell's copies of a released one go
        targets = list(released) + ([namespace[name]] if name in unders and name in namespace else [])
        hit = False
        for store in stores:
            if name in store and any(store[name] is t for t in targets):
                hit = hit or store is namespace
                store[name] = ""
        if hit:
            cleared.append(name)
    return cleared


@atomic
def release_traceback() -> ActionResult:
    """Release the last error: its traceback's frames (and their tensors) and every reference to it."""
    if getattr(sys, "last_traceback", None) is None and getattr(sys, "last_value", None) is None:
        return ActionResult(False, "nothing to release: there is no last error", idle=True)
    clear_last_error()
    return ActionResult(True, "released the last error's traceback (%debug and %tb no longer see it)")


def clear_frames(tb: Any) -> None:
    """Drop the locals of every frame of ``tb`` that is not running, wherever its error lives on.

    Before Python 3.13 reading a frame's ``f_locals`` (as the scan does) leaves a snapshot
    of them in the frame, which ``frame.clear()`` keeps: read once more after it, the
    snapshot drops what was cleared (from 3.13 there is no snapshot)."""
    traceback.clear_frames(tb)
    while tb is not None:
        tb.tb_frame.f_locals  # noqa: B018 - read for its effect: the snapshot follows the cleared frame
        tb = tb.tb_next


def clear_last_error() -> None:
    value = getattr(sys, "last_value", None)
    seen: set[int] = set()
    while isinstance(value, BaseException) and id(value) not in seen:
        seen.add(id(value))
        if value.__traceback__ is not None:
            clear_frames(value.__traceback__)  # drops the frames' locals wherever the error lives on
        value = value.__cause__ or value.__context__
    tb = getattr(sys, "last_traceback", None)
    if tb is not None:
        clear_frames(tb)
    del tb, value  # this frame must not keep the error alive through the collection below
    for name in ("last_traceback", "last_value", "last_type", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    for forget in list(error_holders):
        try:
            forget()
        except Exception:  # releasing more is best effort; the above is done
            pass
    # An exception and its traceback often sit in a reference cycle (a handler that kept the
    # error, a renderer): what was released is freed now, not at the collector's next pass.
    gc.collect()
