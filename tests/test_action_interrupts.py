"""Actions keep their word under interrupts, failed undos, stale fixes and names a move cannot reach."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import weakref

import pytest
import torch
from fuzz_interrupts import (
    WALKS_EVERYTHING,
    InterruptCounts,
    action_kinds,
    identities,
    interrupt_every_action,
    namespace,
    said,
    values,
)

from devinspect import actions
from devinspect.model.fixes import Fix, Move, MoveContainer, RegisterBuffer, Steps


def _total(per_kind: dict[str, InterruptCounts]) -> InterruptCounts:
    total = InterruptCounts()
    for counts in per_kind.values():
        total.add(counts)
    return total


def _assert_none_bad(total: InterruptCounts) -> None:
    assert (total.half_done, total.lost, total.untruthful, total.swallowed) == ([], [], [], [])


def test_every_action_kind_interrupted_at_every_25th_line_is_done_or_undone_and_says_which(sim):
    """Quick: each kind but the one that walks every live object, every 25th line (the slow test: all)."""
    kinds = tuple(k for k in action_kinds() if k not in WALKS_EVERYTHING)
    total = _total(interrupt_every_action(sim, stride=25, kinds=kinds))
    assert total.interrupted > 100  # the interrupts do come, inside every kind
    _assert_none_bad(total)


@pytest.mark.slow
def test_every_action_kind_interrupted_at_every_line_is_done_or_undone_and_says_which(sim):
    """Every line of every kind; the one that walks every live object on each try (half a second
    each in a full session), at every 40th of its lines."""
    per_kind = interrupt_every_action(sim, stride=1, walking_stride=40)
    assert all(counts.interrupted > 0 for counts in per_kind.values()), per_kind
    total = _total(per_kind)
    assert total.interrupted > 3000
    _assert_none_bad(total)


def test_real_signals_from_a_timer_never_leave_an_action_half_done(sim):
    """SIGINT sent by another thread at a random moment of a module move and of a fix of four steps:
    every try ends with everything as before or everything done, nothing lost, and what the
    action said (its result, or the note on the interrupt) matches."""
    kinds = action_kinds()
    rng = random.Random(0)
    interrupted = 0
    for kind in ("move a module", "a fix of four steps"):
        act = kinds[kind]
        clean = namespace(sim)
        start = time.perf_counter()
        act(clean)
        took = time.perf_counter() - start  # only to spread the signals over the action, never asserted
        complete = values(clean)
        for attempt in range(60):
            ns = namespace(sim)
            before, ids_before = values(ns), identities(ns)
            timer = threading.Timer(rng.uniform(0, 1.3 * took), os.kill, (os.getpid(), signal.SIGINT))
            result = raised = None
            try:
                timer.start()
                try:
                    result = act(ns)
                except KeyboardInterrupt as exc:
                    raised = exc
                timer.join()
                time.sleep(0)  # a signal the timer sent is taken here at the latest
            except KeyboardInterrupt:
                timer.join()  # came after the action: the action's own word stands
            interrupted += raised is not None
            now = values(ns)
            assert identities(ns) == ids_before, kind
            assert now in (before, complete), f"{kind}, try {attempt}: half done: {said(result, raised)}"
            text = said(result, raised)
            if now == before and now != complete:
                assert "finished" not in text and "stay changed" not in text, text
            if now == complete and now != before:
                assert "nothing was changed" not in text, text
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert interrupted > 0


def test_an_interrupt_between_two_steps_undoes_the_first_and_is_raised_again(sim, monkeypatch):
    ns = namespace(sim)
    before = values(ns)
    from devinspect.actions import undo as undo_module

    real_add = undo_module.UndoLog.add
    calls = []

    def add_then_signal(self, label, restore):
        calls.append(label)
        if len(calls) == 3:  # the third change is made: a Ctrl-C comes now
            signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        real_add(self, label, restore)

    monkeypatch.setattr(undo_module.UndoLog, "add", add_then_signal)
    with pytest.raises(KeyboardInterrupt) as raised:
        actions.apply_fix(ns, Steps((Move("model", "sim:0"), RegisterBuffer("model", "pe", "sim:0"))))
    assert values(ns) == before
    (note,) = raised.value.__notes__
    assert note == "devinspect: apply fix was interrupted: nothing was changed (the 3 changes made before it were undone)"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert torch.is_grad_enabled()


def test_an_interrupt_during_the_last_change_is_raised_once_the_action_is_complete(sim, monkeypatch):
    ns = {"x": torch.ones(3)}
    real_to = torch.Tensor.to

    def to_then_signal(self, *args, **kwargs):
        out = real_to(self, *args, **kwargs)
        signal.getsignal(signal.SIGINT)(signal.SIGINT, None)
        return out

    monkeypatch.setattr(torch.Tensor, "to", to_then_signal)
    with pytest.raises(KeyboardInterrupt) as raised:
        actions.move(ns, "x", "sim:0")
    monkeypatch.undo()
    # The copy is on the side; the interrupt is taken after it, before the name is bound: nothing changed.
    assert ns["x"].device.type == "cpu"
    assert raised.value.__notes__ == ["devinspect: move was interrupted: nothing was changed"]


def test_when_the_undo_fails_the_message_names_every_change_that_stays_gradients_included(sim, monkeypatch):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model(torch.ones(1, 2)).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    real_swap = torch.utils.swap_tensors
    calls = [0]

    def swap_fails_after_two(a, b):
        calls[0] += 1
        if calls[0] > 2:
            raise RuntimeError("injected: the swap fails")
        return real_swap(a, b)

    monkeypatch.setattr(torch.utils, "swap_tensors", swap_fails_after_two)
    result = actions.move({"model": model}, "model", "sim:0")
    monkeypatch.undo()
    assert not result.ok
    stayed = [n for n, p in model.named_parameters() if p.device.type == "sim"]
    assert stayed == ["0.weight", "0.bias"]
    for n in stayed:
        assert f"model[0].{n.split('.')[1]} and its gradient (on sim:0)" in result.message, result.message
    assert "nothing was changed" not in result.message and "stay changed" in result.message
    # No gradient is lost: each is where its parameter is, with its numbers.
    for n, p in model.named_parameters():
        assert p.grad is not None and p.grad.device == p.device and torch.equal(p.grad.cpu(), grads[n])


def test_release_then_apply_says_what_the_release_did_when_the_apply_fails(sim, monkeypatch):
    head = torch.nn.Linear(2, 2)
    ns = {"head": head, "loss": head(torch.ones(1, 2, requires_grad=True)).sum()}
    refused = actions.move(ns, "head", "sim:0")
    assert not refused.ok and refused.follow_up is not None and "Release graphs" in refused.message

    def out_of_memory(self, *args, **kwargs):
        raise torch.OutOfMemoryError("injected: out of memory")

    monkeypatch.setattr(torch.Tensor, "to", out_of_memory)
    result = actions.apply_after_release(ns, refused.follow_up, Move("head", "sim:0"))
    monkeypatch.undo()
    assert not result.ok and ns["loss"].grad_fn is None
    assert result.message.startswith("released autograd graphs: loss = loss.detach(), and that stays")
    assert "OutOfMemoryError" in result.message
    assert result.left == ("loss = loss.detach()",)
    # Without the fault, the same choice moves it.
    ns["loss"] = head(torch.ones(1, 2, requires_grad=True)).sum()
    done = actions.apply_after_release(ns, refused.follow_up, Move("head", "sim:0"))
    assert done.ok and head.weight.device == sim and "then moved head to sim:0" in done.message


def test_the_fix_panel_offers_release_graphs_beside_a_refused_fix_and_says_both(sim):
    from devinspect.jupyter.fix_buttons import FixButton

    head = torch.nn.Linear(2, 2)
    ns = {"head": head, "loss": head(torch.ones(1, 2, requires_grad=True)).sum()}
    button = FixButton(Fix("move head", action=Move("head", "sim:0")), ns)
    button.button.click()
    assert button.status.value.startswith("✖") and button.follow_up.layout.display != "none"
    button.follow_up.click()
    assert button.status.value.startswith("✔ released autograd graphs: loss = loss.detach(); then moved head")


def test_the_devices_table_offers_release_graphs_beside_a_move_a_graph_refused(sim):
    from devinspect import scan
    from devinspect.jupyter.devices_explorer import DevicesExplorer

    head = torch.nn.Linear(2, 2)
    ns = {"head": head, "loss": head(torch.ones(1, 2, requires_grad=True)).sum()}
    explorer = DevicesExplorer(scan(ns).select(), lambda: scan(ns).select(), ns, ["cpu", "sim:0"])
    explorer.filter.value = "head.weight"
    row = next(r for r, rec in zip(explorer.rows, explorer._page_records) if rec.name == "head.weight")
    row.children[1].value = "sim:0"
    assert "✖" in row.children[2].value and "Release graphs" in row.children[2].value
    assert row.children[3] is explorer.release_button and explorer.release_button.layout.display != "none"
    explorer.release_button.click()
    assert head.weight.device == sim and ns["loss"].grad_fn is None


def test_a_move_that_would_not_reach_the_reference_the_code_uses_is_refused_and_says_why(sim):
    def steps():
        t = torch.ones(3)
        yield 1
        yield t

    paused = steps()
    next(paused)

    class Config:
        table = torch.ones(2)

    class KeepsItsOwn:
        def __init__(self):
            self._t = torch.ones(2)

        @property
        def t(self):
            return self._t

        @t.setter
        def t(self, value):
            pass  # the owner keeps its own tensor

    ns = {"paused": paused, "proxy": Config.__dict__, "holder": KeepsItsOwn()}
    local = actions.move(ns, 'paused.gi_frame.f_locals["t"]', "sim:0")
    assert not local.ok and "a local of a paused generator" in local.message and "nothing was changed" in local.message
    assert next(paused).device.type == "cpu"
    proxied = actions.move(ns, 'proxy["table"]', "sim:0")
    assert not proxied.ok and "read-only mappingproxy" in proxied.message and Config.table.device.type == "cpu"
    kept = actions.move(ns, "holder.t", "sim:0")
    assert not kept.ok and "still reads the old tensor" in kept.message and "nothing was changed" in kept.message
    assert ns["holder"].t.device.type == "cpu"


def test_the_devices_table_offers_no_move_for_a_paused_generators_local_and_says_why(sim):
    from devinspect import scan
    from devinspect.jupyter.devices_explorer import DevicesExplorer

    def steps():
        t = torch.ones(3)
        yield t

    paused = steps()
    ns = {"paused": paused}
    next(paused)
    explorer = DevicesExplorer(scan(ns).select(), lambda: scan(ns).select(), ns, ["cpu", "sim:0"])
    row = next(r for r, rec in zip(explorer.rows, explorer._page_records) if "f_locals" in rec.name)
    move = row.children[1]
    assert move.disabled and "a local of a paused generator" in move.tooltip


def test_a_fix_applied_after_its_names_were_rebound_refuses_and_changes_nothing(sim):
    from devinspect.jupyter.fix_buttons import FixButton

    model = torch.nn.Linear(2, 2)
    ns = {"model": model, "batch": [torch.ones(2)]}
    action = Steps((Move("model", "sim:0"), MoveContainer("batch", "sim:0")))
    made = actions.made_for(ns, action)
    button = FixButton(Fix("move them", action=action), ns)
    # No reference, weak or strong, to what the fix was made for.
    assert all(weakref.getweakrefcount(p) == 0 for p in model.parameters())
    assert all(not isinstance(v, torch.Tensor) for _, v in made.identities)
    ns["model"] = torch.nn.Linear(2, 2)  # the cell ran again
    result = actions.apply_fix(ns, action, made_for=made)
    assert not result.ok
    assert result.message == ("model is not the model this fix was made for: run the cell again to get a fix for it "
                              "(nothing was changed)")
    assert ns["model"].weight.device.type == "cpu" and ns["batch"][0].device.type == "cpu"
    button.button.click()
    assert "model is not the model this fix was made for" in button.status.value
    # The same fix on the objects it was made for applies.
    ns["model"] = model
    assert actions.apply_fix(ns, action, made_for=made).ok and model.weight.device == sim


def test_a_move_of_an_expanded_view_reports_the_bytes_the_copy_allocated(sim):
    ns = {"x": torch.ones(3).expand(1000, 3)}
    copied = ns["x"].to(sim)
    allocated = copied.untyped_storage().nbytes()
    result = actions.move(ns, "x", "sim:0")
    assert result.ok and result.nbytes == allocated == 12_000, (result.nbytes, allocated)
    assert "11.7 KiB" in result.message


def test_an_action_result_shows_itself_as_other_results_do():
    result = actions.ActionResult(True, "moved x to sim:0 (12 B)", 12)
    assert repr(result) == "✔ moved x to sim:0 (12 B)"
    bundle = result._repr_mimebundle_()
    assert bundle["text/plain"] == "✔ moved x to sim:0 (12 B)" and "moved x to sim:0" in bundle["text/html"]
    assert "ActionResult(" not in bundle["text/html"]
