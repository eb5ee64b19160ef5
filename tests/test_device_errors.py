"""Device errors beside a plain mismatch, as a notebook user meets them: a move whose result is
dropped, a device tensor read as a NumPy array, a DataLoader pinning or forking over a dataset on
the device, a generator of another device. Each is explained under a plain cell, under
``%%devcheck``, by ``devinspect.explain()`` and in the pointer line over the traceback, and its
printed fix runs as printed (or its edit, made as printed, makes the cells work)."""

from __future__ import annotations

import pytest
import torch
from conftest import run
from scenario_runner import apply_lines

import devinspect

PRELUDE = """import torch, torch.nn as nn, numpy as np
from torch.utils.data import DataLoader, TensorDataset
dev = torch.device("sim:0")
model = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 3)).to(dev)
"""


def explained(ip, code: str):
    """Run a cell that must fail; return (its error's explanation, the text shown, the pointer line)."""
    result, text, _, captured = run(ip, code)
    error = result.error_in_exec
    assert error is not None, "the cell was meant to fail"
    pointer = next((line for line in captured.stdout.splitlines() if "explained below the traceback" in line), "")
    return devinspect.explain(error, namespace=ip.user_ns), text, pointer


def must_work(ip, code: str):
    result, text, _, _ = run(ip, code)
    assert result.error_in_exec is None, f"{result.error_in_exec!r}\n{text}"
    return result


def apply_edits(ip, fix, cells: dict[int, str]) -> dict[int, str]:
    """Make the printed edits in the cells they name (by execution count), as a user would."""
    edited = dict(cells)
    for edit in fix.edits:
        edited[edit.where.cell] = apply_lines(edited[edit.where.cell], [edit])
        assert edited[edit.where.cell] is not None, f"line {edit.where.line} is not {edit.old!r}"
    return edited


def counted(ip, code: str) -> int:
    """Run a setup cell; its execution count."""
    return must_work(ip, code).execution_count


# -- a move whose result is dropped ------------------------------------------------------------


def test_a_dropped_move_is_named_at_its_line_and_the_fix_keeps_the_copy(ip, sim):
    made = "x = torch.randn(4, 8)\nx.to(dev)\n"
    number = counted(ip, PRELUDE + made)
    explanation, text, pointer = explained(ip, "out = model(x)")
    fix = explanation.mismatch.fix
    assert f"x.to(dev) at Cell In[{number}], line 6 returns a moved copy, which is dropped: x stays on cpu" in fix.summary
    assert "- x.to(dev)" in text and "+ x = x.to(dev)" in text and "Tensor.to returns a moved copy" in text
    assert pointer.startswith("devinspect: device mismatch") and "returns a moved copy" in pointer
    assert fix.code == "x = x.to(dev)"
    must_work(ip, fix.code)  # as printed, in the namespace: the cell then works
    must_work(ip, "out = model(x)")
    cells = apply_edits(ip, fix, {number: PRELUDE + made})
    must_work(ip, cells[number])  # the edited cell, run again: the copy is kept from now on
    must_work(ip, "out = model(x)")
    assert str(ip.user_ns["x"].device) == "sim:0"


def test_a_dropped_move_in_the_failed_cell_is_edited_there_by_apply_fix(ip, sim):
    from devinspect.jupyter.fix_buttons import FixButton

    must_work(ip, PRELUDE)
    cell = "feats = torch.randn(2, 8, dtype=torch.float64)\nfeats.float().to(dev)\nout = model(feats.float())\n"
    explanation, _, _ = explained(ip, cell)
    fix = explanation.mismatch.fix
    assert fix.code is None and [e.new for e in fix.edits] == ["feats = feats.float().to(dev)"]
    button = FixButton(fix, ip.user_ns, shell=ip)
    button.button.click()
    assert button.status.value.startswith("✔"), button.status.value
    must_work(ip, cell)  # the cell runs edited
    assert ip.rl_next_input.splitlines()[1] == "feats = feats.float().to(dev)"
    ip.rl_next_input = None


