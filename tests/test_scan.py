"""devinspect.scan: every record kind, names as typed, shared storage counted once."""

from __future__ import annotations

import collections
import dataclasses
import sys
import warnings
from typing import NamedTuple

import pytest
import torch

import devinspect
from devinspect.collect.namespace.referrers import holders
from devinspect.model.records import FRAME_COLUMNS


def by_name(result):
    return {r.name: r for r in result.records}


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))
        self.register_buffer("cache", torch.zeros(2), persistent=False)


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(), Block()])
        self.heads = torch.nn.ModuleDict({"cls": torch.nn.Linear(4, 2)})


def test_module_names_parameters_buffers_and_grads(sim):
    model = Encoder().to(sim)
    model.layers[0].q_proj(torch.ones(1, 4, device=sim)).sum().backward()
    recs = by_name(devinspect.scan({"model": model}))
    w = recs["model.layers[0].q_proj.weight"]
    assert (w.kind, w.device, w.dtype, w.shape, w.nbytes) == ("parameter", "sim:0", "float32", (4, 4), 64)
    assert w.storage_bytes == 64 and w.requires_grad and w.owner == "model.layers[0].q_proj"
    assert recs["model.layers[0].q_proj.weight.grad"].kind == "gradient"
    assert recs["model.layers[0].q_proj.weight.grad"].param == "model.layers[0].q_proj.weight"
    assert recs["model.layers[1].scale"].kind == "buffer"
    assert recs["model.layers[1].cache"].note == "non-persistent"
    assert "model.heads.cls.weight" in recs
    assert "model.layers[1].q_proj.weight.grad" not in recs


def test_result_frame_has_the_documented_columns(sim):
    x = torch.ones(3, 4)
    frame = devinspect.scan({"x": x, "m": torch.nn.Linear(2, 2)}).frame
    for column in ("name", "root", "kind", "device", "dtype", "shape", "nbytes", "storage_bytes",
                   "storage_id", "alias_of", "requires_grad"):
        assert column in frame.columns
    assert list(frame.columns[: len(FRAME_COLUMNS)]) == list(FRAME_COLUMNS)
    row = frame.set_index("name").loc["x"]
    assert row["nbytes"] == 48 and row["device"] == "cpu" and row["shape"] == (3, 4)


def test_containers_and_objects_are_named_as_typed():
    Point = NamedTuple("Point", [("a", torch.Tensor), ("b", int)])

    @dataclasses.dataclass
    class Batch:
        ids: torch.Tensor
        extra: dict

    class Holder:
        __slots__ = ("t",)

        def __init__(self):
            self.t = torch.zeros(1)

    class Plain:
        def __init__(self):
            self.weights = [torch.zeros(1)]

    ns = {
        "batch": {"input_ids": torch.zeros(2), 3: torch.zeros(1), ("a", 1): torch.zeros(1)},
        "items": [torch.zeros(1), (torch.zeros(1),)],
        "q": collections.deque([torch.zeros(1)]),
        "s": {torch.zeros(1)},
        "p": Point(torch.zeros(1), 3),
        "b": Batch(torch.zeros(2), {"mask": torch.zeros(2)}),
        "h": Holder(),
        "obj": Plain(),
    }
    names = set(by_name(devinspect.scan(ns)))
    assert {
        'batch["input_ids"]', "batch[3]", 'batch[("a", 1)]', "items[0]", "items[1][0]", "q[0]",
        "list(s)[0]", "p.a", "b.ids", 'b.extra["mask"]', "h.t", "obj.weights[0]",
    } <= names


