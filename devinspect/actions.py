"""The only code in devinspect that changes user state.

Every action resolves its target by name in the namespace, checks what it can
beforehand, does its work on the side, and changes the user's objects only in a
last step that is undone if any part of it fails: an action completes, or leaves
everything exactly as it was. Each returns an :class:`ActionResult` saying what it
did, in bytes, or why it did nothing; none raises.
"""

from __future__ import annotations

import ast
import gc
import re
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterable, MutableMapping

import torch

from . import fixes
from .model import (
    EmptyCache,
    Move,
    MoveOptimizerState,
    RebuildOptimizer,
    RegisterBuffer,
    ReleaseGraphs,
    ReleaseHistory,
    Steps,
)


@dataclass(frozen=True)
class ActionResult:
    """What an action did. ``ok`` is False when nothing was changed; ``message`` says why.

    ``nbytes`` is the memory the action moved, released or freed. ``follow_up`` is
    an action that would let this one succeed (release the autograd graphs that hold
    parameters PyTorch refuses to swap), for a button to offer.
    """

    ok: bool
    message: str
    nbytes: int = 0
    follow_up: Any = None


class _Path:
    """A name as the user typed it: ``x``, ``batch["ids"]``, ``model.encoder``, ``getattr(m, "a b")``."""

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise ValueError(f"{text!r} is not a name")
        try:
            node = ast.parse(text, mode="eval").body
        except (SyntaxError, ValueError):
            raise ValueError(f"{text!r} is not a variable name") from None
        self.steps: list[tuple[str, Any]] = []
        while not isinstance(node, ast.Name):
            if isinstance(node, ast.Attribute):
                self.steps.append(("attr", node.attr))
                node = node.value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                self.steps.append(("item", node.slice.value))
                node = node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                  and len(node.args) == 2 and isinstance(node.args[1], ast.Constant)
                  and isinstance(node.args[1].value, str) and not node.keywords):
                self.steps.append(("attr", node.args[1].value))
                node = node.args[0]
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
    try:
        if t.layout == torch.strided and not t.is_nested and t.device.type != "meta":
            return int(t.untyped_storage().nbytes())
        return int(t.nbytes)
    except Exception:  # noqa: BLE001 - wrapper subclasses have no storage of their own
        try:
            return int(t.numel() * t.element_size())
        except Exception:  # noqa: BLE001
            return 0


def _human(n: int) -> str:
    from .render.units import human_bytes

    return human_bytes(n)


