"""Plain-text rendering of memory snapshots and per-cell history (terminal IPython)."""

from __future__ import annotations

import time

from ...model import DeviceMemory, MemoryHistory, MemorySnapshot, ReconRow, human_bytes, signed_bytes
from ..text import plural

_LABEL_WIDTH = 58


def device_title(d: DeviceMemory) -> str:
    """``cuda:0  NVIDIA H100 (torch 0 · NVML 2 by uuid · GPU-8932f937…)``."""
    if d.kind == "cpu":
        return "cpu  this process"
    where = [f"torch {d.torch_index}"] if d.torch_index is not None else []
    if d.driver_index is not None:
        where.append(f"NVML {d.driver_index}" + (f" by {d.driver_match}" if d.driver_match else ""))
    if d.uuid:
        where.append(d.uuid[:12] + "…" if len(d.uuid) > 13 else d.uuid)
    name = f"  {d.name}" if d.name else ""
    return f"{d.device}{name}" + (f"  ({' · '.join(where)})" if where else "")


def device_headline(d: DeviceMemory) -> str:
    """The one line a user reads first: allocated, reserved, total (and peaks)."""
    if d.kind == "cpu":
        parts = [f"resident {human_bytes(d.process_bytes)}"]
        if d.peak_process_bytes is not None:
            parts[0] += f" (peak {human_bytes(d.peak_process_bytes)})"
        if d.driver_total_bytes is not None:
            parts.append(f"available {human_bytes(d.driver_free_bytes)} of {human_bytes(d.driver_total_bytes)}")
        return "   ".join(parts)
    if d.state != "ready":
        return d.status
    parts = [
        f"allocated {human_bytes(d.allocated_bytes)} (peak {human_bytes(d.peak_allocated_bytes)})",
        f"reserved {human_bytes(d.reserved_bytes)} (peak {human_bytes(d.peak_reserved_bytes)})",
    ]
    if d.driver_total_bytes is not None:
        parts.append(f"total {human_bytes(d.driver_total_bytes)}")
    return "   ".join(parts)


def details(d: DeviceMemory) -> str:
    """Cache, fragmentation and failure counters, for ready devices."""
    if d.kind == "cpu" or d.state != "ready":
        return ""
    parts = [f"empty_cache() would release {human_bytes(d.releasable_bytes)}"]
    if d.segments is not None:
        parts.append(plural(d.segments, "segment"))
    if d.inactive_split_bytes:
        parts.append(f"{human_bytes(d.inactive_split_bytes)} fragmented")
    if d.alloc_retries is not None:
        parts.append(plural(d.alloc_retries, "allocation retry", "allocation retries"))
    if d.ooms is not None:
        parts.append(plural(d.ooms, "out-of-memory error"))
    return " · ".join(parts)


def recon_value(r: ReconRow) -> str:
    return human_bytes(r.value_bytes) if r.value_bytes is not None else "unavailable"


def render_device(d: DeviceMemory) -> list[str]:
    lines = [device_title(d), f"  {device_headline(d)}"]
    extra = details(d)
    if extra:
        lines.append(f"  {extra}")
    if d.driver_status and d.kind != "cpu":
        lines.append(f"  driver: {d.driver_status}")
    rows = d.reconciliation
    if rows:
        lines.append(f"  {'where the memory is':<{_LABEL_WIDTH}}{'bytes':>11}  source")
        for r in rows:
            label = f"= {r.label}" if r.total else f"  {r.label}"
            lines.append(f"  {label:<{_LABEL_WIDTH}}{recon_value(r):>11}  {r.source}")
        if d.tensors is not None and d.tensors.counted_at:
            lines.append(f"  (tensors counted at {time.strftime('%H:%M:%S', time.localtime(d.tensors.counted_at))})")
    return lines


def snapshot_title(snapshot: MemorySnapshot) -> str:
    """``memory of 2 accelerators and this process``: what the snapshot shows, no more."""
    accelerators = len(snapshot.accelerators)
    parts = [f"{accelerators} accelerator{'s' if accelerators != 1 else ''}"] if accelerators else []
    if any(d.kind == "cpu" for d in snapshot.devices):
        parts.append("this process")
    shown = " and ".join(parts) or "no device"
    hidden = f" ({snapshot.hidden} unused not shown: --all-devices)" if snapshot.hidden else ""
    return f"memory of {shown}{hidden}"


def render_snapshot(snapshot: MemorySnapshot) -> str:
    lines = [f"devinspect: {snapshot_title(snapshot)}", *snapshot.notes]
    for d in snapshot.devices:
        lines.append("")
        lines.extend(render_device(d))
    return "\n".join(lines)


def history_rows(history: MemoryHistory) -> list[tuple[str, ...]]:
    """(cell, device, allocated after, change, peak, reserved after, wall, code) as text."""
    out = []
    for c in history.cells:
        for d in c.devices:
            change = None
            if d.allocated_after is not None and d.allocated_before is not None:
                change = d.allocated_after - d.allocated_before
            out.append((
                f"[{c.cell}]" if c.cell is not None else "[?]",
                d.device + (" resident" if d.device == "cpu" else " allocated"),
                human_bytes(d.allocated_after),
                signed_bytes(change),
                human_bytes(d.peak_allocated),
                "" if d.device == "cpu" else human_bytes(d.reserved_after),
                f"{c.wall_s * 1000:.0f} ms" if c.wall_s < 10 else f"{c.wall_s:.1f} s",
                ("✖ " if c.failed else "") + c.source[:48],
            ))
    return out


HISTORY_HEADERS = ("cell", "device and measure", "after", "change", "peak", "reserved", "wall", "code")


def render_history(history: MemoryHistory) -> str:
    if not history.cells:
        return "devinspect: no cells recorded yet (%gpumem --track starts recording; run some cells)."
    rows = history_rows(history)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(HISTORY_HEADERS)]
    lines = [f"devinspect: memory per cell ({len(history.cells)} cells)",
             "  ".join(h.ljust(w) for h, w in zip(HISTORY_HEADERS, widths)).rstrip()]
    for r in rows:
        lines.append("  ".join(v.rjust(w) if i in (2, 3, 4, 5, 6) else v.ljust(w)
                               for i, (v, w) in enumerate(zip(r, widths))).rstrip())
    return "\n".join(lines)
