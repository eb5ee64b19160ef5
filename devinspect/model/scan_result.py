"""What a scan returns, and the views a magic shows of it."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from itertools import compress, islice, repeat
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from . import tensor_columns
from .display import Displayed
from .fixes import Finding
from .record_table import RecordTable, record_column, size_keys
from .records import (
    KINDS,
    DeviceTotal,
    DroppedMove,
    FunctionCall,
    HistoryHold,
    LoaderSummary,
    ModelCall,
    ModuleSummary,
    OptimizerSummary,
    SchedulerSummary,
    TableHolder,
    TensorRecord,
    Truncation,
)

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class ScanResult:
    """Everything :func:`devinspect.scan` found, as data.

    ``records`` lists every tensor found (aliases included); ``devices`` sums them
    per device with each storage counted once; ``frame`` is the same as a pandas
    DataFrame. :attr:`findings` explains what looks wrong; it is computed once, on
    the whole result. :meth:`select` gives a view of some records (and the findings
    about them) with display settings beside the data.
    """

    #: A :class:`~devinspect.model.record_table.RecordTable` from the walk; any sequence of records will do.
    records: Sequence[TensorRecord]
    modules: tuple[ModuleSummary, ...] = ()
    loaders: tuple[LoaderSummary, ...] = ()
    truncated: tuple[Truncation, ...] = ()
    #: Accelerator storages reachable only through excluded history names or
    #: ``sys.last_traceback``: always measured, even when those names are not listed.
    history: tuple[HistoryHold, ...] = ()
    roots: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    optimizers: tuple[OptimizerSummary, ...] = ()
    schedulers: tuple[SchedulerSummary, ...] = ()
    #: Namespace tensors the session's cells pass to its modules (the latest call of each module).
    calls: tuple[ModelCall, ...] = ()
    #: Calls of functions with several namespace tensors in the session's latest cells.
    function_calls: tuple[FunctionCall, ...] = ()
    #: What the latest cells move where they use it (``x`` in ``model(x.to(dev))``), as written.
    moved_in_cells: tuple[str, ...] = ()
    #: Moves in the latest cells whose result is dropped (``x.to(dev)`` as a statement).
    dropped_moves: tuple[DroppedMove, ...] = ()
    #: ``(path, class name)`` of every module and submodule the namespace reaches by name.
    module_types: tuple[tuple[str, str], ...] = ()
    #: Objects of the user's own classes (not modules) holding tensors: a sampler's tables.
    holders: tuple[TableHolder, ...] = ()
    #: The rules that say what looks wrong (:func:`devinspect.find`), given by whoever
    #: builds the result; a result built without them has no findings.
    rules: Callable[[ScanResult], Iterable[Finding]] | None = field(default=None, repr=False, compare=False)

    @property
    def devices(self) -> tuple[DeviceTotal, ...]:
        """Per-device totals, most storage bytes first (summed on first use, then kept)."""
        return _kept(self, "_devices", lambda: device_totals(self.records))

    def of_kind(self, *kinds: str) -> tuple[TensorRecord, ...]:
        """The records of these kinds, in walk order: a rule about parameters or optimizer
        state reads those, not every tensor of the namespace. Only the records picked are
        made, and a selection is kept when it is a small part of the records."""
        kept = _kept(self, "_of_kind", dict)
        found = kept.get(kinds)
        if found is None:
            found = tuple(map(self.records.__getitem__, self._indexes_of_kind(kinds)))
            if len(found) * 8 <= len(self.records):
                kept[kinds] = found
        return found

    def _indexes_of_kind(self, kinds: tuple[str, ...]) -> Iterable[int]:
        if isinstance(self.records, RecordTable):
            return self.records.indexes_where("kind", kinds)
        # Any other sequence of records: its kinds kept as one byte per record.
        codes = _kept(self, "_kind_codes",
                      lambda: bytes(map(_KIND_CODES.get, record_column(self.records, "kind"), repeat(255))))
        wanted = frozenset(_KIND_CODES.get(kind, 254) for kind in kinds)
        return compress(range(len(codes)), map(wanted.__contains__, codes))

    @property
    def history_bytes(self) -> int:
        """Accelerator bytes held only by output history / the last traceback."""
        return sum(h.storage_bytes for h in self.history)

    @property
    def total_bytes(self) -> int:
        """Bytes of every storage, each counted once: the sum of :attr:`devices`."""
        return sum(d.storage_bytes for d in self.devices)

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The findings for this result (computed on first use, then kept)."""
        cached = self.__dict__.get("_findings")
        if cached is None:
            cached = tuple(self.rules(self)) if self.rules is not None else ()
            object.__setattr__(self, "_findings", cached)
        return cached

    @property
    def frame(self) -> pd.DataFrame:
        """All records as a DataFrame with the columns in :data:`FRAME_COLUMNS`."""
        return records_frame(self.records)

    def select(self, selection: Selection | None = None, display: Display | None = None) -> ScanView:
        """A view of the records (and findings) ``selection`` picks, shown with ``display``."""
        return ScanView(self, selection or Selection(), display or Display())

    def __len__(self) -> int:
        return len(self.records)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return self.select()._repr_mimebundle_(include, exclude)

    def __repr__(self) -> str:
        return repr(self.select())


