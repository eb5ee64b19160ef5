"""A checked cell behaves exactly as the same cell unchecked.

Thousands of small generated programs run twice in the same shell, once plain and once
under ``%%devcheck``, from identical starting namespaces. Compared: whether the cell
failed, the exception's type and message, what it printed, the value it showed, every
tensor it left (device, dtype, shape, layout, values), whether a module kept its
Parameter objects, and the torch-function mode stack it left behind. The statements
cover what broke the check before: moves under the swap flag (no weakref may sit on a
tensor), sparse/quantized/nested/meta tensors, BaseExceptions and compile errors,
modes left open, and device-mismatch errors.
"""

from __future__ import annotations

import gc
import linecache
import sys
import warnings

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.utils.capture import capture_output

SETUP = """
import asyncio, warnings
import torch, torch.nn as nn, torch.nn.functional as F
from torch.overrides import TorchFunctionMode
dev = torch.device("sim:0")
class CountingMode(TorchFunctionMode):
    calls = 0
    def __torch_function__(self, func, types, args=(), kwargs=None):
        CountingMode.calls += 1
        return func(*args, **(kwargs or {}))
compiled = torch.compile(nn.Sequential(nn.Linear(3, 3), nn.ReLU()), backend="eager")
def warn_here():
    warnings.warn("from the user's function")
with warnings.catch_warnings():  # PyTorch's warn-once messages fire here, not in whichever run comes first
    warnings.simplefilter("ignore")
    torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)
    torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
"""

#: Statements a generated program is made of; each may fail, as user code does.
STATEMENTS = [
    "a = torch.arange(6.0).reshape(2, 3)",
    "b = torch.ones(2, 3, device=dev)",
    "a = a.to(dev)",
    "b = b.cpu()",
    "c = a + b",
    "c = a @ b.T",
    "print(a)",
    "print(repr(b), str(b))",
    "v = a.sum().item()",
    "v = float(b.sum())",
    "v = b.tolist()",
    "v = a.numpy()",
    "v = a[a > 1]",
    "v = b.nonzero()",
    "s = torch.eye(3).to_sparse()",
    "s = s.to(dev)",
    "d = torch.zeros(3, 3); d.copy_(s)",
    "d = torch.zeros(3, 3, device=dev); d.copy_(s)",
    "t = s.to_dense().cpu()",
    "q = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8)",
    "q = q.dequantize().to(dev)",
    "n = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])",
    "n = n.to(dev)",
    "m = torch.empty(2, 3, device='meta')",
    "m = m.to('cpu')",
    "m = m + 1",
    "lin = nn.Linear(3, 3)",
    "ids = [id(p) for p in lin.parameters()]",
    "lin.to(dev)",
    "lin.to('cpu')",
    "out = lin(a)",
    "out = lin(torch.ones(2, 3))",
    "out.sum().backward()",
    "torch.__future__.set_swap_module_params_on_conversion(True)",
    "torch.__future__.set_swap_module_params_on_conversion(False)",
    "torch.device('meta').__enter__()",
    "CountingMode().__enter__()",
    "raise ValueError('boom')",
    "1 / 0",
    "raise KeyboardInterrupt",
    "return 5",
    "x = undefined_name",
    "try:\n    a + b\nexcept RuntimeError as e:\n    caught = str(e)",
    "del a",
    "a",
    # Fused fast paths that test has_torch_function (padded positions differ on the slow path).
    "enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2).eval()",
    "with torch.no_grad():\n    y = enc(torch.ones(2, 5, 8), src_key_padding_mask=torch.tensor([[False] * 5, [False, False, True, True, True]]))",
    "mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()",
    "with torch.no_grad():\n    y = mha(*[torch.ones(2, 5, 8)] * 3, key_padding_mask=torch.tensor([[False] * 5, [False, False, True, True, True]]), need_weights=False)[0]",
    "y = F.scaled_dot_product_attention(*[torch.ones(1, 2, 4, 8)] * 3, is_causal=True)",
    # Top-level await, and what a coroutine may not raise as it is.
    "await asyncio.sleep(0)",
    # Warnings PyTorch raises from C++ and from Python, and the user's own: each names the
    # line a plain run names, so filters by module or "once per line" act alike.
    "v = torch.ones(2).new_tensor(torch.ones(2))",
    "v = F.softmax(torch.ones(2, 3))",
    "v = torch.ones(2, device=dev).new_tensor(torch.ones(2))",
    "warn_here()",
    # A compiled model: Dynamo traces the check's mode with it, and must compute the same. (Its
    # tracing errors show Dynamo's frames, which then include the mode's: the README says so.)
    "out = compiled(torch.ones(2, 3))",
    "with warnings.catch_warnings(record=True) as seen:\n    v = torch.tensor(torch.ones(2))\nseen = [(w.filename[:5], w.lineno > 1) for w in seen]",
    "raise StopIteration",
    "raise StopAsyncIteration",
]


