"""Errors explained after the fact: a device mismatch in any cell, running out of device
memory, and what keeps a tensor alive (%devices --why)."""

from __future__ import annotations

import gc
import json
import re
import sys
from pathlib import Path

import pytest
import torch
from conftest import notebook, run, run_notebook, run_python
from IPython.utils.capture import capture_output
from nbclient.exceptions import CellExecutionError

import devinspect
from devinspect import testing
from devinspect.model.units import human_bytes

SETUP = """import torch
from torch import nn
from devinspect import testing
dev = testing.enable()
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).to(dev)
x = torch.randn(4, 8)
"""


@pytest.fixture
def capped(sim, ip):
    """The simulated devices with 64 MiB each, uncapped again afterwards; nothing earlier tests
    left (an error's traceback, the shell's output history, garbage) holds any of it."""
    devinspect.release_traceback()
    with capture_output():
        ip.displayhook.flush()
    gc.collect()
    if any(torch.sim.memory_allocated(i) for i in range(testing.DEVICE_COUNT)):
        # An earlier test's error still reachable when its shell was frozen (gc.freeze) is garbage
        # only a collection of the frozen objects frees (its frames may hold tensors on the
        # device): that collection walks all the suite has frozen, so only when something is left.
        gc.unfreeze()
        gc.collect()
    testing.enable(memory="64MiB")
    torch.sim.empty_cache()
    yield sim
    devinspect.release_traceback()
    testing.enable(memory=None)


# -- a device mismatch, in any cell -------------------------------------------------------


def test_a_plain_failing_cell_is_explained_under_its_traceback(ip, sim):
    run(ip, SETUP)
    result, text, html, captured = run(ip, "y = model(x)")
    assert type(result.error_in_exec) is RuntimeError
    assert "device mismatch in F.linear (cpu, sim:0)" in text
    assert "x                            cpu" in text and "model[0].weight" in text
    assert 'x = x.to("sim:0")' in text and "%%devcheck" in text
    assert "device mismatch in <code>F.linear</code>" in html


def test_a_models_output_handed_straight_on_is_named_as_the_line_writes_it(ip, sim):
    run(ip, "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
            "model = nn.Linear(4, 3).to('sim')\nx = torch.randn(2, 4, device='sim')\nlabels = torch.tensor([0, 1])")
    _result, text, html, _captured = run(ip, "loss = F.cross_entropy(model(x), labels)")
    assert "the output of model(x)" in text and "(unnamed)" not in text
    assert "the output of model(x)" in html
    assert 'labels = labels.to("sim:0")' in text  # the name is shown, never used as code


def test_the_printed_fix_runs_as_printed_and_the_cell_then_works(ip, sim):
    run(ip, SETUP)
    run(ip, "y = model(x)")
    explanation = devinspect.explain(namespace=ip.user_ns)
    fix = explanation.mismatch.fix
    assert run(ip, fix.code)[0].success
    assert run(ip, "y = model(x)")[0].success



def test_a_torchscript_model_called_with_a_meta_input_is_explained_with_an_edit_that_works(ip):
    # TorchScript runs the model in C++ (no Python frame inside it): the line that called it is
    # the failing call, the model's C++ parameters its other side.
    run(ip, "import torch\nfrom torch import nn\nmodel = nn.Sequential(nn.Linear(4, 4), nn.ReLU())\n"
            "scripted = torch.jit.script(model)\n")
    run(ip, "x = torch.ones(2, 4, device='meta')")
    result, text, _, _ = run(ip, "y = scripted(x)")
    assert type(result.error_in_exec) is RuntimeError
    assert "device mismatch in scripted (cpu, meta)" in text and "model[0].weight" in text
    # A meta tensor holds no data to move: the line that makes it is edited instead.
    assert "x = x.to(" not in text and '+ x = torch.ones(2, 4, device="cpu")' in text
    assert run(ip, 'x = torch.ones(2, 4, device="cpu")')[0].success
    assert run(ip, "y = scripted(x)")[0].success

def test_apply_fix_under_an_explained_error_moves_the_input(ip, sim):
    from devinspect.jupyter.fix_buttons import explanation_panel

    run(ip, SETUP)
    run(ip, "y = model(x)")
    panel = explanation_panel(devinspect.explain(namespace=ip.user_ns), ip.user_ns, shell=ip)
    panel.apply.button.click()
    assert panel.apply.status.value.startswith("✔ x = x.to(")
    assert ip.user_ns["x"].device == sim and run(ip, "y = model(x)")[0].success


def test_in_a_kernel_the_fix_is_a_button(kernel_ip, sim):
    run(kernel_ip, SETUP)
    _, _, _, captured = run(kernel_ip, "y = model(x)")
    assert any("application/vnd.jupyter.widget-view+json" in o.data for o in captured.outputs)


def _ours(printed: str) -> bool:
    """Whether devinspect said something or showed a frame of its own (the checkout's path may
    itself contain the word: a clone is called devinspect)."""
    package = str(Path(devinspect.__file__).parent)
    return "devinspect:" in printed or package in printed


def test_clean_cells_and_other_errors_show_nothing(ip, sim):
    run(ip, SETUP)
    _, text, _, captured = run(ip, "z = model(x.to(dev))")
    assert captured.outputs == [] and not _ours(text + captured.stdout + captured.stderr)
    for code in ("torch.ones(2) @ torch.ones(3)", "raise ValueError('not about devices')", "{}['missing']",
                 "model(torch.ones(3, 5, device=dev))"):
        result, text, _, captured = run(ip, code)
        assert result.error_in_exec is not None
        assert captured.outputs == [] and not _ours(text + captured.stdout + captured.stderr), code