def test_shared_storage_is_counted_once():
    base = torch.zeros(100)
    lin = torch.nn.Linear(10, 10)
    tied = torch.nn.Linear(10, 10)
    tied.weight = lin.weight
    ns = {
        "base": base, "view": base[10:20], "det": base.detach(), "data": lin.weight.data,
        "lin": lin, "tied": tied, "params": [lin.weight],
    }
    result = devinspect.scan(ns)
    recs = by_name(result)
    assert recs["lin.weight"].alias_of is None
    assert recs["view"].alias_of == "base" and recs["view"].nbytes == 40
    assert recs["det"].alias_of == "base"
    assert recs["data"].alias_of == "lin.weight"
    assert recs["tied.weight"].alias_of == "lin.weight"
    assert recs["params[0]"].alias_of == "lin.weight" and recs["params[0]"].kind == "parameter"
    expected = 400 + 400 + 40 + 40  # base, lin.weight, lin.bias, tied.bias
    assert result.total_bytes == expected
    assert sum(d.storage_bytes for d in result.devices) == expected


def test_optimizer_state_linked_to_parameter_names(sim):
    model = torch.nn.Linear(3, 2).to(sim)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3, device=sim)).sum().backward()
    opt.step()
    recs = by_name(devinspect.scan({"opt": opt, "model": model}))
    state = recs['opt.state[model.weight]["exp_avg"]']
    assert state.kind == "optimizer_state" and state.param == "model.weight" and state.device == "sim:0"
    assert recs['opt.state[model.weight]["step"]'].device == "cpu"


def test_optimizer_without_model_names_params_by_group():
    p = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.ones(2)
    opt.step()
    recs = by_name(devinspect.scan({"opt": opt}))
    assert 'opt.param_groups[0]["params"][0]' in recs
    assert 'opt.state[opt.param_groups[0]["params"][0]]["momentum_buffer"]' in recs


def test_unregistered_module_attributes_are_found(sim):
    class PE(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(2, 2)
            self.pe = torch.zeros(5, 2)
            self.tables = {"a": torch.zeros(1)}

    model = torch.nn.Sequential(PE()).to(sim)
    result = devinspect.scan({"model": model})
    recs = by_name(result)
    assert recs["model[0].pe"].kind == "attribute" and recs["model[0].pe"].device == "cpu"
    assert recs['model[0].tables["a"]'].kind == "attribute"
    assert [(u.name, u.class_name, u.attr) for u in result.modules[0].unregistered] == [
        ("model[0].pe", "PE", "pe"), ("model[0].tables", "PE", "tables")]
    assert result.modules[0].unregistered[0].assigned_at.text == "self.pe = torch.zeros(5, 2)"


def test_wrappers_compile_and_dataparallel():
    lin = torch.nn.Linear(2, 2)
    recs = by_name(devinspect.scan({"c": torch.compile(lin), "dp": torch.nn.DataParallel(torch.nn.Linear(2, 2))}))
    assert "c._orig_mod.weight" in recs and "dp.module.weight" in recs


def test_unusual_tensors_have_sizes_or_explicit_unknowns():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.testing._internal.two_tensor import TwoTensor

    with FakeTensorMode():
        fake = torch.empty(5, 5)
    ns = {
        "coo": torch.eye(4).to_sparse(),
        "csr": torch.eye(4).to_sparse_csr(),
        "q": torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8),
        "meta": torch.empty(100, device="meta"),
        "lazy": torch.nn.LazyLinear(3),
        "njt": torch.nested.nested_tensor([torch.randn(2, 3), torch.randn(4, 3)], layout=torch.jagged),
        "two": TwoTensor(torch.randn(3), torch.randn(3)),
        "fake": fake,
    }
    recs = by_name(devinspect.scan(ns))
    assert recs["coo"].layout == "sparse_coo" and recs["coo"].storage_bytes == 4 * 2 * 8 + 4 * 4
    assert recs["csr"].layout == "sparse_csr" and recs["csr"].storage_bytes > 0
    assert recs["q"].dtype == "qint8" and recs["q"].storage_bytes == 4
    assert recs["meta"].storage_bytes == 0 and recs["meta"].nbytes == 400
    assert recs["lazy.weight"].shape is None and recs["lazy.weight"].storage_bytes is None
    assert recs["njt"].storage_bytes == (6 * 3) * 4 + 3 * 8  # values + offsets
    assert recs["two"].storage_bytes == 24 and recs["two"].type_name == "TwoTensor"
    assert recs["fake"].storage_bytes == 0 and "fake" in recs["fake"].note
    assert all(r.kind != "error" for r in recs.values())