def snapshot(ns: dict, before: set) -> dict:
    """What a cell left: tensors (values readable on the host) and module parameter identities."""
    out = {}
    with torch._C.DisableTorchFunction():
        for name in sorted(set(ns) - before - {"_", "__", "___"}):
            if name.startswith("_"):
                continue
            value = ns[name]
            if isinstance(value, torch.Tensor):
                shape = ([tuple(t.shape) for t in value.unbind()] if value.is_nested and value.device.type == "cpu"
                         else "nested" if value.is_nested else tuple(value.shape))
                entry = [str(value.device), str(value.dtype), str(value.layout), shape]
                if value.device.type not in ("meta",) and value.layout == torch.strided and not value.is_nested \
                        and not value.is_quantized:
                    entry.append(value.detach().cpu().tolist())
                out[name] = tuple(map(str, entry))
            elif isinstance(value, torch.nn.Module):
                out[name] = tuple((n, str(p.device), p.detach().cpu().tolist() if p.device.type != "meta" else None)
                                  for n, p in value.named_parameters())
            elif isinstance(value, (int, float, str, list)):
                out[name] = repr(value)
    return out


def split_traceback(stdout: str) -> tuple[list[str], list[str]]:
    """(what the cell printed, the traceback's frames as ``file: function``).

    Cell numbers and line numbers are left out: the checked cell's body starts one line
    further down (the magic's own line) and the two runs are different cells.
    """
    lines = stdout.splitlines()
    cut = next((i for i, line in enumerate(lines) if line.startswith(("-" * 20, "Traceback (most recent call last)"))),
               len(lines))
    frames = []
    for line in lines[cut:]:
        line = line.strip()
        if line.startswith("Cell In["):
            frames.append("cell" + (" in " + line.split(" in ", 1)[1] if " in " in line else ""))
        elif line.startswith("File "):
            frames.append(line.split(":", 1)[0].rsplit("/", 2)[-1] + " in " + line.rsplit(" in ", 1)[-1].split("(")[0])
        elif line.startswith("[... skipping hidden"):
            frames.append("hidden")
    import re

    def same(line: str) -> str:
        line = re.sub(r"Cell In\[\d+\], line \d+", "Cell In[N], line L", line)
        return re.sub(r" at 0x[0-9a-f]+", " at 0x…", re.sub(r"^Out\[\d+\]", "Out[N]", line))

    # An error met while torch.compile traces shows Dynamo's own frames, among them the mode's
    # it traced (the README says so): compared up to where tracing starts.
    tracing = next((i for i, frame in enumerate(frames) if frame.startswith("convert_frame.py")), len(frames))
    return [same(line) for line in lines[:cut]], frames[:tracing]


def function_modes() -> list[str]:
    return [type(torch._C._get_function_stack_at(i)).__name__ for i in range(torch._C._len_torch_function_stack())]


def reset_modes() -> None:
    while torch._C._len_torch_function_stack():
        torch._C._pop_torch_function_stack()