#: A record's kind as one byte (255: a kind not listed in KINDS).
_KIND_CODES = {kind: code for code, kind in enumerate(KINDS)}


def _kept(owner: Any, key: str, compute: Callable[[], Any]) -> Any:
    """``compute()``, made once per (frozen) ``owner`` and kept in its ``__dict__``."""
    cached = owner.__dict__.get(key)
    if cached is None:
        cached = compute()
        object.__setattr__(owner, key, cached)
    return cached


def device_totals(records: Sequence[TensorRecord]) -> tuple[DeviceTotal, ...]:
    """Per-device totals of ``records``, each storage counted once, most bytes first."""
    sums = records.device_sums() if isinstance(records, RecordTable) else None
    if sums is not None:
        return _ordered_totals(sums)
    totals: dict[str, list[int]] = {}
    # Read as columns: one loop over plain values, no attribute or property read per record.
    for device, alias, storage_bytes, nbytes in zip(record_column(records, "device"),
                                                    record_column(records, "alias_of"),
                                                    record_column(records, "storage_bytes"),
                                                    record_column(records, "nbytes")):
        t = totals.get(device)
        if t is None:
            t = totals[device] = [0, 0, 0]
        t[0] += 1
        if alias is None:
            if storage_bytes is not None:
                t[1] += storage_bytes
            if nbytes is not None:
                t[2] += nbytes
    return _ordered_totals(totals)


def _ordered_totals(totals: dict[str, list[int]]) -> tuple[DeviceTotal, ...]:
    out = [DeviceTotal(d, n, s, lg) for d, (n, s, lg) in totals.items()]
    out.sort(key=lambda d: (-d.storage_bytes, d.device))
    return tuple(out)


@dataclass(frozen=True)
class Selection:
    """Which records a view shows: names (a dotted name keeps what lies below it), a
    device (``cpu``, ``cuda`` for every CUDA device, ``cuda:1``) and a kind."""

    names: tuple[str, ...] = ()
    device: str | None = None
    kind: str | None = None

    def keeps(self, r: TensorRecord) -> bool:
        if self.kind is not None and r.kind != self.kind:
            return False
        if self.device is not None and not device_matches(r.device, self.device):
            return False
        # A name's own records include those named another way from it (list(d.values())[1]).
        if self.names and not any(is_under(r.name, n) or is_under(r.param or "", n) or r.root == n
                                  for n in self.names):
            return False
        return True

    @property
    def everything(self) -> bool:
        return not self.names and self.device is None and self.kind is None


def device_matches(device: str, wanted: str) -> bool:
    """``cuda:1`` matches ``cuda`` and ``cuda:1``; ``cpu:0`` and ``cpu`` are the same device."""
    if wanted == device:
        return True
    kind, _, index = wanted.partition(":")
    if not index:
        return device.split(":", 1)[0] == kind
    return kind == "cpu" and device == "cpu"


#: Rows a table shows before "… N more", and the orders it can show them in.
DEFAULT_MAX_ROWS = 40
SORTS = ("walk", "bytes", "name", "device", "kind")


