"""Each finding, from a live namespace on the simulated device (or from records)."""

from __future__ import annotations

import torch

import devinspect
from devinspect.diagnose.findings import find
from devinspect.model.fixes import Move, ReleaseHistory
from devinspect.model.records import LoaderSummary, ModuleSummary
from devinspect.model.scan_result import ScanResult


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


def test_host_copies_a_module_moves_to_its_inputs_device_as_it_uses_them_are_a_hint(sim):
    # Kept on the host on purpose (torchvision's default boxes): what is made from them is moved.
    class Boxes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pairs = [torch.ones(2, 2), torch.ones(3, 2)]

        def forward(self, features):
            boxes = torch.cat(self.pairs).to(features.device)
            return features.mean() + boxes

    class Kept(torch.nn.Module):  # read, and nothing moved: still a warning
        def __init__(self):
            super().__init__()
            self.pairs = [torch.ones(2, 2)]

        def forward(self, features):
            return features.mean() + torch.cat(self.pairs)

    boxes = Boxes()
    boxes(torch.randn(2, 2, device=sim))
    f = only(devinspect.scan({"boxes": boxes}), "unregistered-tensor-attribute")
    assert f.severity == "hint" and "Boxes moves what it makes from it to its inputs' device" in f.message
    assert only(devinspect.scan({"kept": Kept()}), "unregistered-tensor-attribute").severity == "warning"


def test_state_a_module_makes_as_it_runs_is_a_hint_on_its_device_and_an_error_elsewhere(sim):
    class CausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(4, 4)
            self.mask = None
            self.state = None

        def forward(self, x):
            if self.mask is None or self.mask.size(0) != len(x):
                self.mask = torch.triu(torch.ones(len(x), len(x)), 1).to(x.device)
            self.state = self.proj(x).detach().sum(0)
            return self.proj(self.mask @ x)

    model = CausalLM().to(sim)
    model(torch.randn(3, 4, device=sim))
    found = [f for f in devinspect.scan({"model": model}).findings if f.code == "unregistered-tensor-attribute"]
    assert sorted(f.subject for f in found) == ["model.mask", "model.state"]
    assert all(f.severity == "hint" and "CausalLM makes it as it runs" in f.message for f in found)
    model.to("cpu")  # .to() leaves the mask behind: that is an error again
    mask = next(f for f in devinspect.scan({"model": model}).findings if f.subject == "model.mask")
    assert mask.severity == "error" and "It is on sim:0 while model is on cpu" in mask.message
    assert "register_buffer" in mask.fix.code
    # In a notebook whose device is the accelerator, the model is what was left on the host.
    ns = {"device": sim, "model": model}
    mask = next(f for f in devinspect.scan(ns).findings if f.subject == "model.mask")
    assert mask.severity == "error" and "the model is what sits on the host" in mask.message
    exec(mask.fix.code, ns)
    assert model.proj.weight.device == sim and model.mask.device == sim


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
    result = ScanResult(records=(), modules=(cuda_model,), loaders=(loader, pinned), rules=find)
    f = only(result, "loader-not-pinned")
    assert f.subject == "train_loader" and f.fix.code == "train_loader.pin_memory = True"
    cpu_only = ScanResult(records=(), modules=(ModuleSummary("m", "Linear", 2, 24, 0, 0, 0, ("cpu",)),), loaders=(loader,), rules=find)
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


# -- findings that are true --------------------------------------------------------


def _recomputing_modules():
    import warnings

    from torch.nn.utils import parametrize, prune, spectral_norm, weight_norm
    from torch.nn.utils.parametrizations import orthogonal
    from torch.nn.utils.parametrizations import weight_norm as weight_norm_v2

    class Symmetric(torch.nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).T

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch deprecates the old weight_norm
        modules = {"weight_norm": weight_norm(torch.nn.Linear(3, 3)), "spectral_norm": spectral_norm(torch.nn.Linear(3, 3)),
                   "weight_norm_v2": weight_norm_v2(torch.nn.Linear(3, 3)), "orthogonal": orthogonal(torch.nn.Linear(3, 3))}
    pruned = torch.nn.Linear(3, 3)
    prune.l1_unstructured(pruned, "weight", 0.5)
    parametrized = torch.nn.Linear(3, 3)
    parametrize.register_parametrization(parametrized, "weight", Symmetric())
    modules.update(pruned=pruned, parametrized=parametrized)
    return modules