@pytest.mark.parametrize("shape", ["loop", "helper", "method"])
def test_a_dropped_move_in_a_loop_or_a_function_is_edited_where_it_is(ip, sim, shape):
    setup, failing, line = {
        "loop": ("loader = DataLoader(TensorDataset(torch.randn(8, 8)), batch_size=4)\n",
                 "for xb, in loader:\n    xb.to(dev)\n    out = model(xb)\n", "    xb = xb.to(dev)"),
        "helper": ("def predict(m, t):\n    t.to(dev)\n    return m(t)\n", "out = predict(model, torch.randn(2, 8))\n",
                   "    t = t.to(dev)"),
        "method": ("class Runner:\n    def step(self, m, batch):\n        batch.cuda() if False else None\n"
                   "        batch.to(dev)\n        return m(batch)\n",
                   "out = Runner().step(model, torch.randn(3, 8))\n", "        batch = batch.to(dev)"),
    }[shape]
    number = counted(ip, PRELUDE + setup)
    explanation, _, _ = explained(ip, failing)
    fix = explanation.mismatch.fix
    assert "returns a moved copy, which is dropped" in fix.summary and fix.code is None
    target = number if shape != "loop" else None
    if target is None:  # in the failed cell: Apply fix edits it there
        edited = apply_lines(failing, fix.edits)
        assert line in edited.splitlines()
        must_work(ip, edited)
    else:
        cells = apply_edits(ip, fix, {number: PRELUDE + setup})
        assert line in cells[number].splitlines()
        must_work(ip, cells[number])
        must_work(ip, failing)


def test_devices_finds_a_dropped_move_before_anything_fails(ip, sim):
    number = counted(ip, PRELUDE + "x = torch.randn(4, 8)\nx.to(dev)\nw = torch.ones(3, device=dev)\nw.to(dev)\n"
                     "model.to(dev)\n")
    view = ip.run_line_magic("devices", "-f")
    dropped = [f for f in view.findings if f.code == "dropped-move"]
    assert [f.subject for f in dropped] == ["x"]  # w is on the device already; a module moves in place
    assert dropped[0].message == (f"Cell In[{number}], line 6: x.to(dev) returns a moved copy, which is dropped: "
                                  "x is still on cpu")
    assert not [f for f in view.findings if f.code == "input-on-other-device" and "x" in f.names]
    must_work(ip, dropped[0].fix.code)
    must_work(ip, "out = model(x)")
    assert not [f for f in ip.run_line_magic("devices", "-f").findings if f.code == "dropped-move"]


@pytest.mark.parametrize(("setup", "cell", "found"), [
    # Items of the outputs in a generator, an attribute of one, a method keeping its device, a name
    # bound from one: each meets target on the model's device.
    ("target = torch.zeros(4, 3)", "outs = [model(x), model(x)]\nloss = sum((o - target).abs().mean() for o in outs)",
     "o - target"),
    ("target = torch.zeros(4, 3)", "out = model(x)\nloss = (out.softmax(-1) * target).sum()", "out.softmax(-1) * target"),
    ("target = torch.zeros(4, 3)", "loss = (target - model(x)[0]).pow(2).mean()", "target - model(x)[0]"),
    # Off the device first, a 0-dim host tensor (it mixes with any device), a local of a function,
    # or a target the cell moves itself: nothing to report.
    ("target = torch.zeros(4, 3)", "loss = (model(x).cpu() - target).abs().mean()", None),
    ("scale = torch.tensor(2.0)", "out = model(x) * scale", None),
    ("target = torch.zeros(4, 3)", "def step(target):\n    return model(x) - target\nloss = step(target.to(dev))", None),
    ("target = torch.zeros(4, 3)", "target = target.to(dev)\nloss = (model(x) - target).abs().mean()", None),
])
def test_devices_finds_a_host_tensor_the_cells_arithmetic_meets_with_a_models_output(ip, sim, setup, cell, found):
    must_work(ip, PRELUDE + "x = torch.randn(4, 8, device=dev)\n" + setup)
    run(ip, cell)
    view = ip.run_line_magic("devices", "-f")
    meets = [f for f in view.findings if f.code == "input-on-other-device" and "with the output of model" in f.message]
    if found is None:
        assert not meets, meets
        return
    assert len(meets) == 1 and f"computes {found} with the output of model" in meets[0].message, view.findings
    must_work(ip, meets[0].fix.code)
    must_work(ip, cell)


# -- a device tensor read as a NumPy array -------------------------------------------------------


