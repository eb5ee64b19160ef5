"""A fixed sample of the generated device-error scenarios (``error_scenarios.py``): a dropped
``.to()``, a device tensor read as a NumPy array, a DataLoader pinning or forking over device
tensors, a generator of another device, each in several shapes and met through each entry point.
Every printed fix runs as printed (or its edits, made as printed, make the cells work), twice,
losing nothing; errors near these kinds get no device explanation, clean sessions no finding.
They run on the simulated device, but for a shuffling DataLoader's, whose fix (a generator of the
device) only CUDA can run: those run on a GPU (``cuda``-marked).

``benchmarks/fix_corpus.py --corpus errors`` runs 2,000 of them and prints the rates by kind,
shape and entry point.
"""

from __future__ import annotations

import collections

import pytest
from error_scenarios import EXPLAINED_AS, KINDS, NEAR, generate_error
from scenario_runner import ScenarioRun

#: Seeds run in CI: a fixed sample, the same on every run.
SEEDS = range(64)
SCENARIOS = [generate_error(seed) for seed in SEEDS]
#: A shuffling DataLoader's fix is a generator of the device, which only a device with generators of
#: its own (CUDA; not the simulated one, written in Python) can make: those run on a GPU.
ON_A_GPU = [s for s in SCENARIOS if "device_generator" in s.needs]
#: Seeds below this also run in the quick profile (-m "not slow").
QUICK_SEEDS = 8


def judged(ip, scenario, device: str) -> None:
    outcome = ScenarioRun(ip, scenario, device).run()
    assert outcome.verdict == "pass", f"[{outcome.stage}] {outcome.reason}\nfix:\n{outcome.fix_text}"


@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.name, marks=[pytest.mark.slow] if s.seed >= QUICK_SEEDS
                                                   else []) for s in SCENARIOS if s not in ON_A_GPU])
def test_generated_error_scenario(ip, sim, scenario):
    judged(ip, scenario, "sim:0")


@pytest.mark.cuda
@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.name) for s in ON_A_GPU])
def test_generated_error_scenario_on_cuda(ip, scenario):
    judged(ip, scenario, "cuda:0")


def test_the_sample_covers_every_kind_shape_and_entry():
    pairs = {(s.bug, s.family) for s in SCENARIOS}
    assert {(kind, shape) for kind, shapes in KINDS.items() for shape in shapes} <= pairs
    entries = collections.defaultdict(set)
    for s in SCENARIOS:
        entries[s.bug].add(s.entry)
    assert all({"plain", "devcheck", "button"} <= entries[kind] for kind in KINDS)
    assert "devices" in entries["dropped_move"]
    assert sum(s.bug == NEAR for s in SCENARIOS) >= 6 and {s.kind for s in SCENARIOS if s.bug == NEAR} == {"other", "clean"}
    assert all(s.error_kind == EXPLAINED_AS[s.bug] for s in SCENARIOS if s.kind == "device_error")


def test_the_generator_is_deterministic():
    assert generate_error(7) == generate_error(7)
    assert generate_error(7) != generate_error(8)