def test_modules_whose_weight_a_hook_recomputes_have_no_findings(sim):
    modules = _recomputing_modules()
    for name, module in modules.items():
        with torch.no_grad():
            module(torch.randn(2, 3))
        module.to(sim)
        with torch.no_grad():
            module(torch.randn(2, 3, device=sim))
        result = devinspect.scan({"model": module, "x": torch.randn(2, 3, device=sim)})
        assert result.findings == (), (name, [f.message for f in result.findings])
        # A recomputed weight is listed, said to be recomputed, and never offered to register_buffer.
        recomputed = [r for r in result.records if r.note and "recomputed before each forward" in r.note]
        assert name not in ("weight_norm", "spectral_norm", "pruned") or recomputed, name


def test_adams_cpu_step_is_not_a_finding(sim):
    model = torch.nn.Linear(3, 2).to(sim)
    opt = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3, device=sim)).sum().backward()
    opt.step()
    assert all(s["step"].device.type == "cpu" for s in opt.state.values())
    assert devinspect.scan({"model": model, "opt": opt}).findings == ()


def test_inputs_hint_never_claims_a_mismatch_will_follow(sim):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16)).to(sim)
    labels = torch.randint(0, 50, (1, 4))
    ids = labels.to(sim)
    model(ids, labels=labels)  # transformers moves labels to the logits' device itself
    (f,) = [f for f in devinspect.scan({"model": model, "labels": labels, "ids": ids}).findings]
    assert f.code == "input-on-other-device" and f.severity == "hint"
    assert "raise" not in f.message and "unless the model moves it itself" in f.message


def test_a_stale_optimizer_is_an_error_with_a_rebuild(sim):
    model = torch.nn.Linear(4, 2).to(sim)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.8, 0.9))
    model = torch.nn.Linear(4, 2).to(sim)  # the model's cell ran again
    f = only(devinspect.scan({"model": model, "opt": opt}), "stale-optimizer")
    assert f.severity == "error" and "2 of the 2 parameters opt (AdamW) updates" in f.message
    assert f.fix.code == "import torch\nopt = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.8, 0.9))"
    # Where torch is imported already, the fix does not import it again.
    bound = only(devinspect.scan({"model": model, "opt": opt, "torch": torch}), "stale-optimizer")
    assert bound.fix.code == "opt = torch.optim.AdamW(model.parameters(), lr=0.01, betas=(0.8, 0.9))"
    ns = {"model": model, "opt": opt}
    exec(f.fix.code, ns)
    assert ns["opt"].param_groups[0]["params"][0] is model.weight
    assert devinspect.scan({"model": model, "opt": ns["opt"]}).findings == ()


def test_a_partly_materialised_model_gets_advice_not_a_move_that_raises(sim):
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    model[0] = torch.nn.Linear(4, 4)
    f = only(devinspect.scan({"model": model}), "partly-materialised-module")
    assert f.severity == "error" and f.fix.code is None and f.fix.action is None
    assert "load_state_dict(state_dict, assign=True)" in f.fix.note and "to_empty" in f.fix.note
    # Following the advice works.
    model.load_state_dict(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)).state_dict(), assign=True)
    assert devinspect.scan({"model": model}).findings == ()
    model.to(sim)


def test_findings_are_computed_once_and_filters_keep_them(stale_optimizer):
    model, opt = stale_optimizer
    result = devinspect.scan({"model": model, "opt": opt})
    from devinspect.model.scan_result import Selection

    view = result.select(Selection(kind="optimizer_state"))
    assert [f.code for f in view.findings] == ["optimizer-state-device"]
    assert result.select(Selection(kind="optimizer_state")).result.findings is result.findings  # not recomputed
    assert result.select(Selection(device="cpu")).findings == result.findings
    assert result.select(Selection(kind="buffer")).findings == ()


