"""One rank's view as small plain data, and every rank's side by side.

A :class:`RankSummary` is what ``%devices`` and ``%gpumem`` would show on one rank,
cut to a size that does not grow with the number of tensors: per-device totals, the
top N tensors by bytes, the findings, the allocator's and the driver's figures, the
parameters' signatures (for comparing model copies across ranks) and the DTensor
placements. It travels as a dict of plain values (:meth:`RankSummary.to_wire`), so a
rank running another devinspect version still sends something the receiver can read.
A :class:`RankReport` holds every rank's summary and what only the comparison shows.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping

from .device_memory import nullable
from .display import Displayed
from .fixes import Finding

if TYPE_CHECKING:
    import pandas as pd

#: Bumped when the wire format changes meaning; older and newer readers skip unknown keys.
SCHEMA = 1
#: A rank this much above the median is an outlier (0.25: 25% more).
SKEW_MARGIN = 0.25


@dataclass(frozen=True, slots=True)
class DeviceUse:
    """One device as this rank sees it: its tensors (scan) and its memory (allocator, driver)."""

    device: str
    tensors: int = 0
    tensor_bytes: int = 0
    allocated_bytes: int | None = None
    reserved_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    #: What the driver counts for this process on the device, and the device's total.
    process_bytes: int | None = None
    total_bytes: int | None = None
    #: The driver's index of the device (NVML), where known.
    driver_index: str | None = None


@dataclass(frozen=True, slots=True)
class TopTensor:
    name: str
    kind: str
    device: str
    dtype: str
    shape: tuple[int, ...] | None
    storage_bytes: int


@dataclass(frozen=True, slots=True)
class ParameterSignature:
    """What two copies of one model must agree on across ranks (DDP keeps them equal)."""

    name: str
    device_type: str
    dtype: str
    shape: tuple[int, ...] | None


@dataclass(frozen=True, slots=True)
class DTensorPlacement:
    """A DTensor parameter: its mesh, how it is laid out on it, and this rank's shard."""

    name: str
    mesh_shape: tuple[int, ...]
    mesh_dim_names: tuple[str, ...] | None
    mesh_device_type: str
    placements: tuple[str, ...]
    global_shape: tuple[int, ...]
    local_shape: tuple[int, ...]


@dataclass(frozen=True)
class RankSummary:
    rank: int
    world_size: int
    hostname: str = ""
    pid: int = 0
    local_rank: int | None = None
    #: What moved it: the torch.distributed backend ("gloo", "nccl"), or "ipyparallel".
    transport: str = ""
    devinspect_version: str = ""
    torch_version: str = ""
    schema: int = SCHEMA
    devices: tuple[DeviceUse, ...] = ()
    tensors: int = 0
    tensor_bytes: int = 0
    top: tuple[TopTensor, ...] = ()
    findings: tuple[Finding, ...] = ()
    parameters: tuple[ParameterSignature, ...] = ()
    #: All parameters, of which ``parameters`` lists the first MAX_PARAMETERS.
    parameter_count: int = 0
    dtensors: tuple[DTensorPlacement, ...] = ()
    #: Driver indices of the GPUs where NVML lists this process (a CUDA context each);
    #: None when NVML could not say.
    cuda_contexts: tuple[str, ...] | None = None
    #: The driver index of this rank's own GPU (its local rank's), where known.
    own_gpu: str | None = None
    elapsed_s: float = 0.0
    #: Why this rank's summary is missing or partial (an error, a time-out); None when complete.
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def accelerators(self) -> tuple[DeviceUse, ...]:
        return tuple(d for d in self.devices if d.device != "cpu")

    def accelerator_total(self, figure: str) -> int | None:
        """``figure`` (``"allocated_bytes"``, …) summed over the accelerators that report it; None if none does."""
        known = [getattr(d, figure) for d in self.accelerators if getattr(d, figure) is not None]
        return sum(known) if known else None

    @property
    def accelerator_bytes(self) -> int:
        """What this rank holds on its accelerators: the allocator's figure, else its tensors'."""
        return sum(d.allocated_bytes if d.allocated_bytes is not None else d.tensor_bytes for d in self.accelerators)

    @property
    def held_bytes(self) -> int:
        """The figure ranks are compared by: accelerator memory, or tensor bytes on a CPU-only rank."""
        return self.accelerator_bytes if self.accelerators else self.tensor_bytes

    def to_wire(self) -> dict[str, Any]:
        """Plain values only (dicts, lists, str, int, float, None): safe to pickle across versions."""
        return asdict(self)

    @classmethod
    def from_wire(cls, data: Mapping[str, Any]) -> RankSummary:
        """Read a summary another rank sent; keys this version does not know are kept in ``extra``."""
        return _build(cls, data)


