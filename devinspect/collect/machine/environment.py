"""What a bug report needs to say about this machine, read without initialising CUDA.

``python -m devinspect`` prints it; ``--json`` gives the same as JSON. Versions of
devinspect, Python, IPython, ipywidgets, ipykernel, JupyterLab and torch; torch's build
(CPU, CUDA or ROCm, and their versions); the accelerators torch reports; the visible
GPUs as the driver (NVML) sees them, matched to torch's indices through
``CUDA_VISIBLE_DEVICES`` (UUIDs and MIG instances included), with their memory; and
whether CUDA is initialised in this process (reading this never initialises it).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from typing import Any

import torch


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def gather() -> dict[str, Any]:
    """The report as plain data."""
    from ...version import __version__
    from .memory_readings import read_nvml
    from .memory_snapshot import match_driver_devices

    cuda_compiled = bool(torch.cuda._is_compiled())
    build = "ROCm" if torch.version.hip else "CUDA" if torch.version.cuda else "CPU"
    report: dict[str, Any] = {
        "devinspect": __version__,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "packages": {p: _version(p) for p in ("torch", "IPython", "ipywidgets", "ipykernel", "jupyterlab",
                                              "notebook", "nvidia-ml-py", "transformers")},
        "torch": {
            "version": torch.__version__,
            "build": build,
            "cuda": torch.version.cuda,
            "hip": torch.version.hip,
            "cuda_initialised": bool(torch.cuda.is_initialized()) if cuda_compiled else False,
            "cuda_device_count": _count(torch.cuda.device_count) if cuda_compiled else 0,
        },
        "accelerator": _accelerator(),
        "env": {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES")},
        "nvml": None,
    }
    # The driver's view is read on every machine (NVML never initialises CUDA): a GPU that torch
    # does not see, or a missing driver, is what this report is for.
    count = report["torch"]["cuda_device_count"] or 0
    nvml = read_nvml()
    devices = nvml.get("devices") or []
    matches = match_driver_devices(count, [], devices, report["env"]) if count else []
    report["nvml"] = {
        "error": nvml.get("error"),
        "driver_version": nvml.get("driver_version"),
        "devices": [_nvml_device(d) for d in devices],
        "torch_to_driver": [
            {"torch": f"cuda:{i}", "driver": (entry or {}).get("index"), "uuid": (entry or {}).get("uuid"),
             "how": how}
            for i, (entry, how) in enumerate(matches)
        ],
    }
    return report


def _count(fn: Any) -> int | str:
    try:
        return int(fn())
    except Exception as exc:  # a broken driver is part of the report
        return f"unavailable: {type(exc).__name__}: {exc}"


def _accelerator() -> dict[str, Any] | None:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return None
    try:
        current = accelerator.current_accelerator()
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    if current is None:
        return {"type": None}
    return {"type": current.type, "device_count": _count(accelerator.device_count)}


def _nvml_device(d: dict[str, Any]) -> dict[str, Any]:
    keep = ("index", "name", "uuid", "total", "used", "free", "reserved", "mig_enabled", "parent_uuid", "gi", "ci")
    out = {k: d[k] for k in keep if k in d}
    if "processes" in d:
        out["processes"] = len(d["processes"])
    return out