def _why(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def _device(device: Any) -> tuple[torch.device | None, ActionResult | None]:
    try:
        return torch.device(device), None
    except (RuntimeError, TypeError, ValueError) as exc:
        return None, ActionResult(False, f"{device!r} is not a device: {_why(exc)}")


# -- moving ---------------------------------------------------------------------------


def move(namespace: MutableMapping[str, Any], name: str, device: str) -> ActionResult:
    """Move the tensor or module called ``name`` to ``device``: completely, or not at all.

    A module keeps its Parameter objects and their gradients (so an optimizer that
    holds them stays valid, as ``Module.to`` does on CUDA), its buffers move, and the
    state of every optimizer in the namespace that holds its parameters follows each
    parameter. A tensor is reassigned (``x = x.to(device)``); a leaf that requires
    grad, or a Parameter, keeps its identity instead. If any tensor cannot move (out
    of memory, a meta tensor, a parameter an autograd graph saved), everything moved
    so far goes back and the result names the tensor and the reason.
    """
    value, failed = _find(namespace, name)
    if failed is not None:
        return failed
    target, failed = _device(device)
    if failed is not None:
        return failed
    if isinstance(value, torch.nn.Module):
        return _Mover(namespace, target).module(name, value)
    if isinstance(value, torch.Tensor):
        return _Mover(namespace, target).tensor(name, value)
    return ActionResult(False, f"{name} is a {type(value).__name__}, not a tensor or module")


class _Mover:
    """One all-or-nothing move: plan, copy on the side, then commit with an undo log."""

    def __init__(self, namespace: MutableMapping[str, Any], target: torch.device):
        self.namespace = namespace
        self.target = target
        self.swap_flag = bool(torch.__future__.get_swap_module_params_on_conversion())
        self.undo: list[Callable[[], None]] = []
        self.moved_bytes = 0

    # -- modules ----------------------------------------------------------------

    def module(self, name: str, module: torch.nn.Module) -> ActionResult:
        params: dict[int, tuple[str, torch.nn.Parameter]] = {}
        buffers: list[tuple[torch.nn.Module, str, str, torch.Tensor]] = []
        recomputed: list[tuple[torch.nn.Module, str]] = []
        for path, sub in _named_modules(module, name):
            for key, p in list(sub._parameters.items()):
                if p is not None and id(p) not in params:
                    params[id(p)] = (_child(path, key, sub), p)
            for key, b in list(sub._buffers.items()):
                if b is not None:
                    buffers.append((sub, key, _child(path, key, sub), b))
            for attr in _recomputed(sub):
                recomputed.append((sub, attr))
        problem = self._refusal([(n, p) for n, p in params.values()] + [(n, b) for _, _, n, b in buffers])
        if problem is not None:
            return problem
        # Attributes weight_norm & co. recompute before each forward hold a graph that saves
        # their parameters; they are derived state, so a swap move drops that graph.
        if not self._all_in_place(p for _, p in params.values()):
            for sub, attr in recomputed:
                current = sub.__dict__.get(attr)
                if isinstance(current, torch.Tensor) and current.grad_fn is not None:
                    self.undo.append(lambda sub=sub, attr=attr, current=current: sub.__dict__.__setitem__(attr, current))
                    sub.__dict__[attr] = current.detach()
            held = self._held([(n, p) for n, p in params.values()])
            if held is not None:
                self._rollback()
                return held
        try:
            planned_params = [(n, p, self._copy(n, p), self._copy(f"{n}.grad", p.grad) if p.grad is not None else None)
                              for n, p in params.values()]
            planned_buffers = [(sub, key, n, self._copy(n, b)) for sub, key, n, b in buffers]
            planned_state = self._plan_optimizer_state({id(p) for _, p in params.values()})
        except _CannotMove as exc:
            self._rollback()
            return ActionResult(False, f"could not move {name} to {self.target}: {exc} (nothing was changed)")
        try:
            for n, p, new, new_grad in planned_params:
                self._commit_parameter(p, new, new_grad)
            for sub, key, _n, new in planned_buffers:
                old = sub._buffers[key]
                self.undo.append(lambda sub=sub, key=key, old=old: sub._buffers.__setitem__(key, old))
                sub._buffers[key] = new
            states = self._commit_state(planned_state)
        except Exception as exc:  # noqa: BLE001 - anything half done is undone
            self._rollback()
            return ActionResult(False, f"could not move {name} to {self.target}: {_why(exc)} (nothing was changed)")
        counts = f"{len(planned_params)} parameters, {len(planned_buffers)} buffers"
        grads = sum(1 for *_, g in planned_params if g is not None)
        if grads:
            counts += f", {grads} gradients"
        if states:
            counts += f", {states} optimizer state tensors"
        return ActionResult(True, f"moved {name} to {self.target}: {counts} ({_human(self.moved_bytes)})",
                            self.moved_bytes)

    # -- tensors ----------------------------------------------------------------

    def tensor(self, name: str, t: torch.Tensor) -> ActionResult:
        keep_identity = isinstance(t, torch.nn.Parameter) or (t.requires_grad and t.is_leaf)
        problem = self._refusal([(name, t)])
        if problem is not None:
            return problem
        if not keep_identity:
            try:
                new = self._copy(name, t)
            except _CannotMove as exc:
                return ActionResult(False, f"could not move {name} to {self.target}: {exc} (nothing was changed)")
            try:
                _Path(name).set(self.namespace, new)
            except Exception as exc:  # noqa: BLE001 - the variable still holds the old tensor
                return ActionResult(False, f"could not assign {name}: {_why(exc)} (nothing was changed)")
            return ActionResult(True, f"{name} = {name}.to({str(self.target)!r}) ({_human(self.moved_bytes)})",
                                self.moved_bytes)
        if not self._all_in_place([t]):
            held = self._held([(name, t)])
            if held is not None:
                return held
        try:
            new = self._copy(name, t)
            new_grad = self._copy(f"{name}.grad", t.grad) if t.grad is not None else None
            planned_state = self._plan_optimizer_state({id(t)})
        except _CannotMove as exc:
            return ActionResult(False, f"could not move {name} to {self.target}: {exc} (nothing was changed)")
        try:
            self._commit_parameter(t, new, new_grad)
            states = self._commit_state(planned_state)
        except Exception as exc:  # noqa: BLE001
            self._rollback()
            return ActionResult(False, f"could not move {name} to {self.target}: {_why(exc)} (nothing was changed)")
        what = "Parameter" if isinstance(t, torch.nn.Parameter) else "leaf tensor"
        extra = f", and {states} optimizer state tensors" if states else ""
        return ActionResult(True, f"moved {name} to {self.target}, the same {what}{extra} ({_human(self.moved_bytes)})",
                            self.moved_bytes)

    # -- the steps ---------------------------------------------------------------

    def _refusal(self, tensors: list[tuple[str, torch.Tensor]]) -> ActionResult | None:
        """Tensors that can never move (no data, not initialised), said before anything changes."""
        for n, t in tensors:
            if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):
                return ActionResult(False, f"{n} is not initialised yet (a lazy module): run one forward pass first "
                                           "(nothing was changed)")
            if t.device.type == "meta" and self.target.type != "meta":
                return ActionResult(False, f"{n} is on the meta device and holds no data, so it cannot be copied: "
                                           "load it with load_state_dict(state_dict, assign=True), or use "
                                           f"to_empty(device={str(self.target)!r}) and initialise it (nothing was changed)")
        return None

    def _in_place(self, t: torch.Tensor) -> bool:
        return fixes.moves_in_place(str(t.device), str(self.target), self.swap_flag) and \
            type(t) in (torch.Tensor, torch.nn.Parameter)

    def _all_in_place(self, tensors: Iterable[torch.Tensor]) -> bool:
        return all(self._in_place(t) for t in tensors)

    def _held(self, tensors: list[tuple[str, torch.Tensor]]) -> ActionResult | None:
        """Parameters PyTorch will refuse to swap (an autograd graph saved them), and what holds them."""
        held = [(n, t) for n, t in tensors if not self._in_place(t) and t._use_count() > 2]
        if not held:
            return None
        names, traceback_too = graph_holders(self.namespace, {id(t) for _, t in held})
        holders = [f"the graph of {n}" for n in names] + (["the last error's traceback"] if traceback_too else [])
        what = " and ".join(holders) if holders else "an autograd graph kept elsewhere"
        what = ("what holds " + ("it" if len(held) == 1 else "them") + ": " + what)
        shown = ", ".join(n for n, _ in held[:3]) + (" …" if len(held) > 3 else "")
        follow_up = ReleaseGraphs(tuple(names), traceback_too) if holders else None
        return ActionResult(
            False,
            f"PyTorch moves these tensors to {self.target} by swapping them, and refuses {shown}, which an autograd "
            f"graph or a traceback still uses ({what}). Release them first (Release graphs: values are kept), "
            f"then move (nothing was changed)",
            follow_up=follow_up,
        )

    def _copy(self, name: str, t: torch.Tensor) -> torch.Tensor:
        try:
            with torch.no_grad():
                new = t.to(self.target)
        except Exception as exc:  # noqa: BLE001 - an OOM, an unsupported dtype: nothing changed yet
            raise _CannotMove(f"{name}: {_why(exc)}") from None
        if new is not t:
            self.moved_bytes += _bytes(t)
        return new

    def _commit_parameter(self, p: torch.Tensor, new: torch.Tensor, new_grad: torch.Tensor | None) -> None:
        if new is p and (new_grad is None or new_grad is p.grad):
            return
        if self._in_place(p):
            old_data, old_grad = p.data, p.grad
            old_grad_data = old_grad.data if old_grad is not None else None

            def undo(p=p, old_data=old_data, old_grad=old_grad, old_grad_data=old_grad_data) -> None:
                p.data = old_data
                if old_grad is not None:
                    old_grad.data = old_grad_data
                    p.grad = old_grad

            self.undo.append(undo)
            p.data = new
            if old_grad is not None and new_grad is not None:
                old_grad.data = new_grad  # the gradient object stays the same too
            return
        grad = p.grad
        if grad is not None:
            p.grad = None  # reading .grad raises the use count PyTorch checks before a swap
        replacement = (torch.nn.Parameter(new, requires_grad=p.requires_grad) if isinstance(p, torch.nn.Parameter)
                       else new.detach().requires_grad_(p.requires_grad))
        try:
            torch.utils.swap_tensors(p, replacement)
        except Exception:
            if grad is not None:
                p.grad = grad
            raise

        def undo_swap(p=p, replacement=replacement, grad=grad) -> None:
            p.grad = None
            torch.utils.swap_tensors(p, replacement)
            if grad is not None:
                p.grad = grad

        self.undo.append(undo_swap)
        if new_grad is not None:
            p.grad = new_grad

    def _plan_optimizer_state(self, param_ids: set[int]) -> list[tuple[dict, Any, torch.Tensor, torch.Tensor]]:
        """State of the namespace's optimizers for the moved parameters, copied to the target."""
        planned = []
        for opt_name, opt in _optimizers(self.namespace):
            for p, state in opt.state.items():
                if id(p) not in param_ids or not isinstance(state, dict):
                    continue
                for key, v in state.items():
                    if isinstance(v, torch.Tensor) and v.device != self.target and \
                            not fixes.stays_on_host(tuple(v.shape), str(v.device)):
                        planned.append((state, key, v, self._copy(f"{opt_name}.state[…][{key!r}]", v)))
        return planned

    def _commit_state(self, planned: list[tuple[dict, Any, torch.Tensor, torch.Tensor]]) -> int:
        for state, key, old, new in planned:
            self.undo.append(lambda state=state, key=key, old=old: state.__setitem__(key, old))
            state[key] = new
        return len(planned)

    def _rollback(self) -> None:
        while self.undo:
            step = self.undo.pop()
            try:
                step()
            except Exception:  # noqa: BLE001 - undo what can be undone; the rest was never done
                pass