@pytest.mark.parametrize(("made", "read", "fixed"), [
    ("z = model(torch.randn(5, 8, device=dev))", "arr = z.detach().numpy()", "arr = z.detach().cpu().numpy()"),
    ("z = model(torch.randn(5, 8, device=dev))", "arr = z.numpy()", "arr = z.detach().cpu().numpy()"),
    ("with torch.no_grad():\n    z = model(torch.randn(5, 8, device=dev))", "arr = np.asarray(z)",
     "arr = np.asarray(z.cpu())"),
    ("z = model(torch.randn(5, 8, device=dev))", "import pandas as pd\nframe = pd.DataFrame({'a': z[:, 0]})",
     "frame = pd.DataFrame({'a': z[:, 0].detach().cpu()})"),
    ("z = [model(torch.randn(2, 8, device=dev)).sum() for step in range(3)]", "mean = np.mean(z)",
     "mean = np.mean([t.detach().cpu() for t in z])"),
])
def test_a_device_tensor_read_as_an_array_is_copied_to_the_host_on_the_users_line(ip, sim, made, read, fixed):
    must_work(ip, PRELUDE + made)
    explanation, text, pointer = explained(ip, read)
    error = explanation.device_error
    assert explanation.kind == "host array" and error.operands[0].name.startswith("z")
    assert error.operands[0].device == "sim:0" and "reads it as a NumPy array" in error.what
    assert pointer.startswith("devinspect: host array: z") and "fix: copy z" in pointer
    assert [e.new for e in error.fix.edits] == [fixed] and f"+ {fixed}" in text
    must_work(ip, apply_lines(read, error.fix.edits))


@pytest.mark.parametrize("where", ["earlier cell", "same cell", "helper"])
def test_a_dropped_copy_to_the_host_is_named_and_kept_where_it_is_written(ip, sim, where):
    setup, failing, edited = {
        "earlier cell": ("z = torch.randn(5, 3, device=dev)\nz.cpu()\n", "arr = z.numpy()", "z = z.cpu()"),
        "same cell": ("", "z = torch.randn(5, 3, device=dev)\nz.to('cpu')\narr = np.asarray(z)", "z = z.to('cpu')"),
        "helper": ("def to_array(t):\n    t.cpu()\n    return t.detach().numpy()\n",
                   "arr = to_array(model(torch.randn(5, 8, device=dev)))", "    t = t.cpu()"),
    }[where]
    number = counted(ip, PRELUDE + setup)
    explanation, text, pointer = explained(ip, failing)
    error = explanation.device_error
    assert error.kind == "host array" and "returns a moved copy, which is dropped" in error.fix.summary
    assert pointer.startswith("devinspect: host array: ") and "returns a moved copy" in pointer
    edit, = error.fix.edits
    assert edit.new == edited.strip()
    if where == "same cell":  # Apply fix edits the failed cell, which then works
        assert error.fix.action is not None and error.fix.code is None
        must_work(ip, apply_lines(failing, error.fix.edits))
    else:
        if where == "earlier cell":
            assert error.fix.code == "z = z.cpu()"
        cells = apply_edits(ip, error.fix, {number: PRELUDE + setup})
        assert edited in cells[number].splitlines()
        must_work(ip, cells[number])
        must_work(ip, failing)
    assert type(ip.user_ns["arr"]).__module__ == "numpy"


def test_a_dropped_copy_to_the_host_of_a_tensor_that_requires_grad_is_fixed_on_the_reading_line(ip, sim):
    must_work(ip, PRELUDE + "z = model(torch.randn(5, 8, device=dev))\nz.cpu()\n")
    explanation, _, _ = explained(ip, "arr = z.numpy()")
    fix = explanation.device_error.fix  # z = z.cpu() alone would leave a tensor NumPy refuses (it requires grad)
    assert [e.new for e in fix.edits] == ["arr = z.detach().cpu().numpy()"]
    must_work(ip, fix.edits[0].new)


def test_apply_fix_copies_the_tensor_in_the_failed_cell_and_the_cell_works(ip, sim):
    from devinspect.jupyter.fix_buttons import explanation_panel

    must_work(ip, PRELUDE + "z = model(torch.randn(5, 8, device=dev))")
    explanation, _, _ = explained(ip, "arr = z.numpy()\nmean = arr.mean()")
    ip.kernel = object()  # a widget front end: the panel's buttons are offered
    try:
        panel = explanation_panel(explanation, ip.user_ns, shell=ip)
    finally:
        del ip.kernel
    panel.apply.button.click()
    assert panel.apply.status.value.startswith("✔"), panel.apply.status.value
    must_work(ip, "arr = z.numpy()\nmean = arr.mean()")  # runs edited
    assert ip.rl_next_input.startswith("arr = z.detach().cpu().numpy()")
    ip.rl_next_input = None


