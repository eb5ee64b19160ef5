"""How an edit of the user's code names a device: in their own words.

A local tensor's ``.device`` inside a function (one that has a value where the edit goes), the
function's own device variable, the notebook's device variable (``dev = torch.device("cuda")``),
else a literal. Read statically: frame locals and namespace values by their exact type.
"""

from __future__ import annotations

import types
from typing import Any, Mapping

import torch

from ...collect import locations, namespace_items, user_code
from ...runtime import tensor_getters
from .. import fix_builders

_T = torch.Tensor


def device_variable(namespace: Mapping[str, Any], device: str) -> str | None:
    """A namespace variable holding ``device`` (``dev = torch.device("cuda")``), if the user has one."""
    wanted = torch.device(device)
    found = []
    for name, value in namespace_items(namespace):
        if name.startswith("_"):
            continue
        vt = type(value)
        if vt is torch.device:
            same = value == wanted or (value.index is None and value.type == wanted.type and (wanted.index or 0) == 0)
        elif vt is str and len(value) < 20:
            try:
                parsed = torch.device(value)
            except (RuntimeError, ValueError):
                continue
            same = parsed == wanted or (parsed.index is None and parsed.type == wanted.type and (wanted.index or 0) == 0)
        else:
            continue
        if same:
            found.append(name)
    preferred = ("device", "dev", "DEVICE")
    found.sort(key=lambda n: (n not in preferred, len(n), n))
    return found[0] if found else None


def device_names(namespace: Mapping[str, Any]) -> dict[str, str]:
    """For each device a namespace variable holds (``dev = torch.device("cuda")``), the variable an
    edit names it by (what :func:`device_variable` picks); kept with a scan, which keeps no value."""
    devices = set()
    for name, value in namespace_items(namespace):
        vt = type(value)
        if not name.startswith("_") and (vt is torch.device or (vt is str and len(value) < 20)):
            try:
                device = torch.device(value)
            except (RuntimeError, ValueError, TypeError):
                continue
            devices.add(device.type if device.type == "cpu" else f"{device.type}:{device.index or 0}")
    return {d: n for d in devices if (n := device_variable(namespace, d)) is not None}


def device_in_frame(frame: types.FrameType | None, device: str, avoid: set[str] = frozenset(),
                    prefer: tuple[str, ...] = (), line: int | None = None) -> str | None:
    """``h.device`` for a local tensor of ``frame`` on ``device`` (the user's own code keeps working
    when the model moves), else None; the names in ``prefer`` (the failing call's operands) first.
    With ``line`` (where the edit goes), only locals that already have a value there."""
    if frame is None or frame.f_locals is frame.f_globals:
        return None
    local_vars = locations.frame_locals(frame)

    def usable(name: Any) -> bool:
        return type(name) is str and name.isidentifier() and (line is None or (
            user_code.bound_before(frame.f_code, name, line)
            and not user_code.rebound_from(frame.f_code, name, line, frame.f_lineno)))

    for name, value in dict.items(local_vars):
        if type(value) is torch.device and str(value) == device and usable(name):
            if not any(n in local_vars and usable(n) for n in prefer):
                return name  # the function's own device variable
    ordered = [(n, dict.get(local_vars, n)) for n in prefer if n in local_vars] + list(dict.items(local_vars))
    for name, value in ordered:
        if (name != "self" and name not in avoid and issubclass(type(value), _T) and str(tensor_getters.device(value)) == device
                and usable(name)):
            return f"{name}.device"
    return None


def device_expression(namespace: Mapping[str, Any], device: str, frame: types.FrameType | None = None,
                      avoid: set[str] = frozenset(), prefer: tuple[str, ...] = (), line: int | None = None) -> str:
    """How an edit names ``device``: a local tensor's ``.device`` inside a function (one that has a
    value at ``line``, where the edit goes), else a device variable that line can see (the
    notebook's, or a module file's own: a module cannot see the notebook's names), else a literal."""
    visible = namespace if frame is None or frame.f_globals is namespace else frame.f_globals
    return (device_in_frame(frame, device, avoid, prefer, line) or device_variable(visible, device)
            or fix_builders.device_literal(device))
