"""Fixes at the cause: the line that made a tensor, the part of a model off its map, a container
kept whole, a scheduler rebuilt with its optimizer; and explanations that stay honest about
temporaries, compiled code and buffers PyTorch keeps on the host.
"""

from __future__ import annotations

import random

import pytest
import torch
from conftest import run
from fix_cases import CASES, PRELUDE
from scenario_runner import shallow_recursion
from torch.optim import lr_scheduler as L

import devinspect


def test_a_tensor_made_in_the_failed_cell_is_fixed_by_editing_that_cell(ip, sim):
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "model = torch.nn.Linear(8, 2).to(dev)")
    cell = "features = torch.randn(4, 8)\nscores = model(features)\n"
    result, _, _, _ = run(ip, cell)
    assert result.error_in_exec is not None
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    (edit,) = fix.edits
    assert (edit.old, edit.new) == ("features = torch.randn(4, 8)", "features = torch.randn(4, 8, device=dev)")
    assert fix.code is None and fix.rerun  # moving features now would not last: the cell makes it again
    from devinspect.jupyter.fix_buttons import FixButton

    button = FixButton(fix, ip.user_ns, shell=ip)
    button.button.click()
    assert button.status.value.startswith("✔") and "when the cell runs again" in button.status.value
    ip.rl_next_input = None
    result, _, _, _ = run(ip, cell)  # Re-run cell: the notebook sends the cell's text again
    assert result.error_in_exec is None and ip.user_ns["scores"].device == sim
    assert ip.rl_next_input.startswith("features = torch.randn(4, 8, device=dev)")  # the cell shows the edit
    ip.rl_next_input = None
    result, _, _, _ = run(ip, cell)  # the edit is made once: the same old text runs as written
    assert result.error_in_exec is not None


def test_a_loop_over_a_host_loader_moves_its_batches_at_the_loop(ip, sim):
    run(ip, "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\nfrom devinspect import testing\n"
            "dev = testing.enable()\nmodel = torch.nn.Linear(8, 2).to(dev)\n"
            "loader = DataLoader(TensorDataset(torch.randn(6, 8), torch.randn(6, 2)), batch_size=2)")
    cell = "for xb, yb in loader:\n    loss = torch.nn.functional.mse_loss(model(xb), yb)\n"
    run(ip, cell)
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    (edit,) = fix.edits
    assert edit.old == "for xb, yb in loader:" and edit.new == "for xb, yb in loader:\n    xb, yb = xb.to(dev), yb.to(dev)"
    assert fix.code is None  # xb = xb.to(dev) would not last: the next batch comes from the loader again


@pytest.mark.parametrize("collate", ["dict", "list", "encoding", "namedtuple"])
def test_a_loop_over_whole_batches_moves_each_batch_at_the_loop(ip, sim, collate):
    """A loader whose batches are dicts or lists (default collate of dict or tuple samples, a
    tokenizer's BatchEncoding, a collate function's namedtuple): the loop's first line moves the
    batch whole, keeping its type, and the loop runs."""
    sample = {"dict": '{"x": torch.randn(8), "y": torch.tensor(1)}', "list": "(torch.randn(8), torch.tensor(1))",
              "encoding": '{"x": torch.randn(8)}', "namedtuple": "(torch.randn(8), torch.tensor(1))"}[collate]
    collate_fn = {"encoding": ", collate_fn=lambda b: BatchEncoding(default_collate(b))",
                  "namedtuple": ", collate_fn=lambda b: Batch(*default_collate(b))"}.get(collate, "")
    run(ip, "import torch\nfrom collections import namedtuple\nfrom torch.utils.data import DataLoader, default_collate\n"
            "from transformers import BatchEncoding\nfrom devinspect import testing\n"
            "dev = testing.enable()\nmodel = torch.nn.Linear(8, 2).to(dev)\nBatch = namedtuple('Batch', ['x', 'y'])\n"
            f"loader = DataLoader([{sample} for _ in range(4)], batch_size=2{collate_fn})")
    use = {"list": "batch[0]", "namedtuple": "batch.x"}.get(collate, 'batch["x"]')
    cell = f"for batch in loader:\n    out = model({use})\n"
    result, _, _, _ = run(ip, cell)
    assert result.error_in_exec is not None
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    (edit,) = fix.edits
    moved = {"dict": "batch = {k: v.to(dev) for k, v in batch.items()}", "list": "batch = [t.to(dev) for t in batch]",
             "encoding": "batch.data = {k: v.to(dev) for k, v in batch.data.items()}",
             "namedtuple": "batch = batch._replace(x=batch.x.to(dev), y=batch.y.to(dev))"}[collate]
    assert edit.old == "for batch in loader:" and edit.new == f"for batch in loader:\n    {moved}"
    result, _, _, _ = run(ip, cell.replace("for batch in loader:", edit.new))
    assert result.error_in_exec is None and ip.user_ns["out"].device == torch.device(sim.type, 0)