def settle(ip) -> None:
    """Finalize, out of sight, what earlier cells left for the garbage collector.

    IPython abandons a cell's coroutine when a cell that awaits cannot run on the event
    loop (``await`` next to a top-level ``return``: "needs a real async loop"), with or
    without the check. The coroutine sits in a reference cycle with the error that the
    shell keeps as the last one, and finalizing it prints GeneratorExit tracebacks from
    IPython's ``run_code`` into whatever cell runs when the collector happens to run. So
    such a run is followed by this, and the collector runs only here (it is off while a
    run is compared).
    """
    with capture_output():
        for _ in range(4):  # a finalized coroutine's traceback becomes the new last error
            for name in ("last_type", "last_value", "last_traceback", "last_exc"):
                if hasattr(sys, name):
                    delattr(sys, name)
            ip.last_execution_result = None
            if not gc.collect():
                break


def run_once(ip, body: str, checked: bool) -> dict:
    if "CountingMode" not in ip.user_ns:
        settle(ip)  # what earlier tests left
    gc.disable()
    try:
        return compared_run(ip, body, checked)
    finally:
        if "await" in body and "return" in body:  # only such a cell leaves a coroutine behind
            settle(ip)
        gc.enable()


def compared_run(ip, body: str, checked: bool) -> dict:
    ns = ip.user_ns
    if "CountingMode" not in ns:
        ip.run_cell(SETUP)
    reset_modes()
    torch.__future__.set_swap_module_params_on_conversion(False)
    before = set(ns)
    torch.manual_seed(0)  # the same start for both runs (and proof the check draws no random numbers)
    cell = ("%%devcheck -q\n" if checked else "") + body
    with capture_output() as captured, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # both runs see every warning (no registry kept between them)
        result = ip.run_cell(cell)
    modes = function_modes()
    reset_modes()
    with capture_output() as after:  # the next plain cell sees what a plain run would have left
        ip.run_cell("print(sorted(k for k, v in globals().items() if isinstance(v, torch.Tensor) and k[:1] != '_'))")
    torch.__future__.set_swap_module_params_on_conversion(False)
    error = result.error_in_exec or result.error_before_exec
    state = snapshot(ns, before)
    ids_kept = None
    if "lin" in ns and "ids" in ns and isinstance(ns["lin"], torch.nn.Module):
        ids_kept = [id(p) for p in ns["lin"].parameters()] == ns["ids"]
    for name in set(ns) - before:
        del ns[name]
    CountingMode = ns["CountingMode"]
    CountingMode.calls = 0
    printed, traceback = split_traceback(captured.stdout)
    # Where each warning was attributed: the file (a cell is "cell") and the source line it names.
    warned = [("cell" if w.filename.startswith("<") else w.filename.rsplit("/", 1)[-1], w.category.__name__,
               str(w.message), linecache.getline(w.filename, w.lineno).strip()) for w in seen]
    return {
        "failed": error is not None,
        # A SyntaxError's text names the file and line: the checked body starts a line lower.
        "error": (type(error).__name__, error.msg if isinstance(error, SyntaxError) else str(error).split("\n")[0])
        if error is not None else None,
        "stdout": printed,
        "traceback": traceback,
        "value": __import__("re").sub(r" at 0x[0-9a-f]+", "", repr(result.result)) if not isinstance(
            result.result, torch.Tensor) else str(result.result.shape),
        "state": {k: v for k, v in state.items() if k != "ids"},
        "ids_kept": ids_kept,
        "modes": modes,
        "next_cell": after.stdout,
        "warnings": warned,
    }


programs = st.lists(st.sampled_from(STATEMENTS), min_size=1, max_size=6).map("\n".join)


#: Programs the suite draws: each of the 59 statements runs in about 30 of them (the long run,
#: DEVINSPECT_PROGRAMS=5000, finds no more differences than this).
PROGRAMS = int(__import__("os").environ.get("DEVINSPECT_PROGRAMS", "500"))


@pytest.mark.slow
@settings(max_examples=PROGRAMS, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
          database=None)
@given(body=programs)
def test_a_checked_cell_behaves_exactly_as_unchecked(plain_tracebacks, sim, body):
    ip = plain_tracebacks
    plain = run_once(ip, body, checked=False)
    checked = run_once(ip, body, checked=True)
    assert checked == plain, body


