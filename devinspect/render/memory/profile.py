"""``%%gpumem``'s profile as text and as static HTML: the lines, then the peak explained."""

from __future__ import annotations

from html import escape

from ...model import Column, LineMemory, LineMemoryProfile, each, human_bytes, signed_bytes
from ..html import column_table
from ..table import aligned_lines


def _span(before: int | None, after: int | None) -> str:
    return f"{human_bytes(before)} → {human_bytes(after)}"


def _alive(m: LineMemory) -> str:
    parts = [f"{name} {human_bytes(size)}" for name, size in m.alive]
    if m.alive_unnamed:
        parts.append(f"no name {human_bytes(m.alive_unnamed)}")
    return ", ".join(parts)


def nested_label(m: LineMemory) -> str:
    """A line's label, marked as run inside the row above it when it is a function's line."""
    return m.label if not m.depth else f"{'  ' * (m.depth - 1)}↳ {m.label}"


def _ran(read):
    """A column's reader for a line that ran line by line; ``—`` for a function's line known from
    its allocations alone."""
    return each(lambda m: read(m) if m.runs is not None else "—")


#: ``%%gpumem``'s columns, one row per line of the cell (and of the functions it ran).
LINE_COLUMNS: tuple[Column[LineMemory], ...] = (
    Column("line", each(nested_label), chars=7),
    Column("runs", _ran(lambda m: str(m.runs)), width="number", chars=4),
    Column("allocated before → after", _ran(lambda m: _span(m.allocated_before, m.allocated_after)),
           width="number", chars=10),
    Column("change", each(lambda m: signed_bytes(m.change)), width="number", chars=9),
    Column("peak in line", each(lambda m: human_bytes(m.peak) if m.peak is not None else "—"), width="number",
           chars=9),
    Column("reserved before → after", _ran(lambda m: _span(m.reserved_before, m.reserved_after)),
           width="number", chars=10, folds=True),
    Column("made here, still alive", each(_alive), width="words", chars=14),
    Column("code", each(lambda m: m.text), width="code"),
)


def title(profile: LineMemoryProfile) -> str:
    change = None
    if profile.allocated_end is not None and profile.allocated_start is not None:
        change = profile.allocated_end - profile.allocated_start
    return (f"devinspect: %%gpumem on {profile.device}: allocated {human_bytes(profile.allocated_start)} → "
            f"{human_bytes(profile.allocated_end)} ({signed_bytes(change)}), reserved "
            f"{human_bytes(profile.reserved_start)} → {human_bytes(profile.reserved_end)}")


def peak_lines(profile: LineMemoryProfile) -> list[str]:
    """The peak in words: where, what was live, and the what-if without the largest temporary."""
    peak = profile.peak
    if peak is None:
        return []
    out = [f"Peak {human_bytes(peak.allocated)} on {peak.line}."]
    if peak.held:
        shown = ", ".join(f"{what} {human_bytes(size)}" for what, size in peak.held[:6])
        more = len(peak.held) - 6
        out.append(f"Live then: {shown}" + (f", and {more} more." if more > 0 else "."))
    if peak.largest_temporary is not None and peak.without_largest_temporary is not None:
        what, size = peak.largest_temporary
        out.append(f"Without the largest temporary ({what}, {human_bytes(size)}) the peak would be "
                   f"{human_bytes(peak.without_largest_temporary)} (from the recorded sizes; nothing was run again).")
    return out


def notes(profile: LineMemoryProfile) -> list[str]:
    out = []
    if not profile.has_events:
        out.append(f"No allocation events: {profile.events_source}.")
    if profile.events_dropped:
        out.append(f"{profile.events_dropped:,} allocation events came after the first "
                   "2,000,000 and were not kept: the peak and the names cover the ones before.")
    if profile.error is not None:
        out.append(f"The cell stopped with {profile.error}: the lines up to it are shown.")
    for device, before, after in profile.elsewhere:
        out.append(f"Not profiled: {device}, where the cell changed allocated memory ({human_bytes(before)} → "
                   f"{human_bytes(after)}); %%gpumem -d {device} profiles it.")
    if profile.explain_unfollowed and any(m.runs is None for m in profile.lines):
        out.append("Lines with — for runs are a function's, known from its allocations alone: this Python has no "
                   "sys.monitoring (3.12+) to follow functions line by line without slowing every call.")
    if not profile.lines:
        out.append("No line of the cell ran.")
    return out


def render_text(profile: LineMemoryProfile) -> str:
    lines = [title(profile)]
    if profile.lines:
        lines.extend(aligned_lines(LINE_COLUMNS, profile.lines))
    lines.extend(peak_lines(profile))
    lines.extend(notes(profile))
    return "\n".join(lines)


def render_html(profile: LineMemoryProfile) -> str:
    out = [f'<div class="devinspect devinspect-gpumem-lines"><p><b>{escape(title(profile))}</b></p>']
    if profile.lines:
        out.append(column_table(LINE_COLUMNS, profile.lines))
    out.extend(f"<p>{escape(line)}</p>" for line in peak_lines(profile) + notes(profile))
    out.append("</div>")
    return "".join(out)
