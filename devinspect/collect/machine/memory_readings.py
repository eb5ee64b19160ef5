"""Raw memory readings, taken without side effects: PyTorch's allocator counters
(``torch.cuda.memory_stats``, or ``torch.accelerator`` and the backend module for
other devices), the driver's view (NVML, optional) and this process's resident memory.

Reading never initialises CUDA, never creates a context, never synchronises, empties
a cache, collects garbage or resets a stat. Readings are plain JSON-able dicts, so
:func:`devinspect.collect.machine.memory_snapshot.build` can be tested on readings recorded elsewhere.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any, Mapping

import torch


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
    except Exception as exc:  # a broken driver is a reading, not a crash
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
        except Exception as exc:
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
    except Exception:
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
    except Exception as exc:
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
            except Exception:
                pass
        try:
            dev["memory_stats"] = {k: int(v) for k, v in accelerator_call(current.type, "memory_stats", i).items()}
        except Exception as exc:
            dev["error"] = _reason(exc)
        try:
            dev["mem_get_info"] = [int(v) for v in accelerator_call(current.type, "get_memory_info", i)]
        except Exception as exc:
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
    except Exception as exc:  # NVMLError_LibraryNotFound, driver mismatch …
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
    except Exception as exc:
        return {"error": f"NVML failed ({_reason(exc)})"}
    finally:
        _try(pynvml.nvmlShutdown)


def _try(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # a field NVML cannot give is None
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
        out["rss"] = kib(status, "VmRSS")
        out["peak_rss"] = kib(status, "VmHWM")
        out["total"] = kib(meminfo, "MemTotal")
        out["available"] = kib(meminfo, "MemAvailable")
        return out
    except OSError:
        pass
    try:  # macOS, Windows: psutil ships with ipykernel
        import psutil

        out["rss"] = int(psutil.Process().memory_info().rss)
        vm = psutil.virtual_memory()
        out["total"], out["available"] = int(vm.total), int(vm.available)
    except Exception as exc:
        out["error"] = f"process memory unavailable ({_reason(exc)})"
    return out


def kib(text: str, key: str) -> int | None:
    m = re.search(rf"^{key}:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def stat(stats: Mapping[str, int], key: str) -> int | None:
    value = stats.get(key)
    return int(value) if value is not None else None


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


def other_accelerators() -> list[tuple[str, int]]:
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
    except Exception:
        return []
