"""Findings about tensors ``model.to()`` never reaches: tables an object of the user's class keeps
(a sampler's coefficients), and plain attributes a module's own forward moves on every pass."""

from __future__ import annotations

import torch
from conftest import run

import devinspect
from devinspect.diagnose.findings import find
from devinspect.model.records import (
    ModuleSummary,
    SourceLine,
    TableHolder,
    TensorRecord,
)
from devinspect.model.scan_result import ScanResult


def _table(name: str, device: str) -> TensorRecord:
    return TensorRecord(name, name.split(".")[0], "tensor", device, "float32", (10,), 40, 40, hash(name))


def test_host_tables_of_an_object_beside_its_device_tables_are_found_from_records():
    made = SourceLine("<cell>", 5, "__init__", "self.alphas_cumprod = torch.cumprod(alphas, 0)", 2)
    holder = TableHolder("sampler", "Sampler", self_placed=("timesteps",),
                         made_at=(("alphas_cumprod", made, "self.alphas_cumprod = torch.cumprod(alphas, 0).to(device)"),))
    model = ModuleSummary("model", "Conv2d", 2, 40, 0, 0, 0, ("cuda:0",))
    records = (_table("sampler.betas", "cuda:0"), _table("sampler.alphas_cumprod", "cpu"),
               _table("sampler.timesteps", "cpu"))  # timesteps: its class makes them again as it runs
    result = ScanResult(records=records, modules=(model,), holders=(holder,), rules=find)
    (f,) = [f for f in result.findings if f.code == "host-table-in-object"]
    assert f.severity == "warning" and f.names == ("sampler.alphas_cumprod",)
    assert f.fix.code == 'sampler.alphas_cumprod = sampler.alphas_cumprod.to("cuda:0")'
    (edit,) = f.fix.edits
    assert edit.old == made.text and edit.new.endswith(".to(device)")
    # Nothing on an accelerator, or no model there: nothing reads them together.
    on_host = ScanResult(records=records[1:], modules=(model,), holders=(holder,), rules=find)
    no_model = ScanResult(records=records, modules=(), holders=(holder,), rules=find)
    assert not [f for r in (on_host, no_model) for f in r.findings if f.code == "host-table-in-object"]


_SAMPLER = '''import torch
from devinspect import testing
dev = testing.enable()

class Sampler:
    def __init__(self, steps, device):
        betas = torch.linspace(1e-4, 0.02, steps)
        self.betas = betas.to(device)
        self.alphas_cumprod = torch.cumprod(1 - betas, 0)

    def q_sample(self, x0, t, noise):
        a = self.alphas_cumprod[t].view(-1, 1)
        return a.sqrt() * x0 + (1 - a).sqrt() * noise + self.betas[t].view(-1, 1)

class Scheduler:
    """Keeps its tables on the host on purpose: it moves them where it reads them."""

    def __init__(self, steps):
        self.alphas_cumprod = torch.cumprod(1 - torch.linspace(1e-4, 0.02, steps), 0)
        self.timesteps = torch.arange(steps)

    def set_timesteps(self, device):
        self.timesteps = self.timesteps.to(device)

    def add_noise(self, x0, noise, t):
        self.alphas_cumprod = self.alphas_cumprod.to(device=x0.device)
        return self.alphas_cumprod[t].view(-1, 1) * x0 + noise

model = torch.nn.Linear(4, 4).to(dev)
sampler = Sampler(10, dev)
scheduler = Scheduler(10)
scheduler.set_timesteps(dev)
'''


def test_a_samplers_host_table_is_found_at_rest_and_its_fix_runs(ip):
    run(ip, _SAMPLER)
    view = ip.run_line_magic("devices", "-f")
    found = [f for f in view.findings if f.code == "host-table-in-object"]
    assert [f.names for f in found] == [("sampler.alphas_cumprod",)]  # the scheduler moves its own
    (edit,) = found[0].fix.edits
    assert edit.new == "self.alphas_cumprod = torch.cumprod(1 - betas, 0).to(device)"
    x, t = "torch.randn(2, 4, device=dev)", "torch.tensor([1, 3], device=dev)"
    assert not run(ip, f"y = model(sampler.q_sample({x}, {t}, {x}))")[0].success
    assert run(ip, found[0].fix.code)[0].success
    assert run(ip, f"y = model(sampler.q_sample({x}, {t}, {x}))")[0].success


def test_a_plain_attribute_its_own_forward_moves_on_every_pass_is_a_hint_not_an_error(sim):
    class Positions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.pos = torch.randn(8, 4)

        def forward(self, x):
            return self.proj(x) + self.pos.to(x.device, dtype=x.dtype)[: x.shape[0]]

    class Half(Positions):
        def forward(self, x):  # one read moves it, the other does not: the second fails
            return self.proj(x) + self.pos.to(x.device)[: x.shape[0]] * self.pos.sum()

    model, half = Positions().to(sim), Half().to(sim)
    (f,) = [f for f in devinspect.scan({"model": model}).findings if f.code == "unregistered-tensor-attribute"]
    assert f.severity == "hint" and "moves it to its inputs' device wherever it reads it" in f.message
    assert model(torch.randn(2, 4, device=sim)).device == sim  # so it is: no call meets it on the host
    (g,) = [f for f in devinspect.scan({"half": half}).findings if f.code == "unregistered-tensor-attribute"]
    assert g.severity == "error"
