"""Plain data for accelerator and process memory: what :mod:`devinspect.collect.machine.memory_snapshot` reads.

Sizes are ``*_bytes`` ints. ``None`` means "could not be measured here" and comes
with a reason in ``status`` or ``driver_status``; it is never a guessed 0. The
reconciliation (:attr:`DeviceMemory.reconciliation`) is a pure function of these
fields, so it can be checked from readings recorded on another machine.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from .display import Displayed, draw

if TYPE_CHECKING:
    import pandas as pd

#: PyTorch's caching allocator rounds every block up to a multiple of this.
BLOCK_BYTES = 512
#: ... and reserves device memory in segments of at least this (small pool).
SEGMENT_BYTES = 2 << 20


@dataclass(frozen=True, slots=True)
class TensorTally:
    """Tensor storage on one device found by the scan core, each storage counted once.

    ``named_bytes``: reachable from a name in the namespace. ``history_bytes``: held
    only by IPython's output history (``Out``, ``_``, ``_12``) or the last
    traceback. ``other_bytes``: alive but reached by no name (closures, autograd
    graph nodes kept by Python objects, caches): found by a garbage-collector walk.
    """

    named_bytes: int
    history_bytes: int
    other_bytes: int
    named_count: int = 0
    history_count: int = 0
    other_count: int = 0
    counted_at: float = 0.0

    @property
    def total_bytes(self) -> int:
        return self.named_bytes + self.history_bytes + self.other_bytes


@dataclass(frozen=True, slots=True)
class ReconRow:
    """One line of a reconciliation. ``total`` rows are the sum of the rows above them
    since the previous total; ``source`` is ``"measured"`` or ``"derived"``."""

    label: str
    value_bytes: int | None
    source: str
    note: str = ""
    total: bool = False
    #: The call that reads it, for a tooltip (the note says it in words).
    call: str = ""


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    """Memory of one device (``cuda:0``, ``xpu:0``, ``mps``) or of this process (``cpu``).

    Allocator figures come from PyTorch's caching allocator (``torch.cuda.memory_stats``):
    ``allocated`` is memory in live tensors, ``reserved`` what the allocator holds
    from the driver (allocated plus its cache), which is what ``nvidia-smi`` counts
    for PyTorch, plus the CUDA context and other libraries (``outside_allocator``).
    Driver figures come from NVML (``nvidia-ml-py``) or ``cudaMemGetInfo``.
    For ``cpu``: ``process_bytes`` is this process's resident memory (RSS),
    ``driver_total_bytes``/``driver_free_bytes`` the machine's total and available memory.
    """

    device: str
    kind: str
    state: str  # "ready", "not initialised", "unavailable", "process"
    status: str
    name: str | None = None
    torch_index: int | None = None
    driver_index: str | None = None
    driver_match: str | None = None  # how the driver index was found: uuid, CUDA_VISIBLE_DEVICES, order
    uuid: str | None = None
    allocated_bytes: int | None = None
    requested_bytes: int | None = None
    reserved_bytes: int | None = None
    active_bytes: int | None = None
    inactive_split_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    segments: int | None = None
    alloc_retries: int | None = None
    ooms: int | None = None
    driver_total_bytes: int | None = None
    driver_free_bytes: int | None = None
    driver_used_bytes: int | None = None
    driver_reserved_bytes: int | None = None
    #: What CUDA can allocate in all (``cudaMemGetInfo``'s total, the "total capacity" of an
    #: out-of-memory message): the driver's total less what the driver keeps for itself.
    capacity_bytes: int | None = None
    process_bytes: int | None = None
    peak_process_bytes: int | None = None
    other_processes_bytes: int | None = None
    other_processes: int | None = None
    driver_status: str | None = None  # None: driver figures read; else "unavailable: reason"
    tensors: TensorTally | None = None

    @property
    def releasable_bytes(self) -> int | None:
        """What ``empty_cache()`` would return to the driver: reserved segments with no
        live block. Free pieces of segments still in use (``inactive_split``) stay."""
        if self.reserved_bytes is None or self.active_bytes is None or self.inactive_split_bytes is None:
            return None
        return max(self.reserved_bytes - self.active_bytes - self.inactive_split_bytes, 0)

    @property
    def outside_allocator_bytes(self) -> int | None:
        """This process's device memory that PyTorch's allocator does not hold (CUDA
        context, cuBLAS/cuDNN handles, other libraries), per the driver."""
        if self.process_bytes is None or self.reserved_bytes is None or self.kind == "cpu":
            return None
        return self.process_bytes - self.reserved_bytes

    @property
    def reconciliation(self) -> tuple[ReconRow, ...]:
        """Rows that add up from the tensors you named to the device's total memory."""
        if self.kind == "cpu":
            return _cpu_rows(self)
        return _device_rows(self)