def test_a_list_attribute_moves_whole_keeping_its_type_and_a_failure_changes_nothing(sim):
    from devinspect import actions

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.anchors = [torch.zeros(4), torch.ones(4), "a label"]

    model = Net().to(sim)
    ns = {"model": model}
    (f,) = [f for f in devinspect.scan(ns).findings if f.code == "unregistered-tensor-attribute"]
    exec(f.fix.code, {**ns, "torch": torch})  # as printed: a list again, the label kept
    assert type(model.anchors) is list and [t.device.type for t in model.anchors[:2]] == ["sim", "sim"]
    assert model.anchors[2] == "a label"
    model.anchors = [torch.zeros(4), torch.empty(4, device="meta")]  # the second cannot be copied
    before = list(model.anchors)
    result = actions.apply_fix(ns, f.fix.action)
    assert not result.ok and "nothing was changed" in result.message
    assert all(a is b for a, b in zip(model.anchors, before))


def test_register_buffer_as_printed_copies_before_the_attribute_leaves(sim):
    class PE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.pe = torch.empty(4, device="meta")  # no data: the copy to the device fails

    model = PE()
    model.lin.to(sim)
    (f,) = [f for f in devinspect.scan({"model": model}).findings if f.code == "unregistered-tensor-attribute"]
    with pytest.raises(NotImplementedError):
        exec(f.fix.code, {"model": model})
    assert "pe" in model.__dict__  # nothing was lost


def test_a_stale_optimizer_is_rebuilt_with_the_schedulers_that_drive_it(sim):
    model = torch.nn.Linear(4, 2).to(sim)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda=lambda epoch: 0.5 ** epoch)
    steps = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)
    model = torch.nn.Linear(4, 2).to(sim)  # the model's cell ran again
    ns = {"model": model, "opt": opt, "decay": decay, "steps": steps, "torch": torch}
    (f,) = [f for f in devinspect.scan(ns).findings if f.code == "stale-optimizer"]
    assert "decay" in f.fix.code and "steps" in f.fix.code
    exec(f.fix.code, ns)
    assert ns["decay"].optimizer is ns["opt"] and ns["steps"].optimizer is ns["opt"]
    assert ns["steps"].step_size == 3 and ns["decay"].lr_lambdas[0](2) == 0.25
    assert ns["opt"].param_groups[0]["params"][0] is model.weight


#: Each PyTorch scheduler with arguments drawn at random: (make(optimizer, rng), steps with a metric).
_SCHEDULERS = {
    "StepLR": lambda o, r: L.StepLR(o, step_size=r.randint(1, 9), gamma=r.choice([0.1, 0.5, 0.33])),
    "MultiStepLR": lambda o, r: L.MultiStepLR(o, milestones=sorted(r.sample(range(1, 30), 3)), gamma=0.3),
    "ConstantLR": lambda o, r: L.ConstantLR(o, factor=r.choice([0.2, 0.5, 1 / 3]), total_iters=r.randint(1, 9)),
    "LinearLR": lambda o, r: L.LinearLR(o, start_factor=r.choice([0.1, 0.25, 1 / 7]), total_iters=r.randint(1, 9)),
    "ExponentialLR": lambda o, r: L.ExponentialLR(o, gamma=r.uniform(0.5, 0.99)),
    "PolynomialLR": lambda o, r: L.PolynomialLR(o, total_iters=r.randint(2, 20), power=r.choice([1.0, 2.0, 0.5])),
    "CosineAnnealingLR": lambda o, r: L.CosineAnnealingLR(o, T_max=r.randint(2, 20), eta_min=r.choice([0, 1e-4])),
    "CosineAnnealingWarmRestarts": lambda o, r: L.CosineAnnealingWarmRestarts(o, T_0=r.randint(1, 6), T_mult=2),
    "CyclicLR": lambda o, r: L.CyclicLR(o, base_lr=0.001, max_lr=r.choice([0.01, 0.3]), step_size_up=r.randint(1, 9),
                                        mode=r.choice(["triangular", "triangular2", "exp_range"]), gamma=0.9),
    "OneCycleLR": lambda o, r: L.OneCycleLR(
        o, max_lr=r.choice([0.01, 0.3, 1 / 3]), total_steps=r.randint(61, 200), pct_start=r.choice([0.3, 0.1, 0.25, 1 / 3]),
        anneal_strategy=r.choice(["cos", "linear"]), div_factor=r.choice([25.0, 10.0, 3.0]),
        final_div_factor=r.choice([1e4, 100.0, 7.0]), three_phase=r.random() < 0.3,
        cycle_momentum=r.random() < 0.7, base_momentum=r.choice([0.85, 0.8]), max_momentum=r.choice([0.95, 0.9])),
    "ReduceLROnPlateau": lambda o, r: L.ReduceLROnPlateau(o, mode=r.choice(["min", "max"]), factor=0.5,
                                                          patience=r.randint(0, 3), min_lr=r.choice([0, 1e-5])),
    "LambdaLR": lambda o, r: L.LambdaLR(o, lambda step: 0.9 ** step),
}


