"""The books of a caching allocator for one simulated device (see :mod:`devinspect.testing`).

It keeps the figures PyTorch's CUDA caching allocator keeps, by the same rules, so that
``%gpumem``, ``--track`` and the out-of-memory explanation read the simulated device as
they read a GPU:

* a request is rounded up to 512 bytes and served from a cached free block of its pool
  (requests up to 1 MiB from the small pool's 2 MiB segments, larger ones from the large
  pool), best fit, the rest of the block split off and kept;
* when no cached block fits, a new segment is reserved (2 MiB for a small request, 20 MiB
  for one under 10 MiB, else the request rounded up to 2 MiB);
* beyond the device's capacity, the cached segments that hold nothing are returned and
  the request tried once more (``num_alloc_retries``); if it still does not fit,
  ``torch.OutOfMemoryError`` says what was asked and what the device holds, in CUDA's words;
* a freed block merges with its free neighbours; ``empty_cache()`` returns the segments
  that hold nothing.

The data itself lives in ordinary host memory; these are only the books.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..model import human_bytes

ROUND = 512
SMALL_REQUEST = 1 << 20  # 1 MiB: up to this, a request comes from the small pool
SMALL_SEGMENT = 2 << 20  # 2 MiB
LARGE_SEGMENT = 20 << 20  # 20 MiB, for large requests under 10 MiB
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


#: Blocks and segments are places in memory: one is itself, never another with the same fields
#: (identity equality, which also keeps list.index from comparing whole segments field by field).
@dataclass(eq=False)
class Block:
    segment: Segment
    offset: int
    size: int
    requested: int = 0
    allocated: bool = False

    @property
    def address(self) -> int:
        return self.segment.base + self.offset


@dataclass(eq=False)
class Segment:
    size: int
    small: bool
    blocks: list[Block] = field(default_factory=list)
    #: Where the segment starts in the device's (made-up) address space: event addresses
    #: are unique among live blocks, as a GPU's are.
    base: int = 0

    @property
    def unused(self) -> bool:
        return not any(b.allocated for b in self.blocks)


def rounded(nbytes: int) -> int:
    return max(ROUND, -(-nbytes // ROUND) * ROUND)


def segment_size(size: int) -> int:
    if size <= SMALL_REQUEST:
        return SMALL_SEGMENT
    if size < MIN_LARGE_ALLOC:
        return LARGE_SEGMENT
    return -(-size // ROUND_LARGE) * ROUND_LARGE


class Allocator:
    """Allocated, reserved and peak bytes, allocation and segment counts of one device."""

    def __init__(self, device: str, capacity: int | None = None):
        self.device = device
        self.capacity = capacity
        self.segments: list[Segment] = []
        self.allocated = self.requested = self.reserved = 0
        self.peak_allocated = self.peak_reserved = self.peak_requested = 0
        self.allocations = self.allocations_total = self.frees_total = 0
        self.segments_total = self.segments_freed = 0
        self.alloc_retries = self.ooms = 0
        #: Called as ``observer(action, address, size)`` for each event CUDA's memory history
        #: records: "alloc", "free", "segment_alloc", "segment_free".
        self.observers: list[Callable[[str, int, int], None]] = []
        self._next_base = 1 << 40

    # -- serving and returning blocks -------------------------------------------------

    def malloc(self, nbytes: int) -> Block:
        """A block of at least ``nbytes``; raises ``torch.OutOfMemoryError`` beyond the capacity."""
        size = rounded(nbytes)
        small = size <= SMALL_REQUEST
        block = self._cached_block(size, small)
        if block is None:
            new = segment_size(size)
            if self.capacity is not None and self.reserved + new > self.capacity:
                if self._release_unused():
                    self.alloc_retries += 1
                block = self._cached_block(size, small)
                if block is None and self.reserved + new > self.capacity:
                    self.ooms += 1
                    raise self._out_of_memory(nbytes)
            if block is None:
                block = self._new_segment(new, small)
        self._split(block, size, small)
        block.allocated, block.requested = True, nbytes
        self.allocated += block.size
        self.requested += nbytes
        self.allocations += 1
        self.allocations_total += 1
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_requested = max(self.peak_requested, self.requested)
        if self.observers:
            self._tell("alloc", block.address, block.size)
        return block

    def free(self, block: Block) -> None:
        if not block.allocated:
            return
        block.allocated = False
        if self.observers:
            self._tell("free", block.address, block.size)
        self.allocated -= block.size
        self.requested -= block.requested
        self.allocations -= 1
        self.frees_total += 1
        block.requested = 0
        self._merge(block)

    def requested_at(self, address: int) -> int | None:
        """The bytes asked for by the allocation that holds the block at ``address`` (None if none does)."""
        for segment in self.segments:
            if segment.base <= address < segment.base + segment.size:
                for block in segment.blocks:
                    if block.address == address and block.allocated:
                        return block.requested
        return None

    def empty_cache(self) -> int:
        """Return the segments that hold nothing; the bytes returned."""
        return self._release_unused()

    def reset_peaks(self) -> None:
        self.peak_allocated, self.peak_reserved, self.peak_requested = self.allocated, self.reserved, self.requested

    # -- what PyTorch's allocator reports ----------------------------------------------

    @property
    def inactive_split(self) -> int:
        """Free bytes inside segments that are in use (fragmentation; empty_cache cannot return them)."""
        return sum(b.size for s in self.segments if not s.unused for b in s.blocks if not b.allocated)

    def memory_stats(self) -> dict[str, int]:
        """The keys ``torch.cuda.memory_stats()`` has for the same figures."""
        stats = {
            "allocated_bytes.all.current": self.allocated,
            "allocated_bytes.all.peak": self.peak_allocated,
            "requested_bytes.all.current": self.requested,
            "requested_bytes.all.peak": self.peak_requested,
            "reserved_bytes.all.current": self.reserved,
            "reserved_bytes.all.peak": self.peak_reserved,
            "active_bytes.all.current": self.allocated,
            "active_bytes.all.peak": self.peak_allocated,
            "inactive_split_bytes.all.current": self.inactive_split,
            "allocation.all.current": self.allocations,
            "allocation.all.allocated": self.allocations_total,
            "allocation.all.freed": self.frees_total,
            "segment.all.current": len(self.segments),
            "segment.all.allocated": self.segments_total,
            "segment.all.freed": self.segments_freed,
            "num_alloc_retries": self.alloc_retries,
            "num_ooms": self.ooms,
        }
        if self.capacity is not None:
            stats["capacity_bytes"] = self.capacity
        return stats

    def free_bytes(self) -> int | None:
        """What the device has left beyond the reserved segments (as cudaMemGetInfo's free)."""
        return None if self.capacity is None else max(0, self.capacity - self.reserved)

    # -- inside --------------------------------------------------------------------------

    def _cached_block(self, size: int, small: bool) -> Block | None:
        fits = [b for s in self.segments if s.small == small for b in s.blocks if not b.allocated and b.size >= size]
        return min(fits, key=lambda b: b.size) if fits else None

    def _tell(self, action: str, address: int, size: int) -> None:
        for observer in self.observers:
            observer(action, address, size)

    def _new_segment(self, size: int, small: bool) -> Block:
        segment = Segment(size, small, base=self._next_base)
        self._next_base += size
        block = Block(segment, 0, size)
        segment.blocks.append(block)
        self.segments.append(segment)
        self.segments_total += 1
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        if self.observers:
            self._tell("segment_alloc", segment.base, size)
        return block

    @staticmethod
    def _split(block: Block, size: int, small: bool) -> None:
        rest = block.size - size
        # As CUDA's allocator: a small block splits when a rounded piece remains, a large
        # one only when more than a small request's worth remains.
        if rest >= (ROUND if small else SMALL_REQUEST + 1):
            blocks = block.segment.blocks
            blocks.insert(blocks.index(block) + 1, Block(block.segment, block.offset + size, rest))
            block.size = size

    @staticmethod
    def _merge(block: Block) -> None:
        blocks = block.segment.blocks
        i = blocks.index(block)
        if i + 1 < len(blocks) and not blocks[i + 1].allocated:
            block.size += blocks.pop(i + 1).size
        if i > 0 and not blocks[i - 1].allocated:
            blocks[i - 1].size += blocks.pop(i).size

    def _release_unused(self) -> int:
        unused = [s for s in self.segments if s.unused]
        released = sum(s.size for s in unused)
        self.segments = [s for s in self.segments if not s.unused]
        self.reserved -= released
        self.segments_freed += len(unused)
        if self.observers:
            for segment in unused:
                self._tell("segment_free", segment.base, segment.size)
        return released

    def _out_of_memory(self, nbytes: int) -> Any:
        import torch

        capacity = self.capacity or 0
        free = max(0, capacity - self.reserved)
        cached = self.reserved - self.allocated
        return torch.OutOfMemoryError(
            f"{self.device.split(':')[0]} out of memory. Tried to allocate {human_bytes(nbytes)}. "
            f"{self.device} has a total capacity of {human_bytes(capacity)} of which {human_bytes(free)} is free. "
            f"Of the allocated memory {human_bytes(self.allocated)} is allocated by PyTorch, and "
            f"{human_bytes(cached)} is reserved by PyTorch but unallocated. The simulated device's capacity "
            "is set by devinspect.testing.enable(memory=...)."
        )
