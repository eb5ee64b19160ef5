"""Each finding, from a live namespace on the simulated device (or from records)."""

from __future__ import annotations

import torch

import devinspect
from devinspect.model import LoaderSummary, ModuleSummary, Move, ReleaseHistory, ScanResult


def codes(result):
    return [f.code for f in result.findings]


def only(result, code):
    found = [f for f in result.findings if f.code == code]
    assert len(found) == 1, result.findings
    return found[0]


def test_mixed_device_module_names_where_each_part_is(sim):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model[0].to(sim)
    f = only(devinspect.scan({"model": model}), "mixed-device-module")
    assert f.severity == "error" and f.subject == "model"
    assert "model[0] on sim:0" in f.message and "model[1] on cpu" in f.message
    # One target for the whole model: the accelerator the user moved to wins.
    assert f.fix.code == 'model.to("sim:0")' and f.fix.action == Move("model", "sim:0")


def test_single_device_model_has_no_findings(sim):
    model = torch.nn.Linear(2, 2).to(sim)
    x = torch.ones(1, 2, device=sim)
    assert devinspect.scan({"model": model, "x": x}).findings == ()


def test_unregistered_attribute_left_behind_by_to(sim):
    class PositionalEncoding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.pe = torch.zeros(8, 4)

    model = PositionalEncoding().to(sim)
    f = only(devinspect.scan({"model": model}), "unregistered-tensor-attribute")
    assert f.subject == "model.pe" and f.severity == "error"
    assert "It is on cpu while model is on sim:0" in f.message
    (edit,) = f.fix.edits
    assert edit.context == "PositionalEncoding" and edit.old == "self.pe = torch.zeros(8, 4)"
    assert edit.new == 'self.register_buffer("pe", torch.zeros(8, 4), persistent=False)'
    # The runtime fix works as printed: registered, on the model's device, state_dict unchanged.
    keys = set(model.state_dict())
    exec(f.fix.code, {"model": model})
    assert model.pe.device == sim and "pe" in dict(model.named_buffers()) and set(model.state_dict()) == keys
    model.to("cpu")
    assert model.pe.device.type == "cpu"


def test_unregistered_attribute_on_same_device_is_a_warning():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.lookup = [torch.zeros(2)]

    f = only(devinspect.scan({"m": M()}), "unregistered-tensor-attribute")
    assert f.severity == "warning" and f.subject == "m.lookup" and "buffer" in f.fix.summary


def test_optimizer_state_left_on_cpu_after_checkpoint_load(stale_optimizer):
    model, opt = stale_optimizer
    f = only(devinspect.scan({"model": model, "opt": opt}), "optimizer-state-device")
    assert f.subject == "opt" and f.severity == "error"
    assert "4 state tensors of opt" in f.message and "sim:0" in f.message
    assert '"exp_avg"' in f.message and "step" not in f.message
    namespace = {"opt": opt, "torch": torch}
    exec(f.fix.code, namespace)
    assert devinspect.scan({"model": model, "opt": opt}).findings == ()


def test_inputs_on_another_device_than_the_model(sim):
    model = torch.nn.Linear(3, 2).to(sim)
    ns = {"model": model, "x": torch.ones(4, 3), "batch": {"labels": torch.ones(4)}, "other": torch.ones(1)}
    result = devinspect.scan(ns)
    hints = [f for f in result.findings if f.code == "input-on-other-device"]
    assert {f.subject for f in hints} == {"x", 'batch["labels"]'}
    assert all(f.severity == "hint" for f in hints)
    assert next(f for f in hints if f.subject == "x").fix.code == 'x = x.to("sim:0")'


def test_accelerator_memory_held_by_output_history(sim):
    out = torch.zeros(1024, device=sim)
    ns = {"Out": {3: out}, "_3": out, "_": out}
    f = only(devinspect.scan(ns), "held-by-output-history")
    assert f.storage_bytes == 4096 and "4.0 KiB" in f.message and "Out[3]" in f.message
    assert f.fix.action == ReleaseHistory()


def test_cpu_history_is_not_reported():
    ns = {"Out": {3: torch.zeros(1024)}, "_": None}
    assert devinspect.scan(ns).history == ()


def test_unpinned_loader_feeding_a_cuda_model():
    cuda_model = ModuleSummary("model", "Linear", 2, 24, 0, 0, 0, ("cuda:0",))
    loader = LoaderSummary("train_loader", pin_memory=False, num_workers=2, batch_size=32)
    pinned = LoaderSummary("val_loader", pin_memory=True, num_workers=2, batch_size=32)
    result = ScanResult(records=(), modules=(cuda_model,), loaders=(loader, pinned))
    f = only(result, "loader-not-pinned")
    assert f.subject == "train_loader" and f.fix.code == "train_loader.pin_memory = True"
    cpu_only = ScanResult(records=(), modules=(ModuleSummary("m", "Linear", 2, 24, 0, 0, 0, ("cpu",)),), loaders=(loader,))
    assert cpu_only.findings == ()


def test_real_dataloader_is_seen(sim):
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(4, 2)), batch_size=2)
    result = devinspect.scan({"loader": loader, "model": torch.nn.Linear(2, 2)})
    assert result.loaders[0].pin_memory is False
    assert "loader-not-pinned" not in codes(result)  # the model is on cpu, not CUDA


def test_findings_are_ordered_by_severity(sim):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model[0].to(sim)
    result = devinspect.scan({"model": model, "deep": [[[[[[[[[[torch.zeros(1)]]]]]]]]]]})
    severities = [f.severity for f in result.findings]
    assert severities == sorted(severities, key=["error", "warning", "hint"].index)
