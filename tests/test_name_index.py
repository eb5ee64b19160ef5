"""The explanation's name index: walking lists, dicts and objects only when a question needs
them gives the names the whole walk gives."""

from __future__ import annotations

import random

import pytest
import torch

from devinspect.collect.namespace.scan import NameIndex


class Holder:
    def __init__(self, value):
        self.value = value


def namespace_and_probes(seed: int, sim) -> tuple[dict, list]:
    rng = random.Random(seed)
    pool = [torch.randn(3) for _ in range(rng.randint(1, 6))]
    table = {f"k{i}": torch.randn(2, 2) for i in range(rng.randint(1, 4))}
    learned = torch.randn(2, requires_grad=True)
    learned.grad = torch.ones(2)
    ns = {
        "model": torch.nn.Linear(2, 2),
        "x": torch.randn(2),
        "pool": pool,
        "table": table,
        "holder": Holder(rng.choice(pool)),
        "nested": [[learned], (torch.zeros(1, device="meta"),)],
        "on_sim": {"t": torch.ones(2, device=sim)},
        "views": [pool[0][1:]] if rng.random() < 0.5 else [],
    }
    probes = [
        torch.randn(2),  # a temporary: nobody holds it
        rng.choice(pool), pool[-1][:2], pool[-1].detach(),  # held, a view of held memory, another owner
        table[rng.choice(list(table))], learned.grad, ns["x"], ns["x"][:1],
        ns["nested"][1][0], torch.zeros(1, device="meta"), ns["on_sim"]["t"], ns["on_sim"]["t"][:1],
        ns["model"].weight, ns["model"].weight.detach(), pool[0].reshape(3),
    ]
    return ns, probes


@pytest.mark.parametrize("seed", range(12))
def test_the_two_step_index_names_as_the_whole_walk(sim, seed):
    ns, probes = namespace_and_probes(seed, sim)
    for probe in probes:
        whole = NameIndex(ns)
        whole.result  # noqa: B018 - walks every name first
        expected = whole.lookup(probe)
        found = NameIndex(ns).lookup(probe)
        assert (found is None) == (expected is None)
        if found is not None:
            assert (found[0].name, found[1]) == (expected[0].name, expected[1])


def test_a_temporary_does_not_walk_the_large_containers(sim):
    ns = {"model": torch.nn.Linear(2, 2), "pool": [torch.zeros(1) for _ in range(1000)]}
    index = NameIndex(ns)
    assert index.lookup(torch.randn(2)) is None
    assert not index.complete  # the pool was only looked through, never named
    assert index.lookup(ns["pool"][7])[0].name == "pool[7]"
    assert index.complete


def namespace_with_graphs(seed: int, sim) -> dict:
    """Models, optimizers with state, graph holders and plain tensors, each bound directly or
    inside lists, tuples, dicts and objects, in an order drawn from ``seed``."""
    rng = random.Random(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4))
    other = torch.nn.Linear(3, 2).to(sim if rng.random() < 0.5 else "cpu")
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(5, 3)).sum().backward()
    opt.step()
    loss = model(torch.randn(2, 3)).sum()
    leaf = torch.zeros(2, requires_grad=True)
    places = {
        "model": model, "other": other, "opt": opt, "loss": loss, "leaf": leaf,
        "plain": [torch.zeros(1) for _ in range(rng.randint(0, 50))],
        "losses": [loss * i for i in range(rng.randint(1, 3))],
        "mixed": [torch.ones(1), loss.detach(), rng.choice([loss, torch.ones(1), None])],
        "table": {i: torch.zeros(2) for i in range(rng.randint(0, 20))},
        "pair": (torch.ones(1), torch.ones(1) + 1),
        "holder": Holder(rng.choice([loss, opt, other, torch.ones(1)])),
    }
    names = list(places)
    rng.shuffle(names)
    ns = {}
    for name in names:
        value = places[name]
        wrap = rng.choice(["bare", "bare", "list", "dict", "object"])
        if name in ("model", "other", "opt") and wrap == "object":
            wrap = "bare"
        ns[name] = {"bare": value, "list": [value], "dict": {"v": value}, "object": Holder(value)}[wrap]
    return ns


@pytest.mark.parametrize("seed", range(16))
def test_the_holders_answer_what_a_move_asks_as_the_whole_walk(sim, seed):
    from devinspect.diagnose.findings import optimizers_with_state_under

    ns = namespace_with_graphs(seed, sim)
    holders = NameIndex(ns).holders
    whole = NameIndex(ns)
    whole = whole.result

    def graphs(result):
        return sorted(r.name for r in result.records if r.kind == "tensor" and r.requires_grad and not r.is_leaf)

    def kept(result):
        # A graph holder's alias is not asked: every name that holds a graph is released.
        return sorted((r.name, r.kind, r.device, r.alias_of if r.kind != "tensor" else None) for r in result.records
                      if r.kind != "tensor" or r.requires_grad)

    assert graphs(holders) == graphs(whole)
    assert kept(holders) == kept(whole)
    assert holders.modules == whole.modules
    assert holders.optimizers == whole.optimizers
    for module in whole.modules:
        assert optimizers_with_state_under(holders, module.name) == optimizers_with_state_under(whole, module.name)
    assert [r for r in holders.records if r.kind == "tensor" and not r.requires_grad] == []