def test_an_error_whose_message_names_no_device_is_not_a_mismatch_whatever_its_inputs(ip, sim):
    """A checkpoint on the host loaded into a model on the device is how loading works: when it
    fails for its shapes, the inputs' two devices are not the cause, plain or checked."""
    run(ip, SETUP)
    run(ip, 'ckpt = {k: torch.zeros(v.shape[0] + 1, *v.shape[1:]) for k, v in model.state_dict().items()}')
    for code in ("model.load_state_dict(ckpt)", "%%devcheck\nmodel.load_state_dict(ckpt)",
                 "torch.nn.utils.vector_to_parameters(torch.randn(3), model.parameters())",
                 "model[0].weight.view_as(torch.zeros(3))"):
        result, text, _, captured = run(ip, code)
        assert result.error_in_exec is not None, code
        assert "device mismatch" not in text + captured.stdout, code
    assert devinspect.explain(namespace=ip.user_ns).mismatch is None
    # A mismatch whose message names only the devices' kinds is still one.
    from devinspect.collect.code.failing_call import names_a_device

    assert names_a_device(RuntimeError("Input tensor is not an XLA tensor: CPUFloatType"), ["cpu", "xla:0"])
    assert names_a_device(RuntimeError("Tensor for argument #2 'mat1' is on CPU"), ["cpu", "cuda:0"])
    assert not names_a_device(TypeError("SimTensor.__new__() got an unexpected keyword"), ["cpu", "sim:0"])


def test_the_edit_goes_to_the_line_that_made_the_tensor_not_one_that_indexes_with_it(ip, sim):
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "table = torch.randn(10, 4, device=dev)\nidx = torch.tensor([0, 3])")
    run(ip, "table[idx.to(dev)] = torch.zeros(2, 4, device=dev)")
    _, text, _, _ = run(ip, "g = torch.gather(table, 0, idx[:, None].expand(2, 4))")
    assert "- idx = torch.tensor([0, 3])" in text and "+ idx = torch.tensor([0, 3], device=dev)" in text
    assert "- table[" not in text


def test_an_edit_on_a_line_of_several_statements_edits_the_culprits_and_parses(ip, sim):
    import ast

    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "a = torch.randn(3, 8, device=dev); b = torch.zeros(8)  # é: columns count bytes")
    for code in ("z = a + b", "%%devcheck\nz = a + b"):
        _, text, _, captured = run(ip, code)
        assert "+ a = torch.randn(3, 8, device=dev); b = torch.zeros(8, device=dev)  # é" in text + captured.stdout
    edit = devinspect.explain(namespace=ip.user_ns).mismatch.fix.edits[0]
    ast.parse(edit.new)


def test_of_two_calls_on_a_line_the_one_that_failed_is_named_with_its_operands(ip, sim):
    run(ip, "import torch\nfrom torch import nn\nfrom devinspect import testing\ndev = testing.enable()\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n"
            "        super().__init__()\n"
            "        self.fc = nn.Linear(8, 8)\n"
            "    def forward(self, x):\n"
            "        return self.fc(x) * self.scale\n"
            "net = Net().to(dev)\n"
            "net.register_buffer('scale', torch.ones(8))\n"
            "inp = torch.randn(4, 8, device=dev)")
    run(ip, "out = net(inp)")
    mismatch = devinspect.explain(namespace=ip.user_ns).mismatch
    assert mismatch.op == "Tensor.__mul__"
    assert "net.scale" in [o.name for o in mismatch.operands] and "inp" not in [o.name for o in mismatch.operands]


def test_nothing_watches_a_cell_while_it_runs(ip, sim):
    run(ip, "import sys, torch\nseen = (torch._C._len_torch_function_stack(), sys.gettrace(), sys.getprofile())")
    assert ip.user_ns["seen"] == (0, None, None)


def test_explaining_can_be_turned_off(ip, sim):
    run(ip, SETUP)
    try:
        run(ip, "%config DevInspect.explain_errors = False")
        _, text, _, captured = run(ip, "y = model(x)")
        assert "device mismatch" not in text and captured.outputs == []
    finally:
        run(ip, "%config DevInspect.explain_errors = True")


def test_a_checked_cell_is_explained_once_by_its_report(ip, sim):
    run(ip, SETUP)
    _, text, _, _ = run(ip, "%%devcheck\ny = model(x)")
    assert text.count("device mismatch in F.linear") == 1 and "devcheck:" in text


def test_an_error_in_the_users_function_names_its_locals(ip, sim):
    run(ip, SETUP + "w = torch.randn(8, 8, device=dev)\n"
                    "def project(a):\n    scaled = a * 2\n    return scaled @ w\n")
    _, text, _, _ = run(ip, "out = project(x)")
    assert "device mismatch in Tensor.__matmul__" in text and "raised in Cell In[" in text
    assert "scaled" in text and "[local]" in text and 'x = x.to("sim:0")' in text


def test_devcheck_last_explains_the_last_error(ip, sim):
    run(ip, SETUP)
    run(ip, "y = model(x)")
    _, text, _, _ = run(ip, "%devcheck --last")
    assert "device mismatch in F.linear" in text
    result, _, _, _ = run(ip, "%devcheck --last -v why_it_failed")
    assert ip.user_ns["why_it_failed"].kind == "device mismatch"
    result, text, _, _ = run(ip, "e = %devcheck --last -o")
    assert ip.user_ns["e"].mismatch.op == "F.linear"


