"""The key scenarios on a real GPU. Skipped without one (see conftest)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

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
    from conftest import run

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
    assert m.fix == "x = x.to(model.weight.device)"


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
