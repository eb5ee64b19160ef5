"""Where the parts of a module sit: the largest submodules on one device, and for a model
dispatched by a ``device_map``, the parts that are not where the map says."""

from __future__ import annotations

from typing import Any

import torch

from ...runtime import tensor_getters
from ..objects import dict_items, instance_dict

#: Buffers PyTorch keeps on the host by design, by the module class that holds them: they
#: never make a model split across devices.
ON_HOST_BY_DESIGN = {("torch.optim.swa_utils", "AveragedModel"): ("n_averaged",)}
ON_HOST_NOTE = "kept on the host by PyTorch"
OFFLOADED_NOTE = "offloaded: accelerate's hook brings its data for each forward pass"


def offloads_weights(d: dict) -> bool:
    """Whether a module (by its instance dict) has an accelerate hook that keeps its weights off
    it (``offload=True``): its parameters are meta on purpose, their data in the hook's
    ``weights_map``, brought to the execution device for each forward pass."""
    hook = d.get("_hf_hook")
    if hook is None:
        return False
    hooks = [hook]
    inner = instance_dict(hook).get("hooks")  # a SequentialHook
    if type(inner) in (list, tuple):
        hooks += list(inner)
    return any(instance_dict(h).get("offload") is True for h in hooks)


def offloaded_note(t: Any, offloaded: bool) -> str | None:
    """The note of a parameter or buffer an offloading hook keeps off its module (it is meta)."""
    try:
        return OFFLOADED_NOTE if offloaded and issubclass(type(t), torch.Tensor) and tensor_getters.is_meta(t) else None
    except Exception:  # one that cannot be read is recorded as it is
        return None


def moves_inputs(d: dict) -> bool:
    """Whether a module (by its instance dict) has forward pre-hooks (or accelerate's
    ``_hf_hook``), which may move its inputs."""
    hooks = d.get("_forward_pre_hooks")
    return "_hf_hook" in d or (issubclass(type(hooks), dict) and dict.__len__(hooks) > 0)


def off_map(name: str, device_map: Any, owner_devices: dict[str, set[str]]) -> tuple[tuple[str, str, str], ...]:
    """``(part, device, mapped device)`` for each part of a dispatched model whose tensors are not
    where its ``device_map`` puts them on an accelerator (a part replaced after dispatch). Only
    plain keys and values are read: strings, ints (CUDA indices, as accelerate reads them) and
    ``torch.device``; host and disk entries are offloaded by hooks, so they are left alone."""
    if not issubclass(type(device_map), dict):
        return ()
    off = []
    for key, where in dict_items(device_map):
        if type(key) is not str:
            continue
        if type(where) is int:
            mapped = f"cuda:{where}"
        elif type(where) is str or type(where) is torch.device:
            mapped = str(where)
        else:
            continue
        if mapped in ("cpu", "disk") or ":" not in mapped:
            continue
        path = name + "".join(f"[{part}]" if part.isdigit() else f".{part}" for part in key.split(".") if part)
        found = set().union(*(devices for owner, devices in owner_devices.items()
                              if owner == path or owner.startswith((path + ".", path + "["))))
        elsewhere = sorted(found - {mapped, "meta"})
        if elsewhere:
            off.append((path, elsewhere[0], mapped))
    return tuple(off)


def placement_of(name: str, owner_devices: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The largest submodules that each sit on one device, for a mixed-device module."""
    subtree: dict[str, set[str]] = {}
    for owner, devices in owner_devices.items():
        path = owner
        while True:
            subtree.setdefault(path, set()).update(devices)
            if path == name or len(path) <= len(name):
                break
            cut = max(path.rfind("."), path.rfind("["))
            if cut <= 0:
                break
            path = path[:cut]
    out: list[tuple[str, str]] = []

    def children_of(path: str) -> list[str]:
        return sorted(p for p in subtree if p != path and p.startswith(path) and p[len(path)] in ".[" and
                      max(p.rfind("."), p.rfind("[")) == len(path))

    def descend(path: str) -> None:
        devices = subtree.get(path, set())
        if len(devices) == 1:
            out.append((path, next(iter(devices))))
            return
        if path in owner_devices and len(owner_devices[path]) > 1:
            for device in sorted(owner_devices[path]):
                out.append((path, device))
        elif path in owner_devices:
            out.append((path, next(iter(owner_devices[path]))))
        for child in children_of(path):
            descend(child)

    descend(name)
    return out
