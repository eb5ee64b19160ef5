"""Accelerator and process memory, read without side effects.

Reading happens in two steps so each can be checked on its own:

* :func:`read` collects raw readings as plain JSON-able dicts: PyTorch's allocator
  counters (``torch.cuda.memory_stats``), the driver's view (NVML, optional), and
  this process's resident memory. It never initialises CUDA, never creates a
  context, never synchronises, empties a cache, collects garbage or resets a stat.
* :func:`build` turns readings into a :class:`~devinspect.memory_model.MemorySnapshot`.
  It is a pure function: the tests feed it readings recorded on a real GPU.

:func:`snapshot` does both, and adds the tensors the scan core finds per device so
the reconciliation can go from "your tensors" to "the device's total".
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Any, Iterable, Mapping

import torch

from .memory_model import CellDevice, CellMemory, DeviceMemory, MemoryHistory, MemorySnapshot, TensorTally

__all__ = ["snapshot", "read", "build", "tally_tensors", "MemoryTracker"]

NOT_INITIALISED = (
    "CUDA is not initialised in this process, so PyTorch holds nothing on this GPU. It starts with the "
    "first tensor put on a GPU (or torch.cuda.init()); devinspect never starts it."
)


def snapshot(
    namespace: Mapping[str, Any] | None = None,
    *,
    tensors: bool = True,
    exclude: Iterable[str] = (),
    nvml: bool = True,
) -> MemorySnapshot:
    """Memory of every accelerator and of this process, reconciled with the tensors in ``namespace``.

    ``namespace`` defaults to the caller's globals. With ``tensors=False`` no tensor
    walk is done (cheaper; the reconciliation then starts at the allocator's figures).
    ``nvml=False`` skips the driver's per-process figures. Reading changes nothing:
    no ``empty_cache``, ``gc.collect``, synchronisation or stat reset, and CUDA is not
    initialised when it was not already.
    """
    tallies = None
    if tensors:
        if namespace is None:
            namespace = sys._getframe(1).f_globals
        tallies = tally_tensors(namespace, exclude=exclude)
    return build(read(nvml=nvml), tallies)


def tally_tensors(namespace: Mapping[str, Any], exclude: Iterable[str] = ()) -> dict[str, TensorTally]:
    """Tensor storage per device: named, held by history, and alive but unnamed (gc walk)."""
    from .scan import scan

    return tallies_of(scan(namespace, include_hidden=True, all_objects=True, exclude=exclude))


def tallies_of(result: Any) -> dict[str, TensorTally]:
    """:func:`tally_tensors` of a scan made with ``include_hidden=True, all_objects=True``."""
    counts: dict[str, list[int]] = {}
    for r in result.records:
        if r.alias_of is not None:
            continue
        slot = 2 if r.kind == "unnamed" else 1 if r.hidden else 0
        c = counts.setdefault(r.device, [0, 0, 0, 0, 0, 0])
        c[slot] += r.counted_bytes
        c[slot + 3] += 1
    now = time.time()
    return {device: TensorTally(*c, counted_at=now) for device, c in counts.items()}


# -- readings ---------------------------------------------------------------


def read(nvml: bool = True) -> dict[str, Any]:
    """Raw readings as plain dicts (JSON-able), for :func:`build`."""
    readings: dict[str, Any] = {
        "taken_at": time.time(),
        "torch": torch.__version__,
        "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")},
        "cuda": read_cuda(),
        "accelerator": None,
        "nvml": None,
        "process": read_process(),
    }
    if not readings["cuda"].get("device_count"):
        readings["accelerator"] = read_accelerator()
    if nvml and readings["cuda"].get("device_count"):
        readings["nvml"] = read_nvml()
    return readings


def in_words(reason: str) -> str:
    """An allocator's failure reason as a user reads it (not an exception's text)."""
    m = re.search(r"Allocator for (\w+) is not a DeviceAllocator", reason)
    if m:
        return (f"{m.group(1)} keeps no caching-allocator statistics PyTorch can read (a device backend written "
                "in Python has none)")
    return re.sub(r"^\w+(Error|Exception): ", "", reason)


def _reason(exc: BaseException) -> str:
    """``Type: last line of the message``, without torch's "please report a bug" preamble."""
    lines = str(exc).strip().splitlines()
    text = lines[-1] if lines else ""
    text = text.split("please report a bug to PyTorch.")[-1].strip()
    return f"{type(exc).__name__}: {text}".strip().rstrip(":")[:200]