@pytest.mark.parametrize("kind", sorted(_SCHEDULERS))
def test_a_scheduler_made_again_for_a_new_optimizer_follows_the_same_schedule_or_is_not_written(kind):
    """Made again from the arguments read back, a scheduler gives the same rates and momenta
    step by step as one made as the user made it; where they cannot all be read back, no
    code is written (a scheduler with a default in place of a lost argument is a new problem)."""
    from devinspect.collect.objects.rebuild_recipes import scheduler_kwargs

    rng, written = random.Random(kind), 0
    for _ in range(25):
        seed = rng.random()

        def made() -> tuple:
            opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1, momentum=0.9)
            return opt, _SCHEDULERS[kind](opt, random.Random(seed))

        old_opt, old = made()
        kwargs = scheduler_kwargs("old", type(old), old.__dict__)
        if kwargs is None:
            continue
        written += 1
        fresh_opt = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1, momentum=0.9)
        again = eval(f"L.{kind}(fresh_opt, {', '.join(f'{k}={v}' for k, v in kwargs)})",
                     {"L": L, "fresh_opt": fresh_opt, "old": old})
        reference_opt, reference = made()
        for step in range(60):
            for opt, sched in ((reference_opt, reference), (fresh_opt, again)):
                opt.step()
                sched.step(float(step % 7)) if kind == "ReduceLROnPlateau" else sched.step()
            assert [(g["lr"], g["momentum"]) for g in fresh_opt.param_groups] == \
                [(g["lr"], g["momentum"]) for g in reference_opt.param_groups], (kind, kwargs, step)
    assert written == (0 if kind == "CyclicLR" else 25)


def test_a_pre_hook_that_misses_a_keyword_argument_is_named_and_the_split_is_kept(ip, sim):
    run(ip, "import torch, torch.nn as nn\nfrom devinspect import testing\ntesting.enable()\n"
            "class Stage(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(4, 4)\n"
            "    def forward(self, h, shift=None):\n        h = self.lin(h)\n"
            "        return h if shift is None else h + shift\n"
            "first, second = Stage().to('sim:0'), Stage().to('sim:1')\n"
            "second.register_forward_pre_hook(lambda module, args: tuple(a.to('sim:1') for a in args))\n"
            "x = torch.randn(2, 4, device='sim:0')\nshift = torch.zeros(4, device='sim:0')")
    run(ip, "out = second(first(x), shift=shift)")
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    assert fix.code == 'shift = shift.to("sim:1")'  # x stays on sim:0, where first is
    assert "moves positional arguments only" in fix.note and "with_kwargs=True" in fix.note


def test_tensors_made_inline_are_said_to_be_unnamed_and_nothing_else_is_blamed(ip, sim):
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "aux = torch.ones(2)\nref = torch.ones(2, device=dev)")
    run(ip, "pair = torch.cat([torch.ones(2), torch.ones(2, device=dev)])")
    explanation = devinspect.explain(namespace=ip.user_ns)
    text = repr(explanation)
    assert "2 unnamed tensors made on the failing line: cpu, sim:0" in text
    assert "aux" not in text and "ref" not in text
    (edit,) = explanation.mismatch.fix.edits
    assert edit.new == "pair = torch.cat([torch.ones(2, device=dev), torch.ones(2, device=dev)])"


def test_a_mismatch_met_while_compiling_is_explained_at_the_users_line(ip):
    run(ip, "import torch, torch.nn as nn\n"
            "class Net(nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n        self.lin = nn.Linear(4, 4)\n"
            "    def forward(self, x):\n        h = self.lin(x)\n        mask = torch.ones(4)\n"
            "        return h * mask\n"
            "model = torch.compile(Net().to('meta'), backend='eager')\nx = torch.randn(2, 4, device='meta')")
    result, _, _, _ = run(ip, "out = model(x)")
    assert type(result.error_in_exec).__name__ == "TorchRuntimeError"
    mismatch = devinspect.explain(namespace=ip.user_ns).mismatch
    assert mismatch is not None and set(mismatch.devices) == {"cpu", "meta"}
    assert mismatch.user_frame.text == "return h * mask" and mismatch.user_frame.function == "forward"
    assert [o.name for o in mismatch.operands] == ["h", "mask"]


def test_buffers_pytorch_keeps_on_the_host_do_not_split_a_model(sim):
    model = torch.nn.Linear(4, 2).to(sim)
    ema = torch.optim.swa_utils.AveragedModel(model)
    assert ema.n_averaged.device.type == "cpu"
    assert devinspect.scan({"model": model, "ema": ema}).findings == ()


