"""devinspect.actions and the fix panels: what a click changes, and that a failure changes nothing."""

from __future__ import annotations

import gc

import torch
from torch import nn

import devinspect
from devinspect import actions
from devinspect.jupyter.fix_buttons import FixButton, findings_panel, fix_panel
from devinspect.model.fixes import Fix, Move, RegisterBuffer, ReleaseGraphs


def state_of(module):
    """Everything a move could change: each parameter/buffer object, its data and device, its grad."""
    out = {}
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        grad = t.grad if isinstance(t, nn.Parameter) else None
        data = t.detach().cpu().clone() if t.device.type != "meta" else torch.empty(0)
        out[name] = (id(t), str(t.device), data, id(grad) if grad is not None else None)
    return out


def same_state(a, b):
    return a.keys() == b.keys() and all(
        a[k][0] == b[k][0] and a[k][1] == b[k][1] and torch.equal(a[k][2], b[k][2]) and a[k][3] == b[k][3] for k in a)


def test_move_a_variable_and_an_item(sim):
    ns = {"x": torch.ones(4), "batch": {"ids": torch.zeros(2, dtype=torch.long)}}
    result = actions.move(ns, "x", "sim:0")
    assert result.ok and ns["x"].device == sim and result.nbytes == 16 and "16 B" in result.message
    assert actions.move(ns, 'batch["ids"]', "sim:0").ok and ns["batch"]["ids"].device == sim


def test_move_a_module_keeps_its_parameter_objects_and_optimizer(sim):
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(3, 2)).sum().backward()
    opt.step()
    params = [id(p) for p in model.parameters()]
    ns = {"model": model, "opt": opt}
    result = actions.move(ns, "model", "sim:0")
    assert result.ok, result.message
    assert ns["model"] is model and [id(p) for p in model.parameters()] == params
    assert all(p.device == sim and p.grad.device == sim for p in model.parameters())
    assert all(b.device == sim for b in model.buffers())
    # The optimizer's state followed each parameter; Adam's CPU step stayed on the host.
    for state in opt.state.values():
        assert state["exp_avg"].device == sim and state["step"].device.type == "cpu"
    assert "4 parameters, 3 buffers, 4 gradients, 8 optimizer state tensors" in result.message
    assert devinspect.scan(ns).findings == ()
    # A part already there is not counted as moved.
    model[0].to("cpu")
    again = actions.move(ns, "model", "sim:0")
    assert again.ok and again.message.startswith("moved model to sim:0: 2 parameters, 0 buffers"), again.message
    # And back to the CPU, still the same objects (PyTorch alone would make new Parameters here).
    assert actions.move(ns, "model", "cpu").ok
    assert [id(p) for p in model.parameters()] == params and model[0].weight.device.type == "cpu"


def test_a_move_that_fails_half_way_puts_everything_back(sim, monkeypatch):
    model = nn.Sequential(*(nn.Linear(3, 3) for _ in range(6)))
    model[1].to(sim)
    before = state_of(model)
    calls = {"n": 0}
    original = torch.Tensor.to

    def flaky_to(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 5:
            raise torch.OutOfMemoryError("simulated: out of memory on the 5th tensor")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", flaky_to)
    result = actions.move({"model": model}, "model", "sim:0")
    monkeypatch.undo()
    assert not result.ok and "OutOfMemoryError" in result.message and "nothing was changed" in result.message
    assert same_state(before, state_of(model))


def test_a_failure_while_committing_is_undone(sim, monkeypatch):
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3), nn.Linear(3, 3))
    model[0].to(sim)
    before = state_of(model)
    original = torch.utils.swap_tensors
    calls = {"n": 0}

    def flaky_swap(a, b):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("simulated failure while swapping")
        return original(a, b)

    monkeypatch.setattr(torch.utils, "swap_tensors", flaky_swap)
    result = actions.move({"model": model}, "model", "sim:0")
    monkeypatch.undo()
    assert not result.ok and "simulated failure" in result.message
    assert same_state(before, state_of(model))


def test_meta_and_lazy_tensors_are_refused_before_anything_moves(sim):
    with torch.device("meta"):
        head = nn.Linear(4, 4)
    model = nn.Sequential(nn.Linear(4, 4), head)
    before = state_of(model)
    result = actions.move({"model": model}, "model", "sim:0")
    assert not result.ok and "meta" in result.message and "load_state_dict(state_dict, assign=True)" in result.message
    assert same_state(before, state_of(model))
    lazy = nn.Sequential(nn.Linear(2, 2), nn.LazyLinear(3))
    result = actions.move({"lazy": lazy}, "lazy", "sim:0")
    assert not result.ok and "not initialised" in result.message and lazy[0].weight.device.type == "cpu"


