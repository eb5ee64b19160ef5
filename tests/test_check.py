"""%%devcheck / devinspect.check: one test per scenario, asserting names, lines and counts."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import devinspect
from devinspect.model.fixes import Move, MoveOptimizerState, RegisterBuffer
from devinspect.observe.checked_block import DeviceCheckError


def line_of(fn, needle):
    """Absolute line number of the first source line of ``fn`` containing ``needle``."""
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if needle in line)


def run_checked(fn, namespace):
    with pytest.raises(Exception) as info:
        with devinspect.check(namespace) as c:
            fn()
    return c.report, info.value


class MaskNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)

    def forward(self, x):
        h = self.fc1(x)
        mask = torch.ones(x.shape[0], 8)  # forgot device=
        return h * mask


def test_a_mask_created_without_device_inside_forward(sim):
    model = MaskNet().to(sim)
    x = torch.randn(4, 8, device=sim)
    report, error = run_checked(lambda: model(x), {"model": model, "x": x})
    m = report.mismatch
    assert m is not None and m.op == "Tensor.mul" and set(m.devices) == {"cpu", "sim:0"}
    mask = next(o for o in m.operands if o.name == "mask")
    assert mask.source == "local" and mask.device == "cpu"
    assert f"test_check.py:{line_of(MaskNet.forward, 'torch.ones')}" in mask.detail
    assert "by torch.ones without device=" in mask.detail
    assert m.user_frame.function == "forward" and m.user_frame.line == line_of(MaskNet.forward, "h * mask")
    assert m.module_path == "model"
    # The user's own line, rewritten with their arguments kept, anchored on the other operand.
    (edit,) = m.fix.edits
    assert edit.where.line == line_of(MaskNet.forward, "torch.ones") and edit.context == "forward"
    assert edit.new.startswith("mask = torch.ones(x.shape[0], 8, device=h.device)")
    assert m.fix.code is None and m.fix.action is None  # a local of user code is never rebound from outside
    assert any("devinspect: device mismatch in Tensor.mul" in note for note in error.__notes__)


def test_b_labels_left_on_cpu(sim):
    model = nn.Linear(8, 3).to(sim)
    x = torch.randn(4, 8, device=sim)
    labels = torch.tensor([0, 1, 2, 0])

    def step():
        return F.cross_entropy(model(x), labels)

    report, _ = run_checked(step, {"model": model, "x": x, "labels": labels})
    m = report.mismatch
    assert m.op == "F.cross_entropy"
    assert {(o.name, o.source, o.device) for o in m.operands} >= {("labels", "namespace", "cpu")}
    assert m.fix.code == 'labels = labels.to("sim:0")'
    assert m.fix.action == Move("labels", "sim:0")


class ScaledNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale = torch.ones(8)  # a plain attribute: .to() leaves it behind

    def forward(self, x):
        return self.fc(x) * self.scale


def test_c_plain_module_attribute_not_moved_by_to(sim):
    model = ScaledNet().to(sim)
    x = torch.randn(2, 8, device=sim)
    report, _ = run_checked(lambda: model(x), {"model": model, "x": x})
    scale = next(o for o in report.mismatch.operands if o.device == "cpu")
    assert (scale.name, scale.source) == ("model.scale", "attribute")
    fix = report.mismatch.fix
    assert fix.code == ('model.register_buffer("scale", (model.__dict__["scale"].to("sim:0"), '
                        'model.__dict__.pop("scale"))[0], persistent=False)')
    assert fix.action == RegisterBuffer("model", "scale", "sim:0")
    (edit,) = fix.edits  # and the class's own line, so it does not come back
    assert edit.context == "ScaledNet" and edit.old == "self.scale = torch.ones(8)  # a plain attribute: .to() leaves it behind"
    assert edit.new == ('self.register_buffer("scale", torch.ones(8), persistent=False)'
                        '  # a plain attribute: .to() leaves it behind')


def test_d_item_in_a_training_loop(sim):
    model = nn.Linear(4, 1).to(sim)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(16, 4, device=sim)
    losses = []

    def train():
        for _ in range(20):
            loss = model(x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())

    with devinspect.check({"model": model}) as c:
        train()
    item_line = line_of(train, "loss.item()")
    stats = next(s for s in c.report.lines if s.where.line == item_line)
    assert dict(stats.syncs) == {".item()": 20}
    assert stats.where.function == "train"
    loop = next(f for f in c.report.findings if f.code == "sync-in-loop")
    assert loop.subject.endswith(f":{item_line} in train") and "20 times" in loop.message
    # The fix is written in the loop's own names, and runs as printed.
    assert loop.fix.summary == ("keep the values on the device (losses.append(loss.detach())) and read them once "
                                "after the loop (losses = torch.stack(losses).tolist())")


def test_e_cpu_then_back_to_device_each_iteration(sim):
    x = torch.randn(64, 8, device=sim)

    def loop():
        out = x
        for _ in range(5):
            host = out.cpu()
            out = host.to(sim) * 2

    with devinspect.check({}) as c:
        loop()
    down = next(s for s in c.report.lines if s.where.line == line_of(loop, "out.cpu()"))
    up = next(s for s in c.report.lines if s.where.line == line_of(loop, "host.to(sim)"))
    assert (down.d2h_count, down.d2h_bytes) == (5, 5 * 64 * 8 * 4)
    assert (up.h2d_count, up.h2d_bytes) == (5, 5 * 64 * 8 * 4)
    assert dict(down.syncs) == {".cpu()": 5}
    trip = next(f for f in c.report.findings if f.code == "round-trip")
    assert f":{line_of(loop, 'host.to(sim)')}" in trip.subject
    assert c.report.totals["h2d_count"] == 5 and c.report.totals["d2h_count"] == 5


def test_f_numpy_on_a_device_tensor(sim):
    t = torch.randn(3, device=sim)

    def convert():
        return t.numpy()

    report, error = run_checked(convert, {"t": t})
    assert isinstance(error, TypeError) and "Use Tensor.cpu()" in str(error)
    # .numpy() of a device tensor raises; it is counted as the device-to-host copy (and the wait
    # for the device) that its fix, .cpu() first, makes it, and explained.
    line, = report.lines
    assert (line.d2h_count, line.d2h_bytes) == (1, 12) and dict(line.syncs) == {".numpy()": 1}
    assert report.mismatch is None and report.error.startswith("TypeError")
    assert report.device_error.kind == "host array" and report.device_error.fix.edits[0].new == "return t.cpu().numpy()"
    with devinspect.check({"t": t}) as c:
        t.numpy(force=True)  # force=True does copy to the host
    assert dict(c.report.lines[0].syncs) == {".numpy()": 1}


class PositionalEncoding(nn.Module):
    def __init__(self, dim=8, length=16):
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.pe = torch.randn(length, dim)  # should be a buffer

    def forward(self, x):
        return self.proj(x) + self.pe[: x.shape[0]]


def test_g_positional_encoding_as_unregistered_attribute(sim):
    model = nn.Sequential(PositionalEncoding()).to(sim)
    x = torch.randn(4, 8, device=sim)
    report, _ = run_checked(lambda: model(x), {"model": model, "x": x})
    pe = next(o for o in report.mismatch.operands if o.device == "cpu")
    assert (pe.name, pe.source) == ("model[0].pe", "attribute") and "a view of model[0].pe" in pe.detail
    assert report.mismatch.module_path == "model[0]"
    assert report.mismatch.fix.code.startswith('model[0].register_buffer("pe", (model[0].__dict__["pe"].to("sim:0"), ')


def test_h_loss_weight_left_on_cpu(sim):
    model = nn.Linear(8, 3).to(sim)
    loss_fn = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 1.0]))
    x = torch.randn(4, 8, device=sim)
    y = torch.tensor([0, 1, 2, 1], device=sim)
    report, _ = run_checked(lambda: loss_fn(model(x), y), {"model": model, "loss_fn": loss_fn, "x": x, "y": y})
    weight = next(o for o in report.mismatch.operands if o.device == "cpu")
    assert (weight.name, weight.source) == ("loss_fn.weight", "buffer")
    assert report.mismatch.target_device == "sim:0"
    assert report.mismatch.fix.code == 'loss_fn.to("sim:0")'
    assert report.mismatch.module_path == "loss_fn"


def test_i_optimizer_state_left_behind_after_loading_a_checkpoint(sim, stale_optimizer):
    model, opt = stale_optimizer
    model(torch.randn(1, 3, device=sim)).sum().backward()
    ns = {"model": model, "opt": opt}
    report, _ = run_checked(opt.step, ns)
    names = {o.name: o for o in report.mismatch.operands}
    assert any(n.startswith('opt.state[model.') and o.source == "optimizer_state" for n, o in names.items())
    assert report.mismatch.fix.action == MoveOptimizerState("opt")
    namespace = {"opt": opt, "torch": torch}
    exec(report.mismatch.fix.code, namespace)
    opt.step()  # the fix works


def test_results_and_gradients_are_bit_identical():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    x = torch.randn(8, 16)

    def step():
        model.zero_grad()
        out = model(x)
        out.pow(2).mean().backward()
        return out.detach().clone(), [p.grad.clone() for p in model.parameters()]

    plain_out, plain_grads = step()
    with devinspect.check({}):
        checked_out, checked_grads = step()
    assert torch.equal(plain_out, checked_out)
    assert all(torch.equal(a, b) for a, b in zip(plain_grads, checked_grads))


def test_nests_with_flop_counter_and_autocast():
    from torch.utils.flop_counter import FlopCounterMode

    model = nn.Linear(32, 32)
    x = torch.randn(4, 32)
    with FlopCounterMode(display=False) as flops_plain:
        model(x)
    with devinspect.check({}), FlopCounterMode(display=False) as flops:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(x)
    assert out.dtype == torch.bfloat16
    assert flops.get_total_flops() == flops_plain.get_total_flops() > 0


def test_torch_compile_still_compiles_inside_the_check():
    import torch._dynamo
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()

    @torch.compile(backend=counter)
    def f(a):
        return torch.sin(a) + a * 2

    with devinspect.check({}):
        out = f(torch.randn(8))
    assert counter.frame_count == 1 and counter.op_count >= 3
    assert out.shape == (8,)


def test_backward_copies_are_counted_on_the_backward_line(sim):
    x = torch.randn(4, 8, requires_grad=True)  # a CPU leaf fed to a device model
    w = torch.randn(8, 3, device=sim, requires_grad=True)
    with devinspect.check({"x": x, "w": w}) as c:
        y = x.to(sim) @ w
        y.sum().backward()  # autograd copies x's gradient back to the host
    lines = {s.where.text.strip(): s for s in c.report.lines}
    forward, backward = lines["y = x.to(sim) @ w"], lines["y.sum().backward()  # autograd copies x's gradient back to the host"]
    assert (forward.h2d_count, forward.h2d_bytes, forward.d2h_count) == (1, 128, 0)
    assert (backward.d2h_count, backward.d2h_bytes) == (1, 128)
    assert dict(backward.syncs) == {"backward copy to host": 1}
    assert x.grad.device.type == "cpu" and w.grad.device == sim
    expected = x.grad.clone()
    x.grad = None
    with devinspect.check({"x": x, "w": w}) as later:
        y = x.to(sim) @ w
    y.sum().backward()  # after the check: its hooks are gone, nothing is counted or changed
    assert later.report.totals["d2h_count"] == 0 and torch.equal(x.grad, expected)


def test_a_backward_pass_over_a_graph_made_before_the_check_counts_its_copies(sim):
    """The forward ran in an earlier cell: its copy node is found in the graph when .backward() is called."""
    x = torch.randn(4, 8, requires_grad=True)
    w = torch.randn(8, 3, device=sim, requires_grad=True)
    loss = (x.to(sim) @ w).sum()  # made before the check
    with devinspect.check({}) as c:
        loss.backward()
    (line,) = c.report.lines
    assert (line.d2h_count, line.d2h_bytes, dict(line.syncs)) == (1, 128, {"backward copy to host": 1})
    assert x.grad.device.type == "cpu"


def test_compiled_forward_and_backward_inside_the_check():
    import torch._dynamo
    import torch._dynamo.testing

    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounter()
    a = torch.randn(8, requires_grad=True)

    def f(t):
        return (torch.sin(t) * 2).sum()

    expected = torch.autograd.grad(f(a), a)[0]
    with devinspect.check({}):
        torch.compile(f, backend=counter)(a).backward()
    assert counter.frame_count == 1 and counter.op_count >= 2  # compiled under the check, not run eagerly
    assert torch.allclose(a.grad, expected)


def test_strict_turns_findings_into_an_error(sim):
    t = torch.ones(3, device=sim)
    with pytest.raises(DeviceCheckError, match="host waits for the device"):
        with devinspect.check({}, strict=True):
            for _ in range(12):
                t.sum().item()


def test_no_findings_on_clean_device_code(sim):
    model = nn.Linear(4, 4).to(sim)
    x = torch.randn(2, 4, device=sim)
    with devinspect.check({"model": model}) as c:
        model(x).sum().backward()
    assert c.report.findings == () and c.report.mismatch is None
    assert c.report.totals["syncs"] == 0


def test_non_blocking_copy_from_unpinned_memory_is_flagged(sim):
    host = torch.randn(32)

    def copy():
        return host.to(sim, non_blocking=True)

    with devinspect.check({}) as c:
        copy()
    flag = next(f for f in c.report.findings if f.code == "non-blocking-unpinned")
    assert flag.subject.endswith(f":{line_of(copy, 'non_blocking=True')} in copy") and "pin_memory" in flag.fix.summary


def test_nests_with_torch_func_checkpointing_and_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils.checkpoint import checkpoint

    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    x = torch.randn(3, 4)
    params = dict(model.named_parameters())

    def loss(p, inp):
        return torch.func.functional_call(model, p, (inp,)).sum()

    plain_grads = torch.func.grad(loss)(params, x)
    plain_ckpt = checkpoint(model, x, use_reentrant=False).sum()
    with devinspect.check({}):
        grads = torch.func.grad(loss)(params, x)
        ckpt = checkpoint(model, x, use_reentrant=False).sum()
        with FakeTensorMode():
            fake_out = nn.Linear(4, 2)(torch.empty(5, 4))
    assert all(torch.equal(grads[k], plain_grads[k]) for k in grads)
    assert torch.equal(ckpt, plain_ckpt)
    assert tuple(fake_out.shape) == (5, 2)


# -- attribution a user trusts ----------------------------------------------------------


def round_trips(report):
    return [f for f in report.findings if f.code == "round-trip"]


def test_round_trips_are_flagged_whatever_the_host_does_in_between(sim):
    t = torch.randn(16, device=sim)

    def shapes():
        h = t.cpu()
        h = h * 2 + 1  # host arithmetic in between
        back1 = h.to(sim)
        a = t.cpu().numpy()
        back2 = torch.from_numpy(a).to(sim)  # through numpy
        values = t.tolist()
        back3 = torch.tensor(values, device=sim)  # through Python lists
        v = t[3].item()
        back4 = torch.tensor(v).to(sim)  # through a Python number
        return back1, back2, back3, back4

    with devinspect.check({}) as c:
        shapes()
    trips = round_trips(c.report)
    left = [line_of(shapes, "h = t.cpu()"), line_of(shapes, "t.cpu().numpy()"),
            line_of(shapes, "t.tolist()"), line_of(shapes, "t[3].item()")]
    back = [line_of(shapes, "h.to(sim)"), line_of(shapes, "from_numpy"), line_of(shapes, "torch.tensor(values"),
            line_of(shapes, "torch.tensor(v)")]
    assert len(trips) == 4
    for trip, out, into in zip(sorted(trips, key=lambda f: f.subject), left, back):
        assert f":{into} in shapes" in trip.subject and f":{out} in shapes" in trip.message


def test_a_legitimate_loop_is_not_a_round_trip(sim):
    model = nn.Linear(4, 1).to(sim)
    batches = [torch.randn(8, 4) for _ in range(5)]

    def train():
        losses = []
        for x in batches:
            loss = model(x.to(sim)).pow(2).mean()
            losses.append(loss.item())  # logging: data leaves, but nothing comes back
        return losses

    with devinspect.check({}) as c:
        train()
    assert round_trips(c.report) == []


def test_printing_and_converting_a_device_tensor_are_syncs_and_empty_copies_are_not(sim):
    t = torch.randn(3, device=sim)

    def show():
        print(t)
        repr(t)
        str(t)
        f"{t[0]:.2f}"
        t.tolist()
        torch.tensor([], device=sim)  # copies nothing
        torch.tensor([1.0, 2.0], device=sim)

    import contextlib
    import io

    with contextlib.redirect_stdout(io.StringIO()), devinspect.check({}) as c:
        show()
    by_line = {s.where.line: dict(s.syncs) for s in c.report.lines}
    assert by_line[line_of(show, "print(t)")] == {"print": 1}
    assert by_line[line_of(show, "repr(t)")] == {"print": 1}
    assert by_line[line_of(show, "str(t)")] == {"print": 1}
    assert by_line[line_of(show, 'f"{t[0]')] == {"print": 1}
    assert by_line[line_of(show, "t.tolist()")] == {".tolist()": 1}
    assert line_of(show, "torch.tensor([], device") not in by_line
    assert by_line[line_of(show, "torch.tensor([1.0")] == {"torch.tensor(…, device=)": 1}


def test_work_inside_library_code_is_blamed_on_the_users_line(sim):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=32,
                                       bos_token_id=0, eos_token_id=0, pad_token_id=0)).to(sim)
    ids = torch.randint(1, 50, (1, 4), device=sim)

    def generate():
        return model.generate(ids, max_new_tokens=12, do_sample=False, pad_token_id=0)

    with devinspect.check({"model": model, "ids": ids}) as c:
        generate()
    files = {s.where.file for s in c.report.lines}
    assert files == {__file__}  # no library file is ever a line of the report
    (line,) = c.report.lines
    assert line.where.line == line_of(generate, "model.generate") and "transformers" in line.inside
    for f in c.report.findings:
        assert f"test_check.py:{line.where.line}" in f.subject and "transformers" in f.message


def test_every_way_of_copying_or_syncing_is_counted_once_on_its_line(sim):
    """Copies and syncs that go by other names than .to() and .item(): each is counted with
    the bytes that cross, and a copy the host does not wait for is not a sync."""
    x = torch.randn(4, 4)  # 64 B on the host
    y = torch.ones(4, 4, device=sim)
    other = torch.ones(4, device=torch.device(sim.type, 1))
    mask = torch.ones(4, dtype=torch.bool, device=sim)
    pinned = torch.empty(4, 4).pin_memory()
    backend = sim.type

    def work():
        getattr(x, backend)()
        other.to(backend)  # noqa: F821 - deleted below, once work() has run; the current device (index 0): a copy from index 1
        y[:, mask]
        torch.equal(y, y)
        torch.where(mask)
        y[:] = x
        y.new_tensor([1.0, 2.0])
        x.type_as(y)
        y.to("cpu", non_blocking=True)
        pinned.copy_(y, non_blocking=True)
        y.numpy(force=True)
        x.to(sim, torch.float16)

    with devinspect.check({}) as c:
        work()
    del other  # and the second device's cache with it, as the tests after this one expect
    getattr(torch, sim.type).empty_cache()
    by_line = {s.where.line: s for s in c.report.lines}

    def counts(needle):
        s = by_line[line_of(work, needle)]
        return (s.h2d_count, s.h2d_bytes, s.d2h_count, s.d2h_bytes, s.d2d_count, s.d2d_bytes, dict(s.syncs))

    assert counts("getattr(x, backend)") == (1, 64, 0, 0, 0, 0, {})
    assert counts("other.to(") == (0, 0, 0, 0, 1, 16, {})
    assert counts("y[:, mask]") == (0, 0, 0, 0, 0, 0, {"bool-mask indexing": 1})
    assert counts("torch.equal") == (0, 0, 0, 0, 0, 0, {"torch.equal": 1})
    assert counts("torch.where(mask)") == (0, 0, 0, 0, 0, 0, {"nonzero": 1})
    assert counts("y[:] = x") == (1, 64, 0, 0, 0, 0, {})
    assert counts("new_tensor") == (1, 8, 0, 0, 0, 0, {".new_tensor()": 1})
    assert counts("type_as") == (1, 64, 0, 0, 0, 0, {})
    assert counts('y.to("cpu", non_blocking') == (0, 0, 1, 64, 0, 0, {})
    assert counts("pinned.copy_") == (0, 0, 1, 64, 0, 0, {})
    assert counts("numpy(force") == (0, 0, 1, 64, 0, 0, {".numpy()": 1})
    assert counts("float16") == (1, 32, 0, 0, 0, 0, {})  # converted on the host: half the bytes cross


def test_setting_the_default_device_in_a_checked_cell_works_as_in_a_plain_one(sim):
    """torch keeps its default device at the bottom of the mode stack and looks for it there
    when it is set again: the check's mode goes above it, and sees what it makes."""
    try:
        torch.set_default_device(sim)
        with devinspect.check({}) as c:
            torch.set_default_device("cpu")
            on_host = torch.ones(2)
            torch.set_default_device(sim)
            made = torch.tensor([1.0, 2.0, 3.0])
        assert on_host.device.type == "cpu" and made.device == torch.device(sim.type, 0)
        assert torch.get_default_device() == torch.device(sim.type, 0) and torch.ones(1).device == made.device
        (line,) = [s for s in c.report.lines if s.h2d_count]
        assert (line.h2d_count, line.h2d_bytes) == (1, 12)
    finally:
        torch.set_default_device(None)
    assert torch._C._len_torch_function_stack() == 0 and torch.ones(1).device.type == "cpu"