def test_dtensor_counts_its_local_shard():
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed not built")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    made_here = not dist.is_initialized()
    if made_here:
        dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        mesh = init_device_mesh("cpu", (1,))
        dt = distribute_tensor(torch.randn(4, 4), mesh, [Replicate()])
        rec = by_name(devinspect.scan({"dt": dt}))["dt"]
        assert rec.type_name == "DTensor" and rec.storage_bytes == 64
    finally:
        if made_here:  # the next test in this worker starts without a group, as a fresh process does
            dist.destroy_process_group()


def test_roots_and_dotted_prefix_restrict_the_walk():
    model = Encoder()
    ns = {"model": model, "x": torch.zeros(1), "y": torch.zeros(1)}
    assert {r.root for r in devinspect.scan(ns, roots=["x"]).records} == {"x"}
    sub = devinspect.scan(ns, roots=["model.layers[1]"])
    assert sub.records and all(r.name.startswith("model.layers[1]") for r in sub.records)
    with pytest.raises(LookupError, match="nope"):
        devinspect.scan(ns, roots=["nope"])


def test_scan_defaults_to_the_callers_globals():
    result = devinspect.scan()
    assert isinstance(result, devinspect.model.scan_result.ScanResult)


def test_depth_and_item_bounds_are_reported_not_silent():
    deep: list = [torch.zeros(1)]
    for _ in range(20):
        deep = [deep]
    big = [torch.zeros(1) for _ in range(30)]
    result = devinspect.scan({"deep": deep, "big": big}, max_depth=5, max_items=10)
    reasons = {t.name: t for t in result.truncated}
    assert "deeper than 5 levels" in next(t.reason for t in result.truncated if t.name.startswith("deep"))
    assert reasons["big"].skipped == 20
    assert sum(r.root == "big" for r in result.records) == 10
    assert any(f.code == "not-walked" for f in result.findings)


def test_history_names_are_excluded_but_their_accelerator_bytes_counted(sim):
    kept = torch.zeros(256, device=sim)
    ns = {"x": torch.zeros(1), "_": kept, "_5": kept, "Out": {5: kept}, "_private": torch.zeros(1)}
    result = devinspect.scan(ns)
    assert {r.name for r in result.records} == {"x"}
    assert result.history_bytes == 1024
    assert [h.name for h in result.history] == ["Out[5]"]
    shown = devinspect.scan(ns, include_hidden=True)
    assert {"Out[5]", "_", "_5", "_private"} <= {r.name for r in shown.records}


def test_history_that_is_also_named_is_not_counted(sim):
    kept = torch.zeros(256, device=sim)
    assert devinspect.scan({"kept": kept, "_": kept}).history_bytes == 0


def test_traceback_locals_are_measured(sim):
    def fails():
        big = torch.zeros(64, device=sim)  # noqa: F841 - kept alive by the traceback
        raise ValueError("boom")

    try:
        fails()
    except ValueError:
        sys.last_type, sys.last_value, sys.last_traceback = sys.exc_info()
    try:
        result = devinspect.scan({})
        assert result.history_bytes == 256
        assert any(h.name.endswith("fails.big") for h in result.history)
        assert any(f.code == "held-by-traceback" for f in result.findings)
    finally:
        sys.last_type = sys.last_value = sys.last_traceback = None