def test_a_parameter_saved_by_a_live_graph_is_refused_with_what_holds_it(sim):
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 3), nn.Linear(3, 1))
    model[3].to(sim)
    model[:3].to(sim)
    model[2].to("cpu")
    x = torch.randn(2, 3, device=sim, requires_grad=True)
    hidden = model[1](model[0](x))  # a graph that saved model[0]'s weight ...
    loss = (hidden * 2).sum()  # ... kept alive by `loss`
    ns = {"model": model, "loss": loss, "x": x}
    before = state_of(model)
    result = actions.move(ns, "model", "cpu")
    assert not result.ok and "the graph of loss" in result.message and "nothing was changed" in result.message
    assert result.follow_up == ReleaseGraphs(("loss",), False)
    assert same_state(before, state_of(model))
    value = loss.item()
    assert actions.apply_fix(ns, result.follow_up).ok and ns["loss"].grad_fn is None and ns["loss"].item() == value
    del loss, hidden
    assert actions.move(ns, "model", "cpu").ok


def test_a_move_reads_the_other_variables_by_their_real_types_and_runs_none_of_their_code(sim):
    ran = []

    class Watched:
        def __getattribute__(self, name):
            ran.append(name)
            return object.__getattribute__(self, name)

    class Lying:
        @property
        def __class__(self):
            raise RuntimeError("a lying __class__ ran")

    class Graphless(torch.Tensor):
        @property
        def grad_fn(self):
            ran.append("grad_fn")
            return None

    class Items(list):
        def __iter__(self):
            ran.append("__iter__")
            return list.__iter__(self)

    model = nn.Linear(2, 2)
    loss = (model.weight ** 2).sum()
    ns = {"model": model, "loss": loss, "watched": Watched(), "lying": Lying(), "items": Items([torch.ones(1)]),
          "t": torch.ones(2).as_subclass(Graphless)}
    # A move to the simulated device swaps tensors, so it asks which graphs hold the parameters.
    result = actions.move(ns, "model", sim)
    assert not result.ok and "the graph of loss" in result.message
    ns["loss"] = loss.detach()
    del loss  # the test's own name held the graph too
    assert actions.move(ns, "model", sim).ok and model.weight.device == torch.device(sim.type, 0)
    assert ran == []


def test_a_leaf_that_requires_grad_stays_a_leaf_and_the_optimizer_keeps_it(sim):
    w = torch.randn(3, requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1)
    (w * 2).sum().backward()
    ns = {"w": w, "opt": opt}
    assert actions.move(ns, "w", "sim:0").ok
    assert ns["w"] is w and w.is_leaf and w.requires_grad and w.device == sim and w.grad.device == sim
    (w * 2).sum().backward()
    opt.step()  # the optimizer still trains the tensor the user has


def test_failed_moves_change_nothing_and_say_why():
    original = torch.ones(3)
    ns = {"x": original, "t": (torch.ones(1),)}
    result = actions.move(ns, "x", "nosuchdevice:0")
    assert not result.ok and "is not a device" in result.message and ns["x"] is original
    result = actions.move(ns, "x", "cuda:7")
    assert not result.ok and ns["x"] is original
    assert not actions.move(ns, "missing", "cpu").ok
    assert not actions.move(ns, "x +", "cpu").ok
    assert not actions.move({"s": "text"}, "s", "cpu").ok
    result = actions.move(ns, "t[0]", "meta")  # a tuple item cannot be assigned
    assert not result.ok and "nothing was changed" in result.message and ns["t"][0].device.type == "cpu"

def test_a_torchscript_module_is_moved_only_where_the_move_reaches_its_cpp_tensors(sim):
    scripted = torch.jit.script(nn.Linear(2, 2))
    traced = torch.jit.trace(nn.Sequential(nn.Linear(2, 2)), torch.ones(1, 2))
    weight, traced_weight = scripted.weight, getattr(traced, "0").weight
    ns = {"scripted": scripted, "traced": traced}
    # The simulated device and meta need a swap of the tensors, which C++ never sees: refused up front.
    for name, device in (("scripted", "sim:0"), ("scripted.weight", "sim:0"), ("traced", "meta"),
                         ("getattr(traced, '0').weight", "sim:0")):
        result = actions.move(ns, name, device)
        assert not result.ok and "TorchScript" in result.message and "nothing was changed" in result.message, name
    assert scripted.weight is weight and weight.device.type == "cpu"
    assert getattr(traced, "0").weight is traced_weight and traced_weight.device.type == "cpu"
    # A move to where it already is has nothing to swap: it succeeds, read back through the module.
    assert actions.move(ns, "scripted", "cpu").ok and scripted.weight.device.type == "cpu"