def test_devcheck_last_without_an_error_or_with_a_cell_says_so(ip, monkeypatch):
    for name in ("last_value", "last_exc"):
        monkeypatch.setattr(sys, name, None, raising=False)
    result, text, _, _ = run(ip, "%devcheck --last")
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "no error to explain" in str(result.error_in_exec)
    result, _, _, _ = run(ip, "%devcheck")
    assert "put %%devcheck on the cell's first line" in str(result.error_in_exec)
    result, _, _, _ = run(ip, "%%devcheck --last\nx = 1")
    assert "takes no cell" in str(result.error_in_exec)
    run(ip, "%devices --no-such-option")  # a usage error is the last error now
    result, _, _, _ = run(ip, "%devcheck --last")
    assert "the last error was a magic's usage error" in str(result.error_in_exec)


def test_explain_from_plain_python(sim):
    ns = {"torch": torch, "sim": sim}
    exec("model = torch.nn.Linear(4, 2).to(sim)\ninputs = torch.randn(3, 4)", ns)
    try:
        exec("model(inputs)", ns)
    except RuntimeError as exc:
        explanation = devinspect.explain(exc, ns)
    assert explanation.kind == "device mismatch"
    assert [o.name for o in explanation.mismatch.operands if o.device == "cpu"] == ["inputs"]
    assert explanation.mismatch.fix.code == 'inputs = inputs.to("sim:0")'
    try:
        raise KeyError("elsewhere")
    except KeyError as exc:
        other = devinspect.explain(exc)
    assert not other and "not a device error" in repr(other)


def test_a_local_of_a_function_is_fixed_in_its_source(sim):
    model = torch.nn.Linear(4, 2).to(sim)
    inputs = torch.randn(3, 4)
    try:
        model(inputs)
    except RuntimeError as exc:
        explanation = devinspect.explain(exc)  # the caller's globals: inputs is a local here
    # The cause is the line that made inputs on the host: it gets device=, in the function's own words.
    (edit,) = explanation.mismatch.fix.edits
    assert (edit.old, edit.new) == ("inputs = torch.randn(3, 4)", "inputs = torch.randn(3, 4, device=sim)")
    assert edit.where.file == __file__


def test_explain_without_any_error_raises(monkeypatch):
    for name in ("last_value", "last_exc"):
        monkeypatch.setattr(sys, name, None, raising=False)
    with pytest.raises(LookupError, match="no error to explain"):
        devinspect.explain()


def test_the_traceback_is_read_not_run(ip, sim):
    """Properties and __getattr__ of the objects on the failing line are never called."""
    run(ip, SETUP + "calls = []\n"
                    "class Batch:\n"
                    "    def __init__(self, t):\n        self.t = t\n"
                    "    @property\n    def inputs(self):\n        calls.append('property')\n        return self.t\n"
                    "    def __getattr__(self, name):\n        calls.append(name)\n        raise AttributeError(name)\n"
                    "batch = Batch(x)\n")
    _, text, _, _ = run(ip, "y = model(batch.t)")
    assert "device mismatch in F.linear" in text
    run(ip, "y = model(batch.inputs)")  # the property ran once, in the cell itself
    assert ip.user_ns["calls"] == ["property"]


# -- out of memory ----------------------------------------------------------------------------

OOM_SETUP = """import torch
from devinspect import testing
dev = testing.device()
keep = torch.ones(4, 1024, 1024, device=dev)  # 16 MiB, named
def step(x):
    h = x.repeat(2, 1, 1)  # 32 MiB, held by the traceback's frame once it fails
    return torch.empty(64, 1024, 1024, device=dev)  # 256 MiB: more than the device has
"""


def test_an_out_of_memory_error_is_explained_with_the_largest_tensors(ip, capped):
    run(ip, OOM_SETUP)
    result, text, _, _ = run(ip, "out = step(keep)")
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    assert "out of memory on sim:0: tried to allocate 256.0 MiB" in text
    assert "when it failed: allocated 48.0 MiB" in text and "of 64.0 MiB" in text
    lines = text.splitlines()
    largest = lines.index("  largest live tensors on sim:0:")
    assert lines[largest + 1].split()[:4] == ["h", "in", "step", "32.0"]
    assert lines[largest + 2].split()[:3] == ["keep", "16.0", "MiB"]
    assert "held only by the last error's traceback 32.0 MiB" in text
    assert "devinspect.release_history()" in text and "torch.sim.empty_cache()" in text


def test_the_printed_release_runs_as_printed_where_only_the_extension_is_loaded(ip, capped):
    run(ip, OOM_SETUP)
    run(ip, "out = step(keep)")
    assert "devinspect" not in ip.user_ns  # %load_ext does not bind the name
    release = devinspect.explain(namespace=ip.user_ns).out_of_memory.fixes[0]
    assert release.code == "import devinspect\ndevinspect.release_history()"
    before = torch.sim.memory_allocated(0)
    result, text, _, _ = run(ip, release.code)
    assert result.error_in_exec is None and before - torch.sim.memory_allocated(0) == 32 << 20
    assert "released" in text and "32.0 MiB" in text