def test_devcheck_explains_a_host_array_and_counts_the_copy_it_needs(ip, sim):
    must_work(ip, PRELUDE + "z = model(torch.randn(5, 8, device=dev))")
    result, text, html, _ = run(ip, "%%devcheck -v report\narr = np.asarray(z)")
    assert type(result.error_in_exec) is TypeError
    report = ip.user_ns["report"]
    assert report.device_error is not None and report.device_error.kind == "host array"
    line = next(s for s in report.lines if s.where.text == "arr = np.asarray(z)")
    assert (line.d2h_count, line.d2h_bytes) == (1, 5 * 3 * 4) and dict(line.syncs) == {".numpy()": 1}
    assert "host array: z is on sim:0" in text and "<b>host array</b>" in html
    assert text.count("host array: z") == 1  # said once: not again after the cell


def test_explain_names_the_library_and_edits_the_users_call_in_plain_python(sim):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    z = torch.randn(5, device=sim)
    try:
        plt.plot(torch.arange(5), z)
    except TypeError as exc:
        explanation = devinspect.explain(exc, {"z": z, "torch": torch, "plt": plt})
    finally:
        plt.close("all")
    error = explanation.device_error
    assert "matplotlib reads it as a NumPy array" in error.what
    assert error.fix.edits[0].new == "plt.plot(torch.arange(5), z.cpu())"
    assert error.fix.action is None  # a file's line: printed, never applied from here


# -- a DataLoader over a dataset on the device ---------------------------------------------------


@pytest.mark.parametrize("options", ["pin_memory=True", "num_workers=2, persistent_workers=True"])
def test_a_loader_over_device_tensors_drops_pinning_or_workers(ip, sim, options):
    pinned = options.startswith("pin")
    setup = (PRELUDE + "ds = TensorDataset(torch.randn(8, 8).to(dev), torch.randint(0, 3, (8,), device=dev))\n"
             f"loader = DataLoader(ds, batch_size=4, {options})\n")
    number = counted(ip, setup)
    loop = "for xb, yb in loader:\n    out = model(xb)\n"
    explanation, text, pointer = explained(ip, loop)
    error = explanation.device_error
    assert error.kind == ("pinned device tensor" if pinned else "device tensor in a worker")
    assert error.what.startswith("loader ") and "ds holds tensors on sim:0" in error.what
    assert [o.name for o in error.operands] == ["loader", "ds.tensors[0]", "ds.tensors[1]"]
    assert error.cell_line.text == "for xb, yb in loader:" and pointer.startswith(f"devinspect: {error.kind}")
    assert error.fix.code == ("loader.pin_memory = False" if pinned else "loader.num_workers = 0")
    assert [e.new for e in error.fix.edits] == ["loader = DataLoader(ds, batch_size=4)"]
    assert "keep the dataset on the host" in error.fix.note and ("spawn" in error.fix.note) != pinned
    must_work(ip, error.fix.code)
    must_work(ip, loop)
    cells = apply_edits(ip, error.fix, {number: setup})
    must_work(ip, cells[number])  # the edited cell makes a loader that works as well
    must_work(ip, loop)


@pytest.mark.parametrize("options", ["pin_memory=True", "num_workers=1", "num_workers=2, pin_memory=True"])
def test_a_loader_whose_dataset_makes_its_items_on_the_device_drops_pinning_or_workers(ip, sim, options):
    setup = (PRELUDE + "from torch.utils.data import Dataset\n"
             "class OnTheFly(Dataset):\n    def __init__(self):\n        self.rows = torch.randn(8, 8)\n"
             "    def __len__(self):\n        return 8\n"
             "    def __getitem__(self, i):\n        return self.rows[i].to(dev)\n\n"
             f"batches = DataLoader(OnTheFly(), batch_size=4, {options})\n")
    number = counted(ip, setup)
    loop = "for xb in batches:\n    out = model(xb)\n"
    explanation, _, pointer = explained(ip, loop)
    error = explanation.device_error
    workers = "num_workers" in options
    assert error.kind == ("device tensor in a worker" if workers else "pinned device tensor")
    assert pointer.startswith(f"devinspect: {error.kind}: batches ")
    assert ("where batches.dataset uses sim" if workers else "batches.dataset makes them on sim:0") in error.what
    assert "its dataset makes its items on sim:0" in error.fix.summary
    assert [e.new for e in error.fix.edits] == ["batches = DataLoader(OnTheFly(), batch_size=4)"]
    must_work(ip, error.fix.code)
    must_work(ip, loop)
    cells = apply_edits(ip, error.fix, {number: setup})
    must_work(ip, cells[number])
    must_work(ip, loop)


