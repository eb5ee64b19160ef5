"""The simulated device in a forked child process: refused once the parent has used it.

CUDA cannot be used in a child made by ``fork`` after the parent initialised it: its first
use there raises "Cannot re-initialize CUDA in forked subprocess" (a DataLoader with
``num_workers > 0`` whose dataset holds GPU tensors meets this in its workers). The
simulated device does the same: once this process has made a tensor on it, a child forked
from it refuses every use of the device, with CUDA's message and the device's name.
A child made by ``spawn`` or ``forkserver`` starts a new interpreter and is not concerned.
"""

from __future__ import annotations

import os

from .identity import DEVICE_TYPE

#: Whether this process has made a tensor on the simulated device (set by the device itself).
used = False
#: Whether this process is a child forked after its parent used the device.
in_bad_fork = False
_installed = False


def _after_fork_in_child() -> None:
    global in_bad_fork
    in_bad_fork = in_bad_fork or used


def install() -> None:
    """Mark children forked from now on (once per process)."""
    global _installed
    if not _installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_after_fork_in_child)
        _installed = True


def refusal() -> RuntimeError:
    """The error a use of the device raises in a forked child (CUDA's, with this device's name)."""
    return RuntimeError(f"Cannot re-initialize {DEVICE_TYPE} in forked subprocess. To use {DEVICE_TYPE} with "
                        "multiprocessing, you must use the 'spawn' start method")