def _minus(a: int | None, *rest: int | None) -> int | None:
    if a is None or any(r is None for r in rest):
        return None
    return a - sum(r for r in rest if r is not None)


def _tensor_rows(t: TensorTally | None, where: str) -> list[ReconRow]:
    if t is None:
        return []
    return [
        ReconRow(f"tensors named in the namespace ({t.named_count})", t.named_bytes, "measured",
                 f"storage bytes of tensors reachable from your variables, {where}"),
        ReconRow(f"held by output history / last traceback ({t.history_count})", t.history_bytes, "measured",
                 "Out, _, _12 … and sys.last_traceback: 'release history' frees them"),
        ReconRow(f"other live tensors ({t.other_count})", t.other_bytes, "measured",
                 "alive but named by nothing (closures, caches, autograd): garbage-collector walk"),
    ]


def _device_rows(d: DeviceMemory) -> tuple[ReconRow, ...]:
    api = "torch.cuda" if d.kind == "cuda" else "torch.accelerator"
    rows = _tensor_rows(d.tensors, "scan")
    found = d.tensors.total_bytes if d.tensors is not None else None
    if d.allocated_bytes is not None:
        if d.requested_bytes is not None:
            if found is not None:
                rows.append(ReconRow("not reachable from Python", _minus(d.requested_bytes, found), "derived",
                                     "tensors only C++ holds: autograd's saved activations, library workspaces; "
                                     "negative: tensors not from PyTorch's allocator (DLPack, IPC)"))
            rows.append(ReconRow("requested by live allocations", d.requested_bytes, "measured",
                                 "the allocator's count of what live allocations asked for, before rounding",
                                 total=found is not None, call=f"{api}.memory_stats()['requested_bytes.all.current']"))
            rows.append(ReconRow("rounding to 512-byte blocks", _minus(d.allocated_bytes, d.requested_bytes), "derived",
                                 "the allocator rounds each block up to a multiple of 512 bytes"))
        elif found is not None:
            rows.append(ReconRow("not reachable from Python (incl. 512-byte rounding)", _minus(d.allocated_bytes, found),
                                 "derived", "autograd's saved activations, library workspaces, block rounding"))
        rows.append(ReconRow("allocated", d.allocated_bytes, "measured", "the allocator's live blocks", total=True,
                             call=f"{api}.memory_allocated()"))
    if d.reserved_bytes is not None and d.allocated_bytes is not None:
        pending = _minus(d.active_bytes, d.allocated_bytes)
        if pending:
            rows.append(ReconRow("freed, waiting on other streams", pending, "derived",
                                 "active − allocated: blocks freed but still used by another stream"))
        if d.inactive_split_bytes is not None and d.active_bytes is not None:
            rows.append(ReconRow("free pieces of segments in use", d.inactive_split_bytes, "measured",
                                 "fragmentation and the 2 MiB/20 MiB segment rounding: empty_cache() cannot return these"))
            rows.append(ReconRow("cached whole segments", d.releasable_bytes, "derived",
                                 "reserved − active − inactive split: what empty_cache() returns"))
        else:
            rows.append(ReconRow("cached by the allocator", _minus(d.reserved_bytes, d.allocated_bytes), "derived",
                                 "reserved − allocated"))
        rows.append(ReconRow("reserved by PyTorch", d.reserved_bytes, "measured",
                             "what the allocator holds from the driver", total=True, call=f"{api}.memory_reserved()"))
    rows.extend(_driver_rows(d))
    return tuple(rows)