def test_release_history_frees_what_the_explanation_says(ip, capped):
    from devinspect.jupyter.fix_buttons import explanation_panel

    run(ip, OOM_SETUP)
    run(ip, "out = step(keep)")
    explanation = devinspect.explain(namespace=ip.user_ns)
    held = explanation.out_of_memory.traceback_bytes
    assert held == 32 << 20
    before = torch.sim.memory_allocated(0)
    panel = explanation_panel(explanation, ip.user_ns, shell=ip)
    release, empty = [box.children[0] for box in panel.children]
    assert release.description == "Release history" and empty.description == "empty_cache"
    release.click()
    assert before - torch.sim.memory_allocated(0) == held  # what it said, freed
    assert "32.0 MiB" in panel.children[0].children[2].value
    empty.click()
    assert panel.children[1].children[2].value.startswith("✔ empty_cache() released")
    # Only segments in use are left (keep's, and a small one of earlier tests' tensors).
    assert torch.sim.memory_reserved(0) - torch.sim.memory_allocated(0) < 2 << 20
    assert run(ip, "out = step(keep[:1])")[0].error_in_exec is not None  # still too big, as it should be


def test_out_of_memory_from_plain_python_with_nothing_to_release(capped):
    keep = torch.ones(4, 1024, 1024, device=capped)
    try:
        torch.empty(13, 1024, 1024, device=capped)  # 52 MiB: less than the device, more than is free
    except torch.OutOfMemoryError as exc:
        explanation = devinspect.explain(exc, {"keep": keep})
    m = explanation.out_of_memory
    assert explanation.kind == "out of memory" and m.device == "sim:0" and m.requested_bytes == 52 << 20
    assert m.at_failure.total_bytes == 64 << 20 and m.now.allocated_bytes == torch.sim.memory_allocated(0)
    assert m.largest[0].name == "keep" and m.largest[0].holder == "namespace" and not m.exceeds_capacity
    # Nothing holds memory that can be given back (the allocator returned its cache before it
    # failed): no fix that frees 0 B, and what would make it fit instead.
    assert m.fixes == () and m.advice
    text = repr(explanation)
    assert "nothing here can be released; what would make it fit: a smaller batch" in text
    from devinspect.render.explanation_text import headline

    assert "— what would: a smaller batch, lower precision" in headline(explanation)


def test_a_request_larger_than_the_device_says_so_before_any_release(ip, capped):
    # 1 GiB on a 64 MiB device (89 GiB on a 79.2 GiB H100): the headline is that the request
    # alone is more than the device holds, then what would make it fit; no release leads.
    run(ip, OOM_SETUP)
    result, text, html, _ = run(ip, "big = torch.empty(256, 1024, 1024, device=dev)")
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    headline = ("devinspect: out of memory on sim:0: tried to allocate 1.0 GiB, more than sim:0 holds in all "
                "(64.0 MiB): no release can make it fit — what would: a smaller batch, lower precision, recomputed "
                "activations, sharding across devices, offloading to the host, a device with more memory "
                "(explained below the traceback ↓)")
    assert headline in text
    m = devinspect.explain(namespace=ip.user_ns).out_of_memory
    assert m.exceeds_capacity and m.requested_bytes == 1 << 30
    assert all("the request still does not fit" in f.summary for f in m.fixes if f.action is not None
               and type(f.action).__name__ == "ReleaseHistory")
    assert "more than sim:0 holds in all" in html and "what would make it fit: a smaller batch" in html


EARLIER_ERROR = """import torch
from devinspect import testing
dev = testing.device()
def f():
    hidden = torch.empty(8, 1024, 1024, device=dev)  # 32 MiB, a local of f
    raise ValueError("bad shape")
"""


def test_a_tensor_held_by_an_earlier_errors_traceback_is_named_and_released():
    """Run in a fresh interpreter: the garbage other tests leave in this one (errors and their
    frames, frozen objects) must not decide which tensors the out-of-memory scan finds."""
    tests = Path(__file__).resolve().parent
    code = (f"import sys; sys.path.insert(0, {str(tests)!r})\n"
            "from IPython.testing.globalipapp import get_ipython\n"
            "ip = get_ipython(); ip.run_line_magic('load_ext', 'devinspect')\n"
            "from devinspect import testing\n"
            "import test_explain\n"
            "test_explain.earlier_errors_local_named_and_released(ip, testing.enable(memory='64MiB'))\n"
            "print('ok')\n")
    out = run_python(code)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stdout[-3000:] + out.stderr[-3000:]


def earlier_errors_local_named_and_released(ip, capped):
    # f raised a cell before: its traceback lives on (IPython's frame in it holds the cell's
    # result, which holds the error) and keeps f's 32 MiB local, which no name reaches.
    run(ip, EARLIER_ERROR)
    first, _, _, _ = run(ip, "f()")
    assert type(first.error_in_exec) is ValueError
    result, text, _, _ = run(ip, "x = torch.empty(12, 1024, 1024, device=dev)")  # 48 MiB; 32 free
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    lines = text.splitlines()
    largest = lines.index("  largest live tensors on sim:0:")
    # Listed by the name it has there (a tensor an earlier test left unnamed may come first).
    row = next((line for line in lines[largest + 1:] if line.split()[:3] == ["hidden", "in", "f"]), None)
    assert row is not None, text
    assert row.split()[3:5] == ["32.0", "MiB"] and "[the traceback of the ValueError from Cell In[" in row
    # The fix that frees the most leads, and it says whether the request then fits.
    m = devinspect.explain(namespace=ip.user_ns).out_of_memory
    release = m.fixes[0]
    assert release.summary.startswith("release the traceback of the ValueError from Cell In[")
    then = human_bytes(m.at_failure.free_bytes + (32 << 20))  # free when it failed, and what the fix frees
    assert f"frees 32.0 MiB on sim:0; then {then} would be free for the 48.0 MiB asked: it fits" in release.summary
    assert f"— fix: {release.summary} (explained below" in text  # the headline above the traceback
    # %devices --all lists it by that name, and --why takes the name as listed.
    listed = ip.run_line_magic("devices", "--all -o")
    name = next(r.name for r in listed.records if r.name.endswith(">:f.hidden"))
    assert re.fullmatch(r"<ValueError from Cell In\[\d+\], line 1>:f\.hidden", name)
    assert ip.run_line_magic("devices", f"--why '{name}' -o").nbytes == 32 << 20
    before = torch.sim.memory_allocated(0)
    done, said, _, _ = run(ip, release.code)  # as printed
    assert done.error_in_exec is None and before - torch.sim.memory_allocated(0) == 32 << 20
    assert "the traceback of the ValueError from Cell In[" in said and "32.0 MiB" in said
    assert run(ip, "x = torch.empty(12, 1024, 1024, device=dev)")[0].success  # now it fits
    run(ip, "del x")


