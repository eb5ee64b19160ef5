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
import json
import os
import platform
import sys
from typing import Any

import torch


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def gather() -> dict[str, Any]:
    """The report as plain data."""
    from . import __version__
    from .memory import match_driver_devices, read_nvml

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
    count = report["torch"]["cuda_device_count"] or 0
    if cuda_compiled and count:
        nvml = read_nvml()
        devices = nvml.get("devices") or []
        matches = match_driver_devices(count, [], devices, report["env"])
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
    except Exception as exc:  # noqa: BLE001 - a broken driver is part of the report
        return f"unavailable: {type(exc).__name__}: {exc}"


def _accelerator() -> dict[str, Any] | None:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None:
        return None
    try:
        current = accelerator.current_accelerator()
    except Exception as exc:  # noqa: BLE001
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


def render(report: dict[str, Any]) -> str:
    """The report as text, one fact per line."""
    from .render.units import human_bytes

    lines = [f"{'devinspect':<13}{report['devinspect']}",
             f"{'python':<13}{report['python']} ({report['platform']})"]
    for package, version in report["packages"].items():
        lines.append(f"{package:<13}{version or 'not installed'}")
    t = report["torch"]
    build = t["build"] + (f" {t['cuda']}" if t["build"] == "CUDA" else f" {t['hip']}" if t["build"] == "ROCm" else "")
    lines.append(f"torch build {build}; CUDA devices: {t['cuda_device_count']}; "
                 f"CUDA initialised in this process: {'yes' if t['cuda_initialised'] else 'no'}")
    accelerator = report["accelerator"]
    if accelerator is not None:
        if accelerator.get("error"):
            lines.append(f"accelerator unavailable: {accelerator['error']}")
        elif accelerator.get("type"):
            lines.append(f"accelerator {accelerator['type']} ({accelerator['device_count']} devices)")
        else:
            lines.append("accelerator none")
    for key, value in report["env"].items():
        if value is not None:
            lines.append(f"{key}={value}")
    nvml = report["nvml"]
    if nvml is not None:
        if nvml.get("error"):
            lines.append(f"NVML: {nvml['error']}")
        else:
            lines.append(f"NVML driver {nvml.get('driver_version')}")
            for d in nvml["devices"]:
                memory = (f"{human_bytes(d.get('used'))} used of {human_bytes(d.get('total'))}"
                          if d.get("total") is not None else "memory unknown")
                lines.append(f"  GPU {d.get('index')}: {d.get('name')} {d.get('uuid')}  {memory}"
                             + ("  (MIG enabled)" if d.get("mig_enabled") else ""))
            for m in nvml["torch_to_driver"]:
                lines.append(f"  torch {m['torch']} -> driver {m['driver']} ({m['how']})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m devinspect",
                                     description="An environment report for devinspect bug reports.")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = gather()
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
