"""Inspection that stays read-only and transparent on hostile input, and actions that tell the truth.

The hostile-object library (``hostile_kinds``) records any of its code that runs; every
reader runs over seeded namespaces of it (``fuzz_readers``), and every magic over all of
it at once. ``benchmarks/fuzz.py`` runs the long profile and prints the counts.
"""

from __future__ import annotations

import gc
import json
import re
import sys
import threading
import weakref
from pathlib import Path

import pytest
import torch
from conftest import run_python
from fuzz_readers import fuzz_namespace
from hostile_kinds import KINDS, Tripwire, build
from IPython.utils.capture import capture_output

import devinspect

#: Namespaces the suite draws (the benchmark draws 10,000).
FAST_PROFILE = 40


def test_the_library_has_thirty_kinds_and_each_trips_when_touched_carelessly():
    assert len(KINDS) >= 30
    careless = 0
    for make in KINDS.values():
        trip = Tripwire()
        value, keep = make(trip)
        trip.armed = True
        for touch in (repr, len, bool, hash, iter, lambda v: v.anything, lambda v: v.__class__, lambda v: v.dtype):
            try:
                touch(value)
            except Exception:  # hostile objects raise; what matters is what ran
                pass
        careless += bool(trip.hits)
        del value, keep
    # Most kinds run code when touched the ordinary way (the rest are odd data: tensors, cycles).
    assert careless >= 15