def test_all_objects_finds_unnamed_tensors():
    holder = []

    def closure():
        return holder

    closure.cache = None
    hidden_away = [torch.full((7,), 3.0)]  # reachable only through a function attribute
    closure.__dict__["stash"] = hidden_away
    del hidden_away
    result = devinspect.scan({"x": torch.zeros(1)}, all_objects=True)
    unnamed = [r for r in result.records if r.kind == "unnamed"]
    assert any(r.shape == (7,) for r in unnamed)
    assert all(r.root == "<unnamed>" and r.name.startswith("<unnamed") for r in unnamed)
    assert closure  # keep alive until the scan is done


def test_non_leaf_tensors_do_not_warn():
    leaf = torch.ones(2, requires_grad=True)
    nonleaf = leaf * 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        devinspect.scan({"nonleaf": nonleaf, "leaf": leaf})


@pytest.fixture
def facts_fail_for_three_elements(monkeypatch):
    """Make reading any 3-element tensor fail, as a broken or exotic tensor would."""
    scan_module = sys.modules["devinspect.collect.namespace.walk"]
    real = scan_module.tensor_facts

    def broken(t):
        if t.numel() == 3:
            raise RuntimeError("storage gone")
        return real(t)

    monkeypatch.setattr(scan_module, "tensor_facts", broken)
    # A list of plain tensors is read a column at a time: one that fails there is read item by item.
    real_bytes = scan_module._storage_bytes

    def broken_bytes(storage):
        if real_bytes(storage) == 3 * 4:
            raise RuntimeError("storage gone")
        return real_bytes(storage)

    monkeypatch.setattr(scan_module, "_storage_bytes", broken_bytes)


def test_uninspectable_object_becomes_an_error_record(facts_fail_for_three_elements):
    recs = by_name(devinspect.scan({"bad": torch.zeros(3), "good": torch.zeros(2)}))
    assert recs["bad"].kind == "error" and "could not inspect: RuntimeError: storage gone" in recs["bad"].note
    assert recs["good"].kind == "tensor"



def test_an_unreadable_tensor_under_several_names_is_one_hint_and_aliases():
    # A batched tensor kept past its vmap: plain torch.Tensor by type, no readable storage.
    kept: list = []
    torch.vmap(lambda x: kept.append(x) or x)(torch.ones(3, 2))
    result = devinspect.scan({"a": kept[0], "many": [kept[0]] * 5 + [torch.zeros(2)]})
    recs = by_name(result)
    assert recs["a"].kind == "error" and recs["a"].alias_of is None
    assert [recs[f"many[{i}]"].alias_of for i in range(5)] == ["a"] * 5 and recs["many[5]"].kind == "tensor"
    hints = [f for f in result.findings if f.code == "could-not-inspect"]
    assert len(hints) == 1 and hints[0].names == ("a", *(f"many[{i}]" for i in range(5)))
    assert hints[0].message.endswith("(also reached as many[0], many[1], many[2], …)")

def test_dataloader_is_summarised_and_its_dataset_walked():
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(8, 2)), batch_size=4)
    result = devinspect.scan({"loader": loader})
    assert result.loaders[0].name == "loader" and result.loaders[0].pin_memory is False
    assert "loader.dataset.tensors[0]" in by_name(result)


def test_mixed_module_placement_names_submodules(sim):
    model = Encoder()
    model.layers[0].to(sim)
    summary = devinspect.scan({"model": model}).modules[0]
    assert summary.is_mixed and set(summary.devices) == {"cpu", "sim:0"}
    assert ("model.layers[0]", "sim:0") in summary.placement
    assert ("model.layers[1]", "cpu") in summary.placement


def test_restricting_to_an_optimizer_still_names_parameters_after_the_model():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    result = devinspect.scan({"model": model, "opt": opt}, roots=["opt"])
    assert {r.root for r in result.records} == {"opt"}
    assert 'opt.state[model.weight]["momentum_buffer"]' in by_name(result)


