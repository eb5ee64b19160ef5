"""Out of device memory, explained right after it happened.

Nothing is recorded beforehand. When ``torch.OutOfMemoryError`` reaches the user, the
failed step's tensors are still alive, held by the error's traceback; the allocator's
counters and one scan (namespace, output history, the traceback's frames, and a
garbage-collector walk for tensors no name reaches) then show the moment of the failure:
what was asked for on which device, allocated / reserved / free, the largest live tensors
by name, and what can be given back: the history and traceback (Release history, which
also clears the traceback's frames, so an exception kept elsewhere holds nothing either)
and the allocator's cached segments (``empty_cache()``).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from ...model import (
    EmptyCache,
    Fix,
    HeldTensor,
    MemoryFigures,
    OutOfMemory,
    ReleaseHistory,
    TensorRecord,
    human_bytes,
    parse_bytes,
    record_column,
)

#: The largest live tensors listed (rows of 1% of the device's tensor bytes or more).
LARGEST = 8

_SIZE = r"([\d.]+\s*[KMGTP]?i?B)"
_REQUESTED = re.compile(r"Tried to allocate " + _SIZE, re.IGNORECASE)
#: The figures PyTorch writes into its out-of-memory messages: CUDA's and the simulated
#: device's, XPU's, MPS's.
_FIGURES = {
    "total_bytes": (re.compile(r"total capacity of " + _SIZE), re.compile(_SIZE + r" total capacity"),
                    re.compile(r"max allowed: " + _SIZE)),
    "free_bytes": (re.compile(r"of which " + _SIZE + r" is free"),),
    "allocated_bytes": (re.compile(_SIZE + r" is allocated by PyTorch"), re.compile(_SIZE + r" already allocated"),
                        re.compile(r"MPS allocated: " + _SIZE)),
    "reserved_bytes": (re.compile(_SIZE + r" reserved in total by PyTorch"),),
}
_UNALLOCATED = re.compile(_SIZE + r" is reserved by PyTorch but unallocated")
#: How each backend names the device in its message: CUDA and XPU "GPU 0", the simulated
#: device "sim:0", MPS has one device.
_DEVICES = (
    (re.compile(r"^(?:CUDA|HIP) out of memory.*?GPU (\d+)", re.DOTALL), "cuda:{}"),
    (re.compile(r"^XPU out of memory.*?GPU (\d+)", re.DOTALL), "xpu:{}"),
    (re.compile(r"\b([a-z]\w*:\d+) has a total capacity"), "{}"),
    (re.compile(r"^MPS backend out of memory"), "mps:0"),
)


#: What makes a request fit that no release can, each with how: said when the request is
#: more than the device holds, or more than every release together would free.
ADVICE = (
    ("a smaller batch", "or shorter sequences, smaller images"),
    ("lower precision", "bfloat16 or float16 with torch.autocast, 8-bit optimizer states"),
    ("recomputed activations", "torch.utils.checkpoint, instead of keeping them for backward"),
    ("sharding across devices", "FSDP, tensor parallelism"),
    ("offloading to the host", "parameters or optimizer state kept on the CPU"),
    ("a device with more memory", ""),
)


def out_of_memory(exc: BaseException, namespace: Mapping[str, Any], exclude: Iterable[str] = ()) -> OutOfMemory:
    """The post-mortem of ``exc``, a ``torch.OutOfMemoryError``, read now."""
    from ...collect import build, error_of, read, scan, tallies_of

    message = _message(exc)
    result = scan(namespace, include_hidden=True, all_objects=True, exclude=exclude)
    snap = build(read(), tallies_of(result))
    device = failed_device(message) or next((d.device for d in snap.accelerators if d.state == "ready"), None)
    d = next((x for x in snap.devices if x.device == device), None)
    records = result.records
    on_device = [records[i] for i, (where, alias, size) in enumerate(zip(
        record_column(records, "device"), record_column(records, "alias_of"), record_column(records, "storage_bytes")))
        if where == device and alias is None and size]
    traceback_bytes = sum(r.counted_bytes for r in on_device if r.hidden and r.root == "sys.last_traceback")
    history_bytes = sum(r.counted_bytes for r in on_device if r.hidden and r.root != "sys.last_traceback")
    # Errors that are over, whose tracebacks no name reaches but keep their frames' tensors.
    earlier: dict[str, int] = {}
    for r in on_device:
        label = error_of(r.name) if r.kind == "unnamed" else None
        if label is not None:
            earlier[label] = earlier.get(label, 0) + r.counted_bytes
    largest = _largest(on_device)
    listed = sum(t.count for t in largest)
    now = MemoryFigures(*(getattr(d, f, None) if d is not None else None for f in (
        "allocated_bytes", "reserved_bytes", "driver_free_bytes", "driver_total_bytes")))
    at_failure = figures_in(message)
    requested = requested_in(message)
    exceeds = requested is not None and at_failure.total_bytes is not None and requested > at_failure.total_bytes
    # The last error's frames are the failed step's own when it is this error: running the step
    # again makes their tensors again, so they do not count towards the request fitting.
    own = _is_last_error(exc)
    fit = _Fit(requested, at_failure.free_bytes, exceeds)
    fixes: list[tuple[Fix, int, int]] = []  # (fix, bytes towards the request, bytes freed)
    released = traceback_bytes + history_bytes + sum(earlier.values())
    if released:
        parts = [part for part, n in (("the last error's traceback", traceback_bytes),
                                      ("the output history", history_bytes)) if n]
        parts += [f"the traceback of the {label[1:-1]}" for label in sorted(earlier, key=lambda k: -earlier[k])]
        towards = released - (traceback_bytes if own else 0)
        step_own = (f" ({human_bytes(traceback_bytes)} of it the failed step's own, made again when it runs again)"
                    if own and traceback_bytes else "")
        fixes.append((Fix(
            summary=f"release {_joined(parts)}: frees {human_bytes(released)} on {device}{step_own}{fit.after(towards)}",
            code=_importing(namespace, "devinspect") + "devinspect.release_history()", action=ReleaseHistory(),
            note="%debug and %tb no longer see the error once its traceback is released",
        ), towards, released))
    # An error kept in a variable (saved = e) keeps the frames of its traceback, and their tensors.
    kept: dict[str, int] = {}  # the error's path -> bytes its frames hold
    for r in on_device:
        if not r.hidden and _TRACEBACK_MARK in r.name:
            holder = r.name.split(_TRACEBACK_MARK, 1)[0]
            kept[holder] = kept.get(holder, 0) + r.counted_bytes
    if kept:
        freed = sum(kept.values())
        fixes.append((Fix(
            summary=f"drop the traceback of {', '.join(kept)}: frees {human_bytes(freed)} on {device}{fit.after(freed)}",
            code="\n".join(_drop_traceback(holder, namespace) for holder in kept),
            note="the error keeps its type and message; only the frames it keeps, and their tensors, go",
        ), freed, freed))
    kind = device.split(":")[0] if device else None
    if kind is not None and d is not None and d.reserved_bytes is not None and (d.releasable_bytes or fixes):
        # What it returns goes to the driver, for other processes: this process reuses its cache anyway.
        fixes.append((Fix(
            summary=f"return the allocator's cached segments to the driver ({human_bytes(d.releasable_bytes)} now"
                    + (", more once the fix above is run)" if fixes else ")"),
            code=_importing(namespace, "torch") + f"torch.{kind}.empty_cache()", action=EmptyCache(),
            note="other processes can use what it returns; PyTorch itself would reuse the cache anyway",
        ), 0, d.releasable_bytes or 0))
    # The one that frees the most for the request first; empty_cache (nothing for it) last.
    fixes.sort(key=lambda f: (-f[1], type(f[0].action) is EmptyCache, -f[2]))
    towards_all = sum(f[1] for f in fixes)
    return OutOfMemory(
        device=device, requested_bytes=requested, at_failure=at_failure, now=now,
        releasable_bytes=d.releasable_bytes if d is not None else None,
        largest=largest, traceback_bytes=traceback_bytes, history_bytes=history_bytes,
        fixes=tuple(f[0] for f in fixes), fix_bytes=tuple(f[1] for f in fixes),
        others=len(on_device) - listed,
        others_bytes=sum(r.counted_bytes for r in on_device) - sum(t.nbytes for t in largest),
        earlier_errors_bytes=sum(earlier.values()), exceeds_capacity=exceeds,
        advice=ADVICE if exceeds or fit.short(towards_all) else (),
    )


class _Fit:
    """Whether the request fits once a fix has freed some bytes: the request against what was
    free when it failed (the error's own figures) plus what the fix frees."""

    def __init__(self, requested: int | None, free: int | None, exceeds: bool):
        self.requested, self.free, self.exceeds = requested, free, exceeds

    def short(self, freed: int) -> bool:
        return (self.exceeds or (self.requested is not None and self.free is not None
                                 and self.free + freed < self.requested))

    def after(self, freed: int) -> str:
        if self.exceeds:
            return "; the request still does not fit: it is more than the device holds"
        if self.requested is None or self.free is None:
            return ""
        free = self.free + freed
        verdict = "it fits" if free >= self.requested else f"still {human_bytes(self.requested - free)} short"
        return f"; then {human_bytes(free)} would be free for the {human_bytes(self.requested)} asked: {verdict}"


def _joined(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _is_last_error(exc: BaseException) -> bool:
    """Whether ``exc`` is the shell's last error (its frames are ``sys.last_traceback``'s)."""
    import sys

    return any(sys.__dict__.get(name) is exc for name in ("last_value", "last_exc"))


def _drop_traceback(holder: str, namespace: Mapping[str, Any]) -> str:
    """``saved.__traceback__ = None``, and the errors chained to it dropped too when there are
    (their tracebacks hold the same frames: ``raise X from e``, or raised while handling)."""
    from ...collect import object_at

    error = object_at(namespace, holder)
    chained = issubclass(type(error), BaseException) and (BaseException.__dict__["__context__"].__get__(error)
                                                          or BaseException.__dict__["__cause__"].__get__(error))
    line = f"{holder}.__traceback__ = None"
    return line + (f"\n{holder}.__context__ = {holder}.__cause__ = None  # the errors chained to it hold frames too"
                   if chained else "")


#: What a tensor's name has between the error that keeps it and the frame it is a local of.
_TRACEBACK_MARK = ".__traceback__:"


def _importing(namespace: Mapping[str, Any], module: str) -> str:
    """The import a printed fix needs first, so that it runs as printed where ``module`` is
    not imported under its own name (``%load_ext`` alone does not bind ``devinspect``)."""
    from ...collect import binds_module

    return "" if binds_module(namespace, module) else f"import {module}\n"


def figures_in(message: str) -> MemoryFigures:
    """The memory figures an out-of-memory message states (those of the moment it failed)."""
    written = {field: _sized(patterns, message) for field, patterns in _FIGURES.items()}
    found = {field: w[0] if w else None for field, w in written.items()}
    unallocated = _size(_UNALLOCATED, message)
    if found["reserved_bytes"] is None and unallocated is not None and found["allocated_bytes"] is not None:
        found["reserved_bytes"] = found["allocated_bytes"] + unallocated
    allocated = written["allocated_bytes"]
    return MemoryFigures(**found, rounding_bytes=_rounding(allocated[1]) if allocated else 0)


def requested_in(message: str) -> int | None:
    """The bytes an out-of-memory message says were asked for ("Tried to allocate 20.00 MiB")."""
    return _size(_REQUESTED, message)


def failed_device(message: str) -> str | None:
    """The device an out-of-memory message names (``cuda:0`` for CUDA's "GPU 0"), or None."""
    for pattern, name in _DEVICES:
        m = pattern.search(message)
        if m:
            return name.format(*m.groups())
    return None


def _size(pattern: re.Pattern[str], message: str) -> int | None:
    found = _sized((pattern,), message)
    return found[0] if found else None


def _sized(patterns: Iterable[re.Pattern[str]], message: str) -> tuple[int, str] | None:
    """The first size one of ``patterns`` finds in ``message``: its bytes, and how it was written."""
    for pattern in patterns:
        m = pattern.search(message)
        if m is None:
            continue
        try:
            return parse_bytes(_binary_units(m.group(1).strip())), m.group(1).strip()
        except ValueError:
            continue
    return None


def _binary_units(written: str) -> str:
    """MPS writes MB and GB for binary units, as PyTorch's other messages write MiB and GiB."""
    return re.sub(r"([KMGTP])B$", r"\1iB", written)


def _rounding(written: str) -> int:
    """Half a unit of the last digit of a size as a message writes it ("68.1 MiB": 0.05 MiB)."""
    number = re.match(r"[\d.]+", written).group(0)
    decimals = len(number.partition(".")[2])
    unit = _binary_units(written[len(number):].strip())
    try:
        return parse_bytes(f"{0.5 * 10 ** -decimals:.{decimals + 1}f} {unit}")
    except ValueError:
        return 0


def _message(exc: BaseException) -> str:
    try:
        return BaseException.__str__(exc)
    except Exception:
        return ""


#: An item of a list or tuple as the scan names it: ``cache[3]``, ``model.blocks[0].cache[12]``.
_ITEM = re.compile(r"(.+)\[(\d+)\]")
#: A list's items are one row from this many on.
_GROUPED = 3


def _largest(records: list[TensorRecord]) -> tuple[HeldTensor, ...]:
    """The largest tensors, a list's items as one row, so one list of many equal tensors
    does not hide everything else (a step's temporaries in the traceback, say)."""
    groups: dict[tuple[str, ...], list[tuple[int, HeldTensor]]] = {}
    for r in records:
        held = _held(r)
        item = _ITEM.fullmatch(held.name)
        key = (item.group(1), held.holder, held.holder_note) if item else (held.name, held.holder, str(id(r)))
        groups.setdefault(key, []).append((int(item.group(2)) if item else 0, held))
    rows = []
    for key, items in groups.items():
        if len(items) < _GROUPED:
            rows.extend(held for _, held in items)
            continue
        indices = sorted(i for i, _ in items)
        contiguous = indices == list(range(indices[0], indices[-1] + 1))
        name = f"{key[0]}[{indices[0]}…{indices[-1]}]" if contiguous else f"{key[0]}[{indices[0]}, …, {indices[-1]}]"
        first = items[0][1]
        same = all(h.dtype == first.dtype and h.shape == first.shape for _, h in items)
        rows.append(HeldTensor(name, first.holder, first.dtype if same else "mixed", first.shape if same else None,
                               sum(h.nbytes for _, h in items), count=len(items), holder_note=first.holder_note))
    rows.sort(key=lambda t: -t.nbytes)
    # Rows under 1% of the device's tensor bytes are left to the "and N smaller" line.
    total = sum(t.nbytes for t in rows)
    return tuple(t for t in rows[:LARGEST] if t is rows[0] or t.nbytes * 100 >= total)


def _held(r: TensorRecord) -> HeldTensor:
    from ...collect import describe

    earlier = describe(r.name) if r.kind == "unnamed" else None
    note = ""
    if r.root == "sys.last_traceback":
        # Scanned as "sys.last_traceback:forward.h": the local h of forward, in the last error.
        frame, _, local = r.name.removeprefix("sys.last_traceback:").partition(".")
        name, holder = f"{local} in {frame}", "last error's traceback"
    elif r.hidden:
        name, holder = r.name, "output history"
    elif earlier is not None:  # a local of an earlier error, that error's traceback the only holder
        (name, note), holder = earlier, "earlier error's traceback"
    elif r.kind == "unnamed":
        name, holder = r.name, "unnamed"
    else:
        name, holder = r.name, "namespace"
    shape = tuple(int(s) for s in r.shape) if r.shape is not None else None
    return HeldTensor(name, holder, r.dtype or "?", shape, r.counted_bytes, holder_note=note)
