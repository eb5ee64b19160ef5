"""The books of the host storages behind a simulated device's tensors: which allocator blocks
each one holds, booked when the first tensor on the device uses it and freed when the last
one's data is gone."""

from __future__ import annotations

import weakref
from typing import Any

import torch

from ..model import parse_bytes
from ..runtime import tensor_getters
from .allocator import Allocator, Block


class StorageBooks:
    """Which host storages back a simulated device's tensors, and their allocator blocks.

    A storage is booked when the first tensor on the device uses it and freed when the
    last such tensor's data is gone (a finalizer on the host tensor each wrapper holds,
    never on the user's tensor). Frees that arrive while the allocator is busy (the
    garbage collector can run anywhere) wait for it.
    """

    def __init__(self, allocator: Allocator):
        self.allocator = allocator
        self.storages: dict[int, list[Any]] = {}  # storage key -> [blocks, users, booked bytes]
        self._busy = False
        self._waiting: list[int] = []

    def reserve(self, nbytes: int) -> Block | None:
        """Book ``nbytes`` before the host memory is taken (raises torch.OutOfMemoryError)."""
        return self._malloc(nbytes) if nbytes else None

    def track(self, data: torch.Tensor, block: Block | None = None) -> None:
        with torch._C.DisableTorchFunction():
            storage = tensor_getters.storage(data)
            key, nbytes = storage._cdata, storage.nbytes()
        entry = self.storages.get(key)
        if entry is None:
            if block is None and nbytes:
                block = self._malloc(nbytes)
            entry = self.storages[key] = [[block] if block is not None else [], 0, nbytes]
        elif block is not None:
            self._free(block)  # booked ahead for a storage already on the books
        if nbytes > entry[2]:  # grown in place (resize_)
            entry[0].append(self._malloc(nbytes - entry[2]))
            entry[2] = nbytes
        entry[1] += 1
        weakref.finalize(data, self._release, key)

    def _release(self, key: int) -> None:
        if self._busy:
            self._waiting.append(key)
            return
        entry = self.storages.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self.storages[key]
            for block in entry[0]:
                self._free(block)

    def _malloc(self, nbytes: int) -> Block:
        self._busy = True
        try:
            return self.allocator.malloc(nbytes)
        finally:
            self._busy = False
            self._drain()

    def _free(self, block: Block) -> None:
        self._busy = True
        try:
            self.allocator.free(block)
        finally:
            self._busy = False
            self._drain()

    def _drain(self) -> None:
        while self._waiting:
            self._release(self._waiting.pop())


def parse_capacity(memory: Any) -> int | None:
    """The bytes ``testing.enable(memory=...)`` names (``"64MiB"``, an int); None for no cap."""
    if memory is None:
        return None
    try:
        capacity = parse_bytes(memory)
    except ValueError as exc:
        raise ValueError(f"testing.enable(memory=...): {exc}") from None
    if capacity <= 0:
        raise ValueError(f"testing.enable(memory=...): a capacity must be more than 0 bytes, not {memory!r}")
    return capacity