def test_a_bad_item_inside_a_large_list_is_an_error_record(facts_fail_for_three_elements):
    recs = by_name(devinspect.scan({"items": [torch.zeros(2), torch.zeros(3), torch.zeros(4)]}))
    assert recs["items[1]"].kind == "error" and "storage gone" in recs["items[1]"].note
    assert recs["items[0]"].kind == recs["items[2]"].kind == "tensor"


def test_a_dead_weakref_proxy_is_one_record_not_the_whole_model_hidden(sim):
    import weakref

    class Owner:
        pass

    class WithProxy(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            owner = Owner()
            self.__dict__["back"] = weakref.proxy(owner)  # the owner is gone: a dead proxy

    result = devinspect.scan({"model": WithProxy()})
    names = {r.name: r for r in result.records}
    assert names["model.lin.weight"].kind == "parameter"
    assert names["model.back"].kind == "error" and "dead weakref.proxy" in names["model.back"].note


def test_any_mapping_is_a_namespace():
    import collections
    import types

    t = torch.zeros(3)
    for mapping in (types.MappingProxyType({"t": t}), collections.ChainMap({"t": t}), collections.UserDict(t=t)):
        assert [r.name for r in devinspect.scan(mapping).records] == ["t"], type(mapping)


def test_containers_not_looked_into_are_reported():
    import numpy as np
    import pandas as pd

    class DictSubclass(dict):
        pass

    class OddDict:
        pass

    odd = OddDict()
    object.__setattr__(odd, "__dict__", DictSubclass(t=torch.zeros(1)))
    objects = np.empty(2, dtype=object)
    objects[0] = torch.zeros(1)
    ns = {"arr": objects, "df": pd.DataFrame({"t": [torch.zeros(1)]}), "plain": np.zeros(3),
          "numbers": pd.DataFrame({"a": [1.0]}), "odd": odd}
    result = devinspect.scan(ns)
    reasons = {t.name: t.reason for t in result.truncated}
    assert "numpy array of Python objects" in reasons["arr"]
    assert "DataFrame with object columns" in reasons["df"]
    assert "DictSubclass" in reasons["odd"]
    assert "plain" not in reasons and "numbers" not in reasons  # numeric arrays hold no tensors
    assert {f.subject for f in result.findings if f.code == "not-walked"} >= {"arr", "df", "odd"}


class _Blocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
        self.blocks = torch.nn.ModuleList([torch.nn.Linear(4, 4)])
        self.bn = torch.nn.BatchNorm1d(4)

    def forward(self, x):
        x = self.seq(x)
        for block in self.blocks:
            x = block(x)
        return self.bn(x)


def test_torchscript_modules_are_read_through_their_cpp_dictionaries_by_the_names_users_type():
    scripted = torch.jit.script(_Blocks())
    traced = torch.jit.trace(torch.nn.Sequential(torch.nn.Linear(4, 2)), torch.ones(1, 4))
    opt = torch.optim.SGD(scripted.parameters(), lr=0.1, momentum=0.9)
    scripted(torch.ones(2, 4)).sum().backward()
    opt.step()
    ns = {"scripted": scripted, "traced": traced, "opt": opt}
    result = devinspect.scan(ns)
    recs = by_name(result)
    expected = {"scripted.seq[0].weight": "parameter", "scripted.blocks[0].bias": "parameter",
                "scripted.bn.running_mean": "buffer", "scripted.seq[0].weight.grad": "gradient",
                "getattr(traced, '0').weight": "parameter",
                'opt.state[scripted.bn.weight]["momentum_buffer"]': "optimizer_state"}
    assert {name: recs[name].kind for name in expected} == expected
    for r in result.records:  # every name is one the user can type
        assert tuple(eval(r.name, dict(ns)).shape) == r.shape, r.name
    assert eval("scripted.blocks[0].weight", dict(ns)) is scripted.blocks[0].weight
    summary = {m.name: m for m in result.modules}
    assert summary["scripted"].parameters == 6 and summary["scripted"].buffers == 3
    assert not result.truncated and not [f for f in result.findings if f.code == "not-walked"]
    why = holders(ns, "scripted.blocks[0].weight")
    assert "scripted.blocks[0].weight" in [r.path for r in why.references]


def test_the_tools_own_frames_in_the_last_traceback_make_no_findings(ip, sim):
    from conftest import run

    ip.run_cell("import torch\nfrom torch import nn\nmodel = nn.Linear(3, 2).to(torch.device('sim:0'))\n"
                "x = torch.randn(2, 3)")
    run(ip, "%devices --kind nonsense")  # a UsageError from argparse, inside IPython's magic machinery
    run(ip, "%%devcheck\ny = model(x)")  # a failure inside the check
    view = ip.run_line_magic("devices", "--hidden -f")
    assert not [f for f in view.findings if "sys.last_traceback" in f.subject or "parse" in f.message]
    traceback_records = [r for r in view.records if r.root == "sys.last_traceback"]
    assert all("devcheck" not in r.name and "parse" not in r.name for r in traceback_records)


def test_devices_never_walks_its_own_earlier_results(ip, sim):
    ip.run_cell("import torch\nmodel = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(50)])")
    for _ in range(6):
        ip.run_cell("%devices", store_history=True)  # each result is kept in Out
    first = devinspect.scan(ip.user_ns, include_hidden=True)
    assert not any(r.name.startswith("Out[") for r in first.records)
    assert first.truncated == ()


def test_a_traceback_through_one_function_twice_names_each_holder_once(sim):
    def nested(depth):
        held = torch.zeros(16, device=sim)  # noqa: F841 - a local in each of the two frames
        if depth:
            nested(depth - 1)
        raise ValueError("boom")

    try:
        nested(1)
    except ValueError:
        sys.last_type, sys.last_value, sys.last_traceback = sys.exc_info()
    try:
        finding = next(f for f in devinspect.scan({}).findings if f.code == "held-by-traceback")
        assert finding.message.count("nested.held") == 1 and len(set(finding.names)) == len(finding.names)
        assert finding.storage_bytes == 128  # both tensors counted
    finally:
        sys.last_type = sys.last_value = sys.last_traceback = None


class _Pair(NamedTuple):
    first: torch.Tensor
    second: torch.Tensor


def _generated_containers(seed: int, sim: torch.device) -> dict:
    """A namespace of containers of plain tensors, with what makes a run unusual mixed in:
    views and shared objects (aliases, inside a run and across runs), tensors needing a
    gradient, a quantized tensor, a meta or sparse one, a Parameter, another object, odd keys."""
    import random

    rng = random.Random(seed)
    pool = [torch.zeros(rng.randint(1, 5)) for _ in range(6)]
    devices = ["cpu", sim]

    def item():
        roll = rng.random()
        if roll < 0.45:
            dtype = rng.choice([torch.float32, torch.int64])
            return torch.ones(rng.randint(1, 4), device=rng.choice(devices), dtype=dtype)
        if roll < 0.6:
            return rng.choice(pool)  # the same object again
        if roll < 0.7:
            return rng.choice(pool)[:1]  # a view: its memory is another's
        if roll < 0.76:
            return torch.ones(2, requires_grad=True) * 2 if rng.random() < 0.5 else torch.ones(2, requires_grad=True)
        if roll < 0.8:
            return torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)
        if roll < 0.84:
            return torch.empty(2, device="meta") if rng.random() < 0.5 else torch.ones(2).to_sparse()
        if roll < 0.88:
            return torch.nn.Parameter(torch.ones(2))
        if roll < 0.92:
            return rng.choice([None, 3, "text", [torch.ones(1)]])
        return torch.ones(5)

    namespace = {}
    for n in range(rng.randint(3, 7)):
        size = rng.choice([2, 3, 8, 40, 300])
        flavour = rng.choice(["mixed", "plain", "plain with aliases"])
        if flavour == "mixed":
            values = [item() for _ in range(size)]
        elif flavour == "plain":
            values = [torch.ones(2) for _ in range(size)]
        else:  # memory shared inside the container, met there first, and with other containers
            local = [torch.zeros(3) for _ in range(4)]
            values = [rng.choice([torch.ones(2), rng.choice(local), rng.choice(local)[1:], rng.choice(pool),
                                  rng.choice(pool)[:1]])
                      for _ in range(size)]
        shape = rng.choice(["list", "tuple", "dict", "keys", "pair"])
        if shape == "list":
            namespace[f"c{n}"] = values
        elif shape == "tuple":
            namespace[f"c{n}"] = tuple(values)
        elif shape == "dict":
            namespace[f"c{n}"] = {f"k{i}": v for i, v in enumerate(values)}
        elif shape == "keys":
            keys = [rng.choice([i, (i, "a"), f"w-{i}", 1.5 * i, object()]) for i in range(size)]
            namespace[f"c{n}"] = dict(zip(keys, values))
        else:
            namespace[f"c{n}"] = _Pair(values[0], values[-1])
    if rng.random() < 0.3:
        namespace["lone"] = pool[0]  # a tensor root is walked before containers: its memory is seen first
    return namespace