@pytest.mark.parametrize("error", [pytest.param("recursion", marks=pytest.mark.slow), "user"])
def test_errors_that_are_not_mismatches_are_not_explained_as_one(ip, sim, error):
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "x = torch.ones(3, device=dev)\ny = torch.ones(3)")
    cell = ("def deeper(t):\n    return deeper(t + 1)\ndeeper(x)" if error == "recursion" else
            "raise ValueError(f'not on the same device: {x.device} and {y.device}')")
    with shallow_recursion():  # the same RecursionError, with a traceback IPython formats quickly
        result, _, _, _ = run(ip, cell)
    assert result.error_in_exec is not None
    assert devinspect.explain(namespace=ip.user_ns).mismatch is None


def test_inputs_the_cells_move_where_they_use_them_get_no_finding(ip, sim):
    """A cell that moves its input first, or moves it in the call, or passes it to a model whose
    hooks move it, runs again as it ran: nothing to report."""
    ip.run_cell("import torch\nfrom torch import nn\nfrom devinspect import testing\ndev = testing.enable()\n"
                "model = nn.Sequential(nn.Linear(8, 2)).to(dev)")
    ip.run_cell("images = torch.randn(16, 8)\nimages = images.to(dev)\npreds = model(images).argmax(-1)\n"
                "images = images.cpu()")
    ip.run_cell("x = torch.randn(4, 8)\ny = model(x.to(dev))")
    ip.run_cell("batch = {'x': torch.randn(4, 8), 'labels': torch.randint(0, 2, (4,))}\n"
                "loss = nn.functional.cross_entropy(model(batch['x'].to(dev)), batch['labels'].to(dev))")
    mine = ("images", "x", "batch", "model", "feats")

    def findings() -> list:
        return [f for f in devinspect.scan(ip.user_ns).findings if f.subject.split("[")[0].split(".")[0] in mine]

    assert findings() == []
    # A cell that sets its input only after the call does fail when it runs again.
    ip.run_cell("feats = torch.randn(2, 8, device=dev)")
    ip.run_cell("out = model(feats)\nfeats = feats.cpu()")
    assert [f.severity for f in findings()] == ["error"]


def test_a_model_left_on_the_host_whose_inputs_the_cells_move_is_found_before_anything_runs(ip, sim):
    """The training function moves each batch to the device and passes it to a model built on the
    host: the model's line is edited, and the function then runs; a parameter's device is read
    through the argument a cell passes (``evaluate(model, dev, ...)``)."""
    ip.run_cell("import torch\nfrom torch import nn\nfrom devinspect import testing\ndev = testing.enable()\n"
                "net = nn.Sequential(nn.Linear(8, 2))")
    ip.run_cell("def fit(batches):\n    for xb in batches:\n        xb = xb.to(dev)\n        out = net(xb)\n"
                "    return out")
    (found,) = [f for f in devinspect.scan(ip.user_ns).findings if f.code == "module-on-other-device"]
    assert found.severity == "error" and "moves xb to sim:0 and passes it to net" in found.message
    assert [(e.old, e.new) for e in found.fix.edits] == [("net = nn.Sequential(nn.Linear(8, 2))",
                                                          "net = nn.Sequential(nn.Linear(8, 2)).to(dev)")]
    assert ip.run_cell(found.fix.code).success and ip.run_cell("out = fit([torch.randn(4, 8)])").success
    # Moved to the host, where the model is: no call fails (another model's device gives a hint only).
    ip.run_cell("cpu_net = nn.Linear(8, 2)\n"
                "def score(model, device, xs):\n    xs = xs.to(device)\n    return model(xs)\n"
                "probe = score(cpu_net, 'cpu', torch.randn(2, 8))")
    assert [f.severity for f in devinspect.scan(ip.user_ns).findings if f.subject == "cpu_net"] == ["hint"]
    ip.run_cell("def evaluate(model, device, xs):\n    xs = xs.to(device)\n    return model(xs)")
    ip.run_cell("try:\n    evaluate(cpu_net, dev, torch.randn(2, 8))\nexcept RuntimeError:\n    pass")
    (found,) = [f for f in devinspect.scan(ip.user_ns).findings if f.subject == "cpu_net"]
    assert found.severity == "error" and "moves xs to sim:0 and passes it to cpu_net" in found.message
    # A batch of named inputs moved item by item, then given as keywords.
    ip.run_cell("dict_net = nn.Linear(8, 2)\n"
                "def step(batch):\n    batch = {k: v.to(dev, non_blocking=True) for k, v in batch.items()}\n"
                "    return dict_net(**batch)")
    (found,) = [f for f in devinspect.scan(ip.user_ns).findings if f.subject == "dict_net"]
    assert found.severity == "error" and "moves batch to sim:0" in found.message
    # A device the function reads from the model itself is the model's: nothing to say.
    ip.run_cell("own_net = nn.Linear(8, 2)\n"
                "def own(xs):\n    dev = next(own_net.parameters()).device\n    xs = xs.to(dev)\n    return own_net(xs)")
    assert [f.severity for f in devinspect.scan(ip.user_ns).findings if f.subject == "own_net"] == ["hint"]
    # A function that moves the model too, before it calls it, runs as it is.
    ip.run_cell("lazy_net = nn.Linear(8, 2)\n"
                "def fit_lazily(xs):\n    lazy_net.to(dev)\n    xs = xs.to(dev)\n    return lazy_net(xs)")
    assert [f.severity for f in devinspect.scan(ip.user_ns).findings if f.subject == "lazy_net"] == ["hint"]