@pytest.mark.slow
def test_no_reader_runs_user_code_crashes_or_keeps_an_object_alive():
    # In a fresh interpreter: the readers look through every object the process holds, so in the
    # suite's process what earlier tests left would set the cost (three times this run's) and
    # could be what keeps a namespace's object alive.
    tests = str(Path(__file__).parent)
    out = run_python(f"import sys, json, dataclasses; sys.path.insert(0, {tests!r})\n"
                     f"from fuzz_readers import fuzz\n"
                     f"print(json.dumps(dataclasses.asdict(fuzz({FAST_PROFILE}))))", timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["namespaces"] == FAST_PROFILE
    assert counts["user_code"] == []
    assert counts["crashes"] == []
    assert counts["kept_alive"] == []


@pytest.mark.parametrize("device", ["meta", "sim:0"])
def test_every_kind_at_once_through_every_reader(sim, device):
    trip = Tripwire()
    ns, keep = build(sorted(KINDS), trip)
    assert len(ns) >= 30
    del ns, keep
    from fuzz_readers import readers

    counts = fuzz_namespace(0, device=device, size=len(KINDS))
    assert (counts.user_code, counts.crashes, counts.kept_alive) == ([], [], [])
    assert [name for name, _ in readers(device)] == ["scan", "scan everything", "--why", "explanation",
                                                      "out-of-memory", "memory tally", "rank summary"]


def _run(ip, cell: str) -> tuple[object, str]:
    with capture_output() as captured:
        result = ip.run_cell(cell, store_history=True)
    shown = "".join(o.data.get("text/plain", "") for o in captured.outputs)
    return result, captured.stdout + captured.stderr + shown


def test_every_magic_on_every_kind(ip, sim):
    trip = Tripwire()
    ns, keep = build(sorted(KINDS), trip)
    ip.user_ns.update(ns)
    ip.user_ns["anchor"] = torch.ones(4, device="sim:0")
    ip.user_ns["torch"] = torch
    package = str(Path(devinspect.__file__).parent)  # a frame of ours (the checkout's own path may say devinspect)
    trip.armed = True
    outputs = []
    for cell in ("%devices", "%devices --all", "%gpumem", "%devices --why anchor",
                 "anchor + torch.ones(4)", "%devcheck --last", "%%devcheck\nanchor * 2"):
        result, text = _run(ip, cell)
        outputs.append(text)
        if not cell.startswith("anchor +"):
            assert result.error_in_exec is None, (cell, text[-2000:])
        assert package not in text.replace(str(Path(package) / "testing"), ""), (cell, text[-2000:])
        assert "could not explain" not in text and "could not be shown" not in text, (cell, text[-2000:])
    trip.armed = False
    assert trip.hits == []
    assert "device mismatch" in outputs[4] and "anchor" in outputs[5]
    for name in ns:
        ip.user_ns.pop(name, None)
    del keep


def test_weak_proxies_are_data(ip, sim):
    ip.run_cell("import weakref, torch\nmodel = torch.nn.Linear(2, 2).to('sim:0')\nm = weakref.proxy(model)\n"
                "t = torch.ones(3)\ntp = weakref.proxy(t)\nclass C: pass\nc = C(); gone = weakref.proxy(c); del c")
    for cell in ("%devices", "%gpumem", "%devices --why model.weight", "%devcheck --last"):
        result, text = _run(ip, cell)
        assert "ProxyType" not in text.replace("(ProxyType)", "") or "dead" in text, text
        assert "Traceback" not in text, (cell, text)
    # A later failed cell, with a proxy to a tensor among the failing frame's locals, is explained.
    _, text = _run(ip, "def f(a):\n    p = weakref.proxy(a)\n    return a + model.weight\nf(torch.ones(2, 2))")
    assert "devinspect: device mismatch" in text and "could not explain" not in text


def test_a_redefined_class_and_a_deleted_module_are_collected_after_every_magic(ip, sim):
    ip.run_cell("import torch\nclass Cfg:\n    table = torch.ones(256, 256)\n"
                "module = torch.nn.utils.parametrizations.weight_norm(torch.nn.Linear(4, 4))\nx = torch.ones(2)")
    old_class = weakref.ref(ip.user_ns["Cfg"])
    old_table = weakref.ref(ip.user_ns["Cfg"].table)
    module = weakref.ref(ip.user_ns["module"])
    for cell in ("%devices", "%devices --why x", "%gpumem", "x + torch.ones(3, device='sim:0')", "%devcheck --last"):
        _run(ip, cell)
    ip.run_cell("import devinspect; devinspect.release_traceback()")
    ip.run_cell("class Cfg:\n    table = torch.zeros(1)\ndel module")
    gc.collect()
    assert old_class() is None and old_table() is None
    assert module() is None


@pytest.mark.parametrize("name", ["get_ipython", "In", "Out", "exit", "_ih", "_oh"])
@pytest.mark.parametrize("magic", ["%gpumem -v", "%devices -v", "%devcheck --last -v", "%%devcheck -v"])
def test_v_refuses_the_shells_own_names(ip, magic, name):
    before = ip.user_ns[name]
    cell = f"{magic} {name}" + ("\nx = 1" if magic.startswith("%%") else "")
    result, text = _run(ip, cell)
    assert "IPython uses that name itself" in text
    assert ip.user_ns[name] is before
    result, text = _run(ip, "%devices")
    assert result.error_in_exec is None


@pytest.mark.parametrize("magic", ["%gpumem -v", "%devices -v", "%devcheck --last -v", "%%devcheck -v"])
def test_v_keeps_a_variable_of_the_user_and_replaces_an_earlier_result(ip, magic):
    ip.run_cell("import torch\nmodel = torch.nn.Linear(2, 2)\nx = torch.ones(1) + torch.ones(2, 2)")
    model = ip.user_ns["model"]
    cell = f"{magic} model" + ("\nx = 1" if magic.startswith("%%") else "")
    result, text = _run(ip, cell)
    assert "model already holds a Linear" in text and ip.user_ns["model"] is model
    _run(ip, "%devices -v report")
    first = ip.user_ns["report"]
    _run(ip, "%devices -v report")
    assert ip.user_ns["report"] is not first and type(ip.user_ns["report"]) is type(first)


def test_release_history_keeps_an_underscore_the_user_assigned(ip, sim):
    ip.run_cell("import torch\nt = torch.randn(5, 3, device='sim:0')", store_history=True)
    ip.run_cell("t * 2", store_history=True)
    ip.run_cell("_, idx = t.max(0)", store_history=True)
    mine = ip.user_ns["_"]
    from devinspect.actions.memory_release import release_history

    result = release_history(ip.user_ns, ip.displayhook, ip.user_ns_hidden)
    assert result.ok and "Out[" in result.message
    assert ip.user_ns["_"] is mine
    # IPython still updates _ for the next output once the user's own is replaced by them.
    ip.run_cell("del _", store_history=True)
    ip.run_cell("41 + 1", store_history=True)
    assert ip.user_ns["_"] == 42


class _Refusing(dict):
    """A module's buffer dict whose assignment fails once the move has swapped the parameters."""

    def __setitem__(self, key, value):
        raise RuntimeError("injected: a buffer cannot be set")


@pytest.mark.parametrize("undo_fails", [False, True])
def test_a_failed_move_says_what_is_where(sim, monkeypatch, undo_fails):
    from devinspect.actions.move import move

    model = torch.nn.BatchNorm1d(3)
    model._buffers = _Refusing(model._buffers)
    swaps = []
    real_swap = torch.utils.swap_tensors

    def swap(a, b):
        swaps.append(a)
        if undo_fails and len(swaps) > 2:  # the two forward swaps work; undoing them fails
            raise RuntimeError("injected: the undo fails")
        return real_swap(a, b)

    monkeypatch.setattr(torch.utils, "swap_tensors", swap)
    ns = {"model": model}
    result = move(ns, "model", "sim:0")
    assert not result.ok
    devices = {n: str(p.device) for n, p in model.named_parameters()}
    if undo_fails:
        assert "nothing was changed" not in result.message
        assert "stay changed" in result.message
        for name, device in devices.items():
            assert (f"model.{name} (on sim:0)" in result.message) == (device == "sim:0")
    else:
        assert "nothing was changed" in result.message
        assert set(devices.values()) == {"cpu"}


def test_an_awaiting_checked_cell_raises_what_the_plain_cell_raises(ip):
    ip.autoawait = True
    for error in ("StopIteration", "StopAsyncIteration", "ValueError('x')"):
        body = f"import asyncio\nawait asyncio.sleep(0)\nraise {error}"
        plain = ip.run_cell(body).error_in_exec
        checked = ip.run_cell("%%devcheck -q\n" + body).error_in_exec
        assert type(checked) is type(plain) and str(checked) == str(plain), error


def test_fast_paths_give_the_same_numbers_under_the_check(ip):
    ip.run_cell("""
import torch, torch.nn as nn
torch.manual_seed(0)
enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).eval()
mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
x = torch.randn(2, 5, 8)
mask = torch.tensor([[False] * 5, [False, False, True, True, True]])
""")
    code = ("with torch.no_grad():\n    {0} = enc(x, src_key_padding_mask=mask)\n"
            "    {0}_m = mha(x, x, x, key_padding_mask=mask, need_weights=False)[0]")
    ip.run_cell(code.format("plain"))
    _run(ip, "%%devcheck -q\n" + code.format("checked"))
    ns = ip.user_ns
    assert torch.equal(ns["plain"], ns["checked"]) and torch.equal(ns["plain_m"], ns["checked_m"])
    assert torch.count_nonzero(ns["checked"][1, 2:]) == 0  # the fast path's zeros at padded positions


@pytest.mark.parametrize("cell", ["a.view(7)", "a @ b", "torch.ones(8192, 8192, device='sim:0')"])
def test_the_simulated_devices_errors_end_at_the_users_line(ip, cell):
    ip.run_cell("from devinspect import testing\nimport torch\ntesting.enable('64MiB')\n"
                "a = torch.ones(6, device='sim:0')\nb = torch.ones(3, 4, device='sim:0')")
    try:
        _, text = _run(ip, cell)
    finally:
        ip.run_cell("testing.enable(None)")
    frames = [line for line in text.splitlines() if line.startswith(("File ", "Cell In["))]
    assert frames and frames[-1].startswith("Cell In["), text
    for internal in ("devinspect", "_pytree", "overrides.py", "_ops.py"):
        assert internal not in "\n".join(frames), text


def test_why_names_the_holders_of_a_jagged_nested_tensor(ip):
    ip.run_cell("import torch\nnested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged)")
    result, text = _run(ip, "%devices --why nested")
    assert result.error_in_exec is None and "Traceback" not in text
    assert re.search(r"float32\[2, j\d+\]", text) and "nested  namespace" in text


def test_why_takes_a_name_with_a_space_and_last_says_what_it_cannot_read(ip, sim):
    ip.run_cell("import torch, numpy as np\nd = {('t', 1): torch.ones(4)}\nx = torch.ones(2, device='sim:0')")
    result, text = _run(ip, '%devices --why d[("t", 1)]')
    assert result.error_in_exec is None and 'd[("t", 1)]  namespace' in text
    _run(ip, "x + torch.from_numpy(np.ones(2, dtype='float32'))")  # an input made and dropped on the line
    result, text = _run(ip, "%devcheck --last")
    assert "not a device error" not in text and "could not be read back" in text and "%%devcheck" in text


def test_why_takes_every_listed_name_bare_or_quoted_as_a_shell_quotes_it(ip):
    """Each name %devices lists, a key with both quote kinds and one with a space among them,
    works after --why typed as listed and quoted by shlex.quote (with options after it too)."""
    import shlex

    ip.run_cell("import torch\nd = {'it\\'s \"q\"': torch.ones(2), 'a b': torch.ones(3), ('t', 1): torch.ones(4)}")
    names = [r.name for r in ip.run_line_magic("devices", "-o d").records]
    assert names == ['d["it\'s \\"q\\""]', 'd["a b"]', 'd[("t", 1)]']
    for name in names:
        for typed in (name, shlex.quote(name), f"{shlex.quote(name)} -v held"):
            result, text = _run(ip, f"%devices --why {typed}")
            assert result.error_in_exec is None and f"{name}  namespace" in text, (typed, text)
    assert ip.user_ns["held"].name == names[-1]
    result, text = _run(ip, "%devices --why " + shlex.quote('d["nothing"]'))
    assert result.error_in_exec is not None and "Traceback" not in text


def test_names_as_devices_prints_them_select_their_rows(ip):
    ip.run_cell("import torch\ndk = {torch.ones(1): torch.ones(2)}\nx = torch.ones(3)")
    for cell, name in (("%devices list(dk)[0]", "list(dk)[0]"), ('%devices "x"', "x"), ("%devices 'x'", "x")):
        result, text = _run(ip, cell)
        assert result.error_in_exec is None and text.strip().splitlines()[-1].startswith(name)
    result, text = _run(ip, "%devices ../")
    assert "'../' is not a name %devices lists" in text and "Traceback" not in text


def test_a_device_block_left_open_and_closed_in_a_checked_cell_ends_as_in_a_plain_one(ip, sim):
    states = {}
    for checked in (False, True):
        ip.run_cell("import torch\nctx = torch.device('sim:0')\nctx.__enter__()")
        ip.run_cell(("%%devcheck -q\n" if checked else "") + "ctx.__exit__(None, None, None)")
        states[checked] = (torch.get_default_device().type, torch.ones(1).device.type,
                           torch._C._len_torch_function_stack())
    assert states[True] == states[False] == ("cpu", "cpu", 0)


def test_an_explained_error_keeps_nothing_alive(ip, sim):
    ip.run_cell("import torch\nx = torch.empty(1 << 21, device='sim:0')")
    ip.run_cell("x.cpu() + torch.ones(1, device='sim:1')")  # explained after the cell
    before = torch.sim.memory_allocated()
    ip.run_cell("del x")
    assert before - torch.sim.memory_allocated() == 8 << 20  # at once, no collector needed


def test_v_keeps_a_simulated_tensor_and_what_the_cell_itself_bound(ip, sim):
    ip.run_cell("import torch\nt = torch.ones(2, device='sim:0')")
    result, text = _run(ip, "%devices -v t")
    assert "t already holds a SimTensor" in text and ip.user_ns["t"].device.type == "sim"
    result, text = _run(ip, "%%devcheck -v rep\nrep = 'mine'")
    assert ip.user_ns["rep"] == "mine" and "the cell made rep a str, which is kept" in text


# -- a fix of several steps is all or nothing -------------------------------------------------


@pytest.fixture
def capped_sim(sim):
    """The simulated devices with 8 MiB each, uncapped again afterwards."""
    devinspect.release_traceback()
    gc.collect()
    devinspect.testing.enable(memory="8MiB")
    torch.sim.empty_cache()
    yield sim
    devinspect.testing.enable(memory=None)


def _places(model, x):
    return [(id(p), str(p.device)) for p in model.parameters()], (id(x), str(x.device))


def test_a_later_step_out_of_memory_undoes_the_earlier_ones(capped_sim):
    """"move model[2] to sim:0; move x to sim:0": x does not fit, so model[2] goes back too,
    the same Parameter objects, their memory on the device given back; one message says so."""
    from devinspect.actions import apply_fix
    from devinspect.model.fixes import Move, Steps

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    model[:2].to(capped_sim)
    x = torch.ones(4096, 1024)  # 16 MiB: more than the device holds
    ns = {"model": model, "x": x}
    before, allocated = _places(model, x), torch.sim.memory_allocated(0)
    result = apply_fix(ns, Steps((Move("model[2]", "sim:0"), Move("x", "sim:0"))))
    assert not result.ok and "OutOfMemoryError" in result.message
    assert result.message.count("nothing was changed") == 1 and "(done before it:" not in result.message
    assert result.message.endswith("(nothing was changed: the step done before it was undone)")
    assert _places(ns["model"], ns["x"]) == before and ns["x"] is x
    gc.collect()
    assert torch.sim.memory_allocated(0) == allocated


def test_an_undo_that_fails_is_named_with_where_it_stays(sim, monkeypatch):
    from devinspect.actions import apply_fix
    from devinspect.model.fixes import Move, Steps

    head, x = torch.nn.Linear(2, 2), torch.ones(3)
    ns = {"head": head, "x": x}
    real_swap = torch.utils.swap_tensors
    swaps = []

    def swap(a, b):
        swaps.append(a)
        if len(swaps) > 2:  # head's two forward swaps work; swapping its weight back fails
            raise RuntimeError("injected: the undo fails")
        return real_swap(a, b)

    monkeypatch.setattr(torch.utils, "swap_tensors", swap)

    class NoAssign(dict):
        def __setitem__(self, key, value):
            if key == "x":
                raise RuntimeError("injected: x cannot be bound")
            dict.__setitem__(self, key, value)

    ns = NoAssign(ns)
    result = apply_fix(ns, Steps((Move("head", "sim:0"), Move("x", "sim:0"))))
    assert not result.ok and "injected: x cannot be bound" in result.message
    assert "nothing was changed" not in result.message and "stay changed" in result.message
    for name, p in head.named_parameters():
        assert (f"head.{name} (on sim:0)" in result.message) == (p.device.type == "sim")
    assert result.left and all(label.startswith("head.") for label in result.left)
    assert ns["x"] is x


class _FailsOnce(dict):
    """An optimizer's per-parameter state whose assignment fails the first time."""

    failures = 1

    def __setitem__(self, key, value):
        if type(self).failures:
            type(self).failures -= 1
            raise RuntimeError("injected: the state store refuses once")
        dict.__setitem__(self, key, value)


def test_moving_optimizer_state_is_all_or_nothing(sim):
    from devinspect.actions import move_optimizer_state

    model = torch.nn.Linear(128, 256)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 128)).sum().backward()
    opt.step()
    model.to(sim)
    states = list(opt.state.values())
    # The first parameter's state is plain, the second's store refuses its first assignment.
    second = _FailsOnce(states[1])
    opt.state[model.bias] = second
    first = dict(states[0])
    gc.collect()
    allocated = torch.sim.memory_allocated(0)
    result = move_optimizer_state({"opt": opt}, "opt")
    assert not result.ok and "refuses once" in result.message and "nothing was changed" in result.message
    assert {k: id(v) for k, v in opt.state[model.weight].items()} == {k: id(v) for k, v in first.items()}
    assert all(v.device.type == "cpu" for s in opt.state.values() for v in s.values())
    gc.collect()
    assert torch.sim.memory_allocated(0) == allocated  # the 256 KiB of copies are given back
    # Once the store accepts, the same action moves everything.
    assert move_optimizer_state({"opt": opt}, "opt").ok
    assert {v.device.type for s in opt.state.values() for k, v in s.items() if k != "step"} == {"sim"}


