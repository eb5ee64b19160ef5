"""The key scenarios on a real GPU. Skipped without one (see conftest)."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest
import torch
from conftest import run

import devinspect

pytestmark = pytest.mark.cuda


def test_scan_on_a_gpu_machine_does_not_initialise_cuda():
    code = (
        "import torch, devinspect\n"
        "m = torch.nn.Linear(4, 4); x = torch.zeros(3)\n"
        "r = devinspect.scan({'m': m, 'x': x}, all_objects=True); r.findings; repr(r)\n"
        "print(torch.cuda.is_available(), torch.cuda.is_initialized())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "False"]


def test_cuda_records_and_bytes_match_the_allocator():
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated(0)
    big = torch.empty(256, 1024, device="cuda:0")  # exactly 1 MiB: no allocator rounding
    assert torch.cuda.memory_allocated(0) - before == 1 << 20
    view = big[:10]
    rec = {r.name: r for r in devinspect.scan({"big": big, "view": view}).records}
    assert rec["big"].device == "cuda:0" and rec["big"].storage_bytes == 1 << 20
    assert rec["view"].alias_of == "big"


def test_mixed_cuda_cpu_model_and_unregistered_attribute():
    class PE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.pe = torch.zeros(8, 4)

    model = torch.nn.Sequential(PE(), torch.nn.Linear(4, 2)).cuda()
    model[1].cpu()
    codes = {f.code for f in devinspect.scan({"model": model}).findings}
    assert {"mixed-device-module", "unregistered-tensor-attribute"} <= codes


def test_optimizer_state_left_on_cpu_and_unpinned_loader():
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    model.cuda()
    loader = DataLoader(TensorDataset(torch.zeros(4, 3)), batch_size=2)
    codes = {f.code for f in devinspect.scan({"model": model, "opt": opt, "loader": loader}).findings}
    assert {"optimizer-state-device", "loader-not-pinned"} <= codes


def test_history_holds_gpu_memory(ip):
    run(ip, "import torch\ntorch.zeros(1024, device='cuda')")
    _, text, _, _ = run(ip, "%devices")
    assert "held only by IPython's output history" in text


def test_devcheck_names_cpu_input_of_a_cuda_model():
    model = torch.nn.Linear(8, 3).cuda()
    x = torch.randn(4, 8)
    try:
        with devinspect.check({"model": model, "x": x}) as c:
            model(x)
    except RuntimeError:
        pass
    m = c.report.mismatch
    assert m is not None and set(m.devices) == {"cpu", "cuda:0"}
    assert m.fix is not None and m.fix.code == 'x = x.to("cuda:0")'


def test_devcheck_counts_cuda_copies_and_syncs():
    x = torch.randn(256, device="cuda")

    def loop():
        for _ in range(10):
            x.sum().item()
            x.cpu().cuda()

    with devinspect.check({}) as c:
        loop()
    totals = c.report.totals
    assert totals["d2h_count"] == 10 and totals["h2d_count"] == 10 and totals["d2h_bytes"] == 10 * 1024
    assert {f.code for f in c.report.findings} >= {"sync-in-loop", "round-trip"}


# -- %gpumem figures against torch's counters and NVML ------------------------------

MiB = 1 << 20


def _cuda_row(ns):
    from devinspect.collect.machine.memory_snapshot import snapshot

    torch.cuda.synchronize()
    return snapshot(ns).device("cuda:0")


def test_known_allocations_match_allocator_and_named_bytes():
    torch.zeros(1, device="cuda:0")  # CUDA is initialised by the test, never by devinspect
    # Earlier tests leave small CUDA tensors in reference cycles (a caught error's frames, a
    # closure): the collector would free them at its next pass, whenever that is, and the
    # counter read after the snapshot would be that much lower than the snapshot's (1 KiB on
    # the H100: two 512-byte blocks). Collected now, nothing is freed between the two reads.
    gc.collect()
    before = _cuda_row({})
    a = torch.empty(256 * 1024, device="cuda:0")  # exactly 1 MiB
    b = torch.empty(250, dtype=torch.uint8, device="cuda:0")  # 250 bytes -> one 512-byte block
    after = _cuda_row({"a": a, "b": b})
    assert after.allocated_bytes - before.allocated_bytes == MiB + 512
    assert after.requested_bytes - before.requested_bytes == MiB + 250
    assert after.tensors.named_bytes == MiB + 250
    assert after.allocated_bytes == torch.cuda.memory_allocated(0)
    assert after.reserved_bytes == torch.cuda.memory_reserved(0)
    assert after.peak_allocated_bytes == torch.cuda.max_memory_allocated(0)
    rows = after.reconciliation
    running = 0
    for r in rows:
        if r.total:
            assert r.value_bytes == running, r.label
        running = r.value_bytes if r.total else running + r.value_bytes
    if after.process_bytes is not None:  # NVML is installed and sees this process
        assert after.process_bytes >= after.reserved_bytes


def test_nvml_total_is_cudas_total_and_what_the_driver_keeps():
    # NVML's total is the device's memory; CUDA's total leaves out what the driver keeps (480 MiB
    # on an H100 80GB), shown as its own row: the two totals are related, not equal.
    row = _cuda_row({})
    assert row.name == torch.cuda.get_device_name(0)
    cuda_total = torch.cuda.mem_get_info(0)[1]
    assert row.capacity_bytes == cuda_total
    if row.driver_used_bytes is None:  # no NVML: the total is CUDA's own
        assert row.driver_total_bytes == cuda_total
        return
    kept = {r.label: r.value_bytes for r in row.reconciliation}.get("reserved by the driver", 0)
    assert row.driver_total_bytes - kept == cuda_total
    assert 0 <= kept < row.driver_total_bytes // 20


def test_empty_cache_action_releases_what_it_announced():
    from devinspect import actions

    x = torch.empty(64 * MiB // 4, device="cuda:0")
    del x  # 64 MiB cached, whole segment
    announced = _cuda_row({}).releasable_bytes
    assert announced >= 64 * MiB
    reserved = torch.cuda.memory_reserved(0)
    result = actions.empty_cache()
    assert result.ok and result.nbytes == reserved - torch.cuda.memory_reserved(0)
    assert result.nbytes == announced


def test_reset_peak_action_and_tracker_peak():
    from devinspect import actions
    from devinspect.collect.machine.memory_tracker import MemoryTracker

    y = torch.empty(32 * MiB // 4, device="cuda:0")
    del y
    assert torch.cuda.max_memory_allocated(0) >= torch.cuda.memory_allocated(0) + 32 * MiB
    result = actions.reset_peak_stats()
    assert result.ok and torch.cuda.max_memory_allocated(0) == torch.cuda.memory_allocated(0)
    tracker = MemoryTracker()
    tracker.before(1, "z")
    z = torch.empty(8 * MiB // 4, device="cuda:0")
    del z
    cell = {d.device: d for d in tracker.after().devices}["cuda:0"]
    assert cell.peak_allocated >= cell.allocated_before + 8 * MiB
    assert cell.allocated_after == cell.allocated_before


def test_snapshot_creates_no_context_on_other_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    has_context = torch._C._cuda_hasPrimaryContext
    torch.zeros(1, device="cuda:0")
    assert not has_context(1)
    _cuda_row({})
    assert not has_context(1)


def test_a_wrapper_over_a_cuda_tensor_that_answers_its_own_metadata_is_read_as_constructed():
    """A quantisation-style wrapper (device, layout and sizes asked of its __torch_dispatch__)
    over a CUDA tensor: the scan reads cuda:0 and its shape from what PyTorch holds, counts the
    CUDA tensor it keeps, and never calls the wrapper."""
    from hostile_kinds import Tripwire, dispatching_wrapper

    trip = Tripwire()
    wrapper, _ = dispatching_wrapper(trip)
    wrapper.elem = wrapper.elem.to("cuda:0")
    made = torch.Tensor._make_wrapper_subclass(type(wrapper), (2, 3), dtype=torch.float32, device="cuda:0",
                                               dispatch_device=True, dispatch_layout=True,
                                               dispatch_sizes_strides_policy="sizes")
    made.elem = wrapper.elem
    trip.armed = True
    row = devinspect.scan({"w": made}).records[0]
    assert trip.hits == []
    assert (row.device, row.shape, row.storage_bytes) == ("cuda:0", (2, 3), 24)


# -- out of memory on the real allocator ----------------------------------------------------

GiB = 1 << 30


def test_a_request_larger_than_the_gpu_is_said_first(ip):
    run(ip, "import torch\ntorch.zeros(1, device='cuda:0')")
    total = torch.cuda.mem_get_info(0)[1]
    result, text, _, _ = run(ip, f"big = torch.empty({total + 10 * GiB}, dtype=torch.uint8, device='cuda:0')")
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    m = devinspect.explain(namespace=ip.user_ns).out_of_memory
    assert m.device == "cuda:0" and m.exceeds_capacity and m.advice
    assert "no release can make it fit — what would: a smaller batch" in text
    devinspect.release_traceback()


def test_a_local_of_an_earlier_error_is_named_and_its_release_makes_the_request_fit(ip):
    run(ip, "import torch\n"
            "def f():\n"
            "    hidden = torch.empty(4 << 30, dtype=torch.uint8, device='cuda:0')\n"
            "    raise ValueError('bad shape')\n")
    assert type(run(ip, "f()")[0].error_in_exec) is ValueError
    asked = torch.cuda.mem_get_info(0)[0] + 2 * GiB  # more than is free, less than free with hidden's 4 GiB
    result, text, _, _ = run(ip, f"x = torch.empty({asked}, dtype=torch.uint8, device='cuda:0')")
    assert isinstance(result.error_in_exec, torch.OutOfMemoryError)
    assert "hidden in f" in text and "[the traceback of the ValueError from Cell In[" in text
    release = devinspect.explain(namespace=ip.user_ns).out_of_memory.fixes[0]
    assert release.summary.startswith("release the traceback of the ValueError") and release.summary.endswith("it fits")
    before = torch.cuda.memory_allocated(0)
    assert run(ip, release.code)[0].success and before - torch.cuda.memory_allocated(0) == 4 * GiB
    assert run(ip, f"x = torch.empty({asked}, dtype=torch.uint8, device='cuda:0')")[0].success
    run(ip, "del x")
    devinspect.release_traceback()
    torch.cuda.empty_cache()


# -- %%gpumem: CUDA's history, tagged by line -------------------------------------------------


def test_gpumem_a_cell_known_to_the_byte_and_the_history_left_as_it_was(ip):
    ip.user_ns.update(torch=torch)
    torch.zeros(1, device="cuda:0")
    body = ("a = torch.empty(4 << 20, dtype=torch.uint8, device='cuda:0')\n"
            "b = torch.empty(8 << 20, dtype=torch.uint8, device='cuda:0')\n"
            "c = torch.empty(1000, dtype=torch.uint8, device='cuda:0')\n"
            "del b")
    result, _, _, _ = run(ip, f"%%gpumem -v prof\n{body}")
    prof = ip.user_ns.pop("prof")
    assert result.success and prof.events_source == "CUDA's memory history"
    assert [(m.line, m.change) for m in prof.lines] == [(2, 4 * MiB), (3, 8 * MiB), (4, 1024), (5, -8 * MiB)]
    assert prof.peak.allocated - prof.allocated_start == 12 * MiB + 1024 and prof.peak.line == "line 4"
    assert prof.line(2).alive == (("a", 4 * MiB),) and prof.line(4).alive == (("c", 1024),)
    assert prof.allocated_end == torch.cuda.memory_allocated(0)
    assert not torch._C._cuda_isHistoryEnabled()
    assert getattr(torch._C, "_cuda_getMemoryMetadata", lambda: "")() == ""
    run(ip, "del a, c")


def test_gpumem_backward_allocations_of_autograds_thread_count_on_the_backward_line(ip):
    ip.user_ns.update(torch=torch)
    run(ip, "net = torch.nn.Linear(256, 2048).to('cuda:0')\nx = torch.randn(512, 256, device='cuda:0')")
    result, _, _, _ = run(ip, "%%gpumem -v prof\nloss = net(x).square().mean()\nloss.backward()")
    prof = ip.user_ns.pop("prof")
    assert result.success
    grads = dict(prof.line(3).alive)
    assert grads["net.weight.grad"] == 2048 * 256 * 4 and grads["net.bias.grad"] == 2048 * 4
    run(ip, "del net, x, loss")


def test_a_3d_convolution_of_a_host_input_fails_in_the_dispatcher_and_is_explained_as_a_mismatch(ip):
    # CUDA's answer is NotImplementedError ("Could not run 'aten::slow_conv3d_forward' with
    # arguments from the 'CUDA' backend"), not a device message: read from the operands all the same.
    run(ip, "import torch\nfrom torch import nn\nconv = nn.Conv3d(1, 2, 1).cuda()\nvolume = torch.ones(1, 1, 4, 4, 4)")
    result, text, _, _ = run(ip, "out = conv(volume)")
    assert type(result.error_in_exec) is NotImplementedError and "'CUDA' backend" in str(result.error_in_exec)
    explanation = devinspect.explain(namespace=ip.user_ns)
    assert explanation.mismatch is not None and "volume" in text and "conv.weight" in text
    assert run(ip, explanation.mismatch.fix.code)[0].success
    assert run(ip, "out = conv(volume)")[0].success and ip.user_ns["out"].is_cuda


def test_a_model_on_meta_runs_on_cuda_indices_and_the_value_read_later_is_explained(ip):
    # An H200 ran a meta GPT-2 on CUDA input ids: the meta kernels run, the outputs are on meta,
    # and the error comes where a value is read.
    run(ip, "import torch\nfrom torch import nn\nwith torch.device('meta'):\n    table = nn.Embedding(10, 4)\n"
            "ids = torch.tensor([1, 2], device='cuda:0')")
    assert run(ip, "rows = table(ids)")[0].success and ip.user_ns["rows"].is_meta
    result, _, _, _ = run(ip, "total = rows.sum().item()")
    assert result.error_in_exec is not None
    error = devinspect.explain(namespace=ip.user_ns).device_error
    assert error is not None and error.kind == "meta data" and "table made it" in error.what
    assert run(ip, error.fix.code)[0].success and run(ip, "total = table(ids).sum().item()")[0].success