class _CannotMove(Exception):
    pass


def _named_modules(module: torch.nn.Module, name: str) -> list[tuple[str, torch.nn.Module]]:
    """``(path, module)`` for a module and its submodules, paths as %devices names them."""
    from .scan import _child_name

    out, seen, stack = [], set(), [(name, module)]
    while stack:
        path, m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append((path, m))
        for key, child in reversed(list(m._modules.items())):
            if child is not None:
                stack.append((_child_name(path, key, type(m)), child))
    return out


def _child(path: str, key: str, module: torch.nn.Module) -> str:
    from .scan import _child_name

    return _child_name(path, key, type(module))


def _recomputed(module: torch.nn.Module) -> list[str]:
    names = []
    for hook in module._forward_pre_hooks.values():
        for key in ("name", "_tensor_name"):
            attr = getattr(hook, "__dict__", {}).get(key)
            if isinstance(attr, str) and attr in module.__dict__:
                names.append(attr)
    return names


def _optimizers(namespace: MutableMapping[str, Any]) -> list[tuple[str, torch.optim.Optimizer]]:
    return [(k, v) for k, v in list(namespace.items())
            if isinstance(k, str) and not k.startswith("_") and isinstance(v, torch.optim.Optimizer)]


def graph_holders(namespace: MutableMapping[str, Any], param_ids: set[int],
                  limit: int = 200_000) -> tuple[list[str], bool]:
    """Namespace variables whose autograd graph reaches these parameters, and whether the
    last traceback's frames hold such a graph. Walks at most ``limit`` graph nodes."""
    budget = [limit]

    def reaches(roots: Iterable[Any]) -> bool:
        stack, seen = [r for r in roots if r is not None], set()
        while stack and budget[0] > 0:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            budget[0] -= 1
            variable = getattr(node, "variable", None)
            if variable is not None and id(variable) in param_ids:
                return True
            for child, _ in getattr(node, "next_functions", ()):
                if child is not None:
                    stack.append(child)
        return False

    names = [k for k, v in list(namespace.items())
             if isinstance(k, str) and not k.startswith("_") and isinstance(v, torch.Tensor) and v.grad_fn is not None
             and reaches([v.grad_fn])]
    # A failed cell's frames hold its tensors (and the graphs made before the error) until the
    # traceback goes; clearing a finished traceback's frames loses nothing but %debug.
    tb = getattr(sys, "last_traceback", None)
    traceback_too = tb is not None and any(_frame_holds_tensors(t.tb_frame) for t in _tb_entries(tb))
    return names, traceback_too