def test_a_module_that_holds_no_tensor_is_not_taken_for_a_model_on_meta(ip, sim):
    """A loss (or an activation) holds no parameter: a cell that passes it device tensors is fine."""
    ip.run_cell("import torch\nfrom torch import nn\nfrom devinspect import testing\ndev = testing.enable()\n"
                "criterion = nn.BCELoss()\nscores = torch.rand(4, device=dev)\nlabels = torch.ones(4, device=dev)")
    ip.run_cell("loss = criterion(scores, labels)")
    assert [f.message for f in devinspect.scan(ip.user_ns).findings if f.subject == "criterion"] == []


def test_a_split_models_fix_moves_the_inputs_its_cells_pass_and_the_cell_then_runs(ip, sim):
    ip.run_cell("import torch\nfrom torch import nn\nfrom devinspect import testing\ndev = testing.enable()\n"
                "split = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))\n"
                "split_opt = torch.optim.Adam(split.parameters())\nids = torch.randn(4, 8)")
    ip.run_cell("split(ids).sum().backward()\nsplit_opt.step()")
    ip.run_cell("split[0].to(dev)")
    (f,) = [f for f in devinspect.scan(ip.user_ns).findings if f.code == "mixed-device-module"]
    assert 'ids = ids.to("sim:0")' in f.fix.code and "split_opt.state" in f.fix.code
    assert run(ip, f.fix.code)[0].success
    assert run(ip, "split(ids).sum().backward()\nsplit_opt.step()")[0].success
    assert [f.code for f in devinspect.scan(ip.user_ns).findings if f.subject.startswith(("split", "ids"))] == []


def test_moving_a_model_known_by_another_name_takes_its_optimizers_state(ip, sim):
    ip.run_cell("import torch\nfrom torch import nn\nfrom devinspect import testing\ndev = testing.enable()\n"
                "inner = nn.Linear(8, 2)\nwrapped = nn.Sequential(inner)\n"
                "wrapped_opt = torch.optim.AdamW(wrapped.parameters())\nfeats = torch.randn(4, 8)\n"
                "wrapped(feats).sum().backward()\nwrapped_opt.step()\nfeats = feats.to(dev)")
    ip.run_cell("out = wrapped(feats)")
    (f,) = [f for f in devinspect.scan(ip.user_ns).findings if f.subject == "feats" or f.subject == "wrapped"]
    assert "wrapped_opt.state" in f.fix.code
    assert run(ip, f.fix.code)[0].success
    assert run(ip, "wrapped(feats).sum().backward()\nwrapped_opt.step()")[0].success
    assert all(s["exp_avg"].device == sim for s in ip.user_ns["wrapped_opt"].state.values())


def test_a_result_never_computed_is_shown_as_its_expression_not_as_one_of_its_inputs(ip, sim):
    """After the fact, ``self.lin(x) * mask`` has two operands: the result of ``self.lin(x)``, which
    no frame holds, and ``mask``. The weight that tells the result's device is not an operand."""
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "class M(torch.nn.Module):\n"
            "    def __init__(self):\n        super().__init__()\n        self.lin = torch.nn.Linear(8, 8)\n"
            "    def forward(self, x):\n        mask = torch.ones(x.shape[0], 8)\n        return self.lin(x) * mask\n"
            "model = M().to(dev)\nx = torch.randn(5, 8, device=dev)")
    result, _, _, _ = run(ip, "y = model(x)")
    assert result.error_in_exec is not None
    mismatch = devinspect.explain(namespace=ip.user_ns).mismatch
    shown = {o.name: (o.source, o.device) for o in mismatch.operands}
    assert shown == {"self.lin(x)": ("result", "sim:0"), "mask": ("local", "cpu")}
    assert "computed from model.lin.weight" in mismatch.operands[0].detail
    (edit,) = mismatch.fix.edits
    assert edit.new.strip() == "mask = torch.ones(x.shape[0], 8, device=x.device)"


