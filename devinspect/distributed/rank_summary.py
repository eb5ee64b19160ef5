"""One rank's view as small plain data, the unit a distributed job sends.

A :class:`RankSummary` is what ``%devices`` and ``%gpumem`` would show on this rank,
cut to a size that does not grow with the number of tensors: per-device totals, the
top N tensors by bytes, the findings, the allocator's and the driver's figures, the
parameters' signatures (for comparing model copies across ranks) and the DTensor
placements. It travels as a dict of plain values (:meth:`RankSummary.to_wire`), so a
rank running another devinspect version still sends something the receiver can read.
"""

from __future__ import annotations

import functools
import os
import socket
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping

#: Bumped when the wire format changes meaning; older and newer readers skip unknown keys.
SCHEMA = 1
#: Tensors listed per rank unless asked otherwise.
TOP = 20
#: Findings and parameter signatures sent at most (a model's parameters, not its tensors).
MAX_FINDINGS = 50
MAX_PARAMETERS = 4096


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
class RankFinding:
    severity: str
    code: str
    message: str


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
    findings: tuple[RankFinding, ...] = ()
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


def summary(namespace: Mapping[str, Any] | None = None, *, top: int = TOP, timeout: float | None = None,
            rank: int | None = None, world_size: int | None = None, transport: str | None = None,
            exclude: Any = ()) -> RankSummary:
    """This process's view (default namespace: the caller's globals) as a :class:`RankSummary`.

    ``timeout`` bounds the work in seconds: the steps after the one that overran are
    left out and ``error`` says so. Any error of its own is caught into ``error``:
    a rank always has something to send. ``exclude`` names are not walked (a shell's own).
    """
    import sys

    if namespace is None:
        namespace = sys._getframe(1).f_globals
    started = time.perf_counter()
    identity = _identity(rank, world_size, transport)
    parts: dict[str, Any] = {}
    error = None
    steps = (("scan", _scan_part), ("memory", _memory_part), ("DTensor placements", _dtensor_part))
    for step, read in steps:
        try:
            parts.update(read(namespace, top, parts, exclude))
        except Exception as exc:  # noqa: BLE001 - the rank still reports, saying what failed
            error = f"{step} failed: {type(exc).__name__}: {exc}"
            break
        spent = time.perf_counter() - started
        if timeout is not None and spent > timeout and step != steps[-1][0]:
            error = f"timed out: {spent:.2f} s after the {step}, over the {timeout:g} s allowed; the rest is left out"
            break
    parts.pop("_result", None)
    return RankSummary(**identity, **parts, elapsed_s=time.perf_counter() - started, error=error)


def failed_summary(rank: int, world_size: int, error: str, transport: str = "") -> RankSummary:
    """A rank that sent nothing readable, said in ``error``."""
    return RankSummary(rank=rank, world_size=world_size, transport=transport, error=error)


# -- the parts -----------------------------------------------------------------------------


def _identity(rank: int | None, world_size: int | None, transport: str | None) -> dict[str, Any]:
    import torch

    from .. import __version__

    dist = torch.distributed
    initialised = dist.is_available() and dist.is_initialized()
    local = os.environ.get("LOCAL_RANK")
    return {
        "rank": rank if rank is not None else (dist.get_rank() if initialised else 0),
        "world_size": world_size if world_size is not None else (dist.get_world_size() if initialised else 1),
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "local_rank": int(local) if local and local.isdigit() else None,
        "transport": transport if transport is not None else (str(dist.get_backend()) if initialised else ""),
        "devinspect_version": __version__,
        "torch_version": torch.__version__,
    }


def _scan_part(namespace: Mapping[str, Any], top: int, _: dict[str, Any], exclude: Any) -> dict[str, Any]:
    from ..scan import scan

    result = scan(namespace, exclude=exclude)
    counted = [r for r in result.records if r.counted_bytes]
    largest = sorted(counted, key=lambda r: -r.counted_bytes)[:top]
    params = [r for r in result.records if r.kind == "parameter" and r.alias_of is None]
    return {
        "_result": result,
        "tensors": len(result.records),
        "tensor_bytes": sum(d.storage_bytes for d in result.devices),
        "top": tuple(TopTensor(r.name, r.kind, r.device, r.dtype or "?", _ints(r.shape), r.counted_bytes)
                     for r in largest),
        "findings": tuple(RankFinding(f.severity, f.code, f.message) for f in result.findings[:MAX_FINDINGS]),
        "parameters": tuple(ParameterSignature(r.name, r.device.split(":")[0], r.dtype or "?", _ints(r.shape))
                            for r in params[:MAX_PARAMETERS]),
        "parameter_count": len(params),
        "devices": tuple(DeviceUse(d.device, d.tensors, d.storage_bytes) for d in result.devices),
    }


