"""One rank's view as a :class:`~devinspect.model.ranks.RankSummary`: the scan, its
findings, memory readings and DTensor placements, cut to a size that does not grow
with the number of tensors."""

from __future__ import annotations

import heapq
import os
import socket
import time
from itertools import compress
from typing import Any, Mapping

from ...model import PLAIN_TYPE_NAMES, DeviceUse, Finding, ParameterSignature, RankSummary, TopTensor, record_column

#: Tensors listed per rank unless asked otherwise.
TOP = 20
#: Findings and parameter signatures sent at most (a model's parameters, not its tensors).
MAX_FINDINGS = 50
MAX_PARAMETERS = 4096


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
        except Exception as exc:  # the rank still reports, saying what failed
            error = f"{step} failed: {type(exc).__name__}: {exc}"
            break
        spent = time.perf_counter() - started
        if timeout is not None and spent > timeout and step != steps[-1][0]:
            error = f"timed out: {spent:.2f} s after the {step}, over the {timeout:g} s allowed; the rest is left out"
            break
    parts.pop("_result", None)
    return RankSummary(**identity, **parts, elapsed_s=time.perf_counter() - started, error=error)


def _identity(rank: int | None, world_size: int | None, transport: str | None) -> dict[str, Any]:
    import torch

    from ...version import __version__

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
    from ..findings import scan

    result = scan(namespace, exclude=exclude)
    records = result.records
    sizes = [0 if alias is not None else (size or 0) for alias, size in
             zip(record_column(records, "alias_of"), record_column(records, "storage_bytes"))]
    largest = [records[i] for i in heapq.nlargest(top, compress(range(len(sizes)), sizes), key=sizes.__getitem__)]
    params = [r for r in result.of_kind("parameter") if r.alias_of is None]
    return {
        "_result": result,
        "tensors": len(result.records),
        "tensor_bytes": sum(d.storage_bytes for d in result.devices),
        "top": tuple(TopTensor(r.name, r.kind, r.device, r.dtype or "?", _ints(r.shape), r.counted_bytes)
                     for r in largest),
        "findings": tuple(Finding(f.code, f.severity, f.subject, f.message) for f in result.findings[:MAX_FINDINGS]),
        "parameters": tuple(ParameterSignature(r.name, r.device.split(":")[0], r.dtype or "?", _ints(r.shape))
                            for r in params[:MAX_PARAMETERS]),
        "parameter_count": len(params),
        "devices": tuple(DeviceUse(d.device, d.tensors, d.storage_bytes) for d in result.devices),
    }


def _memory_part(namespace: Mapping[str, Any], top: int, parts: dict[str, Any], exclude: Any) -> dict[str, Any]:
    from ...collect import build, read, tallies_of

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
    from ...collect import dtensor_placements

    result = parts.get("_result")
    roots = None if result is None else {root for root, class_name in zip(
        record_column(result.records, "root"), record_column(result.records, "type_name"))
        if class_name not in PLAIN_TYPE_NAMES}
    if roots is not None and not roots:
        return {"dtensors": ()}
    return {"dtensors": dtensor_placements(namespace, roots, exclude, MAX_PARAMETERS)}


def _ints(shape: Any) -> tuple[int, ...] | None:
    try:
        return tuple(int(s) for s in shape) if shape is not None else None
    except (TypeError, ValueError):  # symbolic sizes
        return None