@pytest.fixture
def plain_tracebacks(ip):
    """The test shell with IPython's plain traceback mode: the same frames, a tenth of the formatting time."""
    mode = ip.InteractiveTB.mode
    ip.InteractiveTB.set_mode("Plain")
    yield ip
    ip.InteractiveTB.set_mode(mode)
    ip.user_ns.pop("CountingMode", None)


def test_every_kind_of_failure_fails_a_checked_cell(ip, sim):
    """BaseExceptions, compile errors and errors fail the cell (Run All stops), as without the check."""
    for body, name in (("raise KeyboardInterrupt", "KeyboardInterrupt"), ("raise SystemExit(3)", "SystemExit"),
                       ("return 5", "SyntaxError"), ("def f(:\n    pass", "SyntaxError"),
                       ("raise ValueError('x')", "ValueError"), ("class E(BaseException): pass\nraise E()", "E")):
        for checked in (False, True):
            with capture_output():
                result = ip.run_cell(("%%devcheck\n" if checked else "") + body, store_history=True)
            error = result.error_in_exec or result.error_before_exec
            assert type(error).__name__ == name and not result.success, (body, checked)


def test_errors_handled_inside_the_cell_or_in_other_threads_do_not_fail_it(ip, sim):
    with capture_output():
        result = ip.run_cell("%%devcheck\nget_ipython().run_cell('raise ValueError(1)')\nx = 1", store_history=True)
    assert result.success and ip.user_ns["x"] == 1
    errors = []

    def other_thread():
        try:
            ip.run_cell("raise KeyError('in another thread')")
        except Exception as exc:
            errors.append(exc)

    with capture_output():
        result = ip.run_cell("%%devcheck\nimport threading\nt = threading.Thread(target=other)\nt.start(); t.join()\ny = 2",
                             store_history=True) if not ip.user_ns.update(other=other_thread) else None
    assert result.success and ip.user_ns["y"] == 2
    assert ip.custom_exceptions == () or ip.custom_exceptions == tuple()


def test_the_check_removes_only_its_own_mode(ip, sim):
    ip.run_cell(SETUP)
    reset_modes()
    with capture_output():
        ip.run_cell("%%devcheck\ntorch.device('meta').__enter__()\nCountingMode().__enter__()", store_history=True)
    assert function_modes() == ["DeviceContext", "CountingMode"]  # the user's, left open, still there
    ip.user_ns["CountingMode"].calls = 0
    torch.ones(1, device="cpu")
    assert ip.user_ns["CountingMode"].calls == 1  # and working; the check is gone
    reset_modes()
    # A mode the user entered earlier and exits inside the checked cell leaves with the user's exit.
    mode = ip.user_ns["CountingMode"]()
    mode.__enter__()
    ip.user_ns["mode"] = mode
    with capture_output():
        ip.run_cell("%%devcheck\nmode.__exit__(None, None, None)\nz = torch.ones(1)", store_history=True)
    assert function_modes() == []


def test_moves_under_the_swap_flag_work_inside_the_check(ip, sim):
    ip.run_cell(SETUP)
    with capture_output():
        ip.run_cell("%%devcheck\ntorch.__future__.set_swap_module_params_on_conversion(True)\n"
                    "lin = nn.Linear(3, 3)\nids = [id(p) for p in lin.parameters()]\n"
                    "x = torch.ones(2, 3, device=dev)\nlin.to(dev)\nlin(x).sum().backward()\nlin.to('cpu')\n"
                    "torch.__future__.set_swap_module_params_on_conversion(False)", store_history=True)
    lin = ip.user_ns["lin"]
    assert [id(p) for p in lin.parameters()] == ip.user_ns["ids"] and lin.weight.device.type == "cpu"
    # And the next plain cell can move it again at once: the check left nothing on its tensors.
    with capture_output():
        result = ip.run_cell("torch.__future__.set_swap_module_params_on_conversion(True)\nlin.to(dev)\n"
                             "torch.__future__.set_swap_module_params_on_conversion(False)", store_history=True)
    assert result.success


