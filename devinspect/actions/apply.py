"""Carrying out a fix's typed action: buffers, optimizer state, a rebuilt optimizer, or
several steps in order."""

from __future__ import annotations

import ast
from typing import Any, Iterable, MutableMapping

import torch

from ..diagnose import fix_builders
from ..model import (
    EditCell,
    EmptyCache,
    Move,
    MoveContainer,
    MoveOptimizerState,
    RebuildOptimizer,
    RegisterBuffer,
    ReleaseGraphs,
    ReleaseHistory,
    SourceEdit,
    Steps,
)
from .binding import MadeFor, rebound
from .cells import edit_cell
from .interrupts import atomic, checkpoint
from .memory_release import empty_cache, release_history
from .move import move, release_graphs
from .result import ActionResult, NamePath, find_named, held_bytes, human, parse_device, reason
from .undo import UndoLog, detail_of, escaped, failure


@atomic
def register_buffer(namespace: MutableMapping[str, Any], name: str, attr: str, device: str | None,
                    undo: UndoLog | None = None) -> ActionResult:
    """Turn the plain tensor attribute ``name.attr`` into a non-persistent buffer on ``device``.

    Checked first: the attribute must be a tensor in the module's own ``__dict__``,
    a plain identifier, and free of clashes (a parameter, submodule or buffer of
    that name, or a class attribute such as ``pe = None`` that ``register_buffer``
    refuses). Otherwise nothing changes.
    """
    module, failed = find_named(namespace, name)
    if failed is not None:
        return failed
    if not isinstance(module, torch.nn.Module):
        return ActionResult(False, f"{name} is a {type(module).__name__}, not a module")
    if not isinstance(attr, str) or not attr or "." in attr or not attr.isidentifier():
        return ActionResult(False, f"{attr!r} cannot be a buffer name (it must be a plain identifier)")
    for store, what in ((module._parameters, "a parameter"), (module._modules, "a submodule"),
                        (module._buffers, "already a buffer")):
        if attr in store:
            if what.startswith("already"):
                return ActionResult(False, f"{name}.{attr} is {what}; nothing to register", idle=True)
            return ActionResult(False, f"{name} already has {what} called {attr!r}; nothing was changed")
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
        target, failed = parse_device(device)
        if failed is not None:
            return failed
    try:
        with torch.no_grad():
            moved = plain.to(target) if target is not None else plain
    except Exception as exc:
        return ActionResult(False, f"could not move {name}.{attr} to {target}: {reason(exc)} (nothing was changed)")
    del module.__dict__[attr]
    try:
        module.register_buffer(attr, moved, persistent=False)
    except Exception as exc:  # put the attribute back exactly as it was
        module._buffers.pop(attr, None)
        module.__dict__[attr] = plain
        return ActionResult(False, f"could not register {name}.{attr}: {reason(exc)} (nothing was changed)")
    where = f" on {target}" if target is not None else ""
    nbytes = held_bytes(moved) if moved is not plain else held_bytes(plain)
    if undo is not None:
        def unregister() -> None:
            del module._buffers[attr]
            module.__dict__[attr] = plain

        undo.add(f"{name}.{attr} (a buffer{where})", unregister)
    return ActionResult(True, f'{name}.register_buffer("{attr}", …, persistent=False){where}: .to() moves it from now on '
                              f"({human(nbytes)})", nbytes)