@pytest.mark.parametrize("seed", range(12))
def test_containers_read_a_column_at_a_time_give_the_records_read_item_by_item(seed, sim, monkeypatch):
    namespace = _generated_containers(seed, sim)
    monkeypatch.setattr(devinspect.collect.namespace.walk, "_RUN", 32)  # long containers are read in several runs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized and sparse tensors warn when made and read
        at_once = devinspect.scan(namespace)
        monkeypatch.setattr(devinspect.collect.namespace.walk.Walker, "records_runs", False)
        one_by_one = devinspect.scan(namespace)
    assert at_once.records == one_by_one.records
    assert at_once.devices == one_by_one.devices and at_once.truncated == one_by_one.truncated


def test_records_of_some_kinds_keep_the_walk_order():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    result = devinspect.scan({"model": model, "opt": opt, "xs": [torch.ones(1) for _ in range(20)]})
    for kinds in (("parameter",), ("tensor",), ("parameter", "gradient"), ("optimizer_state", "tensor"), ("nope",)):
        assert result.of_kind(*kinds) == tuple(r for r in result.records if r.kind in kinds)
        assert result.of_kind(*kinds) == tuple(r for r in result.records if r.kind in kinds)  # kept or made again


class _Config:
    """A class the user wrote, holding a tensor as a class attribute."""