def test_a_loader_made_by_a_helper_and_a_dataset_class_is_edited_in_the_helper(ip, sim):
    number = counted(ip, PRELUDE + """from torch.utils.data import Dataset
class Points(Dataset):
    def __init__(self, n, device):
        self.X = torch.randn(n, 8).to(device)
        self.y = torch.randint(0, 3, (n,), device=device)
    def __len__(self):
        return len(self.X)
    def __getitem__(self, i):
        return self.X[i], self.y[i]

def make_loader(data):
    return DataLoader(data, batch_size=4, shuffle=True, pin_memory=True)

train_ds = Points(12, dev)
batches = make_loader(train_ds)
""")
    explanation, _, _ = explained(ip, "for epoch in range(2):\n    for xb, yb in batches:\n        out = model(xb)\n")
    error = explanation.device_error
    assert error.kind == "pinned device tensor" and {"train_ds.X", "train_ds.y"} <= {o.name for o in error.operands}
    edit, = error.fix.edits
    assert edit.where.cell == number and edit.context == "make_loader"
    assert edit.new == "return DataLoader(data, batch_size=4, shuffle=True)"


# -- a generator of another device ----------------------------------------------------------------


def test_a_host_generator_under_a_device_default_draws_where_it_is_and_moves(ip, sim):
    try:
        must_work(ip, PRELUDE + "torch.set_default_device(dev)\ng = torch.Generator().manual_seed(3)\n")
        explanation, text, pointer = explained(ip, "perm = torch.randperm(8, generator=g)\nfirst = perm[0]")
        error = explanation.device_error
        assert error.kind == "generator device" and error.operands[0].name == "g"
        assert "torch.randperm makes its tensor on sim:0, but its generator g is on cpu" in error.what
        assert [e.new for e in error.fix.edits] == ["perm = torch.randperm(8, generator=g, device=g.device).to(dev)"]
        assert "torch.Generator(device=dev)" in error.fix.note and "with torch.device(dev)" in error.fix.note
        must_work(ip, apply_lines("perm = torch.randperm(8, generator=g)\nfirst = perm[0]", error.fix.edits))
        expected = torch.randperm(8, generator=torch.Generator().manual_seed(3), device="cpu")
        assert torch.equal(ip.user_ns["perm"].cpu(), expected)  # the numbers the user's generator gives
    finally:
        torch.set_default_device(None)


def test_a_shuffling_loader_under_a_device_default_gets_a_generator_of_the_device(ip, sim):
    try:
        number = counted(ip, PRELUDE + "torch.set_default_device(dev)\n"
                         "loader = DataLoader(TensorDataset(torch.randn(8, 8)), batch_size=4, shuffle=True)\n")
        explanation, _, _ = explained(ip, "for xb, in loader:\n    out = model(xb)\n")
        error = explanation.device_error
        assert error.kind == "generator device" and error.what.startswith("loader shuffles with a host generator")
        assert error.fix.code == "loader.sampler.generator = torch.Generator(device=dev)"
        edit, = error.fix.edits
        assert edit.where.cell == number
        assert edit.new.endswith("batch_size=4, shuffle=True, generator=torch.Generator(device=dev))")
    finally:
        torch.set_default_device(None)