def _memory_part(namespace: Mapping[str, Any], top: int, parts: dict[str, Any], exclude: Any) -> dict[str, Any]:
    from ..memory import build, read, tallies_of

    readings = read()
    result = parts.get("_result")
    snap = build(readings, tallies_of(result) if result is not None else None)
    tensors = {d.device: d for d in parts.get("devices", ())}
    devices = []
    for d in snap.devices:
        if d.kind == "cpu":
            continue
        held = tensors.pop(d.device, DeviceUse(d.device))
        if not held.tensors and not d.peak_reserved_bytes and not d.process_bytes:
            continue  # a device nothing on this rank uses
        devices.append(DeviceUse(
            d.device, held.tensors, held.tensor_bytes, d.allocated_bytes, d.reserved_bytes, d.peak_allocated_bytes,
            d.process_bytes, d.driver_total_bytes, d.driver_index))
    devices.extend(tensors.values())  # cpu, and devices without an allocator
    contexts, own = _cuda_contexts(readings, snap)
    return {"devices": tuple(devices), "cuda_contexts": contexts, "own_gpu": own}


def _cuda_contexts(readings: Mapping[str, Any], snap: Any) -> tuple[tuple[str, ...] | None, str | None]:
    """Where NVML lists this process, and which GPU is this rank's own (its local rank's)."""
    nvml = readings.get("nvml") or {}
    gpus = nvml.get("devices")
    if not gpus:
        return None, None
    pid = os.getpid()
    listed = [g for g in gpus if "processes" in g]
    if not listed:
        return None, None
    contexts = tuple(str(g["index"]) for g in listed if any(p.get("pid") == pid for p in g["processes"]))
    local = os.environ.get("LOCAL_RANK")
    own_index = int(local) if local and local.isdigit() else None
    own = next((d.driver_index for d in snap.devices if d.kind == "cuda" and d.torch_index == own_index), None)
    return contexts, own


def _dtensor_part(namespace: Mapping[str, Any], top: int, parts: dict[str, Any], exclude: Any) -> dict[str, Any]:
    """DTensor parameters of the modules the namespace names, read from their instance
    dicts (no property or ``__getattr__`` of the user's runs). Only the names under which
    the scan found a tensor of a class other than Tensor and Parameter are looked into."""
    import torch

    from ..scan import instance_dict, namespace_items

    result = parts.get("_result")
    roots = None if result is None else {r.root for r in result.records
                                         if r.type_name not in ("Tensor", "Parameter")}
    if roots is not None and not roots:
        return {"dtensors": ()}
    found: list[DTensorPlacement] = []
    seen: set[int] = set()

    def visit(prefix: str, module: Any, depth: int) -> None:
        if id(module) in seen or depth > 32:
            return
        seen.add(id(module))
        d = instance_dict(module)
        for attr, value in (d.get("_parameters") or {}).items():
            placement = _placement(f"{prefix}.{attr}", value)
            if placement is not None:
                found.append(placement)
        for attr, child in (d.get("_modules") or {}).items():
            if isinstance(child, torch.nn.Module):
                visit(f"{prefix}.{attr}", child, depth + 1)

    excluded = set(exclude)
    for name, value in namespace_items(namespace):
        if name.startswith("_") or name in excluded or (roots is not None and name not in roots):
            continue
        if isinstance(value, torch.nn.Module):
            visit(name, value, 0)
        else:
            placement = _placement(name, value)
            if placement is not None:
                found.append(placement)
    return {"dtensors": tuple(found[:MAX_PARAMETERS])}


def _placement(name: str, value: Any) -> DTensorPlacement | None:
    import torch

    from ..scan import instance_dict, slot_values

    if not isinstance(value, torch.Tensor) or not _keeps_a_spec(type(value)):
        return None
    d = {**instance_dict(value), **dict(slot_values(value))}  # DTensor keeps them in slots
    spec, local = d.get("_spec"), d.get("_local_tensor")
    if spec is None or local is None or not hasattr(spec, "placements"):
        return None
    mesh = spec.mesh
    names = getattr(mesh, "mesh_dim_names", None)
    return DTensorPlacement(
        name=name, mesh_shape=tuple(int(s) for s in mesh.shape), mesh_dim_names=tuple(names) if names else None,
        mesh_device_type=str(mesh.device_type), placements=tuple(_placement_name(p) for p in spec.placements),
        global_shape=tuple(int(s) for s in spec.shape), local_shape=tuple(int(s) for s in local.shape))


@functools.lru_cache(maxsize=256)
def _keeps_a_spec(cls: type) -> bool:
    """DTensor and its subclasses: a ``_spec`` slot or attribute in a class dict (read statically)."""
    from ..scan import static_class_attr

    return static_class_attr(cls, "_spec") is not None


def _placement_name(p: Any) -> str:
    """``Shard(0)``, ``Replicate()``, ``Partial(sum)``: how PyTorch's docs write them."""
    kind = type(p).__name__
    if hasattr(p, "dim") and "Shard" in kind:
        return f"{kind}({p.dim})"
    if "Partial" in kind:
        return f"Partial({getattr(p, 'reduce_op', 'sum')})"
    return f"{kind}()"


def _ints(shape: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(s) for s in shape) if shape is not None else None
    except (TypeError, ValueError):  # symbolic sizes
        return None


# -- reading what another rank sent ----------------------------------------------------------

_NESTED = {"devices": DeviceUse, "top": TopTensor, "findings": RankFinding, "parameters": ParameterSignature,
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
