"""The simulated device refuses what CUDA refuses, with CUDA's messages and its own name:
pinning a tensor on the device, its use in a child forked after the parent used it, a generator
of another device, a device tensor read as a NumPy array (``test_cuda_device_errors`` checks the
same calls on a GPU)."""

from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
import torch


def test_pinning_a_tensor_on_the_device_is_refused(sim):
    with pytest.raises(RuntimeError, match=r"^cannot pin 'torch\.sim\.FloatTensor' only dense CPU tensors can be pinned$"):
        torch.randn(3, device=sim).pin_memory()
    with pytest.raises(RuntimeError, match=r"cannot pin 'torch\.sim\.LongTensor'"):
        torch.arange(3, device=sim).pin_memory()
    host = torch.randn(3)
    assert host.pin_memory().is_pinned() and not torch.randn(3, device=sim).is_pinned()


def _use_the_device(queue) -> None:
    try:
        torch.ones(2, device="sim:0")
        queue.put("ran")
    except RuntimeError as exc:
        queue.put(str(exc))
    try:
        made_before[0] + 1
        queue.put("ran")
    except RuntimeError as exc:
        queue.put(str(exc))
    queue.put(torch.sim._is_in_bad_fork())


made_before: list = []


def test_a_child_forked_after_the_parent_used_the_device_refuses_it(sim):
    made_before[:] = [torch.ones(2, device=sim)]
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_use_the_device, args=(queue,))
    child.start()
    said = [queue.get(timeout=60) for _ in range(3)]
    child.join(60)
    message = ("Cannot re-initialize sim in forked subprocess. To use sim with multiprocessing, "
               "you must use the 'spawn' start method")
    assert said == [message, message, True]
    assert not torch.sim._is_in_bad_fork() and torch.ones(2, device=sim).sum().item() == 2  # the parent still can


def test_a_generator_of_another_device_is_refused(sim):
    g = torch.Generator().manual_seed(0)
    message = r"^Expected a 'sim' device type for generator but found 'cpu'$"
    with pytest.raises(RuntimeError, match=message):
        torch.randperm(8, generator=g, device=sim)
    with pytest.raises(RuntimeError, match=message):
        torch.randn(3, device=sim).normal_(generator=g)
    try:
        torch.set_default_device(sim)
        with pytest.raises(RuntimeError, match=message):
            torch.randint(0, 5, (4,), generator=g)
        assert torch.randperm(4).device == sim  # without a generator: the host's default one, as before
    finally:
        torch.set_default_device(None)
    with pytest.raises(NotImplementedError):
        torch.Generator(device=sim)  # a device written in Python has no generator of its own


def test_a_device_tensor_read_as_an_array_raises_the_numpy_error(sim):
    t = torch.randn(3, device=sim)
    message = r"^can't convert sim:0 device type tensor to numpy\. Use Tensor\.cpu\(\) to copy the tensor to host memory first\.$"
    for read in (lambda: t.numpy(), lambda: np.asarray(t), lambda: np.asarray(t, dtype=np.float64)):
        with pytest.raises(TypeError, match=message):
            read()
    assert np.array_equal(t.numpy(force=True), t.cpu().numpy())
