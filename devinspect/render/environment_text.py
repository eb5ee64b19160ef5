"""The environment report (``python -m devinspect``) as text, one fact per line."""

from __future__ import annotations

from typing import Any

from ..model import human_bytes


def render(report: dict[str, Any]) -> str:
    """The report as text, one fact per line."""
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