@atomic
def move_optimizer_state(namespace: MutableMapping[str, Any], name: str, undo: UndoLog | None = None) -> ActionResult:
    """Move each state tensor of the optimizer to its own parameter's device (not Adam's CPU step):
    every one or none (a state store that refuses one gets back those set before it)."""
    opt, failed = find_named(namespace, name)
    if failed is not None:
        return failed
    if not isinstance(opt, torch.optim.Optimizer):
        return ActionResult(False, f"{name} is a {type(opt).__name__}, not an optimizer")
    planned: list[tuple[dict, Any, torch.Tensor, torch.Tensor]] = []
    moved = 0
    try:
        for p, state in opt.state.items():
            if not isinstance(p, torch.Tensor) or not isinstance(state, dict):
                continue
            for key, value in state.items():
                if (isinstance(value, torch.Tensor) and value.device != p.device
                        and not fix_builders.stays_on_host(tuple(value.shape), str(value.device))):
                    with torch.no_grad():
                        new = value.to(p.device)
                    planned.append((state, key, value, new))
                    moved += held_bytes(new)
                    checkpoint()
    except Exception as exc:  # nothing has been replaced yet
        return ActionResult(False, f"could not move the state of {name}: {reason(exc)} (nothing was changed)")
    if not planned:
        return ActionResult(False, f"the state of {name} is already with its parameters", idle=True)
    log = UndoLog()
    params = {id(p): f"param {i}" for i, p in enumerate(p for g in opt.param_groups for p in g["params"])}
    owners = {id(s): params.get(id(p), "…") for p, s in opt.state.items()}
    with log.undone_on_error():
        for state, key, old, new in planned:
            try:
                state[key] = new
            except Exception as exc:  # the copies made so far are dropped with this frame
                return failure(f"could not move the state of {name}: {reason(exc)}", log.rollback())
            log.add(f"{name}.state[{owners.get(id(state), '…')}][{key!r}] (on {new.device})",
                    lambda state=state, key=key, old=old: state.__setitem__(key, old))
    if undo is not None:
        undo.extend(log)
    return ActionResult(True, f"moved {len(planned)} state tensors of {name}, each to its parameter's device "
                              f"({human(moved)})", moved)


@atomic
def rebuild_optimizer(namespace: MutableMapping[str, Any], name: str, module_name: str, class_path: str,
                      kwargs: Iterable[tuple[str, str]] = (), schedulers: Iterable[Any] = (),
                      undo: UndoLog | None = None) -> ActionResult:
    """Replace the optimizer ``name`` with a new one of ``class_path`` over ``module_name``'s
    parameters, and each scheduler of ``schedulers`` (``RebuildScheduler``) with one driving it.
    Everything is made first; names are rebound only when all of it worked."""
    module, failed = find_named(namespace, module_name)
    if failed is not None:
        return failed
    if not isinstance(module, torch.nn.Module):
        return ActionResult(False, f"{module_name} is not a module")
    prefix, _, cls_name = class_path.rpartition(".")
    cls = getattr(torch.optim, cls_name, None) if prefix == "torch.optim" else None
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        return ActionResult(False, f"{class_path} is not a torch.optim optimizer")
    made: list[tuple[str, Any]] = []
    try:
        values = {k: ast.literal_eval(v) for k, v in kwargs}
        new = cls(module.parameters(), **values)
        made.append((name, new))
        for sched in schedulers:
            made.append((sched.name, _scheduler(namespace, sched, new)))
    except Exception as exc:  # nothing has been rebound yet
        return ActionResult(False, f"could not create {name} again: {reason(exc)} (nothing was changed)")
    log = UndoLog()
    with log.undone_on_error():
        for n, value in made:
            path = NamePath(n)
            try:
                old = path.get(namespace)
                path.set(namespace, value)
            except Exception as exc:  # put back what was rebound
                return failure(f"could not assign {n}: {reason(exc)}", log.rollback())
            log.add(f"{n} (made again)", lambda path=path, old=old: path.set(namespace, old))
    if undo is not None:
        undo.extend(log)
    count = sum(1 for _ in module.parameters())
    also = f"; {', '.join(n for n, _ in made[1:])} made again for it" if len(made) > 1 else ""
    return ActionResult(True, f"{name} = {class_path}({module_name}.parameters()…): a new optimizer over "
                              f"{count} parameters, with fresh state{also}")


