"""Inspection that stays read-only and transparent on hostile input, and actions that tell the truth.

The hostile-object library (``hostile_kinds``) records any of its code that runs; every
reader runs over seeded namespaces of it (``fuzz_readers``), and every magic over all of
it at once. ``benchmarks/fuzz.py`` runs the long profile and prints the counts.
"""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path

import pytest
import torch
from fuzz_readers import fuzz, fuzz_namespace
from hostile_kinds import KINDS, Tripwire, build
from IPython.utils.capture import capture_output

import devinspect

#: Namespaces the suite draws (the benchmark draws 10,000).
FAST_PROFILE = 40


def test_the_library_has_thirty_kinds_and_each_trips_when_touched_carelessly():
    assert len(KINDS) >= 30
    careless = 0
    for name, make in KINDS.items():
        trip = Tripwire()
        value, keep = make(trip)
        trip.armed = True
        for touch in (repr, len, bool, hash, iter, lambda v: v.anything, lambda v: v.__class__, lambda v: v.dtype):
            try:
                touch(value)
            except Exception:  # noqa: BLE001 - hostile objects raise; what matters is what ran
                pass
        careless += bool(trip.hits)
        del value, keep
    # Most kinds run code when touched the ordinary way (the rest are odd data: tensors, cycles).
    assert careless >= 15


@pytest.mark.slow
def test_no_reader_runs_user_code_crashes_or_keeps_an_object_alive():
    counts = fuzz(FAST_PROFILE)
    assert counts.namespaces == FAST_PROFILE
    assert counts.user_code == []
    assert counts.crashes == []
    assert counts.kept_alive == []


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
    from devinspect.actions.memory import release_history

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
        assert "stay moved" in result.message
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
