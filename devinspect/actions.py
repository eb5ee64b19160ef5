"""The only code in devinspect that changes user state.

Every action resolves its target by name in the namespace, does its work on the side,
and replaces the user's object only when that work succeeded: a failed move leaves
the variable exactly as it was. Each returns an :class:`ActionResult` saying what it
did, in bytes, or why it did nothing.
"""

from __future__ import annotations

import ast
import gc
import re
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Iterable, MutableMapping

import torch


@dataclass(frozen=True)
class ActionResult:
    """What an action did. ``ok`` is False when nothing was changed; ``message`` says why.

    ``nbytes`` is the memory the action moved, released or freed.
    """

    ok: bool
    message: str
    nbytes: int = 0


class _Path:
    """A name as the user typed it: ``x``, ``batch["ids"]``, ``model.encoder``, ``items[0]``."""

    def __init__(self, text: str):
        try:
            node = ast.parse(text, mode="eval").body
        except SyntaxError:
            raise ValueError(f"{text!r} is not a variable name") from None
        self.steps: list[tuple[str, Any]] = []
        while not isinstance(node, ast.Name):
            if isinstance(node, ast.Attribute):
                self.steps.append(("attr", node.attr))
                node = node.value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                self.steps.append(("item", node.slice.value))
                node = node.value
            else:
                raise ValueError(f"{text!r} is not a plain variable, attribute or item name")
        self.root = node.id
        self.steps.reverse()
        self.text = text

    def get(self, namespace: MutableMapping[str, Any]) -> Any:
        if self.root not in namespace:
            raise LookupError(f"no variable named {self.root!r}")
        value = namespace[self.root]
        for kind, key in self.steps:
            value = getattr(value, key) if kind == "attr" else value[key]
        return value

    def set(self, namespace: MutableMapping[str, Any], new: Any) -> None:
        if not self.steps:
            namespace[self.root] = new
            return
        parent = namespace[self.root]
        for kind, key in self.steps[:-1]:
            parent = getattr(parent, key) if kind == "attr" else parent[key]
        kind, key = self.steps[-1]
        if kind == "attr":
            setattr(parent, key, new)
        else:
            parent[key] = new


_LOOKUP_ERRORS = (ValueError, LookupError, AttributeError, KeyError, IndexError, TypeError)


def _find(namespace: MutableMapping[str, Any], name: str) -> tuple[Any, ActionResult | None]:
    """The object called ``name``, or a failed ActionResult saying why it cannot be found."""
    try:
        return _Path(name).get(namespace), None
    except _LOOKUP_ERRORS as exc:
        return None, ActionResult(False, f"could not find {name}: {exc}")


def _bytes(t: torch.Tensor) -> int:
    return int(t.untyped_storage().nbytes()) if t.layout == torch.strided else int(t.nbytes)


def move(namespace: MutableMapping[str, Any], name: str, device: str) -> ActionResult:
    """Move the tensor or module called ``name`` to ``device`` (``x = x.to(device)``; modules in place)."""
    value, failed = _find(namespace, name)
    if failed is not None:
        return failed
    path = _Path(name)
    try:
        target = torch.device(device)
    except RuntimeError as exc:
        return ActionResult(False, f"could not move {name}: {exc}")
    try:
        if isinstance(value, torch.nn.Module):
            size = sum(_bytes(t) for t in value.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor))
            value.to(target)
            return ActionResult(True, f"moved {name} to {target} ({size:,} bytes of parameters and buffers)", size)
        if isinstance(value, torch.Tensor):
            moved = value.to(target)  # done on the side; the variable changes only if this worked
            path.set(namespace, moved)
            return ActionResult(True, f"{name} = {name}.to({str(target)!r}) ({_bytes(value):,} bytes)", _bytes(value))
    except Exception as exc:  # noqa: BLE001 - a failed move is reported, the object is left as it was
        return ActionResult(False, f"could not move {name} to {target}: {type(exc).__name__}: {exc}")
    return ActionResult(False, f"{name} is a {type(value).__name__}, not a tensor or module")