def _scheduler(namespace: MutableMapping[str, Any], sched: Any, optimizer: Any) -> Any:
    """A scheduler made again for ``optimizer``: its class from ``torch.optim``, its arguments
    literals or attributes of the old scheduler (expressions devinspect wrote, evaluated with
    nothing but the old scheduler's root variable in reach)."""
    module_path, _, cls_name = sched.class_path.rpartition(".")
    module = {"torch.optim.lr_scheduler": torch.optim.lr_scheduler, "torch.optim.swa_utils": torch.optim.swa_utils}
    cls = getattr(module.get(module_path), cls_name, None) if module_path in module else None
    if not isinstance(cls, type):
        raise ValueError(f"{sched.class_path} is not a PyTorch scheduler")
    root = NamePath(sched.name).root
    scope = {root: namespace[root]}
    values = {}
    for key, expr in sched.kwargs:
        try:
            values[key] = ast.literal_eval(expr)
        except (ValueError, SyntaxError):
            values[key] = eval(expr, {"__builtins__": {}}, scope)  # an attribute path devinspect wrote
    return cls(optimizer, **values)


@atomic
def move_container(namespace: MutableMapping[str, Any], name: str, device: str,
                   undo: UndoLog | None = None) -> ActionResult:
    """Move the tensors of the list, tuple or dict ``name`` to ``device``: a new container of the
    same type (anything in it that is not a tensor kept as it is; a dict in it, as a detector's
    targets are, a new dict the same way) replaces the old one once every tensor has been
    copied; otherwise nothing changes."""
    container, failed = find_named(namespace, name)
    if failed is not None:
        return failed
    target, failed = parse_device(device)
    if failed is not None:
        return failed
    kind = type(container)
    if kind not in (list, tuple, dict):
        return ActionResult(False, f"{name} is a {kind.__name__}, not a list, tuple or dict (nothing was changed)")
    items = list(container.items()) if kind is dict else list(enumerate(container))
    moved, nbytes, count = [], 0, 0

    def moved_value(value: Any) -> Any:
        nonlocal nbytes, count
        if isinstance(value, torch.Tensor):
            count += 1
            if value.device != target:
                with torch.no_grad():
                    value = value.to(target)
                nbytes += held_bytes(value)
                checkpoint()
        return value

    try:
        for key, value in items:
            if type(value) is dict and kind is not dict:
                value = {k: moved_value(v) for k, v in value.items()}
            moved.append((key, moved_value(value)))
    except Exception as exc:  # nothing has been replaced yet
        return ActionResult(False, f"could not move {name} to {target}: {reason(exc)} (nothing was changed)")
    new: Any = dict(moved) if kind is dict else kind(value for _, value in moved)
    path = NamePath(name)
    try:
        path.set(namespace, new)
    except Exception as exc:  # the old container is still in place
        return ActionResult(False, f"could not assign {name}: {reason(exc)} (nothing was changed)")
    if undo is not None:
        undo.add(f"{name} (its tensors on {target})", lambda: path.set(namespace, container))
    return ActionResult(True, f"moved the {count} tensors of {name} to {target}, keeping the {kind.__name__} "
                              f"({human(nbytes)})", nbytes)