def read_cuda() -> dict[str, Any]:
    """CUDA allocator counters. Touches a device only when CUDA is already initialised."""
    out: dict[str, Any] = {"compiled": bool(torch.cuda._is_compiled()), "version": torch.version.cuda}
    if not out["compiled"]:
        return out
    out["initialized"] = bool(torch.cuda.is_initialized())
    try:
        # NVML-based before initialisation: neither a context nor torch's lazy init.
        out["device_count"] = int(torch.cuda.device_count())
    except Exception as exc:  # noqa: BLE001 - a broken driver is a reading, not a crash
        out["error"] = _reason(exc)
        out["device_count"] = 0
        return out
    if not out["initialized"]:
        return out
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    devices = []
    for i in range(out["device_count"]):
        dev: dict[str, Any] = {"index": i}
        try:
            props = torch.cuda.get_device_properties(i)  # cached at initialisation
            dev["name"] = props.name
            dev["total_memory"] = int(props.total_memory)
            dev["uuid"] = str(getattr(props, "uuid", "")) or None
            dev["memory_stats"] = {k: int(v) for k, v in torch.cuda.memory_stats(i).items()}
            dev["has_context"] = bool(has_context(i)) if has_context is not None else None
            # cudaMemGetInfo would create a context on a device that has none.
            if dev["has_context"]:
                dev["mem_get_info"] = [int(v) for v in torch.cuda.mem_get_info(i)]
        except Exception as exc:  # noqa: BLE001
            dev["error"] = _reason(exc)
        devices.append(dev)
    out["devices"] = devices
    return out


def accelerator_call(kind: str, name: str, *args: Any) -> Any:
    """``torch.accelerator.<name>(*args)``, or, where that API cannot answer (a device backend
    written in Python has no C++ allocator for it to ask), the function of the same name on
    the device's own module (``torch.<kind>.<name>``), as ``torch.cuda`` and ``torch.xpu``
    name them. The accelerator API's error is raised when neither answers.
    """
    accelerator = getattr(torch, "accelerator", None)
    fallback = getattr(getattr(torch, kind, None), _DEVICE_MODULE_NAMES.get(name, name), None)
    try:
        return getattr(accelerator, name)(*args)
    except Exception:
        if not callable(fallback):
            raise
    return fallback(*args)


#: The device module's name for a torch.accelerator memory call, where the two differ.
_DEVICE_MODULE_NAMES = {"get_memory_info": "mem_get_info"}