def register_buffer(namespace: MutableMapping[str, Any], name: str, attr: str, device: str) -> ActionResult:
    """Turn the plain tensor attribute ``name.attr`` into a registered buffer on ``device``."""
    module, failed = _find(namespace, name)
    if failed is not None:
        return failed
    if not isinstance(module, torch.nn.Module):
        return ActionResult(False, f"{name} is not a module")
    plain = module.__dict__.get(attr)
    if not isinstance(plain, torch.Tensor):
        return ActionResult(False, f"{name}.{attr} is not a plain tensor attribute")
    try:
        moved = plain.to(device)
    except Exception as exc:  # noqa: BLE001
        return ActionResult(False, f"could not move {name}.{attr} to {device}: {type(exc).__name__}: {exc}")
    del module.__dict__[attr]
    module.register_buffer(attr, moved)
    return ActionResult(True, f'{name}.register_buffer("{attr}", ...) on {device}: .to() moves it from now on', _bytes(plain))


def move_optimizer_state(namespace: MutableMapping[str, Any], name: str, device: str) -> ActionResult:
    """Move the optimizer's state tensors (not its 0-dim CPU step counters) to ``device``."""
    opt, failed = _find(namespace, name)
    if failed is not None:
        return failed
    if not isinstance(opt, torch.optim.Optimizer):
        return ActionResult(False, f"{name} is not an optimizer")
    planned: list[tuple[dict, Any, torch.Tensor]] = []
    try:
        for state in opt.state.values():
            for key, value in state.items():
                if isinstance(value, torch.Tensor) and value.dim() > 0 and str(value.device) != str(torch.device(device)):
                    planned.append((state, key, value.to(device)))
    except Exception as exc:  # noqa: BLE001 - nothing has been replaced yet
        return ActionResult(False, f"could not move the state of {name}: {type(exc).__name__}: {exc}")
    moved = 0
    for state, key, value in planned:
        moved += _bytes(state[key])
        state[key] = value
    return ActionResult(True, f"moved {len(planned)} state tensors of {name} to {device}", moved)


def apply_fix(namespace: MutableMapping[str, Any], action: dict[str, str]) -> ActionResult:
    """Carry out a fix described by :attr:`devinspect.model.Mismatch.action`."""
    kind = action.get("kind")
    if kind == "move":
        return move(namespace, action["name"], action["device"])
    if kind == "register_buffer":
        return register_buffer(namespace, action["name"], action["attr"], action["device"])
    if kind == "move_optimizer_state":
        return move_optimizer_state(namespace, action["name"], action["device"])
    return ActionResult(False, f"unknown fix {kind!r}")


# -- memory -------------------------------------------------------------------


def _ready_devices() -> list[Any]:
    """Accelerators whose allocator counters can be read now (CUDA only if already initialised)."""
    from .memory import build, read

    return [d for d in build(read(nvml=False)).accelerators if d.state == "ready"]


def _no_allocator_reason() -> str:
    from .memory import build, read

    snap = build(read(nvml=False))
    if snap.accelerators:
        return snap.accelerators[0].status
    return snap.notes[0] if snap.notes else "no accelerator in this process"


def _change(label: str, before: int | None, after: int | None) -> str:
    from .render.units import human_bytes

    return f"{label} {human_bytes(before)} → {human_bytes(after)}"