def _driver_rows(d: DeviceMemory) -> list[ReconRow]:
    rows: list[ReconRow] = []
    if d.driver_total_bytes is None or d.driver_free_bytes is None:
        return rows  # the device's driver_status says why
    measured_used = d.driver_used_bytes is not None
    used = d.driver_used_bytes if measured_used else d.driver_total_bytes - d.driver_free_bytes
    kept, kept_source = d.driver_reserved_bytes, "measured"
    if kept is None and measured_used and d.capacity_bytes is not None and 0 < d.driver_total_bytes - d.capacity_bytes <= used:
        # NVML before v2 counts what the driver keeps in "used": the difference of the two totals.
        kept, kept_source = d.driver_total_bytes - d.capacity_bytes, "derived"
        used -= kept
    if d.process_bytes is not None:
        if d.reserved_bytes is not None:
            rows.append(ReconRow("outside PyTorch's allocator in this process", d.outside_allocator_bytes, "derived",
                                 "CUDA context, cuBLAS/cuDNN/NCCL, other libraries (process − reserved)"))
        rows.append(ReconRow("this process (driver)", d.process_bytes, "measured", "NVML per-process use",
                             total=d.reserved_bytes is not None))
        if d.other_processes_bytes is not None:
            rows.append(ReconRow(f"other processes ({d.other_processes or 0})", d.other_processes_bytes, "measured",
                                 "NVML per-process use of every other process"))
            rows.append(ReconRow("not attributed to a process", used - d.process_bytes - d.other_processes_bytes,
                                 "derived", "driver reservations, ECC, processes NVML does not list"))
        else:
            rows.append(ReconRow("other processes and the driver", used - d.process_bytes, "derived",
                                 "used − this process (per-process figures of others unavailable)"))
    elif d.reserved_bytes is not None:
        rows.append(ReconRow("outside the allocator (context, others)",
                             used - d.reserved_bytes, "derived",
                             f"used − reserved ({d.driver_status or 'per-process use unavailable'})"))
    rows.append(ReconRow("used (driver)", used, "measured" if measured_used else "derived",
                         "what nvidia-smi shows as used" if measured_used else "total − free",
                         total=d.reserved_bytes is not None or d.process_bytes is not None))
    if kept:
        rows.append(ReconRow("reserved by the driver", kept, kept_source,
                             "kept by the driver and firmware, usable by no process: the total less CUDA's total "
                             "(the \"total capacity\" of an out-of-memory message)"))
    rows.append(ReconRow("free (driver)", d.driver_free_bytes, "measured", ""))
    rows.append(ReconRow("total", d.driver_total_bytes, "measured",
                         "the device's memory, as nvidia-smi shows it" if measured_used
                         else "what CUDA can allocate (cudaMemGetInfo)", total=True))
    return rows


def _cpu_rows(d: DeviceMemory) -> tuple[ReconRow, ...]:
    rows = _tensor_rows(d.tensors, "on the CPU")
    if d.process_bytes is not None:
        if d.tensors is not None:
            rows.append(ReconRow("rest of this process", _minus(d.process_bytes, d.tensors.total_bytes), "derived",
                                 "Python objects, libraries, allocator caches; negative when tensor pages "
                                 "were never touched or are swapped out"))
        rows.append(ReconRow("this process (resident)", d.process_bytes, "measured", "RSS", total=d.tensors is not None))
    if d.driver_total_bytes is not None and d.driver_free_bytes is not None and d.process_bytes is not None:
        rows.append(ReconRow("other processes and the kernel", _minus(d.driver_total_bytes, d.driver_free_bytes, d.process_bytes),
                             "derived", "total − available − this process"))
        rows.append(ReconRow("available", d.driver_free_bytes, "measured", "MemAvailable"))
        rows.append(ReconRow("total", d.driver_total_bytes, "measured", "physical memory", total=True))
    return tuple(rows)


def _whole(column: str) -> bool:
    return column.endswith(("_bytes", "_index", "segments", "retries", "ooms", "processes", "cell"))


def nullable(frame: pd.DataFrame) -> pd.DataFrame:
    """One missing value everywhere (``pd.NA``): whole numbers as ``Int64``, text as ``string``,
    so a value that could not be measured never shows as ``None`` in one column and ``NaN`` in the next."""
    for column in frame.columns:
        values = [v for v in frame[column] if v is not None and not (isinstance(v, float) and v != v)]
        if values and all(isinstance(v, bool) for v in values):
            frame[column] = frame[column].astype("boolean")
        elif values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            frame[column] = frame[column].astype("Int64")
        elif values and all(isinstance(v, float) and v.is_integer() for v in values) and \
                frame[column].dtype.kind == "f" and _whole(column):
            frame[column] = frame[column].astype("Int64")  # whole numbers pandas turned into floats
        elif values and all(isinstance(v, float) for v in values):
            frame[column] = frame[column].astype("Float64")
        elif all(isinstance(v, str) for v in values):
            frame[column] = frame[column].astype("string")
    return frame