def read_accelerator() -> dict[str, Any] | None:
    """A non-CUDA accelerator (XPU, MPS, a PrivateUse1 backend) through ``torch.accelerator``."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return None
    try:
        current = accelerator.current_accelerator()
    except Exception:  # noqa: BLE001
        return None
    if current is None or current.type == "cuda":
        return None
    out: dict[str, Any] = {"type": current.type, "devices": []}
    backend = getattr(torch, current.type, None)
    is_initialized = getattr(backend, "is_initialized", None)
    if callable(is_initialized):
        out["initialized"] = bool(is_initialized())
    try:
        count = int(accelerator.device_count())
    except Exception as exc:  # noqa: BLE001
        out["error"] = _reason(exc)
        return out
    for i in range(count):
        dev: dict[str, Any] = {"index": i}
        if out.get("initialized") is False:
            out["devices"].append(dev)
            continue
        get_name = getattr(backend, "get_device_name", None)
        if callable(get_name):
            try:
                dev["name"] = str(get_name(i))
            except Exception:  # noqa: BLE001
                pass
        try:
            dev["memory_stats"] = {k: int(v) for k, v in accelerator_call(current.type, "memory_stats", i).items()}
        except Exception as exc:  # noqa: BLE001
            dev["error"] = _reason(exc)
        try:
            dev["mem_get_info"] = [int(v) for v in accelerator_call(current.type, "get_memory_info", i)]
        except Exception as exc:  # noqa: BLE001
            dev["mem_get_info_error"] = _reason(exc)
        out["devices"].append(dev)
    return out


def read_nvml() -> dict[str, Any]:
    """The driver's view of every GPU (and MIG instance) through NVML, or ``{"error": reason}``."""
    try:
        import pynvml
    except ImportError:
        return {"error": "nvidia-ml-py is not installed (pip install 'devinspect[nvml]')"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, driver mismatch …
        return {"error": f"NVML could not start ({_reason(exc)})"}
    try:
        out: dict[str, Any] = {"devices": []}
        out["driver_version"] = _text(_try(pynvml.nvmlSystemGetDriverVersion))
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            entry = _nvml_device(pynvml, handle, str(i))
            out["devices"].append(entry)
            mig = _try(pynvml.nvmlDeviceGetMigMode, handle)
            if mig and mig[0]:
                entry["mig_enabled"] = True
                for j in range(_try(pynvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
                    mig_handle = _try(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, j)
                    if mig_handle is None:
                        continue
                    mig_entry = _nvml_device(pynvml, mig_handle, f"{i}:{j}")
                    mig_entry["parent_uuid"] = entry.get("uuid")
                    mig_entry["gi"] = _try(pynvml.nvmlDeviceGetGpuInstanceId, mig_handle)
                    mig_entry["ci"] = _try(pynvml.nvmlDeviceGetComputeInstanceId, mig_handle)
                    out["devices"].append(mig_entry)
        return out
    except Exception as exc:  # noqa: BLE001
        return {"error": f"NVML failed ({_reason(exc)})"}
    finally:
        _try(pynvml.nvmlShutdown)


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a field NVML cannot give is None
        return None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _nvml_device(pynvml: Any, handle: Any, index: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"index": index, "name": _text(_try(pynvml.nvmlDeviceGetName, handle)),
                             "uuid": _text(_try(pynvml.nvmlDeviceGetUUID, handle))}
    memory = None
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None:
        memory = _try(pynvml.nvmlDeviceGetMemoryInfo, handle, version)
    if memory is None:
        memory = _try(pynvml.nvmlDeviceGetMemoryInfo, handle)
    if memory is not None:
        entry.update(total=int(memory.total), used=int(memory.used), free=int(memory.free))
        if getattr(memory, "reserved", None) is not None:
            entry["reserved"] = int(memory.reserved)
    processes: dict[int, int | None] = {}
    listed = False
    for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        found = _try(getattr(pynvml, query, lambda h: None), handle)
        if found is None:
            continue
        listed = True
        for p in found:
            used = getattr(p, "usedGpuMemory", None)
            processes[int(p.pid)] = int(used) if isinstance(used, int) and used < (1 << 62) else None
    if listed:
        entry["processes"] = [{"pid": pid, "used": used} for pid, used in processes.items()]
    return entry


def read_process() -> dict[str, Any]:
    """This process's resident memory (now and peak) and the machine's total/available memory."""
    out: dict[str, Any] = {"pid": os.getpid()}
    try:
        with open("/proc/self/status") as f:
            status = f.read()
        with open("/proc/meminfo") as f:
            meminfo = f.read()
        out["rss"] = _kib(status, "VmRSS")
        out["peak_rss"] = _kib(status, "VmHWM")
        out["total"] = _kib(meminfo, "MemTotal")
        out["available"] = _kib(meminfo, "MemAvailable")
        return out
    except OSError:
        pass
    try:  # macOS, Windows: psutil ships with ipykernel
        import psutil

        out["rss"] = int(psutil.Process().memory_info().rss)
        vm = psutil.virtual_memory()
        out["total"], out["available"] = int(vm.total), int(vm.available)
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"process memory unavailable ({_reason(exc)})"
    return out


def _kib(text: str, key: str) -> int | None:
    m = re.search(rf"^{key}:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


# -- building a snapshot ----------------------------------------------------


def build(readings: Mapping[str, Any], tallies: Mapping[str, TensorTally] | None = None) -> MemorySnapshot:
    """A :class:`MemorySnapshot` from :func:`read` output (live or recorded).

    ``tallies`` (from :func:`tally_tensors`) adds the tensor rows; a device it does
    not mention holds no tensors. Without it the reconciliation starts at the allocator.
    """
    if tallies is not None:
        counted_at = max((t.counted_at for t in tallies.values()), default=0.0) or time.time()
        tallies = _ZeroDefault(tallies, TensorTally(0, 0, 0, counted_at=counted_at))
    else:
        tallies = {}
    devices: list[DeviceMemory] = []
    notes: list[str] = []
    cuda = readings.get("cuda") or {}
    nvml = readings.get("nvml")
    if cuda.get("device_count"):
        nvml_entries = (nvml or {}).get("devices")
        nvml_error = (nvml or {}).get("error") if nvml is not None else "not read"
        if nvml_error:
            notes.append(f"NVML unavailable: {nvml_error}")
        torch_uuids = [d.get("uuid") for d in cuda.get("devices", [])] if cuda.get("initialized") else []
        matches = match_driver_devices(cuda["device_count"], torch_uuids, nvml_entries or [], readings.get("env") or {})
        for i in range(cuda["device_count"]):
            raw = cuda["devices"][i] if cuda.get("initialized") and i < len(cuda.get("devices", [])) else None
            entry, how = matches[i]
            devices.append(_cuda_device(i, raw, entry, how, nvml_error, readings, tallies.get(f"cuda:{i}")))
    else:
        accelerator = readings.get("accelerator")
        if accelerator:
            devices.extend(_accelerator_devices(accelerator, tallies))
        elif not cuda.get("compiled"):
            notes.append(f"No accelerator: this PyTorch build ({readings.get('torch', '?')}) has no CUDA; "
                         "showing this process's memory.")
        else:
            notes.append(cuda.get("error") or "PyTorch has CUDA, but no GPU is visible (check CUDA_VISIBLE_DEVICES).")
    devices.append(_cpu_device(readings.get("process") or {}, tallies.get("cpu")))
    return MemorySnapshot(devices=tuple(devices), notes=tuple(notes), taken_at=float(readings.get("taken_at", 0.0)))


def in_use(snapshot: MemorySnapshot) -> MemorySnapshot:
    """The snapshot without the accelerators nothing in this process uses (no tensors, nothing
    allocated or reserved, no context), counted in ``hidden``. When none is in use, all stay."""
    import dataclasses

    def used(d: DeviceMemory) -> bool:
        t = d.tensors
        counted = t is not None and (t.named_bytes or t.history_bytes or t.other_bytes)
        return bool(counted or d.allocated_bytes or d.reserved_bytes or d.process_bytes)

    accelerators = snapshot.accelerators
    if not any(used(d) for d in accelerators):
        return snapshot
    kept = tuple(d for d in snapshot.devices if d.kind == "cpu" or used(d))
    return dataclasses.replace(snapshot, devices=kept, hidden=len(snapshot.devices) - len(kept))


class _ZeroDefault(dict):
    """Tallies where an unmentioned device holds no tensors (it was counted, nothing was found)."""

    def __init__(self, tallies: Mapping[str, TensorTally], zero: TensorTally):
        super().__init__(tallies)
        self.zero = zero

    def get(self, key: str, default: Any = None) -> TensorTally:  # type: ignore[override]
        return super().get(key, self.zero)


def _stat(stats: Mapping[str, int], key: str) -> int | None:
    value = stats.get(key)
    return int(value) if value is not None else None


def _allocator_fields(stats: Mapping[str, int]) -> dict[str, int | None]:
    return {
        "allocated_bytes": _stat(stats, "allocated_bytes.all.current"),
        "requested_bytes": _stat(stats, "requested_bytes.all.current"),
        "reserved_bytes": _stat(stats, "reserved_bytes.all.current"),
        "active_bytes": _stat(stats, "active_bytes.all.current"),
        "inactive_split_bytes": _stat(stats, "inactive_split_bytes.all.current"),
        "peak_allocated_bytes": _stat(stats, "allocated_bytes.all.peak"),
        "peak_reserved_bytes": _stat(stats, "reserved_bytes.all.peak"),
        "segments": _stat(stats, "segment.all.current"),
        "alloc_retries": _stat(stats, "num_alloc_retries"),
        "ooms": _stat(stats, "num_ooms"),
    }


def _cuda_device(i: int, raw: Mapping[str, Any] | None, entry: Mapping[str, Any] | None, how: str | None,
                 nvml_error: str | None, readings: Mapping[str, Any], tally: TensorTally | None) -> DeviceMemory:
    fields: dict[str, Any] = {"device": f"cuda:{i}", "kind": "cuda", "torch_index": i, "tensors": tally}
    if entry is not None:
        fields.update(name=entry.get("name"), driver_index=entry.get("index"), driver_match=how, uuid=entry.get("uuid"))
    if raw is None:
        fields.update(state="not initialised", status=NOT_INITIALISED)
    elif raw.get("error"):
        fields.update(state="unavailable", status=f"allocator figures not available: {in_words(raw['error'])}")
    else:
        fields.update(state="ready", status="initialised")
        fields["name"] = raw.get("name") or fields.get("name")
        fields["uuid"] = fields.get("uuid") or raw.get("uuid")
        fields.update(_allocator_fields(raw.get("memory_stats") or {}))
    initialised = raw is not None
    if entry is not None and entry.get("total") is not None:
        fields.update(driver_total_bytes=entry["total"], driver_free_bytes=entry.get("free"),
                      driver_used_bytes=entry.get("used"), driver_reserved_bytes=entry.get("reserved"))
        fields.update(_process_fields(entry, (readings.get("process") or {}).get("pid"), initialised))
    elif raw is not None and raw.get("mem_get_info"):
        free, total = raw["mem_get_info"]
        fields.update(driver_total_bytes=total, driver_free_bytes=free,
                      driver_status=f"per-process use unavailable: {nvml_error}" if nvml_error else None)
    else:
        why = nvml_error or "NVML lists no matching device"
        if raw is not None and not raw.get("has_context"):
            why += "; reading cudaMemGetInfo would create a CUDA context on this device"
        fields["driver_status"] = f"unavailable: {why}"
    return DeviceMemory(**fields)


def _process_fields(entry: Mapping[str, Any], pid: int | None, initialised: bool) -> dict[str, Any]:
    processes = entry.get("processes")
    if processes is None:
        return {"driver_status": "per-process use unavailable: NVML did not list processes"}
    ours = [p for p in processes if p.get("pid") == pid]
    others = [p for p in processes if p.get("pid") != pid]
    out: dict[str, Any] = {"other_processes": len(others)}
    if ours:
        out["process_bytes"] = ours[0].get("used")
    elif not initialised:
        out["process_bytes"] = 0  # no CUDA in this process means no context on this GPU
    else:
        out["driver_status"] = ("this process is not among NVML's processes (in a container NVML reports the "
                                "host's process ids)")
        return out
    if any(p.get("used") is None for p in others):
        out["driver_status"] = "NVML does not report other processes' use here (permissions)"
    else:
        out["other_processes_bytes"] = sum(int(p["used"]) for p in others)
    if out.get("process_bytes") is None and ours:
        out["driver_status"] = "NVML does not report this process's use here (permissions)"
    return out


def _accelerator_devices(accelerator: Mapping[str, Any], tallies: Mapping[str, TensorTally]) -> list[DeviceMemory]:
    kind = accelerator["type"]
    out = []
    if accelerator.get("error"):
        return [DeviceMemory(device=kind, kind=kind, state="unavailable", status=f"unavailable: {accelerator['error']}")]
    for raw in accelerator.get("devices", []):
        i = raw["index"]
        name = f"{kind}:{i}"
        fields: dict[str, Any] = {"device": name, "kind": kind, "torch_index": i, "name": raw.get("name"),
                                  "tensors": tallies.get(name)}
        if accelerator.get("initialized") is False:
            fields.update(state="not initialised",
                          status=f"{kind} is not initialised in this process: PyTorch holds nothing on it")
        elif raw.get("error"):
            fields.update(state="unavailable", status=f"allocator figures not available: {in_words(raw['error'])}")
        else:
            fields.update(state="ready", status="initialised", **_allocator_fields(raw.get("memory_stats") or {}))
        if raw.get("mem_get_info"):
            fields["driver_free_bytes"], fields["driver_total_bytes"] = raw["mem_get_info"]
        elif raw.get("mem_get_info_error") and "Allocator for" not in raw["mem_get_info_error"]:
            fields["driver_status"] = f"unavailable: {in_words(raw['mem_get_info_error'])}"
        else:
            fields["driver_status"] = "unavailable: the backend reports no device memory information"
        out.append(DeviceMemory(**fields))
    return out


def _cpu_device(process: Mapping[str, Any], tally: TensorTally | None) -> DeviceMemory:
    return DeviceMemory(
        device="cpu", kind="cpu", state="process", status=process.get("error") or "this process",
        process_bytes=process.get("rss"), peak_process_bytes=process.get("peak_rss"),
        driver_total_bytes=process.get("total"), driver_free_bytes=process.get("available"), tensors=tally,
    )


# -- which driver device is torch's cuda:i ----------------------------------


def _bare_uuid(uuid: str | None) -> str:
    text = (uuid or "").lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text


def match_driver_devices(count: int, torch_uuids: list[str | None], nvml_devices: list[Mapping[str, Any]],
                         env: Mapping[str, str | None]) -> list[tuple[Mapping[str, Any] | None, str | None]]:
    """For each torch index, its NVML entry and how it was found.

    Exact by UUID once CUDA is initialised; before that through ``CUDA_VISIBLE_DEVICES``
    (ordinals, ``GPU-`` UUID prefixes, ``MIG-`` UUIDs or the older
    ``MIG-GPU-<uuid>/<gi>/<ci>`` form). Ordinals follow CUDA's order, which is NVML's
    (PCI bus) order only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; otherwise the match is
    marked approximate.
    """
    by_uuid = {_bare_uuid(d.get("uuid")): d for d in nvml_devices if d.get("uuid")}
    # What CUDA enumerates: whole GPUs, or the MIG instances of a GPU in MIG mode.
    enumerable = [d for d in nvml_devices if not d.get("mig_enabled")]
    pci_order = (env.get("CUDA_DEVICE_ORDER") or "").upper() == "PCI_BUS_ID"
    ordinal_how = "CUDA_VISIBLE_DEVICES" if pci_order else "CUDA_VISIBLE_DEVICES (approximate: CUDA_DEVICE_ORDER is not PCI_BUS_ID)"
    order_how = "order" if pci_order else "order (approximate: CUDA_DEVICE_ORDER is not PCI_BUS_ID)"
    visible = _parse_visible(env.get("CUDA_VISIBLE_DEVICES"))
    out: list[tuple[Mapping[str, Any] | None, str | None]] = []
    for i in range(count):
        uuid = torch_uuids[i] if i < len(torch_uuids) else None
        if uuid and _bare_uuid(uuid) in by_uuid:
            out.append((by_uuid[_bare_uuid(uuid)], "uuid"))
            continue
        if visible is None:
            single = len({d.get("name") for d in enumerable}) <= 1
            out.append((enumerable[i], "order" if single else order_how) if i < len(enumerable) else (None, None))
            continue
        token = visible[i] if i < len(visible) else None
        out.append(_match_token(token, enumerable, nvml_devices, ordinal_how))
    return out


def _match_token(token: str | int | None, enumerable: list[Mapping[str, Any]], nvml_devices: list[Mapping[str, Any]],
                 ordinal_how: str) -> tuple[Mapping[str, Any] | None, str | None]:
    if token is None:
        return None, None
    if isinstance(token, int):
        return (enumerable[token], ordinal_how) if token < len(enumerable) else (None, None)
    legacy = re.fullmatch(r"MIG-(GPU-[0-9a-fA-F-]+)/(\d+)/(\d+)", token)
    for d in nvml_devices:
        if legacy:
            if (_bare_uuid(d.get("parent_uuid")) == _bare_uuid(legacy.group(1))
                    and d.get("gi") == int(legacy.group(2)) and d.get("ci") == int(legacy.group(3))):
                return d, "CUDA_VISIBLE_DEVICES"
        elif d.get("uuid") and _bare_uuid(d["uuid"]).startswith(_bare_uuid(token)) and \
                d["uuid"].lower().startswith(token[:4].lower()):
            return d, "CUDA_VISIBLE_DEVICES"
    return None, None


def _parse_visible(value: str | None) -> list[str | int] | None:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: stops at the first invalid entry; a repeat hides all."""
    if value is None:
        return None
    out: list[str | int] = []
    for raw in value.split(","):
        item = raw.strip()
        if item.upper().startswith(("GPU-", "MIG-")):
            entry: str | int = item
        else:
            m = re.match(r"[+]?\d+", item)
            if not m:
                break
            entry = int(m.group(0))
        if entry in out:
            return []
        out.append(entry)
    return out


# -- per-cell tracking --------------------------------------------------------


class MemoryTracker:
    """Per-cell memory: call :meth:`before` and :meth:`after` around each cell.

    Reads the allocator's counters of every initialised CUDA device and this
    process's resident memory. The peak during a cell comes from the allocator's
    peak counters, reset before each cell (``torch.cuda.reset_peak_memory_stats``)
    and, on Linux, from the kernel's resident-memory high-water mark, reset through
    ``/proc/self/clear_refs``; no thread polls anything. Resetting the peaks is the
    one side effect, and the reason tracking is opt-in.
    """

    def __init__(self) -> None:
        self.cells: list[CellMemory] = []
        self._pending: tuple[int | None, str, float, dict[str, tuple[int | None, ...]]] | None = None
        self._can_reset_rss_peak = os.access("/proc/self/clear_refs", os.W_OK)

    def before(self, cell: int | None, source: str) -> None:
        self._reset_peaks()
        self._pending = (cell, source, time.perf_counter(), _counters())

    def after(self, failed: bool = False, cell: int | None = None) -> CellMemory | None:
        """Record the cell begun by :meth:`before`; None when none was begun.

        ``cell`` is the execution count the cell ran as, when known only afterwards
        (IPython numbers a cell before or after its pre-run hooks, by version).
        """
        if self._pending is None:
            return None
        began, source, start, before = self._pending
        cell = cell if cell is not None else began
        self._pending = None
        wall = time.perf_counter() - start
        after = _counters()
        devices = []
        for device in list(before) + [d for d in after if d not in before]:
            b = before.get(device, (None, None, None, None))
            a = after.get(device, (None, None, None, None))
            if device != "cpu" and not any(b) and not any(a):
                continue  # a device nothing has used: no row
            peak_reserved = a[3] if device != "cpu" else None
            peak_allocated = a[2] if device != "cpu" or self._can_reset_rss_peak else None
            devices.append(CellDevice(device, b[0], a[0], b[1], a[1], peak_allocated, peak_reserved))
        record = CellMemory(cell, source, wall, tuple(devices), failed)
        self.cells.append(record)
        return record

    def history(self) -> MemoryHistory:
        return MemoryHistory(tuple(self.cells))

    def _reset_peaks(self) -> None:
        if torch.cuda._is_compiled() and torch.cuda.is_initialized():
            for i in range(torch.cuda.device_count()):
                torch.cuda.reset_peak_memory_stats(i)
        for kind, i in _other_accelerators():
            try:
                accelerator_call(kind, "reset_peak_memory_stats", i)
            except Exception:  # noqa: BLE001 - a device without peak counters records no peak
                pass
        if self._can_reset_rss_peak:
            self._can_reset_rss_peak = reset_process_peak()


def reset_process_peak() -> bool:
    """Restart this process's peak resident memory (Linux VmHWM) from the current RSS.

    Returns False where the kernel does not offer it (``/proc/self/clear_refs``).
    """
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _other_accelerators() -> list[tuple[str, int]]:
    """(kind, index) of each device of an initialised accelerator other than CUDA (never initialising one)."""
    accelerator = getattr(torch, "accelerator", None)
    try:
        current = accelerator.current_accelerator() if accelerator is not None else None
        if current is None or current.type == "cuda":
            return []
        is_initialized = getattr(getattr(torch, current.type, None), "is_initialized", None)
        if callable(is_initialized) and not is_initialized():
            return []
        return [(current.type, i) for i in range(int(accelerator.device_count()))]
    except Exception:  # noqa: BLE001
        return []


def _counters() -> dict[str, tuple[int | None, ...]]:
    """(allocated, reserved, peak allocated, peak reserved) per initialised accelerator device; RSS for the CPU."""
    out: dict[str, tuple[int | None, ...]] = {}
    if torch.cuda._is_compiled() and torch.cuda.is_initialized():
        for i in range(torch.cuda.device_count()):
            s = torch.cuda.memory_stats(i)
            out[f"cuda:{i}"] = (
                _stat(s, "allocated_bytes.all.current"), _stat(s, "reserved_bytes.all.current"),
                _stat(s, "allocated_bytes.all.peak"), _stat(s, "reserved_bytes.all.peak"),
            )
    for kind, i in _other_accelerators():
        try:
            s = accelerator_call(kind, "memory_stats", i)
        except Exception:  # noqa: BLE001 - no allocator figures: the device is left out
            continue
        out[f"{kind}:{i}"] = (
            _stat(s, "allocated_bytes.all.current"), _stat(s, "reserved_bytes.all.current"),
            _stat(s, "allocated_bytes.all.peak"), _stat(s, "reserved_bytes.all.peak"),
        )
    try:
        with open("/proc/self/status") as f:
            status = f.read()
        out["cpu"] = (_kib(status, "VmRSS"), None, _kib(status, "VmHWM"), None)
    except OSError:
        out["cpu"] = (read_process().get("rss"), None, None, None)
    return out