def test_namespaces_and_the_class_attributes_of_the_users_classes_are_walked():
    import argparse
    import types

    _Config.table = torch.ones(3)
    try:
        ns = {"Config": _Config, "cfg": types.SimpleNamespace(scale=torch.ones(2), nested=types.SimpleNamespace(
            bias=torch.zeros(1))), "args": argparse.Namespace(mask=torch.ones(4)), "Linear": torch.nn.Linear}
        result = devinspect.scan(ns)
        assert {r.name for r in result.records} == {"Config.table", "cfg.scale", "cfg.nested.bias", "args.mask"}
        assert not result.truncated
        for r in result.records:  # each name is one the user can type
            assert tuple(eval(r.name, dict(ns)).shape) == r.shape
        assert "cfg.nested.bias" in [ref.path for ref in holders(ns, "cfg.nested.bias").references]
    finally:
        del _Config.table


def test_module_paths_are_read_in_order_and_a_shared_module_keeps_its_first_path():
    from devinspect.collect.namespace.names import module_tree_paths

    shared = torch.nn.Linear(2, 2)
    model = torch.nn.Sequential(torch.nn.Sequential(shared),
                                torch.nn.ModuleDict({"a-b": shared, "c": torch.nn.ReLU()}), shared)
    assert [path for _, path in module_tree_paths(model, "model", set())] == [
        "model", "model[0]", "model[0][0]", "model[1]", "model[1].c"]
    # An optimizer scanned alone names a shared parameter as the whole scan does: by its first path.
    opt = torch.optim.Adam(model.parameters())
    shared(torch.ones(1, 2)).sum().backward()
    opt.step()
    ns = {"model": model, "opt": opt}
    alone = {r.name for r in devinspect.scan(ns, ["opt"]).records}
    whole = {r.name for r in devinspect.scan(ns).records if r.kind == "optimizer_state" or r.root == "opt"}
    assert alone == whole and any("model[0][0].weight" in name for name in alone)