def _tb_entries(tb: Any) -> list[Any]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out


def _frame_holds_tensors(frame: Any) -> bool:
    try:
        values = list(frame.f_locals.values())
    except Exception:  # noqa: BLE001
        return False
    for v in values:
        if isinstance(v, torch.Tensor) or (isinstance(v, (tuple, list)) and any(isinstance(i, torch.Tensor) for i in v)):
            return True
    return False


def release_graphs(namespace: MutableMapping[str, Any], names: Iterable[str], traceback_too: bool) -> ActionResult:
    """Detach the tensors ``names`` (values kept, graphs dropped) and clear the last traceback's frames."""
    done = []
    for name in names:
        value, failed = _find(namespace, name)
        if failed is None and isinstance(value, torch.Tensor) and value.grad_fn is not None:
            try:
                _Path(name).set(namespace, value.detach())
                done.append(f"{name} = {name}.detach()")
            except Exception as exc:  # noqa: BLE001
                return ActionResult(False, f"could not detach {name}: {_why(exc)}")
    if traceback_too and getattr(sys, "last_traceback", None) is not None:
        _clear_last_error()
        done.append("cleared the last error's traceback (%debug no longer sees it)")
    if not done:
        return ActionResult(False, "nothing to release: no variable or traceback holds such a graph")
    return ActionResult(True, "released autograd graphs: " + "; ".join(done))


