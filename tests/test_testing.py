"""The simulated accelerator behaves like a real one, through the real dispatcher."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

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


# A stand-in for a GPU machine: PyTorch's accelerator query answers "cuda" (nothing else is touched).
AS_IF_CUDA = "import torch\ntorch.accelerator.current_accelerator = lambda check_available=False: torch.device('cuda')\n"


def test_enable_refuses_beside_a_real_accelerator_in_one_line_and_changes_nothing():
    code = AS_IF_CUDA + (
        "from devinspect import testing\n"
        "try:\n    testing.enable()\nexcept testing.SimulatedDeviceError as e:\n    print(repr(str(e)))\n"
        "print(torch._C._get_privateuse1_backend_name(), torch.autograd.is_multithreading_enabled(),\n"
        "      testing.is_enabled(), hasattr(torch, 'sim'), torch.cuda.is_initialized())\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    message, state = out.stdout.strip().splitlines()
    assert "\\n" not in message and "cannot share a process with a real accelerator (cuda)" in message
    assert 'CUDA_VISIBLE_DEVICES=""' in message
    assert state.split() == ["privateuseone", "True", "False", "False", "False"]  # nothing was registered


def test_the_refusal_names_a_way_to_hide_the_gpus_only_where_one_exists():
    from devinspect.testing.real_devices import refusal

    for kind, hint in (("cuda", 'hides the cuda devices (CUDA_VISIBLE_DEVICES="" python'),
                       ("mps", "in a process where torch sees no mps device")):
        message = refusal(torch.device(kind))
        assert "\n" not in message and f"a real accelerator ({kind})" in message and hint in message


def test_with_the_gpus_hidden_the_device_enables():
    # What the refusal tells a GPU machine to do: a process that sees no GPU may use the device.
    code = AS_IF_CUDA.replace("torch.device('cuda')", "None") + (
        "from devinspect import testing\nprint(testing.real_accelerator(), testing.enable())\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "sim:0"]


def test_on_a_gpu_machine_the_suite_keeps_the_simulated_device_out_of_its_process():
    # The tests that use the simulated device are skipped, saying why; the others run.
    tests = Path(__file__).parent
    code = AS_IF_CUDA + (
        "import sys, pytest\n"
        f"sys.exit(pytest.main(['-q', '-rs', '-p', 'no:cacheprovider', '--rootdir', {str(tests.parent)!r},\n"
        f"    {str(tests / 'test_testing.py')!r} + '::test_simulated_device_never_initialises_cuda',\n"
        f"    {str(tests / 'test_sim_autograd.py')!r} + '::test_a_wrong_shape_is_still_pytorchs_own_error',\n"
        f"    {str(tests / 'test_layers.py')!r}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tests.parent)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("cannot share a process with a real accelerator (cuda)") == 2
    assert re.search(r"\d+ passed, 2 skipped", out.stdout), out.stdout


@pytest.mark.cuda
def test_enabling_beside_cuda_leaves_cudas_autograd_streams_and_accelerator_whole():
    code = (
        "import torch\nfrom devinspect import testing\n"
        "try:\n    testing.enable()\n    print('enabled')\nexcept testing.SimulatedDeviceError as e:\n    print('refused')\n"
        "x = torch.randn(3, device='cuda', requires_grad=True)\n(x * 2).sum().backward()\n"
        "s = torch.cuda.Stream()\nwith torch.cuda.stream(s):\n    y = x.detach() * 3 + 1\ns.synchronize()\n"
        "e = torch.cuda.Event(); e.record(); e.synchronize()\n"
        "print(x.grad.tolist(), bool(torch.equal(y, x.detach() * 3 + 1)), torch.accelerator.current_accelerator(),\n"
        "      torch.accelerator.current_stream().device, torch._C._get_privateuse1_backend_name())\n"
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    first, rest = out.stdout.strip().split("\n", 1)
    assert first == "refused"
    assert rest == "[2.0, 2.0, 2.0] True cuda cuda:0 privateuseone"


@pytest.mark.cuda
def test_a_gpu_machine_uses_the_simulated_device_with_its_gpus_hidden():
    code = ("import torch\nfrom devinspect import testing\nd = testing.enable()\n"
            "x = torch.ones(3, device=d, requires_grad=True)\n(x * 2).sum().backward()\n"
            "print(torch.cuda.is_available(), x.grad.device)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "sim:0"]