def test_names_asked_for_keep_whole_variables_next_to_paths():
    ns = {"m": torch.nn.Linear(2, 2), "a": torch.ones(2), "b": [torch.ones(1)]}
    assert sorted(devinspect.scan(ns, roots=["m.weight", "a"]).frame["name"]) == ["a", "m.weight"]
    assert sorted(devinspect.scan(ns, roots=["a", "m.weight"]).frame["name"]) == ["a", "m.weight"]
    assert sorted(devinspect.scan(ns, roots=["m.bias", "m"]).frame["name"]) == ["m.bias", "m.weight"]
    assert sorted(devinspect.scan(ns, roots=["b", "a"]).frame["name"]) == ["a", "b[0]"]


def test_type_hints_a_wrapper_copies_are_not_walked():
    import functools
    import typing

    def forward(x: typing.Optional[typing.List[typing.Dict[str, typing.Tuple[int, ...]]]]) -> list[dict[str, int]]:
        return x

    hooked = torch.nn.Linear(2, 2)
    # How accelerate's hooks wrap forward: a partial that update_wrapper gave the function's hints.
    hooked.forward = functools.update_wrapper(functools.partial(forward), forward)
    for depth in range(6):
        hooked.forward.__annotations__[f"x{depth}"] = typing.Optional[typing.List[typing.Dict[str, list[int]]]]
    result = devinspect.scan({"hooked": hooked}, max_depth=3)
    assert not result.truncated and [r.name for r in result.records] == ["hooked.weight", "hooked.bias"]


def test_a_variable_asked_for_shows_its_tensors_named_another_way_and_a_wrapped_optimizer_keeps_its_name():
    from accelerate import Accelerator

    from devinspect.model.scan_result import Selection

    ns = {"wd": {(1, "a"): torch.ones(1), frozenset({3}): torch.ones(2), torch.float32: torch.ones(3)},
          "other": torch.ones(1)}
    shown = devinspect.scan(ns).select(Selection(names=("wd",))).records
    assert [r.name for r in shown] == ['wd[(1, "a")]', "list(wd.values())[1]", "list(wd.values())[2]"]
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(8, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.5, total_iters=4)
    model, opt, sched = accelerator.prepare(model, opt, sched)
    accelerator.backward(model(torch.randn(4, 8)).sum())
    opt.step()
    result = devinspect.scan({"accelerator": accelerator, "model": model, "opt": opt, "sched": sched}, ["opt"])
    names = [r.name for r in result.records]
    assert len(names) == 6 and all(n.startswith("opt.optimizer.state[model.") for n in names)


def test_cuts_inside_history_and_the_last_traceback_are_listed_only_when_asked_for(monkeypatch):
    def fails():
        deep = [[[[torch.ones(1)]]]]  # noqa: F841 - held by the traceback's frame
        raise ValueError("boom")

    try:
        fails()
    except ValueError as exc:
        monkeypatch.setattr(sys, "last_traceback", exc.__traceback__, raising=False)
    ns = {"x": torch.ones(1), "Out": {1: [[[[torch.ones(2)]]]]}}
    assert devinspect.scan(ns, max_depth=2).truncated == ()
    cut = {t.name.split("[")[0].split(":")[0] for t in devinspect.scan(ns, max_depth=2, include_hidden=True).truncated}
    assert cut == {"Out", "sys.last_traceback"}