def test_every_kind_of_step_is_undone_when_a_later_one_fails(sim):
    """Buffers, containers, optimizer state, a rebuilt optimizer and detached graphs all go
    back when the last step fails; a released traceback cannot, and the message says so."""
    from devinspect.actions import apply_fix
    from devinspect.model.fixes import (
        Move,
        MoveContainer,
        MoveOptimizerState,
        RebuildOptimizer,
        RegisterBuffer,
        ReleaseGraphs,
        Steps,
    )

    model = torch.nn.Linear(2, 2)
    pe = torch.ones(2)
    model.pe = pe
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    model.to(sim)
    state_before = {id(v) for s in opt.state.values() for v in s.values()}
    loss = (model.weight * 2).sum()
    batch = [torch.ones(2), "label"]
    x = torch.ones(3)

    class NoX(dict):
        def __setitem__(self, key, value):
            if key == "x":
                raise RuntimeError("injected: x cannot be bound")
            dict.__setitem__(self, key, value)

    ns = NoX(model=model, opt=opt, loss=loss, batch=batch, x=x)
    steps = (RegisterBuffer("model", "pe", "sim:0"), MoveContainer("batch", "sim:0"), MoveOptimizerState("opt"),
             RebuildOptimizer("opt", "model", "torch.optim.AdamW"), ReleaseGraphs(("loss",), False),
             Move("x", "sim:0"))
    result = apply_fix(ns, Steps(steps))
    assert not result.ok and "injected: x cannot be bound" in result.message
    assert result.message.endswith("(nothing was changed: the 5 steps done before it were undone)")
    assert model.__dict__["pe"] is pe and "pe" not in model._buffers
    assert ns["batch"] is batch and ns["opt"] is opt and ns["loss"] is loss and ns["x"] is x
    assert {id(v) for s in opt.state.values() for v in s.values()} == state_before

    try:
        raise ValueError("an earlier error")
    except ValueError:
        sys.last_traceback = sys.exc_info()[2]
    result = apply_fix(ns, Steps((ReleaseGraphs(("loss",), True), Move("x", "sim:0"))))
    assert not result.ok and "nothing was changed" not in result.message
    assert result.left == ("the last error's traceback (released)",) and ns["loss"] is loss


