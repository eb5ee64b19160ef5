"""What training code uses works on the simulated device as on CUDA, with the device swapped."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from conftest import run_python
from torch.utils.checkpoint import checkpoint

from devinspect import testing


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin, self.drop = nn.Linear(4, 4), nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.lin(x).relu())


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpointing_recomputes_on_the_calling_thread(sim, reentrant):
    torch.manual_seed(0)
    block = Block().to(sim)
    x = torch.randn(3, 4, device=sim, requires_grad=True)
    torch.manual_seed(1)
    checkpoint(block, x, use_reentrant=reentrant).sum().backward()
    grads = [p.grad.cpu().clone() for p in block.parameters()]
    block.zero_grad()
    torch.manual_seed(1)
    block(x).sum().backward()  # the same dropout mask: the recomputation replays the RNG state
    assert all(torch.allclose(g, p.grad.cpu()) for g, p in zip(grads, block.parameters()))


def test_non_reentrant_checkpointing_exits_cleanly():
    # A failure inside the recomputation used to abort the interpreter.
    code = (
        "import torch\nfrom torch.utils.checkpoint import checkpoint\nfrom devinspect import testing\n"
        "d = testing.enable()\nx = torch.ones(3, device=d, requires_grad=True)\n"
        "checkpoint(lambda a: a.sin(), x, use_reentrant=False).sum().backward()\nprint(x.grad.sum().item())\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert float(out.stdout) == pytest.approx(3 * 0.5403, abs=1e-3)


def test_pinned_memory_and_non_blocking_copies(sim):
    host = torch.arange(6.0)
    pinned = host.pin_memory()
    assert pinned.is_pinned() and not host.is_pinned() and torch.equal(pinned, host)
    moved = pinned.to(sim, non_blocking=True)
    assert moved.device == sim and moved.cpu().tolist() == host.tolist()


def test_a_data_loader_pins_its_batches(sim):
    data = torch.utils.data.TensorDataset(torch.randn(8, 3), torch.arange(8))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    for x, y in loader:
        assert x.is_pinned() and y.is_pinned()
        assert x.to(sim, non_blocking=True).device == sim


def test_code_written_for_cuda_streams_runs_with_the_device_swapped(sim):
    a, b = torch.randn(4, 4, device=sim), torch.randn(4, 4, device=sim)
    side = torch.sim.Stream()
    start, end = torch.sim.Event(enable_timing=True), torch.sim.Event(enable_timing=True)
    start.record()
    with torch.sim.stream(side):
        assert torch.sim.current_stream() is side
        product = a @ b
        product.record_stream(side)
    assert torch.sim.current_stream() is torch.sim.default_stream()
    torch.sim.current_stream().wait_stream(side)
    end.record()
    torch.sim.synchronize()
    assert end.query() and start.elapsed_time(end) >= 0
    assert torch.allclose(product.cpu(), a.cpu() @ b.cpu())
    assert isinstance(side, torch.Stream) and torch.accelerator.current_stream().device == sim
    torch.accelerator.synchronize()  # the torch.accelerator spelling too
    torch.accelerator.synchronize(sim)
    with torch.sim.device(1):
        assert torch.sim.current_device() == 1 and torch.ones(1, device="sim").device == torch.device("sim", 1)
    assert torch.sim.current_device() == 0


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_runs_a_model_on_the_device(sim, backend):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2)).to(sim)
    compiled = torch.compile(model, backend=backend)
    x = torch.randn(3, 4, device=sim)
    out = compiled(x)
    out.sum().backward()
    assert out.device == sim and torch.allclose(out.cpu(), model(x).cpu())
    assert model[0].weight.grad.device == sim


def test_autocast_on_the_device_casts_as_cuda_autocast(sim):
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4)).to(sim)
    x = torch.randn(2, 4, device=sim)
    with torch.autocast("sim", dtype=torch.bfloat16):
        hidden = model[0](x)  # linear: the autocast dtype
        normed = model(x)  # layer_norm: float32
        probs = torch.softmax(hidden, -1)  # float32 output
        joined = torch.cat([hidden, x])  # the widest input
        wide = model[0](x.double().float()) @ torch.ones(4, 4, dtype=torch.float64, device=sim).float()
        loss = normed.pow(2).mean()
    loss.backward()
    assert (hidden.dtype, normed.dtype, probs.dtype, joined.dtype) == (
        torch.bfloat16, torch.float32, torch.float32, torch.float32)
    assert wide.dtype == torch.bfloat16 and model[0].weight.grad.dtype == torch.float32
    with torch.autocast("sim"):  # float16 by default, as on CUDA
        assert (x @ x.T).dtype == torch.float16
        with torch.autocast("sim", enabled=False):
            assert (x @ x.T).dtype == torch.float32
    with torch.autocast("sim"), pytest.raises(RuntimeError, match="unsafe to autocast"):
        nn.functional.binary_cross_entropy(torch.rand(3, device=sim), torch.rand(3, device=sim))


@pytest.mark.parametrize("wrap", ["weight_norm", "parametrizations.weight_norm", "spectral_norm",
                                  "parametrizations.spectral_norm"])
def test_reparametrised_modules_move_with_to(sim, wrap):
    utils = nn.utils
    for part in wrap.split("."):
        utils = getattr(utils, part)
    layer = utils(nn.Linear(3, 3))
    layer(torch.ones(1, 3))  # a forward on the CPU first, as a notebook does
    layer.to(sim)
    assert layer(torch.ones(1, 3, device=sim)).device == sim


def test_to_keeps_the_parameters_after_a_cpu_forward_and_back(sim):
    model = nn.Sequential(nn.Linear(3, 3), nn.LayerNorm(3))
    opt = torch.optim.AdamW(model.parameters())
    params = list(model.parameters())
    model(torch.ones(2, 3)).sum().backward()
    grad = params[0].grad
    held = model(torch.ones(2, 3))  # its graph holds the parameters, as a notebook's last output does
    model.to(sim)
    assert list(model.parameters()) == params and all(p.device == sim for p in params)
    assert params[0].grad is grad and grad.device == sim
    model(torch.ones(2, 3, device=sim)).sum().backward()
    opt.step()
    assert all(s["exp_avg"].device == sim for s in opt.state.values())
    model.to("cpu")  # and back: still the same objects, as on CUDA
    assert all(a is b for a, b in zip(model.parameters(), params)) and params[0].grad is grad
    assert type(params[0]) is nn.Parameter and params[0].device.type == "cpu" and grad.device.type == "cpu"
    assert held.device.type == "cpu"


def test_factories_and_moves_are_booked_on_the_allocator():
    sim = testing.enable()
    before = torch.sim.memory_allocated(0)
    kept = torch.arange(1 << 18, device=sim)  # 2 MiB of int64
    assert torch.sim.memory_allocated(0) - before == kept.nbytes
    del kept
    assert torch.sim.memory_allocated(0) == before


def test_a_storage_made_on_the_device_is_refused_in_one_line_not_a_crash():
    # PyTorch would call a null allocator: the process (a notebook's kernel) would die.
    code = (
        "import torch, warnings\nwarnings.simplefilter('ignore')\nfrom devinspect import testing\nd = testing.enable()\n"
        "makers = [lambda: torch.UntypedStorage(8, device=d), lambda: torch.TypedStorage(8, device=d, dtype=torch.float32),\n"
        "          lambda: torch.ones(3, device=d).untyped_storage().clone(),\n"
        "          lambda: torch.UntypedStorage(8).to(device=d)]\n"
        "for make in makers:\n    try:\n        make()\n    except RuntimeError as e:\n        print(str(e).splitlines()[0])\n"
        "print(torch.UntypedStorage(8).nbytes(), torch.ones(3).untyped_storage().clone().nbytes())\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert len(lines) == 5 and all("holds no storage of its own" in line for line in lines[:4])
    assert lines[4] == "8 12"  # host storages as before


def test_a_parameter_rebuilt_from_its_class_is_a_parameter_as_on_a_gpu(sim):
    """On the device a parameter's class is the device's tensor class; library code that rebuilds
    one as ``type(p)(tensor, requires_grad=...)`` (accelerate's offload hooks) gets a parameter,
    as ``nn.Parameter`` gives it on a GPU."""
    lin = torch.nn.Linear(4, 4).to(sim)
    rebuilt = type(lin.weight)(torch.zeros(4, 4), requires_grad=False)
    assert type(rebuilt) is torch.nn.Parameter and not rebuilt.requires_grad
    on_device = type(lin.weight)(torch.ones(4, 4).to(sim))
    assert isinstance(on_device, torch.nn.Parameter) and on_device.requires_grad and on_device.device == sim
    from accelerate import dispatch_model

    torch.manual_seed(0)
    tower = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    expected = tower(torch.ones(2, 4))
    # The middle layer offloaded to the host: its weights come to the device for each forward.
    tower = dispatch_model(tower, device_map={"0": str(sim), "1": "cpu", "2": str(sim)}, main_device=str(sim))
    assert torch.allclose(tower(torch.ones(2, 4)).cpu(), expected)


def test_autocast_on_the_device_keeps_a_positional_dtype(sim):
    x, y = torch.randn(4, 5, device=sim), torch.randint(0, 5, (4,), device=sim)
    for dtype in (torch.float16, torch.bfloat16):
        with torch.autocast("sim", dtype=dtype):
            loss = torch.nn.functional.cross_entropy(x, y)  # log_softmax(x, 1, None) inside
        assert loss.dtype == torch.float32
        assert torch.allclose(loss.cpu(), torch.nn.functional.cross_entropy(x.cpu(), y.cpu()), atol=1e-5)


def test_an_integer_histogram_counts_as_on_cuda(sim):
    """CUDA's histc takes integer tensors (a mixture-of-experts router counts its experts so);
    the CPU's does not: the simulated device counts them and keeps their dtype."""
    routes = torch.tensor([0, 1, 1, 3, 3, 3], dtype=torch.int32, device=sim)
    counts = torch.histc(routes, bins=4, min=0, max=3)
    assert counts.device == sim and counts.dtype == torch.int32 and counts.tolist() == [1, 2, 0, 3]


def test_a_host_tensor_indexed_by_device_indices_raises_as_on_cuda(sim):
    table = torch.arange(5.0)
    with pytest.raises(RuntimeError, match="indices should be either on cpu or on the same device"):
        table[torch.tensor([1, 2], device=sim)]
    assert torch.arange(5.0, device=sim)[torch.tensor([1, 2])].tolist() == [1.0, 2.0]  # the other way is allowed


def test_a_model_saved_on_the_device_loads_back_there_as_from_a_gpu(sim, tmp_path):
    """torch.save of a whole model and torch.load with its weights_only default (the classes
    allowed), as a checkpoint of a GPU model loads: Parameters on the device with their values,
    buffers too; map_location moves them to the host."""
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).to(sim)
    torch.save(model, tmp_path / "model.pt")
    with torch.serialization.safe_globals([nn.Sequential, nn.Linear, nn.BatchNorm1d]):
        loaded = torch.load(tmp_path / "model.pt")
        on_host = torch.load(tmp_path / "model.pt", map_location="cpu")
    for p, q in zip(model.parameters(), loaded.parameters()):
        assert isinstance(q, nn.Parameter) and q.requires_grad and q.device == sim and torch.equal(p.cpu(), q.cpu())
    assert loaded[1].running_var.device == sim and on_host[0].weight.device.type == "cpu"
    torch.save(model.state_dict(), tmp_path / "weights.pt")
    assert {v.device for v in torch.load(tmp_path / "weights.pt").values()} == {sim}