def test_cuda_and_other_backends_messages_are_read():
    from devinspect.diagnose.errors.out_of_memory import failed_device, figures_in

    cuda = ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has a total capacity of 79.15 GiB of which "
            "13.44 MiB is free. Process 1234 has 79.13 GiB memory in use. Of the allocated memory 78.56 GiB is "
            "allocated by PyTorch, and 123.45 MiB is reserved by PyTorch but unallocated.")
    assert failed_device(cuda) == "cuda:1"
    f = figures_in(cuda)
    assert f.total_bytes == int(79.15 * (1 << 30)) and f.free_bytes == int(13.44 * (1 << 20))
    assert f.reserved_bytes == f.allocated_bytes + int(123.45 * (1 << 20))
    mps = ("MPS backend out of memory (MPS allocated: 1.20 GB, other allocations: 2.00 GB, max allowed: 18.13 GB). "
           "Tried to allocate 256.00 MB on private pool.")
    assert failed_device(mps) == "mps:0" and figures_in(mps).total_bytes == int(18.13 * (1 << 30))
    xpu = ("XPU out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.11 GiB total capacity; 12.30 GiB already "
           "allocated; 13.20 GiB reserved in total by PyTorch)")
    assert failed_device(xpu) == "xpu:0" and figures_in(xpu).reserved_bytes == int(13.2 * (1 << 30))


RECORDED_OOM = sorted((Path(__file__).parent / "fixtures").glob("oom_*.json"))


@pytest.mark.parametrize("fixture", RECORDED_OOM, ids=[p.stem for p in RECORDED_OOM])
def test_recorded_out_of_memory_cases_read_as_they_were_explained(fixture):
    # Written by benchmarks/gpu_check.py: oom_cuda.json on a GPU's allocator, oom_sim.json in its
    # dry run. The messages are read here as they were there, and what was said holds.
    from devinspect.diagnose.errors.out_of_memory import failed_device, figures_in, requested_in

    data = json.loads(fixture.read_text())
    assert "captured by benchmarks/gpu_check.py" in data["provenance"]
    cases = {c["name"]: c for c in data["cases"]}
    for case in cases.values():
        assert failed_device(case["message"]) == data["device"]
        # The message writes the capacity rounded ("79.18 GiB"): the device's own figure, near enough.
        assert abs(figures_in(case["message"]).total_bytes - data["capacity_bytes"]) <= data["capacity_bytes"] // 1000
    larger = cases["larger than the device"]
    assert requested_in(larger["message"]) > figures_in(larger["message"]).total_bytes
    assert "no release can make it fit — what would: a smaller batch" in larger["headline"]
    kept = cases["a local kept by an earlier error"]
    figures = figures_in(kept["message"])
    assert figures.free_bytes < requested_in(kept["message"]) <= figures.total_bytes
    assert "hidden in f" in kept["explanation"] and kept["headline"].count("it fits") == 1
    assert all(data["checks"].values()), data["checks"]


# -- who holds a tensor -------------------------------------------------------------------------


def test_why_names_a_closure_out_a_traceback_and_an_autograd_graph(ip, sim):
    run(ip, "import torch\nfrom devinspect import testing\n"
            "h = torch.ones(1000, device=testing.device())\n"
            "def make():\n    kept = h\n    return lambda: kept\n"
            "f = make()\n"
            "w = torch.randn(1000, device=testing.device(), requires_grad=True)\n"
            "loss = (w * h).sum()\n"
            "def boom(a):\n    local = a + 1\n    raise ValueError('boom')\n")
    run(ip, "h")  # shown: Out keeps it
    run(ip, "boom(h)")
    found = ip.run_line_magic("devices", "--why h -o")
    paths = {r.path: r for r in found.references}
    assert "h" in paths and paths["h"].root == "namespace"
    assert paths["f.__closure__[0].cell_contents"].via == "closure"
    assert any(p.startswith("Out[") for p in paths) and any(r.root == "output history" for r in found.references)
    local = next(r for r in found.references if r.root == "last error's traceback")
    assert local.path.endswith(".tb_frame.f_locals['a']") and "a local of boom" in local.note
    graph = [r for r in found.references if r.via == "autograd graph"]
    assert [r.path for r in graph] == ["loss.grad_fn.next_functions[0][0]._saved_other"]
    assert found.complete
    # Each path can be typed: it reaches the tensor itself.
    assert eval(graph[0].path, ip.user_ns) is ip.user_ns["h"]
    assert eval(local.path, ip.user_ns) is ip.user_ns["h"]  # sys is not a name there: the path imports it
    assert local.path.startswith("__import__('sys').last_traceback")
    run(ip, "import sys")
    local = next(r for r in ip.run_line_magic("devices", "--why h -o").references
                 if r.root == "last error's traceback")
    assert local.path.startswith("sys.last_traceback") and eval(local.path, ip.user_ns) is ip.user_ns["h"]