@atomic
def apply_fix(namespace: MutableMapping[str, Any], action: Any, *, displayhook: Any = None,
              hidden: MutableMapping[str, Any] | None = None, undo: UndoLog | None = None,
              made_for: MadeFor | None = None) -> ActionResult:
    """Carry out a fix's typed action (:class:`~devinspect.model.fixes.Move`, ``RegisterBuffer`` …).

    Anything else (a malformed or unknown action) returns ``ok=False`` and changes nothing.
    With ``undo``, an action that succeeds logs there how to put back what it changed. With
    ``made_for`` (:func:`~devinspect.actions.binding.made_for`, taken when the fix was made), a
    fix whose names now refer to other objects (the cell ran again) is refused.
    """
    if made_for is not None:
        stale = rebound(namespace, made_for)
        if stale is not None:
            return ActionResult(False, stale + " (nothing was changed)")
    try:
        if isinstance(action, Move) and isinstance(action.name, str) and isinstance(action.device, str):
            return move(namespace, action.name, action.device, undo)
        if isinstance(action, MoveContainer) and isinstance(action.name, str) and isinstance(action.device, str):
            return move_container(namespace, action.name, action.device, undo)
        if isinstance(action, EditCell) and isinstance(action.edit, SourceEdit):
            return edit_cell(action.edit, undo)
        if isinstance(action, RegisterBuffer) and isinstance(action.module, str):
            return register_buffer(namespace, action.module, action.attr, action.device or None, undo)
        if isinstance(action, MoveOptimizerState) and isinstance(action.optimizer, str):
            return move_optimizer_state(namespace, action.optimizer, undo)
        if isinstance(action, RebuildOptimizer) and isinstance(action.optimizer, str):
            return rebuild_optimizer(namespace, action.optimizer, action.module, action.class_path, action.kwargs,
                                     action.schedulers, undo)
        if isinstance(action, ReleaseGraphs):
            return release_graphs(namespace, action.names, action.traceback, undo)
        if isinstance(action, ReleaseHistory):
            return release_history(namespace, displayhook, hidden, undo=undo)
        if isinstance(action, EmptyCache):
            return empty_cache()  # gives the allocator's unused cache back: no object of the user's changes
        if isinstance(action, Steps) and action.actions:
            return _steps(namespace, action.actions, displayhook, hidden, undo)
    except Exception as exc:  # an action never raises into the user's session
        # Every action catches what it knows how to undo; an error that still gets here was undone
        # by the steps it passed through, which say what stays (unknown where none could).
        return escaped(f"the fix failed: {reason(exc)}", exc)
    return ActionResult(False, f"not a fix devinspect can apply: {action!r}")


def _steps(namespace: MutableMapping[str, Any], steps: tuple[Any, ...], displayhook: Any,
           hidden: MutableMapping[str, Any] | None, undo: UndoLog | None) -> ActionResult:
    """Several actions in order, all or nothing: when one fails, every step done before it is
    undone (newest first), and the one message says what failed and what, if anything, stays."""
    log = UndoLog()
    done: list[str] = []
    changed = total = 0
    with log.undone_on_error():
        for step in steps:
            checkpoint()
            result = apply_fix(namespace, step, displayhook=displayhook, hidden=hidden, undo=log)
            if not result.ok and not result.idle:  # a step an earlier one made needless is no failure
                if not changed:
                    return result
                return failure(detail_of(result), [*result.left, *log.rollback()], undone=changed,
                               follow_up=result.follow_up)
            done.append(result.message)
            changed += result.ok
            total += result.nbytes
    if undo is not None:
        undo.extend(log)
    return ActionResult(bool(changed), "; ".join(done), total, idle=not changed)


@atomic
def apply_after_release(namespace: MutableMapping[str, Any], release: Any, action: Any, *,
                        displayhook: Any = None, hidden: MutableMapping[str, Any] | None = None,
                        made_for: MadeFor | None = None) -> ActionResult:
    """Release the autograd graphs ``release`` names, then apply ``action`` (the "Release graphs,
    then apply" choice a refused move offers). The release cannot be part of the action's undo: a
    graph kept for an undo still holds the tensors PyTorch refuses to swap. So when the action then
    fails, the release stays, and the result says what it did beside why the action failed."""
    if made_for is not None:
        stale = rebound(namespace, made_for)
        if stale is not None:
            return ActionResult(False, stale + " (nothing was changed)")
    released = apply_fix(namespace, release, displayhook=displayhook, hidden=hidden)
    if not released.ok and not released.idle:
        return released
    applied = apply_fix(namespace, action, displayhook=displayhook, hidden=hidden)
    if applied.ok:
        return ActionResult(True, f"{released.message}; then {applied.message}", applied.nbytes)
    if released.idle:
        return applied
    return ActionResult(False, f"{released.message}, and that stays (the values are kept, their graphs are gone); "
                               f"then {applied.message}", 0, applied.follow_up, detail=detail_of(applied),
                        left=(released.message.removeprefix("released autograd graphs: "), *applied.left))
