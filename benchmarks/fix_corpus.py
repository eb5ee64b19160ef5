"""The generated fix corpus: how often devinspect's printed fixes run, fix and add no error.

Runs seeds ``--start`` … ``--start + --count - 1`` of the scenario generator
(``tests/scenarios.py``: model family × where the bug sits × entry point) in one IPython
shell, judges each with ``tests/scenario_runner.py``, and prints the rates per model family,
bug kind and entry point, with the targets:

* at least 99% of printed fixes run, fix and add no error;
* 0 cases of lost data; 0 invented culprits;
* every real mismatch stated with its devices and line;
* 0 device explanations for errors that are not mismatches;
* 0 error or warning findings on clean sessions.

``--corpus errors`` runs the generator of the other device errors instead
(``tests/error_scenarios.py``: a dropped ``.to()``, a device tensor read as a NumPy array, a
DataLoader pinning or forking over device tensors, a generator of another device; each in a
cell, a loop, a helper, a class or through a library call), with the same targets; its rates
by kind are printed under "bug", by shape under "family".

Run: ``python benchmarks/fix_corpus.py [--corpus mismatches|errors] [--count 2000] [--device sim|cuda]
[--json out.json] [--show-failures 20]``
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--device", choices=("sim", "cuda"), default="sim")
    parser.add_argument("--json", metavar="PATH", help="write every outcome as JSON")
    parser.add_argument("--show-failures", type=int, default=20, metavar="N")
    parser.add_argument("--only", metavar="BUG", help="only scenarios of this bug kind")
    parser.add_argument("--corpus", choices=("mismatches", "errors"), default="mismatches",
                        help="the device mismatches' generator, or the other device errors'")
    args = parser.parse_args()

    warnings.filterwarnings("ignore")
    import torch
    from error_scenarios import generate_error
    from IPython.testing.globalipapp import get_ipython
    from scenario_runner import ScenarioRun
    from scenarios import generate

    if args.corpus == "errors":
        generate = generate_error  # the other corpus, judged the same way

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("fix_corpus: no CUDA GPU here; use --device sim")
            return 1
        device = "cuda:0"
    else:
        from devinspect import testing

        try:
            testing.enable()
        except testing.SimulatedDeviceError as exc:  # a GPU in this process: run with CUDA_VISIBLE_DEVICES=""
            print(f"fix_corpus: {exc}")
            return 1
        device = "sim:0"
    ip = get_ipython()
    ip.display_formatter.active_types = ip.display_formatter.format_types
    ip.run_line_magic("load_ext", "devinspect")

    outcomes = []
    started = time.perf_counter()
    for seed in range(args.start, args.start + args.count):
        scenario = generate(seed)
        if args.only and scenario.bug != args.only:
            continue
        outcomes.append(ScenarioRun(ip, scenario, device).run())
        if len(outcomes) % 100 == 0:
            done = [o for o in outcomes if o.verdict != "skip"]
            rate = sum(o.verdict == "pass" for o in done) / max(1, len(done))
            print(f"  {len(outcomes)} run, {rate:.1%} pass, {time.perf_counter() - started:.0f} s", flush=True)
    report(outcomes, args.show_failures, device)
    if args.json:
        Path(args.json).write_text(json.dumps([{
            "seed": o.scenario.seed, "family": o.scenario.family, "bug": o.scenario.bug, "entry": o.scenario.entry,
            "kind": o.scenario.kind, "verdict": o.verdict, "stage": o.stage, "reason": o.reason, "stated": o.stated,
            "lost": o.lost, "invented": o.invented, "false_explanation": o.false_explanation, "fix": o.fix_text,
        } for o in outcomes], indent=1))
    return 0


def rate_table(title: str, outcomes: list, key) -> list[str]:
    groups: dict[str, list] = collections.defaultdict(list)
    for o in outcomes:
        groups[key(o)].append(o)
    lines = [f"{title:<20} {'cases':>6} {'pass':>6} {'rate':>7}"]
    for name in sorted(groups):
        group = groups[name]
        passed = sum(o.verdict == "pass" for o in group)
        lines.append(f"{name:<20} {len(group):>6} {passed:>6} {passed / len(group):>7.1%}")
    return lines


def report(outcomes: list, show: int, device: str) -> None:
    run = [o for o in outcomes if o.verdict != "skip"]
    skipped = [o for o in outcomes if o.verdict == "skip"]
    fixes = [o for o in run if o.scenario.kind in ("mismatch", "device_error", "stale")]
    mismatches = [o for o in run if o.scenario.kind in ("mismatch", "device_error")
                  and o.scenario.entry in ("plain", "devcheck", "button")]
    clean = [o for o in run if o.scenario.kind == "clean"]
    other = [o for o in run if o.scenario.kind == "other"]
    passed = sum(o.verdict == "pass" for o in fixes)
    print(f"\n== generated fix corpus on {device}: {len(outcomes)} scenarios, {len(skipped)} skipped ==")
    print(f"printed fixes that run, fix and add no error: {passed}/{len(fixes)} = {passed / max(1, len(fixes)):.1%}"
          "   (target >= 99%)")
    print(f"lost data: {sum(o.lost for o in run)}   (target 0)")
    print(f"invented culprits: {sum(o.invented for o in run)}   (target 0)")
    stated = sum(bool(o.stated) for o in mismatches)
    print(f"errors stated with their devices (or kind) and line: {stated}/{len(mismatches)}   (target all)")
    print(f"device explanations of other errors: {sum(o.false_explanation for o in other)}/{len(other)}   (target 0)")
    print(f"clean sessions with error/warning findings: {sum(bool(o.clean_findings) for o in clean)}/{len(clean)}"
          "   (target 0)")
    for title, key in (("family", lambda o: o.scenario.family), ("bug", lambda o: o.scenario.bug),
                       ("entry", lambda o: o.scenario.entry)):
        print()
        print("\n".join(rate_table(title, fixes, key)))
    print()
    print("\n".join(rate_table("clean/other family", clean + other, lambda o: f"{o.scenario.kind}:{o.scenario.family}")))
    if skipped:
        reasons = collections.Counter(o.reason.split(":")[0] for o in skipped)
        print("\nskipped:", dict(reasons.most_common(8)))
    failures = [o for o in run if o.verdict == "fail"]
    stages = collections.Counter(o.stage for o in failures)
    print("\nfailures by stage:", dict(stages.most_common()))
    for o in failures[:show]:
        print(f"\n-- {o.scenario.name} [{o.stage}] {o.reason[:300]}")
        if o.fix_text:
            print("   fix: " + o.fix_text[:300].replace("\n", "\n        "))


if __name__ == "__main__":
    sys.exit(main())