def test_why_finds_a_traceback_local_and_an_unnamed_tensor(ip, sim):
    run(ip, "import torch\nfrom devinspect import testing\n"
            "def boom():\n    local = torch.ones(10, device=testing.device())\n    raise ValueError('x')\n")
    run(ip, "boom()")
    found = ip.run_line_magic("devices", "--why sys.last_traceback:boom.local -o")
    (ref,) = found.references
    assert ref.root == "last error's traceback" and ref.path.endswith(".tb_frame.f_locals['local']")
    assert eval(ref.path, ip.user_ns) is sys.last_traceback.tb_next.tb_next.tb_frame.f_locals["local"]
    run(ip, "import gc\nclass Node:\n    pass\nn = Node(); n.me = n; n.t = torch.ones(3); gc.disable(); del n")
    try:
        listed = ip.run_line_magic("devices", "--all -o")
        unnamed = next(r.name for r in listed.records if r.kind == "unnamed" and r.shape == (3,))
        found = ip.run_line_magic("devices", f"--why '{unnamed}' -o")
        assert found.references == () and "Node" in found.unreached or "dict" in found.unreached
        assert "no path from your names" in repr(found)
        # As --all prints it, unquoted: <unnamed N> is one name.
        assert repr(ip.run_line_magic("devices", f"--why {unnamed} -o")) == repr(found)
    finally:
        gc.enable()
        gc.collect()


def test_why_lists_a_class_attribute_of_the_users_class(ip):
    run(ip, "import torch\nt = torch.ones(100)\nclass Cfg:\n    pass\nCfg.table = t\n")
    found = ip.run_line_magic("devices", "--why t -o")
    assert "Cfg.table" in [r.path for r in found.references] and found.unreached == ()


def test_why_mistakes_are_one_line(ip):
    run(ip, "import torch\nhidden_state = torch.ones(2)")
    for line, message in (("--why hiden_state", "did you mean 'hidden_state'?"),
                          ("--why hidden_state -d cpu", "--why takes one name and no other selection"),
                          ("--why", "expected one argument")):
        result, _, _, _ = run(ip, f"%devices {line}")
        assert type(result.error_in_exec).__name__ == "UsageError" and message in str(result.error_in_exec), line


def test_why_runs_no_user_code(ip, sim):
    run(ip, "import torch\ncalls = []\nt = torch.ones(3)\n"
            "class Sneaky:\n"
            "    def __init__(self):\n        self.t = t\n"
            "    @property\n    def other(self):\n        calls.append('property')\n        return t\n"
            "    def __getattr__(self, name):\n        calls.append(name)\n        raise AttributeError(name)\n"
            "    def __eq__(self, other):\n        calls.append('eq')\n        return False\n"
            "    __hash__ = object.__hash__\n"
            "s = Sneaky()\nd = {s: t}\n")
    found = ip.run_line_magic("devices", "--why t -o")
    assert {r.path for r in found.references} >= {"t", "s.t", "d[…]"}
    assert ip.user_ns["calls"] == []


def test_why_is_bounded_and_says_when_it_stopped(ip, monkeypatch):
    from devinspect.collect.namespace import referrers

    run(ip, "import torch\nt = torch.ones(1)\nhay = [[[i] for i in range(1000)] for _ in range(100)]\nhay.append(t)")
    found = ip.run_line_magic("devices", "--why t -o")
    assert found.complete and "hay[100]" in {r.path for r in found.references}
    monkeypatch.setattr(referrers, "MAX_OBJECTS", 1000)
    found = ip.run_line_magic("devices", "--why t -o")
    assert not found.complete and "the search stopped at its bounds" in repr(found)


def test_why_names_a_container_it_looked_at_in_part(ip):
    run(ip, "import torch\nt = torch.ones(1)\nobjs = [0] * 20_000 + [{'s': t}]")
    found = ip.run_line_magic("devices", "--why t -o")
    assert not found.complete
    assert "objs: looked at the first 10,000 of 20,001" in repr(found)
    # A name that is itself a path past the part looked at is a reference all the same.
    run(ip, "big = [torch.zeros(2) for _ in range(20_000)]")
    past = ip.run_line_magic("devices", "--why big[15000] -o")
    assert [r.path for r in past.references] == ["big[15000]"] and not past.unreached
    assert "no path" not in repr(past) and "big: looked at the first 10,000 of 20,000" in repr(past)



def test_why_of_a_tensor_whose_memory_cannot_be_read_still_lists_its_holders(ip):
    # A batched tensor kept past its vmap: plain torch.Tensor by type, no readable storage.
    run(ip, "import torch\nkept = []\n_ = torch.vmap(lambda x: kept.append(x) or x)(torch.ones(3, 2))\n"
            "first = kept[0]")
    result, out, _, _ = run(ip, "%devices --why first")
    assert result.error_in_exec is None, result.error_in_exec
    assert "could not inspect: NotImplementedError" in out and "kept[0]" in out
    found = ip.run_line_magic("devices", "--why first -o")
    assert {r.path for r in found.references} == {"first", "kept[0]"} and found.device == "?"

# -- in a real kernel -----------------------------------------------------------------------------