def test_a_tensor_of_a_plain_object_moves_itself_and_a_comprehension_over_new_tensors_edits_its_line(ip, sim):
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\nx = torch.ones(2, device=dev)")
    run(ip, "class W:\n    def __init__(self):\n        self.t = torch.ones(2)\n"
            "    def go(self):\n        return x + self.t\nw = W()\nw.go()")
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    assert fix.code == 'w.t = w.t.to("sim:0")'  # a plain object has no .to(): its tensor moves
    (made,) = fix.edits  # and its class makes it on the device from now on
    assert (made.old, made.new, made.context) == ("self.t = torch.ones(2)", "self.t = torch.ones(2, device=dev)", "__init__")
    assert run(ip, fix.code)[0].success and run(ip, "w.go()")[0].success
    result, _, _, _ = run(ip, "z = [x + v for v in [torch.ones(2)]]")
    assert result.error_in_exec is not None
    (edit,) = devinspect.explain(namespace=ip.user_ns).mismatch.fix.edits
    assert edit.new == "z = [x + v for v in [torch.ones(2, device=dev)]]"
    assert run(ip, edit.new)[0].success


def test_a_cache_left_on_the_host_is_moved_whole_by_one_fix(ip, sim):
    """A library's object that is no tensor, module or container (GPT-2's DynamicCache) keeps
    every layer's keys and values: one fix moves them all, each where it is."""
    run(ip, "import torch, transformers\nfrom devinspect import testing\ndev = testing.enable()\n"
            "model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, "
            "vocab_size=100)).eval()\nids = torch.randint(1, 100, (1, 5))\n"
            "with torch.no_grad():\n    past = model(ids, use_cache=True).past_key_values\n"
            "model.to(dev)\nnext_ids = torch.randint(1, 100, (1, 1), device=dev)")
    cell = "with torch.no_grad():\n    out = model(next_ids, past_key_values=past, use_cache=True)"
    assert run(ip, cell)[0].error_in_exec is not None
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    assert fix.code.count(".to(\"sim:0\")") == 4 and not fix.edits
    assert run(ip, fix.code)[0].success and run(ip, cell)[0].success


def test_a_part_added_to_an_offloaded_model_moves_alone_and_its_line_is_edited(ip, sim):
    """accelerate's cpu_offload keeps the weights on meta and brings them in per call: moving the
    whole model would copy out of meta and raise. The head assigned afterwards moves alone."""
    run(ip, "import torch, torch.nn as nn, accelerate\nfrom devinspect import testing\ndev = testing.enable()\n"
            "model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))\n"
            "accelerate.cpu_offload(model, execution_device=dev)\nx = torch.randn(4, 8, device=dev)")
    run(ip, "model[2] = nn.Linear(8, 2)")
    assert run(ip, "y = model(x)")[0].error_in_exec is not None
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    assert 'model[2].to("sim:0")' in fix.code and "model.to(" not in fix.code
    (edit,) = fix.edits
    assert edit.new == "model[2] = nn.Linear(8, 2).to(dev)"
    assert run(ip, fix.code)[0].success and run(ip, "y = model(x)")[0].success


def test_a_loop_over_pairs_of_batches_moves_both_and_a_nested_batch_moves_every_tensor(ip, sim):
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "model = torch.nn.Linear(8, 2).to(dev)\n"
            "def batches():\n    for _ in range(2):\n        yield {'x': torch.randn(2, 8)}, {'y': torch.randn(2, 2)}")
    cell = "for inputs, targets in batches():\n    loss = torch.nn.functional.mse_loss(model(inputs['x']), targets['y'])\n"
    assert run(ip, cell)[0].error_in_exec is not None
    (edit,) = devinspect.explain(namespace=ip.user_ns).mismatch.fix.edits
    assert edit.new.splitlines()[1].strip().startswith("inputs, targets = {")
    assert run(ip, cell.replace(edit.old, edit.new))[0].success  # the next line's targets moved too
    run(ip, "batch = {'inputs': {'x': torch.randn(2, 8)}, 'labels': torch.randn(2, 2)}")
    cell = "loss = torch.nn.functional.mse_loss(model(batch['inputs']['x']), batch['labels'])"
    assert run(ip, cell)[0].error_in_exec is not None
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    # No .to() on the line that made a dict; device= on its factories instead (it makes them there from now on).
    assert fix.code.count(".to(") == 2 and [".to(" not in e.new and "device=dev" in e.new for e in fix.edits] == [True]
    assert run(ip, fix.code)[0].success and run(ip, cell)[0].success


def test_a_parameter_made_on_the_host_keeps_being_a_parameter_in_the_edit(ip, sim):
    run(ip, "import torch as th\nfrom devinspect import testing\ndev = testing.enable()\nx = th.ones(3, device=dev)")
    run(ip, "w = th.nn.Parameter(th.ones(3))")
    assert run(ip, "y = x * w")[0].error_in_exec is not None
    (edit,) = devinspect.explain(namespace=ip.user_ns).mismatch.fix.edits
    assert ".to(" in edit.new and not edit.new.rstrip().endswith(".to(dev)") and "Parameter(" in edit.new
    assert run(ip, edit.new)[0].success and ip.user_ns["w"].is_leaf and ip.user_ns["w"].device.type == "sim"


