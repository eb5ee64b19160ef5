"""The simulated device's allocator: CUDA's rules for blocks and segments, its counters as
torch.cuda names them, and torch.OutOfMemoryError beyond its capacity."""

from __future__ import annotations

import gc

import pytest
import torch

from devinspect import testing
from devinspect.testing.allocator import Allocator

MiB = 1 << 20


def test_requests_round_to_blocks_served_from_segments_by_pool():
    a = Allocator("sim:0")
    small = a.malloc(40)
    assert small.size == 512 and a.allocated == 512 and a.requested == 40
    assert a.reserved == 2 * MiB and len(a.segments) == 1  # a small request: a 2 MiB segment
    second = a.malloc(1000)
    assert second.segment is small.segment and a.reserved == 2 * MiB  # split from the cached rest
    a.malloc(3 * MiB)  # a large request under 10 MiB: a 20 MiB segment
    assert a.reserved == 22 * MiB
    a.malloc(11 * MiB)  # served from the 17 MiB the large segment has left
    assert a.reserved == 22 * MiB and a.memory_stats()["segment.all.current"] == 2
    a.malloc(11 * MiB)  # nothing cached fits: 10 MiB or more is rounded up to 2 MiB
    assert a.reserved == 34 * MiB and a.memory_stats()["segment.all.current"] == 3


def test_freed_blocks_merge_and_empty_cache_returns_whole_unused_segments():
    a = Allocator("sim:0")
    x, y = a.malloc(MiB), a.malloc(MiB)
    assert x.segment is y.segment and a.reserved == 2 * MiB
    a.free(x)
    assert a.inactive_split == MiB and a.empty_cache() == 0  # the segment still holds y
    a.free(y)
    assert len(x.segment.blocks) == 1 and x.segment.blocks[0].size == 2 * MiB  # merged back into one
    assert a.allocated == 0 and a.reserved == 2 * MiB  # cached, as on a GPU
    assert a.empty_cache() == 2 * MiB and a.reserved == 0


def test_beyond_capacity_the_cache_is_returned_and_the_request_tried_again():
    a = Allocator("sim:0", capacity=40 * MiB)
    big = a.malloc(30 * MiB)
    a.free(big)  # 30 MiB cached
    a.malloc(34 * MiB)  # does not fit beside the cache: the cache goes, then it fits
    stats = a.memory_stats()
    assert stats["num_alloc_retries"] == 1 and stats["num_ooms"] == 0 and a.reserved == 34 * MiB
    with pytest.raises(torch.OutOfMemoryError) as caught:
        a.malloc(8 * MiB)
    assert a.memory_stats()["num_ooms"] == 1
    message = str(caught.value)
    assert message.startswith("sim out of memory. Tried to allocate 8.0 MiB. sim:0 has a total capacity of "
                              "40.0 MiB of which 6.0 MiB is free.")
    assert "34.0 MiB is allocated by PyTorch" in message


def test_peaks_reset_to_the_current_figures():
    a = Allocator("sim:0")
    a.free(a.malloc(5 * MiB))
    assert a.peak_allocated == 5 * MiB
    a.reset_peaks()
    assert a.peak_allocated == 0 and a.peak_reserved == a.reserved == 20 * MiB


def test_tensors_on_the_simulated_device_book_their_storage_once(sim):
    gc.collect()
    before = torch.sim.memory_allocated(0)
    x = torch.ones(1000, device=sim)
    assert torch.sim.memory_allocated(0) == before + 4096  # 4,000 bytes in 512-byte blocks
    view, detached = x[10:], x.detach()
    assert torch.sim.memory_allocated(0) == before + 4096  # views share the storage
    del x, view
    assert torch.sim.memory_allocated(0) == before + 4096  # detached still uses it
    del detached
    assert torch.sim.memory_allocated(0) == before


def test_a_module_and_its_training_step_are_booked_and_freed(sim):
    gc.collect()
    before = torch.sim.memory_allocated(0)
    model = torch.nn.Linear(256, 256).to(sim)
    weights = torch.sim.memory_allocated(0) - before
    assert weights == 256 * 256 * 4 + 1024
    model(torch.randn(8, 256, device=sim)).sum().backward()
    assert torch.sim.memory_allocated(0) - before == 2 * weights  # the gradients
    assert torch.sim.max_memory_allocated(0) > torch.sim.memory_allocated(0)  # activations came and went
    del model
    gc.collect()
    assert torch.sim.memory_allocated(0) == before


def test_capacity_is_set_by_enable_and_kept_by_a_plain_enable(sim):
    try:
        testing.enable(memory="64MiB")
        testing.enable()  # library code enabling the device lifts no limit
        assert torch.sim.mem_get_info(0)[1] == 64 * MiB
        with pytest.raises(torch.OutOfMemoryError, match="Tried to allocate 76.3 MiB"):
            torch.empty(20_000_000, device=sim)  # 80 MB: refused before any host memory is taken
        with pytest.raises(ValueError, match="not a size: '8 gigs'"):
            testing.enable(memory="8 gigs")
        assert torch.sim.mem_get_info(0)[1] == 64 * MiB  # a wrong size changes nothing
    finally:
        testing.enable(memory=None)
    with pytest.raises(RuntimeError, match="no capacity"):
        torch.sim.mem_get_info(0)