@pytest.mark.slow
def test_in_a_real_kernel_failing_cells_are_explained_and_others_are_not():
    cells = [
        "%load_ext devinspect",
        SETUP,
        "y = model(x)",  # 2: a device mismatch
        "torch.ones(2) @ torch.ones(3)",  # 3: an unrelated error
        "testing.enable(memory='64MiB')\nkeep = torch.ones(4, 1024, 1024, device=dev)",
        "torch.empty(64, 1024, 1024, device=dev)",  # 5: out of memory
    ]
    nb = run_notebook(notebook(cells, raising=range(2, len(cells))))

    def texts(i: int) -> str:
        return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in nb.cells[i].outputs)

    mismatch = nb.cells[2].outputs
    kinds = [o.output_type for o in mismatch]
    assert kinds[-1] == "error" and kinds.count("error") == 1  # the explanation first, the traceback under it
    assert not mismatch[-1]["traceback"][0].startswith("devinspect")  # the traceback as a plain kernel sends it
    assert "device mismatch in F.linear" in texts(2) and 'x = x.to("sim:0")' in texts(2)
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in mismatch)
    assert [o.output_type for o in nb.cells[3].outputs] == ["error"]  # nothing added
    assert "out of memory on sim:0: tried to allocate 256.0 MiB" in texts(5) and "keep" in texts(5)


@pytest.mark.slow
def test_run_all_still_stops_at_an_explained_error():
    cells = ["%load_ext devinspect", SETUP, "y = model(x)", "after = 'ran'"]
    nb = notebook(cells)
    with pytest.raises(CellExecutionError):
        run_notebook(nb)
    assert nb.cells[3].outputs == [] and "device mismatch" in str(nb.cells[2].outputs)


def test_a_lists_items_are_one_row_of_the_largest_tensors(capped):
    parts = [torch.ones(1024, 1024, device=capped) for _ in range(6)]  # 6 x 4 MiB
    pair = [torch.ones(256, 1024, device=capped) for _ in range(2)]  # 2 x 1 MiB: too few to group
    big = torch.ones(2, 1024, 1024, device=capped)  # 8 MiB
    try:
        torch.empty(64, 1024, 1024, device=capped)
    except torch.OutOfMemoryError as exc:
        explanation = devinspect.explain(exc, {"parts": parts, "pair": pair, "big": big})
    rows = [(t.name, t.nbytes, t.count) for t in explanation.out_of_memory.largest]
    assert rows == [("parts[0…5]", 24 << 20, 6), ("big", 8 << 20, 1), ("pair[0]", 1 << 20, 1), ("pair[1]", 1 << 20, 1)]
    assert "parts[0…5]    24.0 MiB  6 × float32[1024, 1024]" in repr(explanation)
    # The message rounds its figures: a difference smaller than that rounding is not "freed".
    assert "freed as the error unwound" not in repr(explanation)


def test_the_traceback_starts_with_a_pointer_to_the_explanation(ip, sim):
    # The first line a user sees over a 60-line torch traceback says what is wrong and that
    # the fix follows; IPython's traceback itself is whole, and another extension's hook stays.
    seen = []
    shells_own = ip._showtraceback

    def another_extensions_hook(etype, value, stb):
        seen.append(list(stb))
        return shells_own(etype, value, stb)

    ip.run_line_magic("unload_ext", "devinspect")
    ip._showtraceback = another_extensions_hook
    handled = []
    ip.set_custom_exc((KeyError,), lambda shell, etype, value, tb, tb_offset=None: handled.append(value))
    try:
        ip.run_line_magic("load_ext", "devinspect")
        run(ip, SETUP)
        result, text, _, _ = run(ip, "y = model(x)")
        pointer, *rest = seen[-1]
        assert pointer.startswith("devinspect: device mismatch in F.linear (cpu, sim:0)")
        assert "fix: move x to sim:0" in pointer and "below the traceback" in pointer
        assert "RuntimeError" in "".join(rest) and "Expected all tensors" in "".join(rest)
        assert 'x = x.to("sim:0")' in text  # the explanation itself, after the cell as before
        run(ip, "1 / 0")
        assert not seen[-1][0].startswith("devinspect")  # other errors: IPython's traceback alone
        run(ip, "{}['k']")
        assert len(handled) == 1  # the custom handler still handles its errors
        ip.run_line_magic("unload_ext", "devinspect")
        assert ip._showtraceback == another_extensions_hook
    finally:
        ip.set_custom_exc((), None)
        del ip._showtraceback
        ip.run_line_magic("load_ext", "devinspect")


def test_the_pointer_is_a_line_of_its_own_in_every_traceback_mode(ip, sim):
    from IPython.utils.capture import capture_output

    run(ip, SETUP)
    mode = ip.InteractiveTB.mode
    try:
        for name in ("Plain", "Minimal", "Context", "Verbose"):
            ip.InteractiveTB.set_mode(name)
            with capture_output() as captured:
                ip.run_cell("y = model(x)")
            first, second = captured.stdout.splitlines()[:2]
            assert first.startswith("devinspect: device mismatch") and first.endswith("(explained below the traceback ↓)")
            assert not second.startswith("devinspect")
    finally:
        ip.InteractiveTB.set_mode(mode)