def test_a_model_offloaded_by_accelerate_is_not_missing_data_and_a_stray_part_is_hooked_back(sim):
    """accelerate keeps an offloaded part's weights in its hook (the parameters are meta on
    purpose): nothing is wrong with that. A part replaced after dispatch is put back where the
    map says with the hook dispatch gives it; dispatching again would read meta weights."""
    from accelerate import dispatch_model

    torch.manual_seed(0)
    tower = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    ns = {"tower": dispatch_model(tower, device_map={"0": str(sim), "1": "cpu", "2": str(sim)},
                                  main_device=str(sim)), "x": torch.ones(2, 4)}
    result = devinspect.scan(ns)
    assert codes(result) == [] and result.modules[0].offloaded == 2 and result.modules[0].unmaterialised == 0
    assert {r.note for r in result.records if r.device == "meta"} == {
        "offloaded: accelerate's hook brings its data for each forward pass"}
    ns["tower"][2] = torch.nn.Linear(4, 2)  # replaced after dispatch: on the host, without a hook
    expected = ns["tower"][2](ns["tower"][1](ns["tower"][0](ns["x"].to(sim))).cpu())
    f = only(devinspect.scan(ns), "mixed-device-module")
    assert "dispatch_model" not in f.fix.code and "tower[2].to(\"sim:0\")" in f.fix.code
    exec(f.fix.code, ns)
    assert torch.allclose(ns["tower"](ns["x"]).cpu(), expected, atol=1e-6)
    assert codes(devinspect.scan(ns)) == []


def test_an_optimizer_over_models_in_a_list_a_dict_or_an_object_is_not_stale():
    import types

    models = [torch.nn.Linear(4, 2) for _ in range(3)]
    pair = (torch.nn.Linear(4, 2), torch.nn.Linear(4, 2))
    cfg = types.SimpleNamespace(model=torch.nn.Linear(4, 2))
    ns = {"opt": torch.optim.SGD([p for m in models for p in m.parameters()], lr=0.1), "models": models,
          "actor_opt": torch.optim.Adam(pair[0].parameters()), "pair": pair,
          "cfg_opt": torch.optim.SGD(cfg.model.parameters(), lr=0.1), "cfg": cfg}
    ns["sched"] = torch.optim.lr_scheduler.StepLR(ns["opt"], step_size=1)
    result = devinspect.scan(ns)
    assert codes(result) == []
    names = {r.name for r in result.records}
    assert "models[0].weight" in names and "pair[0].weight" in names and "cfg.model.weight" in names
    assert {o.name for o in result.optimizers} == {"opt", "actor_opt", "cfg_opt"}  # not sched.optimizer


def test_an_optimizer_over_parameters_nothing_names_is_a_hint_without_a_guess():
    def build():
        net = torch.nn.Linear(4, 2)
        return (lambda x: net(x)), torch.optim.SGD(net.parameters(), lr=0.1)

    predict, opt = build()
    f = only(devinspect.scan({"predict": predict, "opt": opt}), "stale-optimizer")
    assert f.severity == "hint" and f.fix.code is None


def test_a_stale_optimizer_whose_scheduler_cannot_be_read_back_gets_no_partial_code(sim):
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.002)
    ns = {"opt": opt, "sched": torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5),
          "cycle": torch.optim.lr_scheduler.CyclicLR(opt, base_lr=0.001, max_lr=0.01, step_size_up=5),
          "model": torch.nn.Linear(4, 2)}  # the model's cell ran again
    f = only(devinspect.scan(ns), "stale-optimizer")
    assert f.severity == "error" and f.fix.code is None and f.fix.action is None
    assert "make cycle again" in f.fix.note and "then drive the new one" not in f.fix.note