@dataclass(frozen=True, slots=True, repr=False)
class MemorySnapshot(Displayed):
    """Memory of every device at one moment, plus notes on what could not be read.

    Display it in IPython for tables; ``.frame`` has one row per device and
    ``.reconciliation_frame`` one row per reconciliation line.
    """

    devices: tuple[DeviceMemory, ...]
    notes: tuple[str, ...] = ()
    taken_at: float = 0.0
    #: Accelerators left out because nothing uses them (``%gpumem --all-devices`` shows them).
    hidden: int = 0

    def device(self, name: str) -> DeviceMemory:
        for d in self.devices:
            if d.device == name:
                return d
        raise KeyError(f"no device {name!r} in this snapshot (have: {', '.join(d.device for d in self.devices)})")

    @property
    def accelerators(self) -> tuple[DeviceMemory, ...]:
        return tuple(d for d in self.devices if d.kind != "cpu")

    @property
    def releasable_bytes(self) -> int | None:
        """What ``empty_cache()`` would return over all ready devices (None: unknown)."""
        ready = [d for d in self.accelerators if d.state == "ready"]
        if not ready or any(d.releasable_bytes is None for d in ready):
            return None
        return sum(d.releasable_bytes or 0 for d in ready)

    @property
    def frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = []
        for d in self.devices:
            row = {f.name: getattr(d, f.name) for f in fields(DeviceMemory) if f.name != "tensors"}
            t = d.tensors
            row["named_tensor_bytes"] = t.named_bytes if t else None
            row["history_tensor_bytes"] = t.history_bytes if t else None
            row["other_tensor_bytes"] = t.other_bytes if t else None
            row["releasable_bytes"] = d.releasable_bytes
            rows.append(row)
        return nullable(pd.DataFrame(rows))

    @property
    def reconciliation_frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = [
            {"device": d.device, "row": r.label, "bytes": r.value_bytes, "source": r.source, "total": r.total, "note": r.note,
             "call": r.call}
            for d in self.devices
            for r in d.reconciliation
        ]
        return nullable(pd.DataFrame(rows, columns=["device", "row", "bytes", "source", "total", "note"]))


@dataclass(frozen=True, slots=True)
class CellDevice:
    """One device's memory around one cell (``None``: not measurable then)."""

    device: str
    allocated_before: int | None
    allocated_after: int | None
    reserved_before: int | None
    reserved_after: int | None
    peak_allocated: int | None
    peak_reserved: int | None


@dataclass(frozen=True, slots=True)
class CellMemory:
    """What one cell did to memory: per device, before/after and the peak while it ran."""

    cell: int | None
    source: str
    wall_s: float
    devices: tuple[CellDevice, ...]
    failed: bool = False


#: Columns of :attr:`MemoryHistory.frame`.
HISTORY_COLUMNS = (
    "cell", "source", "device", "wall_s", "allocated_before", "allocated_after", "allocated_delta",
    "peak_allocated", "reserved_before", "reserved_after", "peak_reserved", "failed",
)


@dataclass(frozen=True, slots=True, repr=False)
class MemoryHistory(Displayed):
    """The cells recorded by ``%gpumem --track``, oldest first."""

    cells: tuple[CellMemory, ...]

    @property
    def frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = []
        for c in self.cells:
            for d in c.devices:
                rows.append((c.cell, c.source, d.device, c.wall_s, d.allocated_before, d.allocated_after,
                             _minus(d.allocated_after, d.allocated_before), d.peak_allocated,
                             d.reserved_before, d.reserved_after, d.peak_reserved, c.failed))
        return nullable(pd.DataFrame(rows, columns=list(HISTORY_COLUMNS)))

    def figure(self) -> Any:
        """A matplotlib Figure of allocated/reserved/peak per cell, one panel per device."""
        return draw(self, "figure")
