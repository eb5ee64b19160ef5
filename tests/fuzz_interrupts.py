"""Every action kind interrupted at every step, counted.

A KeyboardInterrupt is a signal: CPython runs the SIGINT handler between two bytecodes of
the main thread, and the default handler raises there. This probe does the same thing at
every line an action runs (its own lines, and the lines of ``torch.utils.swap_tensors`` and
``Module.register_buffer`` it calls): a ``sys.settrace`` line hook calls whatever SIGINT
handler is installed at that moment, once per run, at the ``n``-th line, for each ``n``
from the first line to one past the last. An action that defers interrupts records it there
and takes it at its next step boundary; one that does not gets the KeyboardInterrupt in
the middle of whatever it was doing.

For each run the namespace is compared, by value and identity, with the state before the
action and with the state after an uninterrupted run of the same action on a fresh copy:

* ``half_done``: the state is neither (some changes made, some not);
* ``lost``: a value is in neither state (a gradient gone, a module attribute gone, a
  tensor's numbers changed, a Parameter or optimizer state no longer the same object);
* ``untruthful``: what the action said (its result, or the note on the KeyboardInterrupt it
  raised again) does not match the state: "nothing was changed" when something was, a
  complete action it does not mention, a half-done one it does not name;
* ``swallowed``: an interrupt that never reached the caller.
"""

from __future__ import annotations

import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

#: Lines counted as an action's steps: devinspect's actions, and the torch functions they call
#: that change state in several statements.
_ACTIONS_DIR = str(Path(__file__).resolve().parents[1] / "devinspect" / "actions")
_TORCH_STEPS = {"swap_tensors", "register_buffer"}


@dataclass
class InterruptCounts:
    runs: int = 0
    interrupted: int = 0
    half_done: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)
    untruthful: list[str] = field(default_factory=list)
    swallowed: list[str] = field(default_factory=list)

    def add(self, other: InterruptCounts) -> None:
        self.runs += other.runs
        self.interrupted += other.interrupted
        self.half_done += other.half_done
        self.lost += other.lost
        self.untruthful += other.untruthful
        self.swallowed += other.swallowed

    def bad(self) -> int:
        return len(self.half_done) + len(self.lost) + len(self.untruthful) + len(self.swallowed)