def empty_cache() -> ActionResult:
    """Return the allocator's cached, unused segments to the driver (``torch.cuda.empty_cache()``).

    Live tensors are untouched; what is released is what ``nvidia-smi`` stops counting.
    The result says how much was released, measured from the reserved counter.
    """
    from .render.units import human_bytes

    before = _ready_devices()
    if not before:
        return ActionResult(False, f"nothing to release: {_no_allocator_reason()}")
    expected = sum(d.releasable_bytes or 0 for d in before)
    try:
        if any(d.kind == "cuda" for d in before):
            torch.cuda.empty_cache()
        else:
            torch.accelerator.empty_cache()
    except Exception as exc:  # noqa: BLE001
        return ActionResult(False, f"empty_cache() failed: {type(exc).__name__}: {exc}")
    after = {d.device: d for d in _ready_devices()}
    released, changes = 0, []
    for d in before:
        now = after.get(d.device)
        if now is not None and d.reserved_bytes is not None and now.reserved_bytes is not None:
            released += d.reserved_bytes - now.reserved_bytes
            changes.append(_change(f"{d.device} reserved", d.reserved_bytes, now.reserved_bytes))
    return ActionResult(True, f"empty_cache() released {human_bytes(released)} (expected {human_bytes(expected)}): "
                        + "; ".join(changes), released)


def reset_peak_stats() -> ActionResult:
    """Reset the allocator's peak counters (and, on Linux, this process's peak resident memory)."""
    from .memory import read_process, reset_process_peak

    changes, lowered = [], 0
    before = _ready_devices()
    for d in before:
        try:
            if d.kind == "cuda":
                torch.cuda.reset_peak_memory_stats(d.torch_index)
            else:
                torch.accelerator.reset_peak_memory_stats(d.torch_index)
        except Exception as exc:  # noqa: BLE001
            return ActionResult(False, f"could not reset the peaks of {d.device}: {type(exc).__name__}: {exc}")
    after = {x.device: x for x in _ready_devices()}
    for d in before:
        now = after[d.device]
        lowered += (d.peak_allocated_bytes or 0) - (now.peak_allocated_bytes or 0)
        changes.append(_change(f"{d.device} peak allocated", d.peak_allocated_bytes, now.peak_allocated_bytes))
        changes.append(_change("peak reserved", d.peak_reserved_bytes, now.peak_reserved_bytes))
    peak_before = read_process().get("peak_rss")
    if reset_process_peak():
        changes.append(_change("cpu peak resident", peak_before, read_process().get("peak_rss")))
    if not changes:
        return ActionResult(False, f"nothing to reset: {_no_allocator_reason()}")
    return ActionResult(True, "peaks reset: " + "; ".join(changes), lowered)


def _live_tensor_bytes() -> dict[str, int]:
    """Storage bytes of every live tensor per device (each storage once), by a gc walk."""
    from .scan import scan

    return {t.device: t.storage_bytes for t in scan({}, all_objects=True).devices}


def collect_garbage() -> ActionResult:
    """Run ``gc.collect()`` and report the tensor memory it freed, per device."""
    from .render.units import human_bytes

    before, allocated_before = _live_tensor_bytes(), {d.device: d.allocated_bytes for d in _ready_devices()}
    found = gc.collect()
    after, allocated_after = _live_tensor_bytes(), {d.device: d.allocated_bytes for d in _ready_devices()}
    freed = {dev: n - after.get(dev, 0) for dev, n in before.items() if n - after.get(dev, 0) > 0}
    parts = [f"{dev} {human_bytes(n)}" for dev, n in sorted(freed.items())]
    for dev, n in allocated_before.items():
        if allocated_after.get(dev) != n:
            parts.append(_change(f"{dev} allocated", n, allocated_after.get(dev)))
    total = sum(freed.values())
    what = f"freed {human_bytes(total)} of tensors" + (f" ({'; '.join(parts)})" if parts else "")
    return ActionResult(True, f"gc.collect() found {found} unreachable objects; {what}", total)


_OUT_KEY = re.compile(r"^(?:Out|_oh)\[(\d+)\]")
_NUMBERED = re.compile(r"^_(\d+)$")