@pytest.mark.parametrize("given", ["g", "torch.Generator().manual_seed(3)"])
def test_a_seeded_host_generator_given_to_a_loader_or_random_split_is_made_on_the_device_seed_kept(ip, sim, given):
    try:
        number = counted(ip, PRELUDE + "from torch.utils.data import random_split\ntorch.set_default_device(dev)\n"
                         "g = torch.Generator().manual_seed(5)\nfull = TensorDataset(torch.randn(10, 8))\n")
        loader_cell = counted(ip, f"loader = DataLoader(full, batch_size=4, shuffle=True, generator={given})")
        loader_error = explained(ip, "for xb, in loader:\n    out = model(xb)\n")[0].device_error
        split_error = explained(ip, f"train, val = random_split(full, [8, 2], generator={given})")[0].device_error
        assert loader_error.kind == split_error.kind == "generator device"
        assert loader_error.what == f"loader shuffles with its generator {given}, a host one, on sim:0 (the default device)"
        assert split_error.what == f"random_split draws on sim:0 (the default device) with {given}, a host generator"
        assert loader_error.fix.code is None  # the loader holds the user's generator: its line is run again
        for error in (loader_error, split_error):
            edit, = error.fix.edits
            if given == "g":  # made on the device where it is made, its seed kept
                assert (edit.where.cell, edit.new) == (number, "g = torch.Generator(device=dev).manual_seed(5)")
                assert f"run Cell In[{number}] again" in error.fix.note
            else:
                assert "generator=torch.Generator(device=dev).manual_seed(3)" in edit.new
        assert loader_error.fix.edits[0].where.cell == (number if given == "g" else loader_cell)
    finally:
        torch.set_default_device(None)


# -- near them: errors that are not device errors ---------------------------------------------------


@pytest.mark.parametrize("setup,failing", [
    ("w = torch.randn(4, requires_grad=True)", "arr = w.numpy()"),
    ("g = torch.Generator()", "perm = torch.randperm(-3, generator=g)"),
    ("from torch.utils.data import Dataset\nclass Broken(Dataset):\n    def __len__(self):\n        return 8\n"
     "    def __getitem__(self, i):\n        raise KeyError(i)\nloader = DataLoader(Broken(), num_workers=1)",
     "for b in loader:\n    pass"),
])
def test_errors_near_these_kinds_get_no_device_explanation(ip, sim, setup, failing):
    must_work(ip, PRELUDE + setup)
    explanation, text, pointer = explained(ip, failing)
    assert explanation.kind is None and not pointer and "devinspect: " not in text.split("Traceback")[0]
    result, text, _, _ = run(ip, "%%devcheck -v report\n" + failing)
    report = ip.user_ns["report"]
    assert report.device_error is None and report.mismatch is None


def test_check_adds_a_device_errors_diagnosis_to_the_exception_in_a_script(sim):
    z = torch.randn(4, device=sim)
    with pytest.raises(TypeError) as raised:
        with devinspect.check({"z": z}) as c:
            z.numpy()
    assert c.report.device_error.kind == "host array"
    assert any(note.startswith("devinspect: host array: z is on sim:0") for note in raised.value.__notes__)


def test_a_result_computed_on_the_line_and_passed_to_scikit_learn_is_copied_there(ip, sim):
    pytest.importorskip("sklearn")
    must_work(ip, PRELUDE + "with torch.no_grad():\n    scores = model(torch.randn(5, 8, device=dev))\n"
              "labels = torch.randint(0, 3, (5,))\nfrom sklearn.metrics import accuracy_score")
    explanation, _, _ = explained(ip, "acc = accuracy_score(labels, scores.argmax(1))")
    error = explanation.device_error
    assert error.kind == "host array" and "sklearn reads it" in error.what and explanation.mismatch is None
    assert [e.new for e in error.fix.edits] == ["acc = accuracy_score(labels, scores.argmax(1).cpu())"]
    must_work(ip, error.fix.edits[0].new)


@pytest.mark.parametrize("failing", ["total = table(ids).sum().item()", "rows = table(ids)\nprint(rows.tolist())"])
def test_a_value_read_from_what_a_model_on_meta_made_is_explained_by_that_model(ip, sim, failing):
    # The model on meta runs on device indices (the meta kernel outranks the device's, as on CUDA):
    # the error comes where a value is read, and names the model, with the fix %devices gives.
    run(ip, "import torch\nfrom torch import nn\nwith torch.device('meta'):\n    table = nn.Embedding(10, 4)\n"
            f"ids = torch.tensor([1, 2], device='{sim}')")
    result, text, _, _ = run(ip, failing)
    assert result.error_in_exec is not None and "meta tensor" in str(result.error_in_exec)
    error = devinspect.explain(namespace=ip.user_ns).device_error
    assert error is not None and error.kind == "meta data" and "table made it" in error.what, text
    assert run(ip, error.fix.code)[0].success and run(ip, failing)[0].success
    assert not ip.user_ns["table"].weight.is_meta
