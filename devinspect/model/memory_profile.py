"""A cell's accelerator memory by line and by name (``%%gpumem``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .display import Displayed

if TYPE_CHECKING:
    import pandas as pd

# -- what a run records ------------------------------------------------------------------

#: A line of the user's code: (file name, function name, line number).
LineKey = tuple[str, str, int]


@dataclass(slots=True)
class LineTotals:
    """One line's runs added up as they happen: the counters where its first run started
    and its last run ended, and the sum of every run's change."""

    runs: int = 0
    allocated_before: int | None = None
    reserved_before: int | None = None
    allocated_after: int | None = None
    reserved_after: int | None = None
    change: int | None = None
    #: The highest allocated bytes seen while it ran (at its start, its end, or an
    #: allocation inside it); None without allocation events.
    peak: int | None = None
    #: The line that was running it, the first time it ran (a function's line: the line
    #: that called the function); None for the cell's own lines.
    caller: LineKey | None = None


#: One allocator event: (action, address, size, the user's lines running then, innermost
#: first); the action is "alloc", "free", "segment_alloc" or "segment_free". A plain tuple:
#: a loop of small allocations makes millions.
MemoryEvent = tuple[str, int, int, tuple[LineKey, ...]]


@dataclass
class Recording:
    """What a run recorded: each line's totals, in the order lines first ran, and the
    allocator's events."""

    device: str
    lines: dict[LineKey, LineTotals] = field(default_factory=dict)
    events: list[MemoryEvent] = field(default_factory=list)
    allocated_start: int | None = None
    reserved_start: int | None = None
    allocated_end: int | None = None
    reserved_end: int | None = None
    #: Where the events came from, or why there are none.
    events_source: str = ""
    has_events: bool = False
    #: Events heard after the recording was full (not kept: the peak and the names cover
    #: the events before them).
    events_dropped: int = 0
    #: Allocated bytes of the other devices of the same kind, at the start and at the end.
    others_start: dict[str, int] = field(default_factory=dict)
    others_end: dict[str, int] = field(default_factory=dict)


def line_label(function: str, line: int) -> str:
    """How a line is named: ``line 3`` in the cell, ``forward, line 12`` in a function."""
    return f"line {line}" if function == "<module>" else f"{function}, line {line}"


# -- what %%gpumem shows -------------------------------------------------------------------


@dataclass(frozen=True)
class LineMemory:
    """One line of the cell or of a profiled function, its runs added up (a loop's body
    runs many times: before is the first run's, after the last run's, change the sum of
    every run's, peak the highest of any run)."""

    function: str  # "<module>" for the cell's own lines
    line: int
    text: str
    #: None for a function's line known from allocation events only (where Python has no
    #: sys.monitoring, functions are not followed line by line): then the counters are None too.
    runs: int | None
    allocated_before: int | None
    allocated_after: int | None
    change: int | None
    peak: int | None
    reserved_before: int | None
    reserved_after: int | None
    #: (name, bytes) of the tensors made on this line that are alive at the cell's end, largest first.
    alive: tuple[tuple[str, int], ...] = ()
    #: Bytes made on this line, alive at the end, that no name reaches (a graph, a cache).
    alive_unnamed: int = 0
    filename: str = ""
    #: How deep it ran: 0 for the cell's lines, 1 for the lines of a function a cell line
    #: called, and so on. Rows come as they first ran, each under the line that called it.
    depth: int = 0

    @property
    def label(self) -> str:
        return line_label(self.function, self.line)


@dataclass(frozen=True)
class PeakMoment:
    """The moment the cell's allocated memory was highest, and what was live then."""

    allocated: int
    line: str  # the label of the innermost line running then
    #: (what, bytes), largest first: a user's name, "temporary on line N" (the tensors made
    #: on line N live then and freed before the end), "no name, from line N" (alive at the
    #: end, unnamed), or "held before the cell".
    held: tuple[tuple[str, int], ...]
    #: The temporaries of the line whose temporaries held the most at the peak, as ``held``
    #: lists them (one size for one line), and the peak had they never been made (a what-if
    #: from the recorded sizes: nothing is run again).
    largest_temporary: tuple[str, int] | None = None
    without_largest_temporary: int | None = None


@dataclass(frozen=True, repr=False)
class LineMemoryProfile(Displayed):
    """What ``%%gpumem`` measured: the lines, the peak and the totals, on one device."""

    device: str
    lines: tuple[LineMemory, ...]
    peak: PeakMoment | None
    allocated_start: int | None
    allocated_end: int | None
    reserved_start: int | None
    reserved_end: int | None
    #: Where the allocation events came from, or why there were none.
    events_source: str
    has_events: bool
    #: The first line of the exception that stopped the cell, when one did.
    error: str | None = None
    #: Allocation events not kept (a very long cell): the peak and names cover those before.
    events_dropped: int = 0
    #: (device, allocated before, after) of each other device whose memory the cell changed:
    #: not profiled, and said so.
    elsewhere: tuple[tuple[str, int, int], ...] = ()
    #: Whether to say why some lines have no runs (this Python follows no function line by
    #: line): said once in a session, not under every profile.
    explain_unfollowed: bool = True

    @property
    def frame(self) -> pd.DataFrame:
        """One row per line: the table as a DataFrame (bytes as integers)."""
        import pandas as pd

        columns = ["function", "line", "code", "runs", "allocated_before", "allocated_after", "change", "peak",
                   "reserved_before", "reserved_after", "alive", "alive_unnamed", "depth"]
        rows = [{"function": m.function, "line": m.line, "code": m.text, "runs": m.runs,
                 "allocated_before": m.allocated_before, "allocated_after": m.allocated_after, "change": m.change,
                 "peak": m.peak, "reserved_before": m.reserved_before, "reserved_after": m.reserved_after,
                 "alive": ", ".join(f"{name} ({size})" for name, size in m.alive), "alive_unnamed": m.alive_unnamed,
                 "depth": m.depth}
                for m in self.lines]
        return pd.DataFrame(rows, columns=columns)

    def line(self, number: int, function: str = "<module>") -> LineMemory | None:
        """The row of ``number`` in the cell (or in ``function``)."""
        return next((m for m in self.lines if m.line == number and m.function == function), None)