def test_a_tensor_a_library_makes_without_device_is_fixed_on_the_users_line(ip, sim, tmp_path, monkeypatch):
    """Read from the library's source after the fact (no %%devcheck): its line is never the fix."""
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "poslib2.py").write_text("import torch\n\ndef add_positions(h):\n"
                                        "    pos = torch.arange(h.shape[-1], dtype=h.dtype).float()\n"
                                        "    return h + pos\n")
    monkeypatch.syspath_prepend(str(library))
    run(ip, "import torch, poslib2\nfrom devinspect import testing\ndev = testing.enable()\n"
            "h = torch.randn(2, 5, device=dev)")
    run(ip, "y = poslib2.add_positions(h * 2)")
    mismatch = devinspect.explain(namespace=ip.user_ns).mismatch
    made = next(o for o in mismatch.operands if o.device == "cpu")
    assert made.detail.startswith("created by torch.arange without device= inside poslib2")
    (edit,) = mismatch.fix.edits
    assert "poslib2" not in edit.where.file and edit.new == "with torch.device(dev):\n    y = poslib2.add_positions(h * 2)"
    assert run(ip, edit.new)[0].success and ip.user_ns["y"].device.type == "sim"


def test_an_error_kept_in_a_variable_is_named_as_the_holder_of_its_frames_tensors(ip, capped):
    """``saved = e`` keeps the frames of e's traceback, and the tensors their locals hold: the
    post-mortem names them through ``saved``, its fix drops only the traceback, and a usage
    error of a magic in between keeps nothing alive."""
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "def f():\n    hidden_local = torch.empty(50 << 18, device=dev)\n    raise ValueError('boom')\n"
            "try:\n    f()\nexcept ValueError as e:\n    saved = e")
    _, text, _, _ = run(ip, "big = torch.empty(20 << 18, device=dev)")
    assert "saved.__traceback__:f.hidden_local    50.0 MiB" in text
    fix = next(f for f in devinspect.explain(namespace=ip.user_ns).out_of_memory.fixes if "traceback of saved" in f.summary)
    assert fix.code == "saved.__traceback__ = None" and "frees 50.0 MiB" in fix.summary
    run(ip, "%devices --why nothing_of_that_name")  # a usage error: its context holds no frame of the walk
    before = torch.sim.memory_allocated()
    assert run(ip, fix.code)[0].success
    assert before - torch.sim.memory_allocated() == 50 << 20
    assert type(ip.user_ns["saved"]) is ValueError and str(ip.user_ns["saved"]) == "boom"


def test_last_shows_the_mismatch_as_it_was_when_the_cell_failed(ip, sim):
    run(ip, "import torch\nx = torch.ones(2, device='sim:0')\ny = torch.ones(2)")
    run(ip, "x + y")
    run(ip, "y = torch.ones(3)")  # the name now holds a tensor that never took part
    _, text, _, _ = run(ip, "%devcheck --last")
    assert "device mismatch in Tensor.__add__" in text
    rows = [line for line in text.splitlines() if line.strip().startswith("y ") and "[namespace]" in line]
    assert rows and all("float32[2]" in row for row in rows) and "float32[3]" not in text


def test_a_kept_error_with_a_chained_one_is_freed_by_the_printed_fix(ip, capped):
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "def step():\n    act = torch.empty(40 << 18, device=dev)\n    try:\n        {}['k']\n"
            "    except KeyError:\n        raise ValueError('while handling')\n"
            "try:\n    step()\nexcept ValueError as e:\n    saved = e")
    run(ip, "big = torch.empty(40 << 18, device=dev)")
    fix = next(f for f in devinspect.explain(namespace=ip.user_ns).out_of_memory.fixes if "traceback of saved" in f.summary)
    assert "saved.__context__ = saved.__cause__ = None" in fix.code
    before = torch.sim.memory_allocated()
    assert run(ip, fix.code)[0].success and before - torch.sim.memory_allocated() == 40 << 20


def test_a_failed_cells_explanation_is_made_once_and_shown_once(ip, sim):
    """The pointer line drawn with the traceback makes the explanation; the cell's end shows that
    one (not a second), and %devcheck --last shows what was made when the cell failed."""
    failed = ip.magics_manager.registry["DevcheckMagics"].failed
    run(ip, SETUP)
    result, text, _, _ = run(ip, "y = model(x)")
    error = result.error_in_exec
    assert text.count("devinspect: device mismatch in F.linear") == 2  # the pointer line, then the explanation
    assert failed.last_for(error) is not None and failed.early_for(error) is None  # taken by the cell's end
    assert ip.run_line_magic("devcheck", "--last -o") is failed.last_for(error)
    checked, said, _, _ = run(ip, "%%devcheck\ny = model(x)")
    assert said.count("device mismatch in F.linear") >= 1 and failed.last_for(checked.error_in_exec) is None  # the report said it: nothing after the cell


def test_a_3d_convolution_of_a_host_input_is_cudas_missing_kernel_and_explained_as_a_mismatch(ip, sim):
    # CUDA raises NotImplementedError here, not a device message: the host picks its own 3-D
    # kernel for the input and the dispatcher looks for it on the weight's device (an H200 said so).
    run(ip, "import torch\nfrom torch import nn\nconv = nn.Conv3d(1, 2, 1).to('sim:0')\nvolume = torch.ones(1, 1, 4, 4, 4)")
    result, text, _, _ = run(ip, "out = conv(volume)")
    assert type(result.error_in_exec) is NotImplementedError
    assert "Could not run 'aten::slow_conv3d_forward'" in str(result.error_in_exec)
    explanation = devinspect.explain(namespace=ip.user_ns)
    assert explanation.mismatch is not None, explanation
    assert "volume" in text and "conv.weight" in text
    assert run(ip, explanation.mismatch.fix.code)[0].success
    assert run(ip, "out = conv(volume)")[0].success