def failed_summary(rank: int, world_size: int, error: str, transport: str = "") -> RankSummary:
    """A rank that sent nothing readable, said in ``error``."""
    return RankSummary(rank=rank, world_size=world_size, transport=transport, error=error)


_NESTED = {"devices": DeviceUse, "top": TopTensor, "findings": Finding, "parameters": ParameterSignature,
           "dtensors": DTensorPlacement}


def _build(cls: type, data: Mapping[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in known:
            continue
        if cls is RankSummary and key in _NESTED and value is not None:
            value = tuple(_build(_NESTED[key], item) for item in value)
        elif isinstance(value, list):
            value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
        values[key] = value
    if cls is RankSummary:
        values["extra"] = {k: v for k, v in data.items() if k not in known}
    try:
        return cls(**values)
    except TypeError as exc:  # a field this version requires is missing
        if cls is RankSummary:
            return failed_summary(int(data.get("rank", -1)), int(data.get("world_size", 0)),
                                  f"unreadable summary (devinspect {data.get('devinspect_version', '?')}): {exc}")
        raise


def skew(summaries: list[RankSummary] | tuple[RankSummary, ...]) -> tuple[int, int, int] | None:
    """(median bytes, worst rank, its bytes) over the ranks that reported, or None without two."""
    held = [(s.held_bytes, s.rank) for s in summaries if not s.error or s.devices]
    if len(held) < 2:
        return None
    median = int(statistics.median(b for b, _ in held))
    worst, rank = max(held)
    return median, rank, worst


@dataclass(frozen=True, repr=False)
class RankReport(Displayed):
    """What ``gather`` and ``from_view`` return: one :class:`RankSummary` per rank, in rank
    order, and the findings across ranks. ``.frame`` has one row per rank.

    ``focus`` is what the text shows first: "devices" (tensors and placement, as
    ``%devices --ranks``) or "memory" (allocator and driver figures, as ``%gpumem --ranks``).
    """

    summaries: tuple[RankSummary, ...]
    findings: tuple[Finding, ...] = ()
    margin: float = SKEW_MARGIN
    #: Bytes each rank sent (its pickled summary), in rank order; what the transport carried.
    sent_bytes: tuple[int, ...] = ()
    elapsed_s: float = 0.0
    focus: str = "devices"

    @property
    def world_size(self) -> int:
        return max((s.world_size for s in self.summaries), default=0)

    @property
    def skew(self) -> tuple[int, int, int] | None:
        """(median bytes, worst rank, its bytes): the figure ranks are compared by."""
        return skew(self.summaries)

    @property
    def frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = []
        for s in self.summaries:
            rows.append({
                "rank": s.rank, "hostname": s.hostname, "local_rank": s.local_rank, "pid": s.pid or None,
                "devices": ", ".join(d.device for d in s.devices), "tensors": s.tensors,
                "tensor_bytes": s.tensor_bytes, "held_bytes": s.held_bytes,
                "allocated_bytes": s.accelerator_total("allocated_bytes"),
                "reserved_bytes": s.accelerator_total("reserved_bytes"),
                "process_bytes": s.accelerator_total("process_bytes"),
                "findings": len(s.findings), "parameters": s.parameter_count, "dtensors": len(s.dtensors),
                "transport": s.transport, "devinspect_version": s.devinspect_version, "elapsed_s": s.elapsed_s,
                "error": s.error,
            })
        return nullable(pd.DataFrame(rows))

    @property
    def tensors_frame(self) -> pd.DataFrame:
        """Each rank's largest tensors, one row each."""
        import pandas as pd

        return pd.DataFrame([{"rank": s.rank, "name": t.name, "kind": t.kind, "device": t.device, "dtype": t.dtype,
                              "shape": t.shape, "storage_bytes": t.storage_bytes}
                             for s in self.summaries for t in s.top],
                            columns=["rank", "name", "kind", "device", "dtype", "shape", "storage_bytes"])

    @property
    def dtensors_frame(self) -> pd.DataFrame:
        """Each DTensor parameter on each rank: mesh, placements, global and local shape."""
        import pandas as pd

        return pd.DataFrame([{"rank": s.rank, "name": d.name, "mesh_shape": d.mesh_shape,
                              "mesh_device_type": d.mesh_device_type, "placements": ", ".join(d.placements),
                              "global_shape": d.global_shape, "local_shape": d.local_shape}
                             for s in self.summaries for d in s.dtensors],
                            columns=["rank", "name", "mesh_shape", "mesh_device_type", "placements", "global_shape",
                                     "local_shape"])
