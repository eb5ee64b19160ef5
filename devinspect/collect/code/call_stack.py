"""Reading the failing call's stack: the running module, its path, and a tensor's local name.

Frames' locals are read only when they are plain dicts, and objects only through their
own instance dicts: nothing here runs user code.
"""

from __future__ import annotations

import types
from typing import Any, Iterator

import torch

from ...runtime import tensor_getters
from ..objects import dict_items, instance_dict, str_items, type_name
from . import locations
from .locations import frame_locals

_T = torch.Tensor
_Optimizer = torch.optim.Optimizer


def frames_from(frame: Any) -> Iterator[Any]:
    """The frame and its callers, innermost first."""
    while frame is not None:
        yield frame
        frame = frame.f_back


def traceback_locals(tb: Any, max_frames: int = 64) -> Iterator[tuple[str, str, Any]]:
    """``(function, local name, value)`` of each frame of a traceback that is the user's or a
    library's. Frames of devinspect, IPython and the standard library are left out: they hold
    the tools' own objects (argument parsers, the check itself), not the user's."""
    seen = 0
    while type(tb) is types.TracebackType and seen < max_frames:
        frame = tb.tb_frame
        seen += 1
        if frame.f_locals is not frame.f_globals and not locations.is_tool_file(frame.f_code.co_filename):
            for key, value in dict_items(locations.frame_locals(frame)):
                if type(key) is str and key != "__tracebackhide__":
                    yield frame.f_code.co_name, key, value
        tb = tb.tb_next


def running_module_device(frame: types.FrameType | None) -> str | None:
    """The one device of the parameters of the innermost module whose ``forward`` is running."""
    while frame is not None:
        local_vars = locations.frame_locals(frame)
        owner = dict.get(local_vars, "self") if frame.f_code.co_name == "forward" else None
        if issubclass(type(owner), torch.nn.Module):
            devices = set()
            for _, p in str_items(instance_dict(owner).get("_parameters")):
                if issubclass(type(p), _T):
                    devices.add(str(tensor_getters.device(p)))
            if len(devices) == 1:
                return devices.pop()
        frame = frame.f_back
    return None


def innermost_module_path(modules: dict[int, str], frame: types.FrameType | None) -> str | None:
    """Path of the innermost module whose method is on the stack (``model.fc1``)."""
    while frame is not None:
        path = running_module_path(modules, frame)
        if path is not None:
            return path
        frame = frame.f_back
    return None


def running_module_path(modules: dict[int, str], frame: types.FrameType) -> str | None:
    """Path of the module whose ``forward`` this frame runs, or None."""
    local_vars = locations.frame_locals(frame)
    owner = dict.get(local_vars, "self") if frame.f_code.co_name in ("forward", "_call_impl") else None
    return modules.get(id(owner)) if owner is not None else None


def local_name(frame: Any, t: Any, modules: dict[int, str]) -> tuple[str, str] | None:
    """``(name, kind)`` of ``t`` in the frame: a local, or a parameter, buffer or attribute of its ``self``."""
    local_vars = locations.frame_locals(frame)
    if local_vars is frame.f_globals:
        return None
    for key, value in dict_items(local_vars):
        if value is t and key != "self" and type(key) is str:
            return key, "local"
    owner = dict.get(local_vars, "self")
    if issubclass(type(owner), torch.nn.Module):
        d = instance_dict(owner)
        path = modules.get(id(owner))
        prefix = path if path is not None else "self"
        for group, source in (("_parameters", "parameter"), ("_buffers", "buffer")):
            for key, value in str_items(d.get(group)):
                if value is t:
                    return f"{prefix}.{key}", source
        for key, value in d.items():  # a copy
            if value is t and type(key) is str:
                return f"{prefix}.{key}", "attribute"
    return None


def keyword_hook_gap(stack: Any, misplaced: list[tuple[str | None, str | None, Any]], modules: dict[int, str],
                     call_line: str) -> str | None:
    """A module whose forward pre-hook moves positional arguments only, while a misplaced operand
    (``(name, local, value)``) reached its ``forward`` as a keyword argument of ``call_line``."""
    frame = stack
    while frame is not None:
        local_vars = locations.frame_locals(frame)
        owner = dict.get(local_vars, "self")
        if frame.f_code.co_name == "forward" and issubclass(type(owner), torch.nn.Module):
            d = instance_dict(owner)
            hooks = d.get("_forward_pre_hooks")  # an OrderedDict, read through dict's own methods
            with_kwargs = d.get("_forward_pre_hooks_with_kwargs")
            kwargs_aware = set(dict.keys(with_kwargs)) if issubclass(type(with_kwargs), dict) else set()
            plain = [h for k, h in (dict_items(hooks) if issubclass(type(hooks), dict) else ()) if k not in kwargs_aware]
            keywords = {k for k, v in dict_items(local_vars) if type(k) is str}
            missed = [(name, value) for name, local, value in misplaced if name in keywords or local in keywords]
            passed = [name for name, value in missed if f"{_param_of(local_vars, value)}=" in call_line]
            if plain and passed:
                path = modules.get(id(owner), type_name(type(owner)))
                hook = plain[0].__name__ if type(plain[0]) is types.FunctionType else "its pre-hook"
                return (f"{path}'s forward pre-hook {hook} moves positional arguments only: "
                        f"{', '.join(name or '' for name in passed)} reached forward as a keyword argument, which the "
                        "hook never sees (register it with with_kwargs=True to move keyword arguments too, or pass "
                        "it positionally).")
            return None
        frame = frame.f_back
    return None


def _param_of(local_vars: dict, value: Any) -> str:
    return next((k for k, v in dict_items(local_vars) if v is value and type(k) is str), "")


def optimizer_step_running(stack: Any) -> bool:
    """Whether the failure came inside an optimizer's ``step`` (which updates parameters in place,
    so some may have moved on before it failed): a ``step`` frame whose ``self`` is an optimizer,
    PyTorch's or the user's own subclass, whatever functions it calls."""
    return any(f.f_code.co_name == "step" and issubclass(type(dict.get(frame_locals(f), "self")), _Optimizer)
               for f in frames_from(stack))
