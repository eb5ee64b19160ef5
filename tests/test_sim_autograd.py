"""Backward passes on the simulated device as on CUDA: the engine's check of the gradients a
pass starts from, and the recurrent layers, whose steps CUDA computes with fused cells."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import run_python


def test_a_host_gradient_for_a_device_output_is_refused_as_cuda_refuses_it(sim):
    x = torch.ones(3, device=sim, requires_grad=True)
    message = "invalid gradient at index 0 - expected device sim:0 but got cpu"
    with pytest.raises(RuntimeError, match=message):
        torch.autograd.grad(x * 2, x, grad_outputs=torch.ones(3))
    with pytest.raises(RuntimeError, match=message):
        (x * 2).backward(torch.ones(3))
    with pytest.raises(RuntimeError, match=message):
        torch.autograd.backward([x * 2], [torch.ones(3)])
    with pytest.raises(RuntimeError, match="index 1 - expected device sim:0 but got cpu"):
        torch.autograd.grad([x * 2, x * 3], x, grad_outputs=[torch.ones(3, device=sim), torch.ones(3)])
    assert x.grad is None


def test_a_0_dim_host_gradient_is_moved_to_its_output_as_the_engine_moves_it(sim):
    x = torch.ones(3, device=sim, requires_grad=True)
    (x * 2).sum().backward(torch.tensor(0.5))
    assert x.grad.device == sim and x.grad.tolist() == [1.0, 1.0, 1.0]
    (grad,) = torch.autograd.grad((x * 3).sum(), x, grad_outputs=torch.tensor(2.0))
    assert grad.tolist() == [6.0, 6.0, 6.0]


def test_a_wrong_shape_is_still_pytorchs_own_error(sim):
    x = torch.ones(3, device=sim, requires_grad=True)
    with pytest.raises(RuntimeError, match="Mismatch in shape"):
        (x * 2).backward(torch.ones(4))


def test_a_host_gradient_never_kills_the_interpreter():
    # Before the check, a host gradient reached the device's backward kernels through the
    # engine's device queues and the process aborted ("terminate called without an active exception").
    out = run_python(
        "import torch\nfrom devinspect import testing\nd = testing.enable()\n"
        "x = torch.ones(3, device=d, requires_grad=True)\n"
        "for make in (lambda: x.sin(), lambda: torch.nn.Linear(3, 3).to(d)(x), lambda: x.exp()):\n"
        "    try:\n        make().backward(torch.ones(3))\n"
        "    except RuntimeError as e:\n        print(str(e).splitlines()[0])\n"
        "print('alive')\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "alive" and out.stdout.count("invalid gradient at index 0") == 3


RECURRENT = {
    "LSTM": lambda: torch.nn.LSTM(4, 5, num_layers=2, batch_first=True),
    "LSTM-bidirectional-projected": lambda: torch.nn.LSTM(4, 6, bidirectional=True, proj_size=3),
    "GRU": lambda: torch.nn.GRU(4, 5, num_layers=2, dropout=0.0),
    "GRU-no-bias": lambda: torch.nn.GRU(4, 5, bias=False, bidirectional=True),
    "RNN": lambda: torch.nn.RNN(4, 5, nonlinearity="relu"),
    "LSTMCell": lambda: torch.nn.LSTMCell(4, 5),
    "GRUCell": lambda: torch.nn.GRUCell(4, 5),
    "RNNCell": lambda: torch.nn.RNNCell(4, 5),
}


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize("name", list(RECURRENT))
def test_recurrent_layers_run_forward_and_backward_with_the_hosts_numbers(sim, name):
    torch.manual_seed(0)
    on_host = RECURRENT[name]()
    on_device = copy.deepcopy(on_host).to(sim)
    cell = isinstance(on_host, torch.nn.RNNCellBase)
    x = torch.randn(3, 4) if cell else torch.randn(3, 2, 4)
    expected, got = on_host(x), on_device(x.to(sim))
    expected, got = (expected[0], got[0]) if isinstance(expected, tuple) else (expected, got)
    assert got.device == sim
    torch.testing.assert_close(got.cpu(), expected)
    expected.square().sum().backward()
    got.square().sum().backward()
    for (pname, p), q in zip(on_device.named_parameters(), on_host.parameters()):
        assert p.grad.device == sim, pname
        torch.testing.assert_close(p.grad.cpu(), q.grad, msg=pname)


def test_an_lstm_step_feeds_the_next_with_its_state(sim):
    torch.manual_seed(0)
    cell = torch.nn.LSTMCell(3, 4)
    on_device = copy.deepcopy(cell).to(sim)
    h, c = torch.zeros(2, 4), torch.zeros(2, 4)
    hd, cd = h.to(sim), c.to(sim)
    for step in torch.randn(5, 2, 3):
        h, c = cell(step, (h, c))
        hd, cd = on_device(step.to(sim), (hd, cd))
    torch.testing.assert_close(hd.cpu(), h)
    torch.testing.assert_close(cd.cpu(), c)
