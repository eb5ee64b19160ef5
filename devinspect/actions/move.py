"""Moving a tensor or a module to another device, all or nothing; releasing the autograd
graphs that keep PyTorch from moving parameters."""

from __future__ import annotations

import sys
from typing import Any, Iterable, MutableMapping

import torch

from ..collect import frame_locals, instance_dict, script_object, type_is_one_of
from ..diagnose import fix_builders
from ..model import ReleaseGraphs
from ..runtime import tensor_getters
from .interrupts import atomic, checkpoint
from .memory_release import clear_last_error
from .reach import unreached
from .result import ActionResult, CannotMove, NamePath, find_named, held_bytes, human, parse_device, reason
from .undo import UndoLog, detail_of, failure


@atomic
def move(namespace: MutableMapping[str, Any], name: str, device: str, undo: UndoLog | None = None) -> ActionResult:
    """Move the tensor or module called ``name`` to ``device``: completely, or not at all.

    A module keeps its Parameter objects and their gradients (so an optimizer that
    holds them stays valid, as ``Module.to`` does on CUDA), its buffers move, and the
    state of every optimizer in the namespace that holds its parameters follows each
    parameter. A tensor is reassigned (``x = x.to(device)``); a leaf that requires
    grad, or a Parameter, keeps its identity instead. If any tensor cannot move (out
    of memory, a meta tensor, a parameter an autograd graph saved), everything moved
    so far goes back and the result names the tensor and the reason. With ``undo``, a move
    that succeeds logs there how to put everything back (a later step of a fix may fail).
    """
    value, failed = find_named(namespace, name)
    if failed is not None:
        return failed
    target, failed = parse_device(device)
    if failed is not None:
        return failed
    mover = Mover(namespace, target)
    if not isinstance(value, (torch.nn.Module, torch.Tensor)):
        return ActionResult(False, f"{name} is a {type(value).__name__}, not a tensor or module")
    with mover.undo.undone_on_error():
        result = mover.module(name, value) if isinstance(value, torch.nn.Module) else mover.tensor(name, value)
    if result.ok and undo is not None:
        undo.extend(mover.undo)
    return result