def test_a_loop_over_nested_batches_moves_every_part_and_a_list_of_models_gets_no_edit_on_its_list(ip, sim):
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "model = torch.nn.Linear(8, 2).to(dev)\n"
            "def batches():\n    for _ in range(2):\n"
            "        yield {'inputs': {'x': torch.randn(2, 8)}, 'labels': torch.randn(2, 2), 'step': 1}")
    cell = ("for batch in batches():\n"
            "    loss = torch.nn.functional.mse_loss(model(batch['inputs']['x']), batch['labels'])\n")
    assert run(ip, cell)[0].error_in_exec is not None
    (edit,) = devinspect.explain(namespace=ip.user_ns).mismatch.fix.edits
    assert edit.new.splitlines()[1].strip().startswith("batch = {**batch, ")
    assert run(ip, cell.replace(edit.old, edit.new))[0].success
    run(ip, "models = [torch.nn.Linear(8, 2).to(dev) for _ in range(2)]\nmodels.append(torch.nn.Linear(8, 2))\n"
            "x = torch.randn(4, 8, device=dev)")
    cell = "preds = torch.stack([m(x) for m in models])"
    assert run(ip, cell)[0].error_in_exec is not None
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    assert not any(".to(dev)" in e.new and "models = " in e.new for e in fix.edits)
    assert run(ip, fix.code)[0].success and run(ip, cell)[0].success


def test_an_optimizer_of_a_model_whose_head_was_replaced_updates_the_new_head_and_keeps_the_rest(sim):
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(sim)
    decay = [p for p in model.parameters() if p.ndim == 2]
    opt = torch.optim.AdamW([{"params": decay}, {"params": [p for p in model.parameters() if p.ndim == 1],
                                                 "weight_decay": 0.0}], lr=0.01)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
    model(torch.ones(2, 8, device=sim)).sum().backward()
    opt.step()
    sched.step()
    kept = {id(p): opt.state[p]["exp_avg"] for p in model[0].parameters()}
    model[2] = torch.nn.Linear(16, 3).to(sim)  # a new head, for three classes
    ns = {"model": model, "opt": opt, "sched": sched, "torch": torch}
    (f,) = [f for f in devinspect.scan(ns).findings if f.code == "stale-optimizer"]
    assert f.severity == "error" and "model[2] was replaced" in f.message
    exec(f.fix.code, ns)
    assert opt.param_groups[0]["params"][1] is model[2].weight and opt.param_groups[1]["params"][1] is model[2].bias
    assert all(opt.state[p]["exp_avg"] is kept[id(p)] for p in model[0].parameters())
    assert model[2].weight not in opt.state and sched.optimizer is opt and sched.last_epoch == 1
    before = model[2].weight.detach().clone()
    model(torch.ones(2, 8, device=sim)).sum().backward()
    opt.step()
    assert not torch.equal(before, model[2].weight.detach())  # the new head trains
    assert not [f for f in devinspect.scan(ns).findings if f.code == "stale-optimizer"]


class _Rotary(torch.nn.Module):
    """A module with a non-persistent buffer it computes when it is made (rotary frequencies)."""

    def __init__(self, dim: int = 8):
        super().__init__()
        self.proj = torch.nn.Linear(dim, dim)
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)), persistent=False)


def test_a_non_persistent_buffer_left_on_meta_gets_no_advice_that_cannot_give_it_data(sim):
    """Loading the weights cannot give it data (no checkpoint holds it) and to_empty would leave it
    uninitialised: the fix says to make the model on the device, and prints no code that would."""
    source = _Rotary().to(sim)
    with torch.device("meta"):
        loaded = _Rotary()
    loaded.load_state_dict(source.state_dict(), assign=True)
    found = {f.subject: f for f in devinspect.scan({"loaded": loaded}).findings}
    fix = found["loaded"].fix
    assert fix.code is None and "make loaded on sim:0 rather than on meta" in fix.summary
    assert "loaded.inv_freq is a non-persistent buffer" in fix.note and "load_state_dict" not in fix.note
    from devinspect.diagnose import fix_builders

    wholly = fix_builders.materialise("empty", "sim:0", 3, unsaved=("empty.inv_freq",))
    assert wholly.code is None and "to_empty" in wholly.note
    assert fix_builders.materialise("empty", "sim:0", 3).code is not None  # no such buffer: storage and initialisation


def test_a_step_that_failed_part_way_says_what_it_already_changed(ip, sim):
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            "model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 2))\n"
            "opt = torch.optim.Adam(model.parameters())\nmodel(torch.ones(1, 8)).sum().backward()\nopt.step()\n"
            "model.to(dev)\nmodel(torch.ones(1, 8, device=dev)).sum().backward()")
    result, _, _, _ = run(ip, "opt.step()")
    assert result.error_in_exec is not None
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    assert "inside the optimizer's step" in fix.note and "one more step" in fix.note
    run(ip, "x = torch.ones(2, device=dev) + torch.ones(2)")  # a failure outside a step says nothing of one
    assert "optimizer's step" not in (devinspect.explain(namespace=ip.user_ns).mismatch.fix.note or "")


