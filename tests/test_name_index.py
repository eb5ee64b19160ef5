"""The explanation's name index: walking lists, dicts and objects only when a question needs
them gives the names the whole walk gives."""

from __future__ import annotations

import random

import pytest
import torch

from devinspect.collect.scan import NameIndex


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
        whole.result  # walks every name first
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