def release_history(
    namespace: MutableMapping[str, Any],
    displayhook: Any = None,
    hidden: MutableMapping[str, Any] | None = None,
    devices: Iterable[str] | None = None,
) -> ActionResult:
    """Drop the output-history entries and the last traceback that keep tensors alive.

    Clears ``Out[N]``/``_N``, ``_``, ``__``, ``___`` entries and ``sys.last_traceback``
    (with ``sys.last_value``) when they hold tensors on ``devices`` (default: any
    accelerator). In IPython pass the shell's ``displayhook`` and ``user_ns_hidden``
    (``hidden``): both keep their own references to ``_``, ``__``, ``___`` and
    ``_N``, and IPython updates ``_`` afterwards only when they agree. Reports the
    bytes that only these entries held.
    """
    from .model import device_is_accelerator
    from .render.units import human_bytes
    from .scan import scan

    def wanted(device: str) -> bool:
        if devices is None:
            return device_is_accelerator(device)
        return any(device == d or device.split(":")[0] == d for d in devices)

    held = [r for r in scan(namespace, include_hidden=True).records if r.hidden and wanted(r.device)]
    if not held:
        return ActionResult(False, "nothing to release: no history entry or traceback holds such tensors")
    out_keys: set[int] = set()
    unders: set[str] = set()
    traceback_too = False
    for r in held:
        if r.root == "sys.last_traceback":
            traceback_too = True
        elif (m := _OUT_KEY.match(r.name)) or (m := _NUMBERED.match(r.root)):
            out_keys.add(int(m.group(1)))
        elif r.root in ("_", "__", "___"):
            unders.add(r.root)
    freed = sum(r.counted_bytes for r in held)
    allocated_before = {d.device: d.allocated_bytes for d in _ready_devices()}
    cleared = _clear_history(namespace, displayhook, hidden if hidden is not None else {}, out_keys, unders)
    if traceback_too:
        _clear_last_error()
        cleared.append("sys.last_traceback (%debug and %tb no longer see the last error)")
    allocated_after = {d.device: d.allocated_bytes for d in _ready_devices()}
    changes = [_change(f"{dev} allocated", n, allocated_after.get(dev))
               for dev, n in allocated_before.items() if allocated_after.get(dev) != n]
    message = f"released {', '.join(cleared)}: {human_bytes(freed)} of tensors only they held"
    return ActionResult(True, message + (f" ({'; '.join(changes)})" if changes else ""), freed)


def _clear_history(namespace: MutableMapping[str, Any], displayhook: Any, hidden: MutableMapping[str, Any],
                   out_keys: set[int], unders: set[str]) -> list[str]:
    cleared = []
    out = namespace.get("Out")
    released: list[Any] = []  # for the identity checks below; freed when this returns
    for key in sorted(out_keys):
        if isinstance(out, dict) and key in out:
            released.append(out.pop(key))
            cleared.append(f"Out[{key}]")
        if f"_{key}" in namespace:
            released.append(namespace.pop(f"_{key}"))
            cleared.append(f"_{key}")
        hidden.pop(f"_{key}", None)
    for name in ("_", "__", "___"):
        # The shell keeps _, __, ___ in three places (namespace, hidden names, displayhook).
        # Clear each copy that is a released entry or the same object as a cleared name,
        # so they keep agreeing (IPython updates _ only then); a value the user assigned stays.
        stores = [namespace, hidden] + ([displayhook.__dict__] if hasattr(displayhook, "__dict__") else [])
        targets = list(released) + ([namespace[name]] if name in unders and name in namespace else [])
        hit = False
        for store in stores:
            if name in store and any(store[name] is t for t in targets):
                hit = hit or store is namespace
                store[name] = ""
        if hit:
            cleared.append(name)
    return cleared


def _clear_last_error() -> None:
    tb = getattr(sys, "last_traceback", None)
    if tb is not None:
        traceback.clear_frames(tb)  # drops the frames' locals even if the exception lives on elsewhere
    for name in ("last_traceback", "last_value", "last_type", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
