"""The simulated accelerator behaves like a real one, through the real dispatcher."""

from __future__ import annotations

import pytest
import torch
from conftest import run_python
from torch.utils._python_dispatch import TorchDispatchMode

from devinspect import testing


def test_enable_is_idempotent_and_returns_sim0(sim):
    assert testing.enable() == torch.device("sim", 0)
    assert testing.is_enabled()
    assert testing.device(1) == torch.device("sim", 1)
    with pytest.raises(ValueError):
        testing.device(5)


def test_tensor_moves_and_comes_back(sim):
    x = torch.arange(6.0).reshape(2, 3)
    y = x.to(sim)
    assert y.device == sim
    assert (y * 2).device == sim
    back = (y * 2).cpu()
    assert back.device.type == "cpu"
    assert torch.equal(back, x * 2)
    assert y.sum().item() == 15.0
    assert y.to("sim:1").device == torch.device("sim", 1)
    assert torch.ones(3, device=sim).device == sim
    made = torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=sim)
    assert made.device == sim and made.sum().item() == 10.0
    assert torch.tensor([True, False], device=sim).cpu().tolist() == [True, False]
    assert made.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    with pytest.raises(TypeError, match="can't convert sim:0 device type tensor to numpy"):
        made.numpy()
    assert "device='sim:0'" in str(made)
    assert f"{made.sum():.1f}" == "10.0"


def test_model_training_step_on_sim(sim):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    reference = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    reference.load_state_dict(model.state_dict())
    model.to(sim)
    assert all(p.device == sim for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=0.1)
    x = torch.randn(5, 4)
    for m, o, inp in ((model, opt, x.to(sim)), (reference, ref_opt, x)):
        loss = m(inp).pow(2).mean()
        loss.backward()
        o.step()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.allclose(p.cpu(), q)
    state = opt.state[model[0].weight]
    assert state["exp_avg"].device == sim
    assert state["step"].device.type == "cpu"  # as on CUDA (non-capturable AdamW)


def test_device_mismatch_raises_like_a_gpu(sim):
    model = torch.nn.Linear(3, 2).to(sim)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        model(torch.randn(4, 3))
    with pytest.raises(RuntimeError, match="sim:1"):
        torch.ones(2, device="sim:1") + torch.ones(2, device=sim)
    # A CPU scalar tensor may join a device op, as on CUDA.
    assert (torch.ones(2, device=sim) * torch.tensor(3.0)).device == sim


def test_dispatch_mode_sees_copies_as_for_cuda(sim):
    seen = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.ops.aten._to_copy.default:
                seen.append((str(args[0].device), str(kwargs.get("device"))))
            return func(*args, **kwargs)

    with Log():
        t = torch.ones(3).to(sim)
        t.cpu()
    assert seen == [("cpu", "sim:0"), ("sim:0", "cpu")]


def test_simulated_device_never_initialises_cuda():
    code = (
        "import torch\nfrom devinspect import testing\nd = testing.enable()\n"
        "m = torch.nn.Linear(2, 2).to(d); m(torch.ones(1, 2, device=d)).sum().backward()\n"
        "print(torch.cuda.is_initialized())\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_backward_on_the_simulated_device_exits_cleanly():
    # Autograd's worker thread for a Python device used to abort about half of these exits.
    code = (
        "import torch\nfrom devinspect import testing\nd = testing.enable()\n"
        "m = torch.nn.Linear(2, 2).to(d); m(torch.ones(1, 2, device=d)).sum().backward()\n"
    )
    codes = [run_python(code).returncode for _ in range(5)]
    assert codes == [0] * 5


def test_an_older_torch_is_told_which_version_the_device_needs():
    # torch before 2.10 has no hook for a backend written in Python: enable() says so in one line.
    code = (
        "import torch.utils.backend_registration as r\ndel r._setup_privateuseone_for_python_backend\n"
        "from devinspect import testing\ntry:\n    testing.enable()\n"
        "except testing.SimulatedDeviceError as e:\n    print(e)\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    message = out.stdout.strip()
    assert "\n" not in message and "needs torch 2.10 or newer" in message and torch.__version__ in message