def test_register_buffer_validates_first_and_never_loses_the_tensor(sim):
    class Lazy(nn.Module):
        pe = None  # a class default: the lazy-cache pattern

        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.pe = torch.zeros(3)

    lazy = Lazy()
    lazy.pe = torch.ones(2)
    ns = {"lazy": lazy, "m": M()}
    result = actions.register_buffer(ns, "lazy", "pe", "sim:0")
    assert not result.ok and "class attribute" in result.message
    assert torch.equal(lazy.pe, torch.ones(2)) and "pe" in lazy.__dict__  # nothing lost, nothing changed
    m = ns["m"]
    m.__dict__["lin.weight"] = torch.ones(1)
    m.__dict__["weight"] = torch.ones(1)
    for attr, why in (("lin", "a submodule"), ("lin.weight", "plain identifier"), ("", "plain identifier"),
                      ("nothing", "not a plain tensor attribute")):
        result = actions.register_buffer(ns, "m", attr, "sim:0")
        assert not result.ok and why in result.message, (attr, result.message)
    m.lin.__dict__["weight2"] = m.lin.weight  # a clash with a parameter, put there behind nn.Module's back
    assert not actions.register_buffer({"m": m}, "m.lin", "weight", "sim:0").ok
    assert actions.register_buffer(ns, "m", "pe", "sim:0").ok
    assert "pe" in dict(m.named_buffers()) and m.pe.device == sim and "pe" not in m.state_dict()
    assert not actions.register_buffer(ns, "m", "pe", "sim:0").ok  # already a buffer now


def test_optimizer_state_goes_to_each_parameters_own_device(sim):
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    model[0].to(sim)  # split on purpose: the state of model[1] must stay on the CPU
    for p in model[0].parameters():
        opt.state[p]["exp_avg"] = opt.state[p]["exp_avg"].cpu()
        opt.state[p]["exp_avg_sq"] = opt.state[p]["exp_avg_sq"].cpu()
    result = actions.move_optimizer_state({"opt": opt}, "opt")
    assert result.ok and "moved 4 state tensors" in result.message
    for p, state in opt.state.items():
        assert state["exp_avg"].device == p.device and state["step"].device.type == "cpu"


def test_apply_fix_refuses_malformed_actions():
    ns = {"x": torch.ones(1)}
    for bad in (None, {"kind": "move", "name": "x", "device": "cpu"}, Move(3, "cpu"), RegisterBuffer(None, "a", "b"),
                "x = x.cpu()", object()):
        result = actions.apply_fix(ns, bad)
        assert not result.ok
    assert ns["x"].device.type == "cpu"


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
    panel = fix_panel(c.report.mismatch.fix, ns, lambda: reruns.append(model(ns["x"])))
    apply, again = panel.apply, panel.again
    assert apply.button.get_state()["disabled"] is False and again.get_state()["disabled"] is True
    apply.button.click()
    assert ns["x"].device == sim and ns["x"] is not x
    assert apply.status.value.startswith("✔") and "128 B" in apply.status.value
    assert apply.button.disabled and not again.disabled
    # Where no notebook can run the cell again (the view says so), it runs inside the panel.
    again._handle_custom_msg({"event": "no-notebook"}, [])
    assert len(reruns) == 1 and reruns[0].device == sim
    again._handle_custom_msg({"event": "rerun"}, [])  # a notebook ran it: nothing runs here
    assert len(reruns) == 1


def test_fix_panel_reports_a_failed_action_in_the_widget(sim):
    button = FixButton(Fix("move gone to sim:0", "gone = gone.to('sim:0')", action=Move("gone", "sim:0")), {})
    button.button.click()
    assert button.status.value.startswith("✖") and "no variable named &#x27;gone&#x27;" in button.status.value
    assert button.button.disabled is False


def test_apply_fix_next_to_each_devices_finding(sim):
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    model[0].to(sim)
    ns = {"model": model, "x": torch.ones(1, 2)}
    panel = findings_panel(devinspect.scan(ns).findings, ns)
    (row,) = panel.children  # one finding with an action: the split model
    label, box = row.children
    assert "move all of model to sim:0" in label.value
    box.children[0].click()
    assert {p.device for p in model.parameters()} == {sim}
    assert "✔ moved model to sim:0" in box.children[2].value


# -- memory actions --------------------------------------------------------------


def test_empty_cache_and_reset_without_an_accelerator_say_why():
    import subprocess
    import sys

    code = ("import torch; from devinspect import actions; r = actions.empty_cache(); "
            "print(r.ok, r.nbytes, r.message); print(torch.cuda.is_initialized())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("False 0 nothing to release:") and out.splitlines()[1] == "False"


def test_empty_cache_returns_the_simulated_devices_cached_segments_and_says_how_much(sim):
    gc.collect()
    torch.sim.empty_cache()  # segments cached by earlier tests are not this test's
    kept = torch.ones(1000, device=sim)  # keeps its small segment in use
    gone = torch.ones(3 << 20, device=sim)  # 12 MiB: a segment of its own (large requests round to 2 MiB)
    reserved = torch.sim.memory_reserved(0)
    del gone
    assert torch.sim.memory_reserved(0) == reserved  # cached, as on a GPU
    result = actions.empty_cache()
    assert result.ok and result.nbytes == 12 << 20
    assert "released 12.0 MiB (expected 12.0 MiB)" in result.message
    assert torch.sim.memory_reserved(0) == reserved - (12 << 20) and kept.device == sim


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