@dataclass(frozen=True)
class Display:
    """How a view is rendered: rows shown before "… N more", row order, findings only."""

    max_rows: int = DEFAULT_MAX_ROWS
    sort: str = "walk"
    findings_only: bool = False


@dataclass(frozen=True, repr=False)
class ScanView(Displayed):
    """Some records of a :class:`ScanResult`, the findings about them, and how to show them.

    Findings come from the whole result (computed once) and are kept when any record
    they are about is selected, so ``%devices -k optimizer_state`` still shows the
    optimizer-state finding.
    """

    result: ScanResult
    selection: Selection = field(default_factory=Selection)
    display: Display = field(default_factory=Display)

    @property
    def records(self) -> Sequence[TensorRecord]:
        cached = self.__dict__.get("_records")
        if cached is None:
            keeps = self.selection.keeps
            cached = self.result.records if self.selection.everything else tuple(r for r in self.result.records if keeps(r))
            object.__setattr__(self, "_records", cached)
        return cached

    @property
    def findings(self) -> tuple[Finding, ...]:
        everything = self.result.findings
        if self.selection.everything:
            return everything
        shown = {r.name for r in self.records}
        names = self.selection.names
        return tuple(
            f for f in everything
            if any(n in shown for n in f.names)
            or (not f.names and self.selection.device is None and self.selection.kind is None
                and (not names or any(is_under(f.subject, n) for n in names)))
        )

    @property
    def devices(self) -> tuple[DeviceTotal, ...]:
        if self.selection.everything:
            return self.result.devices
        return _kept(self, "_devices", lambda: device_totals(self.records))

    def largest(self, limit: int) -> list[int]:
        """Positions in :attr:`records` of the ``limit`` largest records by :func:`size_keys`
        (the first met among equals), ascending: what a long table shows (kept per limit)."""
        kept = _kept(self, "_largest", dict)
        if limit not in kept:
            sizes = size_keys(self.records)
            if limit >= len(sizes):
                kept[limit] = list(range(len(sizes)))
            else:
                # The limit-th largest size is found among the sizes alone (a C-level heap of
                # ints), then positions are picked in walk order: those above it, and the first
                # ones equal to it.
                threshold = heapq.nlargest(limit, sizes)[-1]
                above = list(compress(range(len(sizes)), map(threshold.__lt__, sizes)))
                equal = islice(compress(range(len(sizes)), map(threshold.__eq__, sizes)), limit - len(above))
                kept[limit] = sorted(above + list(equal))
        return kept[limit]

    @property
    def modules(self) -> tuple[ModuleSummary, ...]:
        names = self.selection.names
        if not names:
            return self.result.modules
        return tuple(m for m in self.result.modules if any(is_under(m.name, n) or is_under(n, m.name) for n in names))

    @property
    def optimizers(self) -> tuple[OptimizerSummary, ...]:
        return self.result.optimizers

    @property
    def history(self) -> tuple[HistoryHold, ...]:
        return self.result.history

    @property
    def history_bytes(self) -> int:
        return self.result.history_bytes

    @property
    def total_bytes(self) -> int:
        return sum(d.storage_bytes for d in self.devices)

    @property
    def options(self) -> dict[str, Any]:
        return self.result.options

    @property
    def frame(self) -> pd.DataFrame:
        return records_frame(self.records)

    def __len__(self) -> int:
        return len(self.records)


def is_under(name: str, prefix: str) -> bool:
    """Whether ``name`` is ``prefix`` or lies below it (``model.fc`` under ``model``)."""
    return name == prefix or (name.startswith(prefix) and len(name) > len(prefix) and name[len(prefix)] in ".[")


def records_frame(records: Sequence[TensorRecord]) -> pd.DataFrame:
    """The records as a DataFrame: a record's own fields, in order (sizes as nullable integers),
    then the text of each declared column that shows no field of its own."""
    import pandas as pd

    columns = TensorRecord._fields
    frame = pd.DataFrame({name: record_column(records, name) for name in columns}, columns=columns)
    for column in ("nbytes", "storage_bytes", "storage_id"):
        frame[column] = frame[column].astype("Int64")
    for column in tensor_columns.TENSOR_COLUMNS:
        if column.field is None and column.name not in frame:
            frame[column.name] = column.texts(records)
    return frame
