"""Generated names and shapes: every printed fix compiles and runs, or none is offered; actions never lose data."""

from __future__ import annotations

import ast
import collections
import types
import weakref

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import devinspect
from devinspect import actions
from devinspect.diagnose import fix_builders

texts = st.text(min_size=0, max_size=12)


@settings(max_examples=400, deadline=None)
@given(texts)
def test_every_string_has_a_literal_that_reads_back(text):
    assert ast.literal_eval(fix_builders.literal(text)) == text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(texts, st.just(None), min_size=1, max_size=4), st.sampled_from(["dict", "proxy", "chain", "user"]))
def test_odd_keys_give_fixes_that_run_as_printed_or_none(keys, mapping):
    device = devinspect.testing.enable()
    model = torch.nn.Linear(2, 2).to(device)
    batch = {k: torch.zeros(1, 2) for k in keys}
    ns = {"model": model, "batch": batch}
    view = {"dict": ns, "proxy": types.MappingProxyType(ns), "chain": collections.ChainMap(ns),
            "user": collections.UserDict(ns)}[mapping]
    result = devinspect.scan(view)
    for record in result.records:
        if record.kind != "tensor":
            continue
        fix = fix_builders.move_tensor(record.name, "sim:0", source=record.device)
        if fix.code is None:
            continue
        exec(fix.code, ns)  # runs as printed
    assert all(t.device == device for t in batch.values())


class WithDefault(torch.nn.Module):
    pe = None

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)


names = st.one_of(st.sampled_from(["pe", "lin", "weight", "training", "forward", "", "a.b", "x y", "buf", "_cache"]),
                  st.text(max_size=6))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(names, st.booleans())
def test_register_buffer_completes_or_changes_nothing(attr, class_default):
    module = WithDefault() if class_default else torch.nn.Sequential(torch.nn.Linear(2, 2))
    tensor = torch.arange(3.0)
    module.__dict__[attr] = tensor
    before = (dict(module.__dict__), dict(module._buffers), dict(module._parameters), dict(module._modules))
    result = actions.register_buffer({"m": module}, "m", attr, "cpu")
    if result.ok:
        assert module._buffers[attr] is not None and torch.equal(module._buffers[attr], tensor)
        assert attr not in module.__dict__ and attr not in module.state_dict()
    else:
        assert (dict(module.__dict__), dict(module._buffers), dict(module._parameters), dict(module._modules)) == before
        assert module.__dict__[attr] is tensor  # nothing lost


def test_weakref_proxies_and_mappings_in_a_fix_corpus_namespace(sim):
    class Owner:
        pass

    owner = Owner()
    ns = {"alive": weakref.proxy(owner), "x": torch.zeros(2)}
    result = devinspect.scan(types.MappingProxyType(ns))
    assert [r.name for r in result.records] == ["x"]  # a live proxy holds nothing of its own
    del owner
    result = devinspect.scan(ns)
    assert sorted((r.name, r.kind) for r in result.records) == [("alive", "error"), ("x", "tensor")]
