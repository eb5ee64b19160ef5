"""Plain-text rendering of an explained error (a device mismatch, another device error, or out of memory)."""

from __future__ import annotations

from ..model import Explanation, HeldTensor, MemoryFigures, OutOfMemory, human_bytes, shape_text
from .check_report_text import device_error_lines, mismatch_lines
from .text import fix_block

#: What a mismatch explanation ends with: the check that sees more.
DEVCHECK_HINT = "run the cell again under %%devcheck for the copies and syncs of each line"


def figures_line(m: MemoryFigures) -> str:
    """``allocated 6.0 GiB · reserved 7.5 GiB · free 120.0 MiB of 8.0 GiB``: what is known."""
    parts = [f"{label} {human_bytes(value)}" for label, value in (
        ("allocated", m.allocated_bytes), ("reserved", m.reserved_bytes), ("free", m.free_bytes)) if value is not None]
    text = " · ".join(parts) or "not known"
    return text + (f" of {human_bytes(m.total_bytes)}" if m.total_bytes is not None else "")


def unwound_text(m: OutOfMemory) -> str:
    """What the failed step's temporaries held: freed as the error unwound its frames."""
    before, after = m.at_failure.allocated_bytes, m.now.allocated_bytes
    if before is None or after is None or before - after <= m.at_failure.rounding_bytes:
        return ""  # no change the message's rounded figure can show
    return f" ({human_bytes(before - after)} freed as the error unwound the frames that held it)"


def holder_text(t: HeldTensor) -> str:
    """What holds ``t``, in words."""
    if t.holder == "earlier error's traceback":
        return f"the traceback of {t.holder_note}"
    if t.holder == "unnamed":
        return "no name (found by the garbage collector)"
    return t.holder


def what_text(t: HeldTensor) -> str:
    """``float32[1024, 1024]``; ``16 × float32[1024, 1024]`` for a list's items."""
    kind = f"{t.dtype}{shape_text(t.shape)}" if t.dtype != "mixed" else "tensors"
    return f"{t.count} × {kind}" if t.count > 1 else kind


def others_text(m: OutOfMemory) -> str:
    return f"and {m.others} smaller tensor{'s' if m.others != 1 else ''}, {human_bytes(m.others_bytes)}"


def held_text(m: OutOfMemory) -> str:
    held = [f"the last error's traceback {human_bytes(m.traceback_bytes)}" if m.traceback_bytes else "",
            f"the output history {human_bytes(m.history_bytes)}" if m.history_bytes else "",
            f"earlier errors' tracebacks {human_bytes(m.earlier_errors_bytes)}" if m.earlier_errors_bytes else ""]
    return " and ".join(h for h in held if h)


def asked_text(m: OutOfMemory) -> str:
    """``tried to allocate 89.0 GiB``, and when that is more than the device holds, says so first."""
    asked = (f"tried to allocate {human_bytes(m.requested_bytes)}" if m.requested_bytes is not None
             else "an allocation failed")
    if m.exceeds_capacity:
        asked += (f", more than {m.device} holds in all ({human_bytes(m.at_failure.total_bytes)}): "
                  "no release can make it fit")
    return asked


def advice_text(m: OutOfMemory) -> str:
    ways = "; ".join(f"{what} ({how})" if how else what for what, how in m.advice)
    if m.exceeds_capacity:
        return f"what would make it fit: {ways}"
    if m.fixes:
        return f"every release above together still leaves it short; what would make it fit: {ways}"
    return f"nothing here can be released; what would make it fit: {ways}"


def out_of_memory_lines(m: OutOfMemory) -> list[str]:
    lines = [f"out of memory on {m.device or 'an unknown device'}: {asked_text(m)}",
             f"  when it failed: {figures_line(m.at_failure)}",
             f"  now:            {figures_line(m.now)}{unwound_text(m)}"]
    if m.largest:
        lines.append(f"  largest live tensors on {m.device}:")
        width = max(len(t.name) for t in m.largest)
        for t in m.largest:
            lines.append(f"    {t.name:<{width}}  {human_bytes(t.nbytes):>10}  {what_text(t)}  "
                         f"[{holder_text(t)}]")
        if m.others:
            lines.append(f"    {others_text(m)}")
    if held_text(m):
        lines.append(f"  held only by {held_text(m)}")
    if m.releasable_bytes is not None:
        lines.append(f"  empty_cache() would release {human_bytes(m.releasable_bytes)} of cached segments now")
    if m.exceeds_capacity and m.advice:
        lines.append(f"  {advice_text(m)}")
    for fix in m.fixes:
        lines.extend(fix_block(fix, "  "))
    if m.advice and not m.exceeds_capacity:
        lines.append(f"  {advice_text(m)}")
    return lines


def render_explanation(e: Explanation) -> str:
    if e.mismatch is not None:
        lines = ["devinspect: " + mismatch_lines(e.mismatch)[0], *mismatch_lines(e.mismatch)[1:],
                 f"  ({DEVCHECK_HINT})"]
    elif e.device_error is not None:
        lines = ["devinspect: " + device_error_lines(e.device_error)[0], *device_error_lines(e.device_error)[1:]]
    elif e.out_of_memory is not None:
        body = out_of_memory_lines(e.out_of_memory)
        lines = ["devinspect: " + body[0], *body[1:]]
    else:
        lines = [f"devinspect: {e.error}: {e.note}"]
    return "\n".join(lines)


def headline(e: Explanation) -> str:
    """One line for the top of the error's traceback: what went wrong, the fix in a few words,
    and where the rest is (printed after the traceback)."""
    if e.mismatch is not None:
        what = mismatch_lines(e.mismatch)[0]
        fix = f" — fix: {e.mismatch.fix.summary}" if e.mismatch.fix is not None else ""
    elif e.device_error is not None:
        what = device_error_lines(e.device_error)[0]
        fix = f" — fix: {e.device_error.fix.summary}" if e.device_error.fix is not None else ""
    elif e.out_of_memory is not None:
        m = e.out_of_memory
        what = out_of_memory_lines(m)[0]
        # The fix that frees the most for the request comes first; one that frees nothing for it
        # never leads: then what would make it fit does.
        first = next((f.summary for f, n in zip(m.fixes, m.fix_bytes) if n > 0), None)
        if m.exceeds_capacity or (first is None and m.advice):
            fix = " — what would: " + ", ".join(way for way, _ in m.advice)
        elif first is not None or m.fixes:
            fix = f" — fix: {first if first is not None else m.fixes[0].summary}"
        else:
            fix = ""
    else:
        return ""
    return f"devinspect: {what}{fix} (explained below the traceback ↓)"
