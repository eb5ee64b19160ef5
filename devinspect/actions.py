"""The only code in devinspect that changes user state.

Every action resolves its target by name in the namespace, does its work on the side,
and replaces the user's object only when that work succeeded: a failed move leaves
the variable exactly as it was. Each returns an :class:`ActionResult` saying what it
did, in bytes, or why it did nothing.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any, MutableMapping

import torch


@dataclass(frozen=True)
class ActionResult:
    """What an action did. ``ok`` is False when nothing was changed; ``message`` says why."""

    ok: bool
    message: str
    moved_bytes: int = 0


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