# -- buffers and optimizers ----------------------------------------------------------------------


def register_buffer(namespace: MutableMapping[str, Any], name: str, attr: str, device: str | None) -> ActionResult:
    """Turn the plain tensor attribute ``name.attr`` into a non-persistent buffer on ``device``.

    Checked first: the attribute must be a tensor in the module's own ``__dict__``,
    a plain identifier, and free of clashes (a parameter, submodule or buffer of
    that name, or a class attribute such as ``pe = None`` that ``register_buffer``
    refuses). Otherwise nothing changes.
    """
    module, failed = _find(namespace, name)
    if failed is not None:
        return failed
    if not isinstance(module, torch.nn.Module):
        return ActionResult(False, f"{name} is a {type(module).__name__}, not a module")
    if not isinstance(attr, str) or not attr or "." in attr or not attr.isidentifier():
        return ActionResult(False, f"{attr!r} cannot be a buffer name (it must be a plain identifier)")
    for store, what in ((module._parameters, "a parameter"), (module._modules, "a submodule"),
                        (module._buffers, "already a buffer")):
        if attr in store:
            return ActionResult(False, f"{name}.{attr} is {what}; nothing to register" if what.startswith("already")
                                else f"{name} already has {what} called {attr!r}; nothing was changed")
    plain = module.__dict__.get(attr)
    if not isinstance(plain, torch.Tensor):
        return ActionResult(False, f"{name}.{attr} is not a plain tensor attribute")
    for klass in type(module).__mro__:
        if attr in vars(klass):
            return ActionResult(False, f"{type(module).__name__} defines {attr!r} as a class attribute "
                                       f"({klass.__name__}.{attr}), so register_buffer refuses it: remove it from the "
                                       "class and register the buffer in __init__ (nothing was changed)")
    target = None
    if device:
        target, failed = _device(device)
        if failed is not None:
            return failed
    try:
        with torch.no_grad():
            moved = plain.to(target) if target is not None else plain
    except Exception as exc:  # noqa: BLE001
        return ActionResult(False, f"could not move {name}.{attr} to {target}: {_why(exc)} (nothing was changed)")
    del module.__dict__[attr]
    try:
        module.register_buffer(attr, moved, persistent=False)
    except Exception as exc:  # noqa: BLE001 - put the attribute back exactly as it was
        module._buffers.pop(attr, None)
        module.__dict__[attr] = plain
        return ActionResult(False, f"could not register {name}.{attr}: {_why(exc)} (nothing was changed)")
    where = f" on {target}" if target is not None else ""
    return ActionResult(True, f'{name}.register_buffer("{attr}", …, persistent=False){where}: .to() moves it from now on '
                              f"({_human(_bytes(plain))})", _bytes(plain))


