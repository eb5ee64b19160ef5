"""Random numbers on the simulated device need a generator of the device, as on CUDA.

The device draws its random numbers from the host's generator (a seed gives the same numbers
as on the CPU), but an op that is handed a generator checks its device as CUDA's kernels do:
a host ``torch.Generator()`` given to ``torch.randperm`` on the device (directly, or through
``torch.set_default_device``, as a DataLoader's ``shuffle=True`` does) raises "Expected a
'sim' device type for generator but found 'cpu'".

A Python backend cannot make a generator of its own (PyTorch asks its C++ hooks for one), so
``torch.Generator(device="sim")`` raises NotImplementedError: the device has no generator
that an op would accept.
"""

from __future__ import annotations

from typing import Any

import torch

from .identity import DEVICE_TYPE


def check(generator: Any) -> None:
    """Refuse a generator of another device, with CUDA's message."""
    if type(generator) is torch.Generator and generator.device.type != DEVICE_TYPE:
        raise RuntimeError(f"Expected a '{DEVICE_TYPE}' device type for generator but found "
                           f"'{generator.device.type}'")