def test_a_traceback_inside_the_check_shows_the_frames_a_plain_cell_shows(ip, sim):
    ip.run_cell(SETUP)
    body = "def f(x):\n    return x @ torch.ones(5, 5)\nf(torch.ones(2, 3))"
    frames = {}
    for checked in (False, True):
        with capture_output() as captured:
            ip.run_cell(("%%devcheck -q\n" if checked else "") + body, store_history=True)
        out = captured.stdout
        frames[checked] = [line.split(",")[0] for line in out.splitlines() if line.startswith(("Cell In[", "File "))]
        assert "devinspect" not in out and "__torch_function__" not in out
    assert [f.split("]")[0].split("[")[0] for f in frames[True]] == [f.split("]")[0].split("[")[0] for f in frames[False]]


def test_a_tensor_method_that_goes_through_the_check_shows_once_in_the_traceback(ip, sim):
    """t.backward() hands itself to the check's mode and runs again: the traceback shows it once,
    at the line a plain cell's traceback shows."""
    ip.run_cell("import torch\nt = torch.ones(2)")
    frames = {}
    for checked in (False, True):
        with capture_output() as captured:
            ip.run_cell(("%%devcheck -q\n" if checked else "") + "t.sum().backward()", store_history=True)
        frames[checked] = [line.split(" in ")[0].split("/")[-1] for line in captured.stdout.splitlines()
                           if line.startswith("File ")]
    assert frames[True] == frames[False] and "overrides.py" not in " ".join(frames[True])


def test_a_warning_names_the_users_line_and_meets_their_filters_as_in_a_plain_cell(ip, sim):
    """PyTorch's warnings, raised inside the check's mode or the simulated device, name the user's
    line, so "once per line", filters by module and "error" act as without the check."""
    ip.run_cell("import torch, warnings\nimport torch.nn.functional as F")
    filters, shown = warnings.filters, warnings._showwarnmsg
    loop = "for _ in range(3):\n    v = F.softmax(torch.ones(2, 3))\n    w = torch.ones(2, device='sim').new_tensor(torch.ones(1))"
    seen = {}
    for checked in (False, True):
        with capture_output(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("default")  # once per module and line
            warnings.filterwarnings("ignore", message="To copy", module="devinspect")  # never matches a user's line
            ip.run_cell(("%%devcheck -q\n" if checked else "") + loop, store_history=True)
        seen[checked] = [(w.filename.startswith("<"), linecache.getline(w.filename, w.lineno).strip()) for w in caught]
    assert seen[True] == seen[False] == [(True, "v = F.softmax(torch.ones(2, 3))"),
                                         (True, "w = torch.ones(2, device='sim').new_tensor(torch.ones(1))")]
    for checked in (False, True):
        with capture_output(), warnings.catch_warnings():
            warnings.filterwarnings("error", message="Implicit dimension")
            result = ip.run_cell(("%%devcheck -q\n" if checked else "") + "v = F.softmax(torch.ones(2, 3))")
        assert type(result.error_in_exec) is UserWarning
    assert warnings.filters is filters and warnings._showwarnmsg is shown


def test_a_fast_path_module_run_by_another_thread_leaves_both_threads_stacks_as_they_were(ip, sim):
    """The check lifts its mode around fused fast-path forwards through global module hooks;
    another thread's forward must neither take the cell's mode nor be given it."""
    ip.run_cell("import threading, sys, torch\nmha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()\n"
                "q = torch.ones(1, 3, 8)")
    body = ("seen = {'main': set(), 'other': set()}\n"
            "def other():\n"
            "    for _ in range(200):\n"
            "        with torch.no_grad():\n            mha(q, q, q, need_weights=False)\n"
            "        seen['other'].add(torch._C._len_torch_function_stack())\n"
            "interval = sys.getswitchinterval(); sys.setswitchinterval(1e-6)\n"
            "t = threading.Thread(target=other); t.start()\n"
            "for _ in range(200):\n"
            "    with torch.no_grad():\n        mha(q, q, q, need_weights=False)\n"
            "    seen['main'].add(torch._C._len_torch_function_stack())\n"
            "t.join(); sys.setswitchinterval(interval)")
    with capture_output():
        result = ip.run_cell("%%devcheck -q\n" + body)
    assert result.success and ip.user_ns["seen"] == {"main": {1}, "other": {0}}
    assert torch._C._len_torch_function_stack() == 0