def move_optimizer_state(namespace: MutableMapping[str, Any], name: str) -> ActionResult:
    """Move each state tensor of the optimizer to its own parameter's device (not Adam's CPU step)."""
    opt, failed = _find(namespace, name)
    if failed is not None:
        return failed
    if not isinstance(opt, torch.optim.Optimizer):
        return ActionResult(False, f"{name} is a {type(opt).__name__}, not an optimizer")
    planned: list[tuple[dict, Any, torch.Tensor]] = []
    moved = 0
    try:
        for p, state in opt.state.items():
            if not isinstance(p, torch.Tensor) or not isinstance(state, dict):
                continue
            for key, value in state.items():
                if (isinstance(value, torch.Tensor) and value.device != p.device
                        and not fixes.stays_on_host(tuple(value.shape), str(value.device))):
                    with torch.no_grad():
                        planned.append((state, key, value.to(p.device)))
                    moved += _bytes(value)
    except Exception as exc:  # noqa: BLE001 - nothing has been replaced yet
        return ActionResult(False, f"could not move the state of {name}: {_why(exc)} (nothing was changed)")
    if not planned:
        return ActionResult(False, f"the state of {name} is already with its parameters")
    for state, key, value in planned:
        state[key] = value
    return ActionResult(True, f"moved {len(planned)} state tensors of {name}, each to its parameter's device "
                              f"({_human(moved)})", moved)


def rebuild_optimizer(namespace: MutableMapping[str, Any], name: str, module_name: str, class_path: str,
                      kwargs: Iterable[tuple[str, str]] = ()) -> ActionResult:
    """Replace the optimizer ``name`` with a new one of ``class_path`` over ``module_name``'s parameters."""
    module, failed = _find(namespace, module_name)
    if failed is not None:
        return failed
    if not isinstance(module, torch.nn.Module):
        return ActionResult(False, f"{module_name} is not a module")
    prefix, _, cls_name = class_path.rpartition(".")
    cls = getattr(torch.optim, cls_name, None) if prefix == "torch.optim" else None
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        return ActionResult(False, f"{class_path} is not a torch.optim optimizer")
    try:
        values = {k: ast.literal_eval(v) for k, v in kwargs}
        new = cls(module.parameters(), **values)
        _Path(name).set(namespace, new)
    except Exception as exc:  # noqa: BLE001 - the old optimizer is still in place
        return ActionResult(False, f"could not create {name} again: {_why(exc)} (nothing was changed)")
    count = sum(1 for _ in module.parameters())
    return ActionResult(True, f"{name} = {class_path}({module_name}.parameters()…): a new optimizer over "
                              f"{count} parameters, with fresh state")


def apply_fix(namespace: MutableMapping[str, Any], action: Any, *, displayhook: Any = None,
              hidden: MutableMapping[str, Any] | None = None) -> ActionResult:
    """Carry out a fix's typed action (:class:`~devinspect.model.Move`, ``RegisterBuffer`` …).

    Anything else (a malformed or unknown action) returns ``ok=False`` and changes nothing.
    """
    try:
        if isinstance(action, Move) and isinstance(action.name, str) and isinstance(action.device, str):
            return move(namespace, action.name, action.device)
        if isinstance(action, RegisterBuffer) and isinstance(action.module, str):
            return register_buffer(namespace, action.module, action.attr, action.device or None)
        if isinstance(action, MoveOptimizerState) and isinstance(action.optimizer, str):
            return move_optimizer_state(namespace, action.optimizer)
        if isinstance(action, RebuildOptimizer) and isinstance(action.optimizer, str):
            return rebuild_optimizer(namespace, action.optimizer, action.module, action.class_path, action.kwargs)
        if isinstance(action, ReleaseGraphs):
            return release_graphs(namespace, action.names, action.traceback)
        if isinstance(action, ReleaseHistory):
            return release_history(namespace, displayhook, hidden)
        if isinstance(action, EmptyCache):
            return empty_cache()
        if isinstance(action, Steps) and action.actions:
            return _steps(namespace, action.actions, displayhook, hidden)
    except Exception as exc:  # noqa: BLE001 - an action never raises into the user's session
        return ActionResult(False, f"the fix failed: {_why(exc)}")
    return ActionResult(False, f"not a fix devinspect can apply: {action!r}")


