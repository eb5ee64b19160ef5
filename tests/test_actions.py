"""devinspect.actions and the fix panel: what a click changes, and that failures change nothing."""

from __future__ import annotations

import torch
from torch import nn

import devinspect
from devinspect import actions
from devinspect.render.widgets import fix_panel


def test_move_a_variable_and_an_item(sim):
    ns = {"x": torch.ones(4), "batch": {"ids": torch.zeros(2, dtype=torch.long)}}
    result = actions.move(ns, "x", "sim:0")
    assert result.ok and ns["x"].device == sim and result.nbytes == 16
    assert actions.move(ns, 'batch["ids"]', "sim:0").ok and ns["batch"]["ids"].device == sim


def test_move_a_module_in_place(sim):
    model = nn.Linear(2, 2)
    ns = {"model": model}
    assert actions.move(ns, "model", "sim:0").ok
    assert ns["model"] is model and model.weight.device == sim


def test_failed_move_leaves_the_object_unchanged():
    original = torch.ones(3)
    ns = {"x": original}
    result = actions.move(ns, "x", "nosuchdevice:0")
    assert not result.ok and "could not" in result.message
    assert ns["x"] is original
    assert not actions.move(ns, "missing", "cpu").ok
    assert not actions.move(ns, "x +", "cpu").ok
    assert not actions.move({"s": "text"}, "s", "cpu").ok


def test_register_buffer_and_optimizer_state(sim):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.pe = torch.zeros(3)

    m = M()
    ns = {"m": m}
    assert actions.register_buffer(ns, "m", "pe", "sim:0").ok
    assert "pe" in dict(m.named_buffers()) and m.pe.device == sim
    assert not actions.register_buffer(ns, "m", "pe", "sim:0").ok  # already a buffer now

    opt = torch.optim.AdamW(m.lin.parameters())
    m.lin(torch.ones(1, 2)).sum().backward()
    opt.step()
    m.to(sim)
    result = actions.move_optimizer_state({"opt": opt}, "opt", "sim:0")
    assert result.ok and "moved 4 state tensors" in result.message
    assert all(v.device == sim for s in opt.state.values() for k, v in s.items() if k != "step")


def test_fix_panel_click_applies_the_fix_and_enables_rerun(sim):
    model = nn.Linear(8, 3).to(sim)
    x = torch.randn(4, 8)
    ns = {"model": model, "x": x}
    try:
        with devinspect.check(ns) as c:
            model(x)
    except RuntimeError:
        pass
    reruns = []
    panel = fix_panel(c.report.mismatch, ns, lambda: reruns.append(model(ns["x"])))
    fix_html, buttons, status, output = panel.children
    apply, again = buttons.children
    assert "x = x.to(model.weight.device)" in fix_html.value
    assert apply.get_state()["disabled"] is False and again.get_state()["disabled"] is True
    apply.click()
    assert ns["x"].device == sim and ns["x"] is not x
    assert status.value.startswith("✔") and apply.disabled and not again.disabled
    again.click()
    assert len(reruns) == 1 and reruns[0].device == sim


def test_fix_panel_reports_a_failed_action_in_the_widget(sim):
    from devinspect.model import Mismatch

    mismatch = Mismatch(op="F.linear", error="", devices=("cpu", "sim:0"), operands=(), cell_line=None, user_frame=None,
                        module_path=None, target_device="sim:0", fix="gone = gone.to('sim:0')",
                        action={"kind": "move", "name": "gone", "device": "sim:0"})
    panel = fix_panel(mismatch, {}, None)
    apply = panel.children[1].children[0]
    apply.click()
    assert panel.children[2].value.startswith("✖") and "no variable named &#x27;gone&#x27;" in panel.children[2].value
    assert apply.disabled is False


# -- memory actions --------------------------------------------------------------


def test_empty_cache_and_reset_without_an_allocator_say_why():
    result = actions.empty_cache()
    assert not result.ok and result.message.startswith("nothing to release:") and result.nbytes == 0
    assert torch.cuda.is_initialized() is False


def test_collect_garbage_reports_the_tensor_bytes_it_freed():
    import weakref

    class Node:
        pass

    n = Node()
    n.me, n.t = n, torch.ones(1 << 18)  # 1 MiB, only in a reference cycle
    alive = weakref.ref(n.t)
    del n
    result = actions.collect_garbage()
    assert alive() is None and result.ok and result.nbytes >= 1 << 20
    assert "cpu 1.0 MiB" in result.message


def test_release_history_clears_entries_and_the_last_traceback(sim):
    import sys
    import weakref

    def fail():
        local = torch.ones(2000, device=sim)  # noqa: F841 - held by the traceback
        raise ValueError("boom")

    try:
        fail()
    except ValueError:
        sys.last_type, sys.last_value, sys.last_traceback = sys.exc_info()
    kept = torch.ones(10, device=sim)
    shown = torch.ones(1000, device=sim)
    in_traceback = weakref.ref(sys.last_traceback.tb_next.tb_frame.f_locals["local"])
    ns = {"kept": kept, "Out": {1: shown, 2: kept}, "_1": shown, "_2": kept, "_": kept}
    hidden = {"_1": shown, "_2": kept, "_": kept}
    probe = weakref.ref(shown)
    del shown
    result = actions.release_history(ns, hidden=hidden)
    assert result.ok and result.nbytes == 4000 + 8000  # Out[1] and the traceback's local, nothing of kept
    assert probe() is None and in_traceback() is None
    assert sys.last_traceback is None and sys.last_value is None
    assert "Out" in ns and 1 not in ns["Out"] and "_1" not in ns and "_1" not in hidden
    assert ns["kept"] is kept and torch.equal(kept.cpu(), torch.ones(10))  # the user's own name is untouched
    again = actions.release_history(ns, hidden=hidden)
    assert not again.ok and again.message.startswith("nothing to release")


def test_release_history_clears_the_displayhooks_copy_but_not_the_users_underscore(sim):
    import weakref

    class Hook:  # IPython's displayhook keeps its own _, __, ___
        pass

    shown = torch.ones(1000, device=sim)
    hook = Hook()
    hook._, hook.__, hook.___ = shown, "", ""
    ns = {"Out": {7: shown}, "_7": shown, "_": 5}  # the user assigned _ = 5 (a loop variable, say)
    probe = weakref.ref(shown)
    del shown
    result = actions.release_history(ns, displayhook=hook, hidden={"_7": ns["_7"]})
    assert result.ok and probe() is None
    assert ns["_"] == 5 and hook._ == ""
