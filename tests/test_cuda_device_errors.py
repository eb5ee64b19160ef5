"""On a real GPU: CUDA raises what the simulated device raises for the device errors beside a
mismatch (a pinned device tensor, a device tensor in a forked DataLoader worker, a generator of
another device, a device tensor read as a NumPy array), and devinspect explains CUDA's error as
the same kind. Skipped without a GPU (see conftest); each error is made once on each device and
the messages compared with the device's name swapped."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import devinspect

pytestmark = pytest.mark.cuda


def raised(action) -> BaseException:
    try:
        action()
    except Exception as exc:  # the error is what is compared
        return exc
    raise AssertionError("it ran: no error to compare")


def last_line(exc: BaseException, device_type: str) -> str:
    """The error's own last line (a worker's original error ends the message), the device named DEV."""
    text = str(exc).strip().splitlines()[-1]
    return text.replace(device_type.upper(), "DEV").replace(device_type, "DEV")


def on_both(sim, make) -> tuple[BaseException, BaseException]:
    """``make(device)``'s error on CUDA and on the simulated device."""
    return raised(lambda: make(torch.device("cuda:0"))), raised(lambda: make(sim))


def test_pinning_a_device_tensor_raises_on_cuda_as_on_the_simulated_device(sim):
    cuda, simulated = on_both(sim, lambda dev: torch.randn(3, device=dev).pin_memory())
    assert type(cuda) is type(simulated) is RuntimeError
    assert last_line(cuda, "cuda") == last_line(simulated, "sim")  # "cannot pin 'torch.DEV.FloatTensor' …"

    def loop(dev):
        loader = DataLoader(TensorDataset(torch.randn(8, 2, device=dev)), batch_size=4, pin_memory=True)
        for _ in loader:
            pass

    cuda, simulated = on_both(sim, loop)
    assert last_line(cuda, "cuda") == last_line(simulated, "sim")


def test_a_forked_worker_refuses_the_device_on_cuda_as_on_the_simulated_device(sim):
    namespace: dict = {}

    def loop(dev):
        namespace["ds"] = TensorDataset(torch.randn(8, 2, device=dev))
        namespace["loader"] = DataLoader(namespace["ds"], batch_size=4, num_workers=1)
        for _ in namespace["loader"]:
            pass

    torch.cuda.init()  # the parent has used CUDA, as a notebook that made the dataset has
    cuda = raised(lambda: loop(torch.device("cuda:0")))
    explained_on_cuda = devinspect.explain(cuda, namespace)
    simulated = raised(lambda: loop(sim))
    assert type(cuda) is type(simulated) is RuntimeError
    assert "in DataLoader worker process 0" in str(cuda) and "in DataLoader worker process 0" in str(simulated)
    assert last_line(cuda, "cuda") == last_line(simulated, "sim")  # "Cannot re-initialize DEV in forked subprocess …"
    assert explained_on_cuda.kind == devinspect.explain(simulated, namespace).kind == "device tensor in a worker"


def test_a_host_generator_on_the_device_raises_on_cuda_as_on_the_simulated_device(sim):
    def draw(dev):
        torch.set_default_device(dev)
        try:
            torch.randperm(8, generator=torch.Generator())
        finally:
            torch.set_default_device(None)

    cuda, simulated = on_both(sim, draw)
    assert type(cuda) is type(simulated) is RuntimeError
    assert last_line(cuda, "cuda") == last_line(simulated, "sim")  # "Expected a 'DEV' device type for generator …"

    def shuffled(dev):
        torch.set_default_device(dev)
        try:
            for _ in DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4, shuffle=True):
                pass
        finally:
            torch.set_default_device(None)

    cuda, simulated = on_both(sim, shuffled)
    assert last_line(cuda, "cuda") == last_line(simulated, "sim")


def test_the_generator_fix_for_a_shuffling_loader_runs_on_cuda():
    dev = torch.device("cuda:0")
    namespace = {"torch": torch, "dev": dev}
    torch.set_default_device(dev)
    try:
        namespace["loader"] = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4, shuffle=True)
        error = raised(lambda: [b for b in namespace["loader"]])
        explanation = devinspect.explain(error, namespace)
        assert explanation.kind == "generator device"
        exec(explanation.device_error.fix.code, namespace)  # as printed
        assert len([b for b in namespace["loader"]]) == 2
    finally:
        torch.set_default_device(None)


@pytest.mark.parametrize("given", ["g", "torch.Generator().manual_seed(3)"])
def test_a_seeded_generator_made_on_the_device_as_printed_lets_a_loader_and_random_split_run_on_cuda(ip, given):
    from scenario_runner import apply_lines

    setup = ("import torch\nfrom torch.utils.data import DataLoader, TensorDataset, random_split\n"
             "dev = torch.device('cuda:0')\ntorch.set_default_device(dev)\n"
             "g = torch.Generator().manual_seed(5)\nfull = TensorDataset(torch.randn(10, 8))\n")
    try:
        for failing in (f"loader = DataLoader(full, batch_size=4, shuffle=True, generator={given})\n"
                        "batches = [xb for xb, in loader]",
                        f"train, val = random_split(full, [8, 2], generator={given})"):
            first = ip.run_cell(setup, store_history=True)
            result = ip.run_cell(failing, store_history=True)
            assert result.error_in_exec is not None, "CUDA took the host generator"
            fix = devinspect.explain(result.error_in_exec, ip.user_ns).device_error.fix
            cells = {first.execution_count: setup, result.execution_count: failing}
            for edit in fix.edits:
                cells[edit.where.cell] = apply_lines(cells[edit.where.cell], [edit])
            for number in sorted(cells):  # the edited cells, run again in their order
                rerun = ip.run_cell(cells[number], store_history=True)
                assert rerun.error_in_exec is None, f"{rerun.error_in_exec!r}\n{cells[number]}"
    finally:
        torch.set_default_device(None)


def test_a_device_tensor_read_as_an_array_raises_on_cuda_as_on_the_simulated_device(sim):
    for read in (lambda t: t.numpy(), np.asarray):
        cuda, simulated = on_both(sim, lambda dev, read=read: read(torch.randn(3, device=dev)))
        assert type(cuda) is type(simulated) is TypeError
        assert last_line(cuda, "cuda") == last_line(simulated, "sim")