def test_torchs_own_modules_and_lazy_ones_are_not_reported(sim):
    lstm, gru = torch.nn.LSTM(8, 16), torch.nn.GRU(4, 4, num_layers=2)
    lazy = torch.nn.Sequential(torch.nn.LazyLinear(16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    assert codes(devinspect.scan({"lstm": lstm, "gru": gru, "lazy": lazy})) == []
    lazy(torch.randn(4, 8))  # the first forward pass makes its parameters
    assert codes(devinspect.scan({"lazy": lazy})) == []
    # A list of tensors that are not the module's parameters is still one .to() leaves behind.
    lstm.extra = [torch.zeros(2)]
    assert codes(devinspect.scan({"lstm": lstm})) == ["unregistered-tensor-attribute"]


def test_a_models_optimizer_follows_it_whichever_name_its_parameters_go_by(sim):
    from devinspect.diagnose.findings import optimizers_with_state_under

    net = torch.nn.Linear(8, 2)
    wrapper = torch.nn.Sequential(net)  # as torch.compile's module keeps the model it compiles
    opt = torch.optim.Adam(wrapper.parameters())
    wrapper(torch.ones(2, 8)).sum().backward()
    opt.step()
    result = devinspect.scan({"net": net, "wrapper": wrapper, "opt": opt})
    assert {r.param for r in result.of_kind("optimizer_state")} == {"net.weight", "net.bias"}
    assert optimizers_with_state_under(result, "wrapper") == ("opt",)


def test_a_model_split_over_accelerators_is_model_parallel_not_a_model_to_move(sim):
    """Parts put on two accelerators one by one are on purpose: a hint says where each part is and
    that activations move where parts meet; no fix moves everything to one device."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model[0].to("sim:0")
    model[1].to("sim:1")
    f = only(devinspect.scan({"model": model}), "mixed-device-module")
    assert f.severity == "hint" and f.fix is None
    assert "model[0] on sim:0" in f.message and "model[1] on sim:1" in f.message and ".to()" in f.message


def test_a_model_or_a_loss_left_on_the_host_next_to_models_on_an_accelerator_is_found(sim):
    """Before anything runs: a teacher model on the host next to a student on the device, a loss
    whose class weights stay on the host; a module without tensors (an activation) is fine."""
    ns = {"student": torch.nn.Linear(4, 2).to(sim), "teacher": torch.nn.Linear(4, 2),
          "criterion": torch.nn.CrossEntropyLoss(weight=torch.tensor([1.0, 3.0])), "act": torch.nn.ReLU()}
    found = [f for f in devinspect.scan(ns).findings if f.code == "module-on-other-device"]
    assert sorted(f.subject for f in found) == ["criterion", "teacher"] and {f.severity for f in found} == {"hint"}
    for f in found:
        exec(f.fix.code, ns)
    assert ns["criterion"].weight.device == sim and ns["teacher"].weight.device == sim
    assert [f for f in devinspect.scan(ns).findings if f.code == "module-on-other-device"] == []


def test_a_model_on_the_host_in_a_notebook_whose_device_is_an_accelerator_is_found(sim):
    ns = {"device": sim, "model": torch.nn.Linear(4, 2), "act": torch.nn.ReLU()}
    (f,) = [f for f in devinspect.scan(ns).findings if f.code == "module-on-other-device"]
    assert f.subject == "model" and f.severity == "hint" and "your device is sim:0 (device)" in f.message
    assert [e.new for e in f.fix.edits] == [] and f.fix.code == 'model.to("sim:0")'
    assert [f for f in devinspect.scan({"device": torch.device("cpu"), "model": torch.nn.Linear(4, 2)}).findings
            if f.code == "module-on-other-device"] == []


def test_a_model_on_the_host_known_by_two_names_is_one_hint_on_the_one_that_holds_it(sim):
    inner = torch.nn.Linear(4, 2)
    ns = {"device": sim, "inner": inner, "wrapped": torch.nn.Sequential(inner, torch.nn.ReLU()),
          "head": torch.nn.Linear(2, 2)}
    found = [f for f in devinspect.scan(ns).findings if f.code == "module-on-other-device"]
    assert sorted(f.subject for f in found) == ["head", "wrapped"]
    exec(next(f for f in found if f.subject == "wrapped").fix.code, ns)
    assert inner.weight.device == sim