def test_waits_inside_a_librarys_own_loop_called_once_are_a_hint(ip, sim):
    """A line that calls into a library once, which reads a device value on each of its own steps
    (a generate loop checking its stop condition), gets a hint; called from the user's loop, the
    same waits are a warning."""
    ip.run_cell("import torch\nfrom devinspect import testing\nimport devinspect\ndev = testing.enable()\n"
                "x = torch.randn(12, device=dev)")
    ip.run_cell("import sys, types\nlib = types.ModuleType('steplib')\n"
                "exec(compile('def run(t):\\n    return [bool(v > 0) for v in t]\\n', "
                "'/usr/lib/python3/dist-packages/steplib.py', 'exec'), lib.__dict__)")
    ip.run_cell("%%devcheck -v once\nflags = lib.run(x)")
    ip.run_cell("%%devcheck -v looped\nfor _ in range(2):\n    flags = lib.run(x)")
    once = [f for f in ip.user_ns["once"].findings if f.code == "sync-in-loop"]
    looped = [f for f in ip.user_ns["looped"].findings if f.code == "sync-in-loop"]
    assert [f.severity for f in once] == ["hint"] and "inside" in once[0].message
    assert [f.severity for f in looped] == ["warning"]


def test_a_loop_reading_each_element_of_a_device_tensor_is_told_to_read_it_once(ip, sim):
    """``for idx, v in enumerate(y): ... v.item()`` waits once per element: the fix reads ``y`` once,
    before the loop, in the loop's own names, and the fixed loop computes the same and waits once."""
    ip.run_cell("import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
                "y = torch.tensor([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8], device=dev)\n"
                "def shifted(y):\n    out = []\n    for idx, v in enumerate(y):\n        out.append(v.item() + idx)\n"
                "    return out")
    ip.run_cell("%%devcheck -v rep\nvalues = shifted(y)")
    (finding,) = [f for f in ip.user_ns["rep"].findings if f.code == "sync-in-loop"]
    assert "for idx, v in enumerate(y.tolist())" in finding.fix.summary and "use v in place of v.item()" in finding.fix.summary
    ip.run_cell("def shifted(y):\n    out = []\n    for idx, v in enumerate(y.tolist()):\n        out.append(v + idx)\n"
                "    return out")
    ip.run_cell("%%devcheck -v fixed\nvalues_fixed = shifted(y)")
    assert ip.user_ns["values_fixed"] == ip.user_ns["values"]
    assert not [f for f in ip.user_ns["fixed"].findings if f.code == "sync-in-loop"]
