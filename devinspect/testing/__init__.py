"""A simulated accelerator for machines without one.

``enable()`` registers a device called ``sim`` (two of them: ``sim:0`` and
``sim:1``) through PyTorch's PrivateUse1 backend, with every tensor's data kept in
ordinary CPU memory. Everything goes through the real dispatcher, so
``x.to("sim")``, ``model.to("sim")``, an optimizer step, ``.item()``, ``.cpu()``
and a device-mismatch error behave as they do on a GPU, and a dispatch mode sees
``aten._to_copy`` from ``cpu`` to ``sim:0`` exactly as it would for ``cuda:0``.
CUDA is never touched.

Use it to test device-agnostic code without a GPU::

    from devinspect import testing
    dev = testing.enable()              # torch.device("sim:0")
    model = MyModel().to(dev)
    model(torch.randn(2, 8))            # RuntimeError: Expected all tensors to be
                                        # on the same device, ... sim:0 and cpu!

Memory: each simulated device keeps a caching allocator's books
(:mod:`devinspect.testing.allocator`): allocated, reserved and peak bytes, allocation and
segment counts, by CUDA's rules. ``enable(memory="8GiB")`` gives each device that
capacity, beyond which an allocation raises ``torch.OutOfMemoryError`` with CUDA's
message; ``torch.sim.empty_cache()`` returns the cached segments. A backend written in
Python cannot answer ``torch.accelerator.memory_stats()`` (PyTorch asks its C++
allocator), so the device module answers instead, under the names ``torch.cuda`` uses:
``torch.sim.memory_stats(i)``, ``memory_allocated``, ``memory_reserved``,
``max_memory_allocated``, ``reset_peak_memory_stats``, ``mem_get_info`` and
``empty_cache``. That is the one hook devinspect reads memory through where
``torch.accelerator`` cannot (:func:`devinspect.collect.machine.memory_readings.accelerator_call`).

Training code runs as on CUDA with the device swapped: factories, checkpointing,
``torch.autocast("sim")``, pinned memory, ``torch.sim.Stream``/``Event``,
``torch.compile`` with the ``eager`` and ``aot_eager`` backends, and ``Module.to``
keeping its Parameter objects (:mod:`.moves`). The README lists where it still differs.

Limits: the PrivateUse1 slot is global and can be named only once per process, so
``enable()`` fails when another PrivateUse1 backend is loaded, and it needs torch 2.10
or newer. It refuses, changing nothing, in a process with a real accelerator: PyTorch would
take the simulated device for the process's accelerator and the GPU's backward passes would
fail (:func:`real_accelerator` says which; hide the GPUs from a process that uses the
simulated device: ``CUDA_VISIBLE_DEVICES=""``). Inductor does not target the simulated device. Arithmetic runs on the CPU at CPU speed; an
op's result is computed before its memory is booked, so an op that runs out of
simulated memory used host memory for a moment.
"""

from __future__ import annotations

from .device import (
    DEVICE_COUNT,
    DEVICE_TYPE,
    SimTensor,
    SimulatedDeviceError,
    device,
    enable,
    is_enabled,
    memory_observers,
    storage_addresses,
)
from .real_devices import real_accelerator

__all__ = ["enable", "device", "is_enabled", "DEVICE_TYPE", "DEVICE_COUNT", "SimTensor", "SimulatedDeviceError",
           "memory_observers", "storage_addresses", "real_accelerator"]