class Mover:
    """One all-or-nothing move: plan, copy on the side, then commit with an undo log."""

    def __init__(self, namespace: MutableMapping[str, Any], target: torch.device):
        self.namespace = namespace
        self.target = target
        self.swap_flag = bool(torch.__future__.get_swap_module_params_on_conversion())
        #: What each committed change restores: run newest first when a move fails half way.
        self.undo = UndoLog()
        self.moved_bytes = 0

    # -- modules ----------------------------------------------------------------

    def module(self, name: str, module: torch.nn.Module) -> ActionResult:
        params: dict[int, tuple[str, torch.nn.Parameter]] = {}
        buffers: list[tuple[torch.nn.Module, str, str, torch.Tensor]] = []
        recomputed: list[tuple[torch.nn.Module, str]] = []
        named = _named_modules(module, name)
        for path, sub in named:
            for key, p in list(sub._parameters.items()):
                if p is not None and id(p) not in params:
                    params[id(p)] = (_child(path, key, sub), p)
            for key, b in list(sub._buffers.items()):
                if b is not None:
                    buffers.append((sub, key, _child(path, key, sub), b))
            for attr in _recomputed(sub):
                recomputed.append((sub, attr))
        problem = self._refusal([(n, p) for n, p in params.values()] + [(n, b) for _, _, n, b in buffers])
        if problem is None and not self._all_in_place([p for _, p in params.values()] + [b for *_, b in buffers]) \
                and any(_is_torchscript(sub) for _, sub in named):
            problem = self._torchscript_refusal(name)
        if problem is not None:
            return problem
        # Attributes weight_norm & co. recompute before each forward hold a graph that saves
        # their parameters; they are derived state, so a swap move drops that graph.
        if not self._all_in_place(p for _, p in params.values()):
            for sub, attr in recomputed:
                current = sub.__dict__.get(attr)
                if isinstance(current, torch.Tensor) and current.grad_fn is not None:
                    self.undo.add(f"the attribute {attr} of {type(sub).__name__} (detached from its graph)",
                                  lambda sub=sub, attr=attr, current=current: sub.__dict__.__setitem__(attr, current))
                    sub.__dict__[attr] = current.detach()
            held = self._held([(n, p) for n, p in params.values()])
            if held is not None:
                stuck = self.undo.rollback()
                return held if not stuck else failure(f"could not move {name}: {detail_of(held)}", stuck)
        try:
            planned_params = [(n, p, self._copy(n, p), self._copy(f"{n}.grad", p.grad) if p.grad is not None else None)
                              for n, p in params.values()]
            planned_buffers = [(sub, key, n, self._copy(n, b)) for sub, key, n, b in buffers]
            planned_state = self._plan_optimizer_state({id(p): n for n, p in params.values()})
            # What moves, not what was looked at: parts already on the target stay as they are.
            moving = (sum(new is not p for _, p, new, _ in planned_params),
                      sum(new is not b for (*_, new), (*_, b) in zip(planned_buffers, buffers)),
                      sum(g is not None and g is not p.grad for _, p, _, g in planned_params))
        except CannotMove as exc:
            return self._undone(f"could not move {name} to {self.target}", str(exc))
        try:
            for n, p, new, new_grad in planned_params:
                self._commit_parameter(n, p, new, new_grad)
            for sub, key, n, new in planned_buffers:
                old = sub._buffers[key]
                sub._buffers[key] = new  # logged once done: a refused assignment has nothing to undo
                self.undo.add(f"{n} (on {new.device})",
                              lambda sub=sub, key=key, old=old: sub._buffers.__setitem__(key, old))
            states = self._commit_state(planned_state)
        except Exception as exc:  # anything half done is undone
            return self._undone(f"could not move {name} to {self.target}", reason(exc))
        # Read back through the modules themselves: a TorchScript module keeps its tensors in
        # C++, where a swap of the Python objects does not reach.
        left = [(_child(path, key, sub), t) for path, sub in named
                for group in (sub._parameters, sub._buffers) for key, t in list(group.items())
                if t is not None and not self._on_target(t)]
        if left:
            return self._undone(f"could not move {name} to {self.target}", self._left_behind(module, left))
        counts = f"{moving[0]} parameters, {moving[1]} buffers"
        if moving[2]:
            counts += f", {moving[2]} gradients"
        if states:
            counts += f", {states} optimizer state tensors"
        return ActionResult(True, f"moved {name} to {self.target}: {counts} ({human(self.moved_bytes)})",
                            self.moved_bytes)

    # -- tensors ----------------------------------------------------------------

    def tensor(self, name: str, t: torch.Tensor) -> ActionResult:
        keep_identity = isinstance(t, torch.nn.Parameter) or (t.requires_grad and t.is_leaf)
        problem = self._refusal([(name, t)])
        if problem is not None:
            return problem
        if not keep_identity:
            why = unreached(self.namespace, name)
            if why is not None:
                return failure(f"could not move {name}: {why}")
            try:
                new = self._copy(name, t)
            except CannotMove as exc:
                return failure(f"could not move {name} to {self.target}: {exc}")
            path = NamePath(name)
            try:
                path.set(self.namespace, new)
            except Exception as exc:  # the variable still holds the old tensor
                return failure(f"could not assign {name}: {reason(exc)}")
            self.undo.add(f"{name} (on {new.device})", lambda: path.set(self.namespace, t))
            try:
                reached = path.get(self.namespace) is new
            except Exception:  # a name that no longer reads back is no move
                reached = False
            if not reached:
                return self._undone(f"could not move {name}", "after the assignment the name still reads the old "
                                    "tensor (what holds it keeps its own reference), so the move would do nothing")
            return ActionResult(True, f"{name} = {name}.to({str(self.target)!r}) ({human(self.moved_bytes)})",
                                self.moved_bytes)
        if not self._all_in_place([t]):
            try:
                holders = NamePath(name).holders(self.namespace)
            except Exception:  # the name was found a moment ago; a holder that fails to read is no module
                holders = []
            if any(_is_torchscript(h) for h in holders):
                return self._torchscript_refusal(name)
            held = self._held([(name, t)])
            if held is not None:
                return held
        try:
            new = self._copy(name, t)
            new_grad = self._copy(f"{name}.grad", t.grad) if t.grad is not None else None
            planned_state = self._plan_optimizer_state({id(t): name})
        except CannotMove as exc:
            return failure(f"could not move {name} to {self.target}: {exc}")
        try:
            self._commit_parameter(name, t, new, new_grad)
            states = self._commit_state(planned_state)
        except Exception as exc:
            return self._undone(f"could not move {name} to {self.target}", reason(exc))
        now, _ = find_named(self.namespace, name)
        if isinstance(now, torch.Tensor) and not self._on_target(now):
            return self._undone(f"could not move {name} to {self.target}", self._left_behind(None, [(name, now)]))
        what = "Parameter" if isinstance(t, torch.nn.Parameter) else "leaf tensor"
        extra = f", and {states} optimizer state tensors" if states else ""
        return ActionResult(True, f"moved {name} to {self.target}, the same {what}{extra} ({human(self.moved_bytes)})",
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

    def _on_target(self, t: torch.Tensor) -> bool:
        device = t.device
        return device.type == self.target.type and (self.target.index is None or device.index == self.target.index)

    def _torchscript_refusal(self, name: str) -> ActionResult:
        return ActionResult(False, f"could not move {name} to {self.target}: its tensors are held by a TorchScript "
                                   "module, in C++, where this move (a swap of the tensors) cannot reach; move the "
                                   f"model before scripting it: torch.jit.script(model.to({str(self.target)!r})) "
                                   "(nothing was changed)")

    @staticmethod
    def _left_behind(module: torch.nn.Module | None, left: list[tuple[str, torch.Tensor]]) -> str:
        """Which tensors, read back after the move, are not on the target."""
        names = ", ".join(n for n, _ in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        return f"{names} stayed on {left[0][1].device} when read back through {'the module' if module else 'its name'}"

    def _in_place(self, t: torch.Tensor) -> bool:
        return fix_builders.moves_in_place(str(t.device), str(self.target), self.swap_flag) and \
            type_is_one_of(t, (torch.Tensor, torch.nn.Parameter))

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
        except Exception as exc:  # an OOM, an unsupported dtype: nothing changed yet
            raise CannotMove(f"{name}: {reason(exc)}") from None
        if new is not t:
            # What the copy allocated: an expanded view is copied whole, a (1000, 3) expand of a (3,)
            # tensor as 12,000 bytes, though the view held 12.
            self.moved_bytes += held_bytes(new)
        checkpoint()
        return new

    def _commit_parameter(self, name: str, p: torch.Tensor, new: torch.Tensor, new_grad: torch.Tensor | None) -> None:
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

            self.undo.add(f"{name}{' and its gradient' if old_grad is not None else ''} (on {new.device})", undo)
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
            moved_grad = p.grad
            p.grad = None
            try:
                torch.utils.swap_tensors(p, replacement)
            except BaseException:
                p.grad = moved_grad  # it stays moved with its gradient, as the label says
                raise
            if grad is not None:
                p.grad = grad

        if new_grad is not None:
            p.grad = new_grad
        self.undo.add(f"{name}{' and its gradient' if grad is not None else ''} (on {new.device})", undo_swap)

    def _plan_optimizer_state(self, param_ids: dict[int, str]) -> list[tuple[dict, Any, torch.Tensor, torch.Tensor, str]]:
        """State of the namespace's optimizers for the moved parameters (by id, to their names),
        copied to the target, each with the name it is shown by."""
        planned = []
        for opt_name, opt in _optimizers(self.namespace):
            for p, state in opt.state.items():
                if id(p) not in param_ids or not isinstance(state, dict):
                    continue
                for key, v in state.items():
                    if isinstance(v, torch.Tensor) and v.device != self.target and \
                            not fix_builders.stays_on_host(tuple(v.shape), str(v.device)):
                        label = f"{opt_name}.state[{param_ids[id(p)]}][{key!r}]"
                        planned.append((state, key, v, self._copy(label, v), label))
        return planned

    def _commit_state(self, planned: list[tuple[dict, Any, torch.Tensor, torch.Tensor, str]]) -> int:
        for state, key, old, new, label in planned:
            state[key] = new
            self.undo.add(f"{label} (on {new.device})",
                          lambda state=state, key=key, old=old: state.__setitem__(key, old))
        return len(planned)

    def _undone(self, what: str, why: str) -> ActionResult:
        """A failed move, undone: "nothing was changed" only when every undo step ran."""
        return failure(f"{what}: {why}", self.undo.rollback())


def _named_modules(module: torch.nn.Module, name: str) -> list[tuple[str, torch.nn.Module]]:
    """``(path, module)`` for a module and its submodules, paths as %devices names them."""
    from ..collect import child_name

    out, seen, stack = [], set(), [(name, module)]
    while stack:
        path, m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        out.append((path, m))
        for key, child in reversed(list(m._modules.items())):
            if child is not None:
                stack.append((child_name(path, key, type(m)), child))
    return out


def _child(path: str, key: str, module: torch.nn.Module) -> str:
    from ..collect import child_name

    return child_name(path, key, type(module))


def _is_torchscript(value: Any) -> bool:
    return isinstance(value, torch.nn.Module) and script_object(instance_dict(value)) is not None


def _recomputed(module: torch.nn.Module) -> list[str]:
    names = []
    for hook in module._forward_pre_hooks.values():
        for key in ("name", "_tensor_name"):
            attr = getattr(hook, "__dict__", {}).get(key)
            if isinstance(attr, str) and attr in module.__dict__:
                names.append(attr)
    return names


def _optimizers(namespace: MutableMapping[str, Any]) -> list[tuple[str, torch.optim.Optimizer]]:
    # By their real types: another variable's __class__ or __getattribute__ is never run.
    return [(k, v) for k, v in list(namespace.items())
            if type(k) is str and not k.startswith("_") and issubclass(type(v), torch.optim.Optimizer)]


def _graph_root(value: Any) -> Any:
    """The autograd node that made ``value`` when it is a tensor (read through TensorBase's own
    getter, so a subclass's property or __torch_function__ is not run), else None."""
    if not tensor_getters.is_tensor(value):
        return None
    try:
        with torch._C.DisableTorchFunction():
            return tensor_getters.grad_fn(value)
    except Exception:  # a tensor that cannot say holds no graph we can walk
        return None


def graph_holders(namespace: MutableMapping[str, Any], param_ids: set[int],
                  limit: int = 200_000) -> tuple[list[str], bool]:
    """Namespace variables whose autograd graph reaches these parameters, and whether the
    last traceback's frames hold such a graph. Walks at most ``limit`` graph nodes."""
    budget = [limit]

    def reaches(roots: Iterable[Any]) -> bool:
        # Seen nodes are kept alive: a graph node's Python object may be made afresh for each
        # next_functions read, and a freed one's id can come back as another node's.
        stack, seen = [r for r in roots if r is not None], {}
        while stack and budget[0] > 0:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen[id(node)] = node
            budget[0] -= 1
            variable = getattr(node, "variable", None)
            if variable is not None and id(variable) in param_ids:
                return True
            for child, _ in getattr(node, "next_functions", ()):
                if child is not None:
                    stack.append(child)
        return False

    names = [k for k, v in list(namespace.items())
             if type(k) is str and not k.startswith("_") and (root := _graph_root(v)) is not None and reaches([root])]
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
        values = list(dict.values(frame_locals(frame)))
    except Exception:
        return False
    for v in values:
        vt = type(v)
        items = list.__iter__(v) if issubclass(vt, list) else tuple.__iter__(v) if issubclass(vt, tuple) else ()
        if tensor_getters.is_tensor(v) or any(map(tensor_getters.is_tensor, items)):
            return True
    return False


@atomic
def release_graphs(namespace: MutableMapping[str, Any], names: Iterable[str], traceback_too: bool,
                   undo: UndoLog | None = None) -> ActionResult:
    """Detach the tensors ``names`` (values kept, graphs dropped) and clear the last traceback's
    frames: every detach or none (the names detached before one that fails are bound again).
    With ``undo``, the detaches are logged there, and the cleared traceback as a change that stays."""
    done = []
    log = UndoLog()
    with log.undone_on_error():
        for name in names:
            value, not_found = find_named(namespace, name)
            if not_found is None and isinstance(value, torch.Tensor) and value.grad_fn is not None:
                path = NamePath(name)
                try:
                    path.set(namespace, value.detach())
                except Exception as exc:
                    return failure(f"could not detach {name}: {reason(exc)}", log.rollback())
                done.append(f"{name} = {name}.detach()")
                log.add(f"{name} (detached)", lambda path=path, value=value: path.set(namespace, value))
        if traceback_too and getattr(sys, "last_traceback", None) is not None:
            clear_last_error()
            done.append("cleared the last error's traceback (%debug no longer sees it)")
            log.add_final("the last error's traceback (released)")
    if not done:
        return ActionResult(False, "nothing to release: no variable or traceback holds such a graph", idle=True)
    if undo is not None:
        undo.extend(log)
    return ActionResult(True, "released autograd graphs: " + "; ".join(done))