@pytest.mark.parametrize("optimizer", ["Adam", "SGD", "RMSprop"])
def test_a_failure_inside_any_optimizers_step_says_the_step_was_partly_applied(ip, sim, optimizer):
    """Whatever optimizer (and whatever functions its step calls), a failure inside its step
    says that the parameters it reached first keep their update."""
    from devinspect.diagnose.fix_builders import PARTIAL_STEP_NOTE

    extra = ", momentum=0.9" if optimizer == "SGD" else ""
    run(ip, "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
            f"w = torch.nn.Parameter(torch.randn(3, device=dev))\nopt = torch.optim.{optimizer}([w], lr=0.1{extra})\n"
            "w.grad = torch.ones(3, device=dev)\nopt.step()\n"
            "for state in opt.state.values():\n"
            "    for key in [k for k, v in state.items() if v.dim() > 0]:\n"
            "        state[key] = state[key].cpu()")
    result, _, _, _ = run(ip, "opt.step()")
    assert result.error_in_exec is not None
    explanation = devinspect.explain(namespace=ip.user_ns)
    assert explanation.mismatch is not None and explanation.mismatch.fix is not None
    assert PARTIAL_STEP_NOTE in (explanation.mismatch.fix.note or "")


def fix_of_failed_case(ip, sim, name: str):
    """The fix explained after the failing cell of the fix corpus's case ``name`` fails."""
    case = next(c for c in CASES if c.name == name)
    run(ip, (PRELUDE + case.setup).replace("DEVICE", str(sim)))
    result, _, _, _ = run(ip, case.failing)
    assert result.error_in_exec is not None
    return devinspect.explain(namespace=ip.user_ns).mismatch.fix


def test_a_value_computed_from_a_host_tensor_is_fixed_where_that_tensor_is_made(ip, sim):
    """``bias`` is computed (through the user's helper, then a reshape) from ``mask``, which one
    branch of a conditional expression makes without ``device=``: that factory line is the cause,
    not the line that adds ``bias``."""
    fix = fix_of_failed_case(ip, sim, "mask-made-in-one-branch-feeds-a-helper")
    (edit,) = fix.edits
    assert (edit.old, edit.new) == ("torch.ones((batch, length), dtype=torch.long)",
                                    "torch.ones((batch, length), dtype=torch.long, device=x.device)")
    assert fix.summary.startswith("create mask (which bias is computed from)")


def test_a_state_made_in_a_comprehension_and_passed_down_is_fixed_where_it_is_made(ip, sim):
    """The operand is unpacked from a parameter, computed by the caller from its own parameter,
    which the forward made in a list comprehension without ``device=``: the edit is there, naming
    the device by a tensor that line reads."""
    (edit,) = fix_of_failed_case(ip, sim, "state-list-made-in-a-comprehension-passed-down").edits
    assert (edit.old, edit.new) == ("*shape, dtype=x.dtype", "*shape, dtype=x.dtype, device=x.device")


def test_a_branch_that_did_not_run_is_not_the_cause(ip, sim):
    """The same forward given a host mask: the branch that makes one did not run, so the trail goes
    on through the parameter to the caller's own variable, which is what moves."""
    case = next(c for c in CASES if c.name == "mask-made-in-one-branch-feeds-a-helper")
    run(ip, (PRELUDE + case.setup).replace("DEVICE", str(sim)))
    run(ip, "m = torch.ones(3, 5, dtype=torch.long)")
    result, _, _, _ = run(ip, "y = model(x, attention_mask=m)")
    assert result.error_in_exec is not None
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    assert fix.summary == f"move m to {sim}" and not any("torch.ones((batch" in e.old for e in fix.edits)


def test_a_value_made_of_two_host_tensors_moves_where_it_is_returned(ip, sim):
    """``links = torch.eye(n) + links`` combines two tensors the loader made on the host: device=
    on ``torch.eye`` alone would make that line mix devices, so the loader's return moves it."""
    (edit,) = fix_of_failed_case(ip, sim, "a-loader-returns-a-value-made-of-two-host-tensors").edits
    assert (edit.old, edit.new) == ("return feats.to(device), links", "return feats.to(device), links.to(device)")


def test_an_edit_in_a_module_file_names_the_device_as_that_file_can_see_it(sim):
    """A module file cannot see the notebook's ``device``: an edit there names a device the
    file has (its own variable) or a literal, never a name that raises NameError."""
    from devinspect.diagnose.causes.device_names import device_expression

    module_globals: dict = {"__name__": "user_module"}
    exec("import sys\ndef here():\n    return sys._getframe()\n", module_globals)
    frame = module_globals["here"]()
    notebook = {"device": sim}
    assert device_expression(notebook, str(sim), frame) == f'"{sim}"'
    module_globals["dev"] = sim
    assert device_expression(notebook, str(sim), frame) == "dev"
    assert device_expression(notebook, str(sim)) == "device"
