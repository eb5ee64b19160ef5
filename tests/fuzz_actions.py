"""Fixes of several steps applied with a fault injected, counted.

For one seed: a small training namespace (a model with a part on the simulated device and a
plain tensor attribute, its optimizer after a step, an input, a batch list), a fix of two to
four steps drawn from the moves, container moves, optimizer-state moves and buffer
registrations the diagnosis makes, and one fault at a drawn call: the namespace refusing an
assignment, ``torch.utils.swap_tensors`` failing, a copy running out of memory, an
optimizer's state or a module's buffers refusing a store, or a KeyboardInterrupt (SIGINT's
handler called at a drawn line of the fix, as CPython calls it between two bytecodes:
``fuzz_interrupts``). The fault fires once, so an undo after it works; with ``undo_fails`` it
keeps firing, so undoing fails too.

Counted: fixes that raised into the caller (``tracebacks``); failed fixes that left something
changed without naming it (``half_done``); failed fixes that say "nothing was changed" while
something was, or name what stays changed while nothing was (``untruthful``).
"""

from __future__ import annotations

import random
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch


@dataclass
class ActionCounts:
    fixes: int = 0
    failed: int = 0
    interrupted: int = 0
    tracebacks: list[str] = field(default_factory=list)
    half_done: list[str] = field(default_factory=list)
    untruthful: list[str] = field(default_factory=list)

    def add(self, other: ActionCounts) -> None:
        self.fixes += other.fixes
        self.failed += other.failed
        self.interrupted += other.interrupted
        self.tracebacks += other.tracebacks
        self.half_done += other.half_done
        self.untruthful += other.untruthful


class _Fault:
    """Raises on the ``at``-th call it is asked about (and every later one when ``sticky``)."""

    def __init__(self, at: int, sticky: bool):
        self.at, self.sticky, self.calls = at, sticky, 0

    def fires(self) -> bool:
        self.calls += 1
        return self.calls == self.at or (self.sticky and self.calls > self.at)


class _Refusing(dict):
    """A dict (the namespace, an optimizer's state of one parameter, a module's buffers)
    whose assignments a fault refuses."""

    fault: _Fault | None = None

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.fault is not None and self.fault.fires():
            raise RuntimeError("injected: the store refuses")
        dict.__setitem__(self, key, value)


def _namespace(sim: torch.device) -> dict[str, Any]:
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 4))
    model.pe = torch.ones(4)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 4)).sum().backward()
    opt.step()
    model[:2].to(sim)
    return {"model": model, "opt": opt, "x": torch.ones(8, 4), "batch": [torch.ones(2), "label"]}


def fingerprint(ns: dict[str, Any]) -> Any:
    """What a fix may change, by identity and device."""
    model, opt = ns["model"], ns["opt"]
    tensors = [(n, id(t), str(t.device), id(t.grad) if t.grad is not None else None)
               for n, t in [*model.named_parameters(), *model.named_buffers()]]
    state = sorted((id(p), str(k), id(v), str(v.device)) for p, s in opt.state.items() for k, v in s.items()
                   if isinstance(v, torch.Tensor))
    return (tuple((k, id(v)) for k, v in sorted(ns.items())), tuple(tensors), tuple(state),
            id(model.__dict__.get("pe")), tuple(id(v) for v in ns["batch"]))


def _steps(rng: random.Random) -> tuple[Any, ...]:
    from devinspect.model.fixes import Move, MoveContainer, MoveOptimizerState, RegisterBuffer

    pool = [Move("model", "sim:0"), Move("model[2]", "sim:0"), Move("x", "sim:0"), MoveContainer("batch", "sim:0"),
            MoveOptimizerState("opt"), RegisterBuffer("model", "pe", "sim:0")]
    return tuple(rng.sample(pool, rng.randint(2, 4)))


def fuzz_fix(seed: int, sim: torch.device) -> ActionCounts:
    """One fix of several steps with one fault, applied through ``apply_fix`` and checked."""
    from fuzz_interrupts import Interrupter, said

    from devinspect.actions import apply_fix
    from devinspect.model.fixes import Steps

    rng = random.Random(seed)
    counts = ActionCounts(fixes=1)
    ns = _Refusing(_namespace(sim))
    steps = _steps(rng)
    kind = rng.choice(["namespace", "swap", "copy", "state", "buffers", "interrupt"])
    fault = _Fault(rng.randint(1, 6), sticky=rng.random() < 0.3)
    interrupter = Interrupter(rng.randint(1, 500)) if kind == "interrupt" else None
    raised: BaseException | None = None
    with ExitStack() as stack:
        if kind == "interrupt":
            pass
        elif kind == "namespace":
            ns.fault = fault
        elif kind == "state":
            opt = ns["opt"]
            for p in list(opt.state):
                refusing = _Refusing(opt.state[p])
                refusing.fault = fault
                opt.state[p] = refusing
        elif kind == "buffers":
            for m in ns["model"].modules():
                m._buffers = _Refusing(m._buffers)
                m._buffers.fault = fault
        else:
            target = (torch.utils, "swap_tensors") if kind == "swap" else (torch.Tensor, "to")
            real = getattr(*target)

            def flaky(*args: Any, real: Any = real, **kwargs: Any) -> Any:
                if fault.fires():
                    raise torch.OutOfMemoryError("injected: out of memory") if kind == "copy" else \
                        RuntimeError("injected: the swap fails")
                return real(*args, **kwargs)

            stack.enter_context(mock.patch.object(*target, flaky))
        before = fingerprint(ns)
        try:
            if interrupter is not None:
                sys.settrace(interrupter)
            result = apply_fix(ns, Steps(steps))
        except KeyboardInterrupt as exc:  # raised again by the fix, once it undid what it did (or finished)
            raised, result = exc, None
        except Exception as exc:  # what is counted
            counts.tracebacks.append(f"{steps} with a {kind} fault: {type(exc).__name__}: {exc}"[:300])
            return counts
        finally:
            sys.settrace(None)
            ns.fault = None
            fault.at = -1  # the fingerprint below reads through the same stores
            fault.sticky = False
    changed = fingerprint(ns) != before
    if not torch.is_grad_enabled():  # a ``no_grad`` block left without its exit
        torch.set_grad_enabled(True)
        counts.half_done.append(f"{[type(s).__name__ for s in steps]} with a {kind} fault: autograd left off")
    if raised is not None:
        counts.interrupted += 1
        text = said(None, raised)
        what = f"{[type(s).__name__ for s in steps]} interrupted: {text or '(said nothing)'}"[:300]
        if "finished" in text:  # complete, then interrupted: it says what it did
            return counts
        counts.failed += 1
        left = "stay changed" in text
        if changed and not left:
            counts.half_done.append(what)
        if (changed and "nothing was changed" in text) or (left and not changed) or (changed and not text):
            counts.untruthful.append(what)
        return counts
    if result.ok:
        return counts
    counts.failed += 1
    what = f"{[type(s).__name__ for s in steps]} with a {kind} fault: {result.message}"[:300]
    if changed and not result.left:
        counts.half_done.append(what)
    if changed == ("nothing was changed" in result.message) or (result.left and not changed):
        counts.untruthful.append(what)
    return counts


def fuzz_fixes(count: int, sim: torch.device, start: int = 0) -> ActionCounts:
    total = ActionCounts()
    for seed in range(start, start + count):
        total.add(fuzz_fix(seed, sim))
    return total