# -- a namespace that another thread changes during a scan -------------------------------------


class Lockstep:
    """A thread that changes the namespace each time the reading thread runs a line of
    devinspect (the reader traces itself and hands over at every line): as if the
    interpreter switched threads at every step of the read, every time."""

    def __init__(self, change):
        self.change = change
        self.go, self.done = threading.Semaphore(0), threading.Semaphore(0)
        self.stopped = False
        self.steps = 0
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            self.go.acquire()
            if self.stopped:
                return
            try:
                self.change(self.steps)
            finally:
                self.done.release()

    def _trace(self, frame, event, arg):
        if not str(frame.f_globals.get("__name__", "")).startswith("devinspect."):
            return None
        if event == "line":
            self.steps += 1
            self.go.release()
            self.done.acquire()
        return self._trace

    def __enter__(self):
        sys.settrace(self._trace)
        return self

    def __exit__(self, *exc):
        sys.settrace(None)
        self.stopped = True
        self.go.release()
        self.thread.join()


def test_a_namespace_a_thread_changes_at_every_step_is_read_without_an_error(sim):
    """The namespace, an object's __dict__, a module's, a list, a dict, a set and an optimizer's
    state each grow on one step and shrink on the next: every reader takes its view of each as
    one copy, so none raises, makes an unreadable row, or names a tensor that was never there."""
    from devinspect.collect.namespace.referrers import holders
    from devinspect.collect.namespace.scan import NameIndex

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    holder = type("Holder", (), {})()
    holder.t = torch.ones(2)
    ns = {"model": model, "opt": opt, "holder": holder, "box": [torch.ones(1), torch.ones(2)],
          "table": {"a": torch.ones(1)}, "bag": {1, 2}, "keep": torch.ones(3)}

    def change(step):
        grow, k = step % 2 == 0, (step // 2) % 5
        for d in (ns, holder.__dict__, ns["table"], model.__dict__, opt.state[model[0].weight]):
            if grow:
                d[f"m{k}"] = torch.ones(1)
            else:
                d.pop(f"m{k}", None)
        if grow:
            ns["box"].append(torch.ones(1))
            ns["bag"].add(step)
            model._modules[f"x{k}"] = torch.nn.Identity()
        else:
            ns["box"].pop()
            ns["bag"].discard(step - 1)
            model._modules.pop(f"x{k}", None)

    readers = {"scan": lambda: devinspect.scan(ns, include_hidden=True).findings and None,
               "names": lambda: NameIndex(ns).result, "why": lambda: holders(ns, "keep")}
    failures = {}
    with Lockstep(change) as lockstep:
        for name, read in readers.items():
            try:
                result = read()
            except Exception as exc:  # what the test counts
                failures[name] = f"{type(exc).__name__}: {exc}"
                continue
            errors = [r.note for r in getattr(result, "records", ()) if r.kind == "error"]
            if errors:
                failures[name] = errors
    assert lockstep.steps > 10_000
    assert failures == {}


def test_fixes_with_a_fault_injected_are_never_half_done(sim):
    """Drawn fixes of several steps, each with one fault (a refused store, a failed swap, an
    out-of-memory copy, sometimes an undo that fails too): none raises, none is left half done
    without saying what stays, and "nothing was changed" is said exactly when it is true."""
    from fuzz_actions import fuzz_fixes

    counts = fuzz_fixes(FAST_PROFILE, sim)
    assert counts.failed > FAST_PROFILE // 4  # the faults do fire
    assert (counts.tracebacks, counts.half_done, counts.untruthful) == ([], [], [])


def test_a_step_an_earlier_step_made_needless_is_no_failure(sim):
    from devinspect.actions import apply_fix
    from devinspect.model.fixes import Move, MoveOptimizerState, Steps

    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    ns = {"model": model, "opt": opt}
    result = apply_fix(ns, Steps((Move("model", "sim:0"), MoveOptimizerState("opt"))))
    assert result.ok and "already with its parameters" in result.message
    assert {v.device.type for s in opt.state.values() for k, v in s.items() if k != "step"} == {"sim"}
    again = apply_fix(ns, Steps((MoveOptimizerState("opt"), MoveOptimizerState("opt"))))
    assert not again.ok and again.idle and "nothing was changed" not in again.message