def namespace(sim: torch.device) -> dict[str, Any]:
    """A small training run: a model split over the host and ``sim`` with a plain tensor
    attribute, its optimizer after a step, a separate head whose loss graph is still alive, an
    input, a batch list and an output-history entry on the device."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3))
    model.pe = torch.arange(3.0)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(2, 3)).sum().backward()
    opt.step()
    model[:2].to(sim)
    head = torch.nn.Linear(2, 2)
    loss = head(torch.ones(1, 2, requires_grad=True)).sum()
    w = torch.ones(2, requires_grad=True)
    w.grad = torch.full((2,), 0.5)
    out = torch.arange(4.0, device=sim)
    return {"model": model, "opt": opt, "head": head, "loss": loss, "w": w, "x": torch.arange(6.0).reshape(2, 3),
            "batch": [torch.ones(2), "label"], "Out": {3: out}, "_3": out}


def _value(t: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return ("not a tensor", type(t).__name__)
    data = tuple(t.detach().cpu().flatten().tolist())
    grad = t.grad if t.is_leaf and t.requires_grad else None
    return (str(t.device), data, t.grad_fn is not None,
            None if grad is None else (str(grad.device), tuple(grad.detach().cpu().flatten().tolist())))


def values(ns: dict[str, Any]) -> dict[str, Any]:
    """Every value an action may change, by name (no identities: two namespaces compare)."""
    out: dict[str, Any] = {}
    model, opt, head = ns["model"], ns["opt"], ns["head"]
    for prefix, module in (("model", model), ("head", head)):
        for n, t in [*module.named_parameters(), *module.named_buffers()]:
            out[f"{prefix}.{n}"] = _value(t)
    where = "attribute" if "pe" in model.__dict__ else "buffer" if "pe" in model._buffers else "gone"
    out["model.pe"] = (where, _value(model.__dict__.get("pe", model._buffers.get("pe"))))
    params = list(model.parameters())
    for i, p in enumerate(params):
        for k, v in opt.state.get(p, {}).items():
            out[f"opt.state[{i}][{k}]"] = _value(v)
    out["opt.state keys"] = len(opt.state)
    for name in ("x", "w", "loss", "_3"):
        out[name] = _value(ns[name]) if name in ns else "gone"
    out["batch"] = tuple(_value(v) for v in ns["batch"])
    out["Out"] = tuple(sorted(ns["Out"]))
    return out


def identities(ns: dict[str, Any]) -> dict[str, int]:
    """The objects every action keeps: modules, Parameters, the optimizer and its state keys."""
    model, opt = ns["model"], ns["opt"]
    out = {"model": id(model), "opt": id(opt), "head": id(ns["head"]), "w": id(ns["w"])}
    for prefix, module in (("model", model), ("head", ns["head"])):
        for n, p in module.named_parameters():
            out[f"{prefix}.{n}"] = id(p)
    out["opt.state"] = hash(tuple(sorted(id(p) for p in opt.state)))
    out["opt.params"] = hash(tuple(id(p) for g in opt.param_groups for p in g["params"]))
    return out


def action_kinds() -> dict[str, Callable[[dict[str, Any]], Any]]:
    """Every kind of action, as a function of the namespace."""
    from devinspect import actions
    from devinspect.model.fixes import (
        EmptyCache,
        Move,
        MoveContainer,
        MoveOptimizerState,
        RegisterBuffer,
        ReleaseGraphs,
        ReleaseHistory,
        Steps,
    )

    def fix(action: Any) -> Callable[[dict[str, Any]], Any]:
        return lambda ns: actions.apply_fix(ns, action)

    return {
        "move a module": lambda ns: actions.move(ns, "model", "sim:0"),
        "move a part": fix(Move("model[2]", "sim:0")),
        "move a tensor": lambda ns: actions.move(ns, "x", "sim:0"),
        "move a leaf": lambda ns: actions.move(ns, "w", "sim:0"),
        "move a list": fix(MoveContainer("batch", "sim:0")),
        "register a buffer": lambda ns: actions.register_buffer(ns, "model", "pe", "sim:0"),
        "move optimizer state": fix(MoveOptimizerState("opt")),
        "release graphs": fix(ReleaseGraphs(("loss",), False)),
        "release history": fix(ReleaseHistory()),
        "empty cache": fix(EmptyCache()),
        "a fix of four steps": fix(Steps((Move("model", "sim:0"), RegisterBuffer("model", "pe", "sim:0"),
                                          MoveContainer("batch", "sim:0"), Move("x", "sim:0")))),
        "release graphs, then move": fix(Steps((ReleaseGraphs(("loss",), False), Move("head", "sim:0")))),
    }


class Interrupter:
    """Calls the installed SIGINT handler at the ``at``-th counted line (0: never); counts lines."""

    def __init__(self, at: int):
        self.at, self.lines, self.fired = at, 0, False
        #: Whether the action held the signal when it came (a handler other than Python's own).
        self.held = False

    def __call__(self, frame: Any, event: str, arg: Any) -> Any:
        code = frame.f_code
        if not (code.co_filename.startswith(_ACTIONS_DIR) or code.co_name in _TORCH_STEPS):
            return None
        if event == "line":
            self.lines += 1
            if self.lines == self.at and not self.fired:
                self.fired = True
                handler = signal.getsignal(signal.SIGINT)
                self.held = handler is not signal.default_int_handler
                if callable(handler):
                    handler(signal.SIGINT, frame)
                else:
                    raise KeyboardInterrupt
        return self


def run(ns: dict[str, Any], act: Callable[[dict[str, Any]], Any], at: int) -> tuple[Any, BaseException | None, Any]:
    """(the action's result, the KeyboardInterrupt it raised, the interrupter: lines run, held)."""
    hook = Interrupter(at)
    sys.settrace(hook)
    try:
        result, raised = act(ns), None
    except KeyboardInterrupt as exc:
        result, raised = None, exc
    finally:
        sys.settrace(None)
    return result, raised, hook


def grad_mode_lost() -> bool:
    """Whether an interrupt left autograd switched off (a ``no_grad`` block left without its exit);
    switched on again for the next run."""
    if torch.is_grad_enabled():
        return False
    torch.set_grad_enabled(True)
    return True


def said(result: Any, raised: BaseException | None) -> str:
    """The result's message, or the notes on the interrupt and the exceptions it interrupted."""
    if raised is None:
        return getattr(result, "message", "")
    notes, seen = [], set()
    while raised is not None and id(raised) not in seen:
        seen.add(id(raised))
        notes += [str(n) for n in getattr(raised, "__notes__", ())]
        raised = raised.__context__
    return " ".join(notes)


def judge(label: str, before: dict, complete: dict, ids_before: dict, ns: dict, result: Any,
          raised: BaseException | None, held: bool, counts: InterruptCounts) -> None:
    """Count what the run left; ``held``: the action held the interrupt when it came (one that came
    with Python's own handler in place, once an action is complete, is the caller's)."""
    now = values(ns)
    text = said(result, raised)
    what = f"{label}: {text or '(said nothing)'}"[:300]
    lost = [k for k in set(before) | set(now) if now.get(k) != before.get(k) and now.get(k) != complete.get(k)]
    lost += [k for k, v in identities(ns).items() if v != ids_before[k]]
    if lost:
        counts.lost.append(f"{label}: {sorted(lost)[:4]}")
    unchanged, finished = now == before, now == complete
    if not unchanged and not finished:
        counts.half_done.append(what)
        if not (raised is not None or (result is not None and not result.ok)) or "stay changed" not in text:
            counts.untruthful.append(what)
        return
    if unchanged and not finished:
        if "stay changed" in text or (raised is not None and "finished" in text):
            counts.untruthful.append(what)
    elif finished and not unchanged:
        if raised is not None and held and "finished" not in text:
            counts.untruthful.append(what)  # done, yet the interrupt does not say so
        if "nothing was changed" in text:
            counts.untruthful.append(what)


def interrupt_every_line(kind: str, act: Callable[[dict[str, Any]], Any], sim: torch.device,
                         stride: int = 1) -> InterruptCounts:
    """``kind`` run once per counted line with the interrupt at that line, each on a fresh namespace."""
    counts = InterruptCounts()
    clean = namespace(sim)
    lines = run(clean, act, 0)[2].lines
    complete = values(clean)
    for at in range(1, lines + 2, stride):
        ns = namespace(sim)
        before, ids_before = values(ns), identities(ns)
        result, raised, hook = run(ns, act, at)
        counts.runs += 1
        label = f"{kind} interrupted at line {at}/{lines}"
        if grad_mode_lost():
            counts.lost.append(f"{label}: autograd left switched off")
        if at <= lines:
            counts.interrupted += 1
            if raised is None and hook.fired:
                counts.swallowed.append(f"{label}: {said(result, None)}"[:300])
        judge(label, before, complete, ids_before, ns, result, raised, hook.held, counts)
    return counts


#: Kinds that walk every live object (``gc.get_objects``) on each run: a coarser stride keeps a quick run quick.
WALKS_EVERYTHING = {"release history"}


def interrupt_every_action(sim: torch.device, stride: int = 1, walking_stride: int | None = None,
                           kinds: tuple[str, ...] | None = None) -> dict[str, InterruptCounts]:
    """Each kind (``kinds``: all) interrupted at every ``stride``-th line (``walking_stride`` for
    :data:`WALKS_EVERYTHING`), by kind."""
    out = {}
    for kind, act in action_kinds().items():
        if kinds is None or kind in kinds:
            every = walking_stride or stride if kind in WALKS_EVERYTHING else stride
            out[kind] = interrupt_every_line(kind, act, sim, every)
    return out
