"""Which devices exist, and what a user-typed device name means, without initialising anything.

``torch.cuda.device_count()`` asks the driver (NVML, or ``cudaGetDeviceCount``)
without creating a CUDA context or initialising PyTorch's CUDA state; the other
backends report their counts the same way. Nothing here touches a device.
"""

from __future__ import annotations

import torch


class DeviceNameError(ValueError):
    """A device name that is not a device, or names one this process does not have."""


def present() -> list[str]:
    """Devices this process can use: ``cpu``, then ``cuda:0`` …, ``xpu:0`` …, ``mps``, PrivateUse1 backends."""
    out = ["cpu"]
    try:
        if torch.cuda._is_compiled():
            out.extend(f"cuda:{i}" for i in range(torch.cuda.device_count()))
    except Exception:  # a broken driver means no usable GPU
        pass
    for kind in ("xpu", "mtia"):
        backend = getattr(torch, kind, None)
        try:
            if backend is not None and backend.is_available():
                out.extend(f"{kind}:{i}" for i in range(backend.device_count()))
        except Exception:
            pass
    try:
        if torch.backends.mps.is_available():
            out.append("mps:0")
    except Exception:
        pass
    name = torch._C._get_privateuse1_backend_name()
    backend = getattr(torch, name, None) if name != "privateuseone" else None
    try:
        if backend is not None:
            out.extend(f"{name}:{i}" for i in range(int(backend.device_count())))
    except Exception:
        pass
    return out


def parse(text: str, extra: tuple[str, ...] = ("meta",)) -> str:
    """A user-typed device (``cuda``, ``cuda:1``, ``cpu:0``, ``sim``) as devinspect names it.

    ``cpu:0`` is ``cpu``; a type without an index (``cuda``) stands for all devices of
    that type. Raises :class:`DeviceNameError` for text that is not a device, or a
    device this process does not have (``extra`` names are always accepted).
    """
    try:
        device = torch.device(text.strip())
    except (RuntimeError, ValueError, TypeError):
        raise DeviceNameError(f"{text!r} is not a device (try cpu, cuda, cuda:0)") from None
    if device.type in extra:
        return device.type
    if device.type == "cpu":
        return "cpu"
    have = present()
    name = str(device)
    if device.index is None:
        if any(d.split(":", 1)[0] == device.type for d in have):
            return device.type
    elif name in have:
        return name
    raise DeviceNameError(f"no device {text.strip()!r} in this process (devices: {', '.join(have)})")
