"""A fixed sample of the generated scenarios (``scenarios.py``): every printed fix runs as printed,
fixes the failing cell (twice), loses nothing and leaves no error finding; clean sessions get
no error or warning; errors that are not device mismatches get no device explanation.

``benchmarks/fix_corpus.py`` runs 2,000 of them and prints the rates per model family, bug
kind and entry point; on a GPU, ``--device cuda`` runs them with CUDA in place of ``sim``.
"""

from __future__ import annotations

import pytest
from scenario_runner import ScenarioRun
from scenarios import generate

#: Seeds run in CI: a fixed sample, the same on every run.
SEEDS = range(240)
SCENARIOS = [generate(seed) for seed in SEEDS]
#: Seeds below this also run in the quick profile (-m "not slow").
QUICK_SEEDS = 30


def marks(scenario) -> list:
    out = []
    if set(scenario.needs) & {"transformers", "peft", "accelerate"} or scenario.seed >= QUICK_SEEDS:
        out.append(pytest.mark.slow)
    return out


@pytest.mark.parametrize("scenario", [pytest.param(s, id=s.name, marks=marks(s)) for s in SCENARIOS])
def test_generated_scenario(ip, sim, scenario):
    for package in ("transformers", "peft", "accelerate"):
        if package in scenario.needs:
            pytest.importorskip(package)
    outcome = ScenarioRun(ip, scenario, "sim:0").run()
    if outcome.verdict == "skip":
        pytest.skip(outcome.reason)
    assert outcome.verdict == "pass", f"[{outcome.stage}] {outcome.reason}\nfix:\n{outcome.fix_text}"


def test_the_sample_covers_every_family_bug_and_entry():
    from scenarios import BUGS, ENTRIES, FAMILIES

    families = {s.family for s in SCENARIOS}
    bugs = {s.bug for s in SCENARIOS}
    assert set(FAMILIES) <= families and {"compiled", "dispatched", "pipeline"} <= families
    assert set(BUGS) | {"clean", "not_a_mismatch"} <= bugs
    assert set(ENTRIES) == {s.entry for s in SCENARIOS}
    assert sum(s.kind == "clean" for s in SCENARIOS) >= 10


def test_the_generator_is_deterministic():
    assert generate(123) == generate(123)
    assert generate(123) != generate(124)
