"""What names the simulated device, for every module of the package: its type, how many
there are, and whether a device argument means one of them."""

from __future__ import annotations

from typing import Any

import torch

#: Name of the simulated device type.
DEVICE_TYPE = "sim"
#: How many simulated devices exist (``sim:0`` … ``sim:{DEVICE_COUNT-1}``).
DEVICE_COUNT = 2


def is_simulated(device: Any) -> bool:
    """Whether ``device`` (a ``torch.device``, a string such as ``"sim:1"``) names a simulated
    device; anything that is not a device at all is not one."""
    try:
        return torch.device(device).type == DEVICE_TYPE
    except (RuntimeError, TypeError):
        return False