def _steps(namespace: MutableMapping[str, Any], steps: tuple[Any, ...], displayhook: Any,
           hidden: MutableMapping[str, Any] | None) -> ActionResult:
    """Several actions in order; stops at the first that fails and says what was done before it."""
    done: list[str] = []
    total = 0
    for step in steps:
        result = apply_fix(namespace, step, displayhook=displayhook, hidden=hidden)
        if not result.ok:
            before = f" (done before it: {'; '.join(done)})" if done else ""
            return ActionResult(False, result.message + before, total, result.follow_up)
        done.append(result.message)
        total += result.nbytes
    return ActionResult(True, "; ".join(done), total)


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
    from .memory import accelerator_call

    try:
        if any(d.kind == "cuda" for d in before):
            torch.cuda.empty_cache()
        else:
            accelerator_call(before[0].kind, "empty_cache")
    except Exception as exc:  # noqa: BLE001
        return ActionResult(False, f"empty_cache() failed: {type(exc).__name__}: {exc}")
    after = {d.device: d for d in _ready_devices()}
    released, changes = 0, []
    for d in before:
        now = after.get(d.device)
        if now is not None and d.reserved_bytes is not None and now.reserved_bytes is not None:
            released += d.reserved_bytes - now.reserved_bytes
            if now.reserved_bytes != d.reserved_bytes or len(before) == 1:
                changes.append(_change(f"{d.device} reserved", d.reserved_bytes, now.reserved_bytes))
    return ActionResult(True, f"empty_cache() released {human_bytes(released)} (expected {human_bytes(expected)}): "
                        + "; ".join(changes), released)


def reset_peak_stats() -> ActionResult:
    """Reset the allocator's peak counters (and, on Linux, this process's peak resident memory)."""
    from .memory import accelerator_call, read_process, reset_process_peak

    changes, lowered = [], 0
    before = _ready_devices()
    for d in before:
        try:
            if d.kind == "cuda":
                torch.cuda.reset_peak_memory_stats(d.torch_index)
            else:
                accelerator_call(d.kind, "reset_peak_memory_stats", d.torch_index)
        except Exception as exc:  # noqa: BLE001
            return ActionResult(False, f"could not reset the peaks of {d.device}: {type(exc).__name__}: {exc}")
    after = {x.device: x for x in _ready_devices()}
    for d in before:
        now = after[d.device]
        lowered += (d.peak_allocated_bytes or 0) - (now.peak_allocated_bytes or 0)
        if not d.peak_reserved_bytes and not d.peak_allocated_bytes and len(before) > 1:
            continue  # a device nothing ever used: nothing to say
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


#: Callables that drop a shell's own references to the last error (IPython keeps one in its
#: traceback formatter and one in the last execution result); the IPython layer registers one.
error_holders: list[Callable[[], None]] = []


def release_traceback() -> ActionResult:
    """Release the last error: its traceback's frames (and their tensors) and every reference to it."""
    if getattr(sys, "last_traceback", None) is None and getattr(sys, "last_value", None) is None:
        return ActionResult(False, "nothing to release: there is no last error")
    _clear_last_error()
    return ActionResult(True, "released the last error's traceback (%debug and %tb no longer see it)")


def _clear_last_error() -> None:
    value = getattr(sys, "last_value", None)
    seen: set[int] = set()
    while isinstance(value, BaseException) and id(value) not in seen:
        seen.add(id(value))
        if value.__traceback__ is not None:
            traceback.clear_frames(value.__traceback__)  # drops the frames' locals wherever the error lives on
        value = value.__cause__ or value.__context__
    tb = getattr(sys, "last_traceback", None)
    if tb is not None:
        traceback.clear_frames(tb)
    del tb, value  # this frame must not keep the error alive through the collection below
    for name in ("last_traceback", "last_value", "last_type", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    for forget in list(error_holders):
        try:
            forget()
        except Exception:  # noqa: BLE001 - releasing more is best effort; the above is done
            pass
    # An exception and its traceback often sit in a reference cycle (a handler that kept the
    # error, a renderer): what was released is freed now, not at the collector's next pass.
    gc.collect()
