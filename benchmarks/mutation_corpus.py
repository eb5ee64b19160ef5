"""The mutation corpus: device bugs made by deleting one device placement from real programs.

Real, device-correct programs (transformers' modeling code for architectures the generated
corpus lacks, read from the installed package; with ``--examples PATH``, PyTorch's own examples
from a checkout of the pytorch/examples repository; with ``--vision``, torchvision's and timm's
models; with ``--libraries``, x-transformers, rotary-embedding-torch, kornia, roma, torchmetrics,
diffusers, torch_geometric, pyro, gpytorch, nflows, zuko, torchdiffeq and monai, with a model split
over two devices and a hand-written sampler: ``benchmarks/library_programs.py``) run at a tiny size on the simulated device.
Each mutant deletes one placement (a ``device=`` argument, a ``.to(device)``, a ``.cuda()``, a
``register_buffer``): a real bug at a real site whose right fix is known. Each mutant runs
through the four entry points (``tests/mutation_runner.py``): the printed fix is applied exactly as
printed, the failing cell must then work twice and lose nothing, and the whole program runs again
from scratch with the fix's edits. Printed per program, mutation kind and entry point, with the
targets:

* at least 99% of printed fixes work (run as printed, the cell works twice, nothing lost, no
  error finding after);
* at least 97% remove the cause (the program runs from its first cell with the edits);
* 0 lost, 0 invented culprits (a fix that moves what the program keeps on the host);
* at least 60% of the culprits that exist before the failing cell runs (at rest) are found by
  ``%devices`` then, with a fix;
* every unmutated program runs with no error or warning finding.

Run: ``python benchmarks/mutation_corpus.py [--examples PATH] [--vision] [--libraries] [--only NAME,...] [--json out.json]``
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", metavar="PATH", help="a checkout of the pytorch/examples repository")
    parser.add_argument("--only", metavar="NAMES", help="only these programs (comma-separated)")
    parser.add_argument("--no-transformers", action="store_true", help="leave out the transformers programs")
    parser.add_argument("--vision", action="store_true",
                        help="add torchvision's and timm's models (both must be built for the installed torch)")
    parser.add_argument("--libraries", action="store_true",
                        help="add the other libraries' programs (benchmarks/library_programs.py; each needs its package)")
    parser.add_argument("--entries", default="plain,devcheck,devices,button")
    parser.add_argument("--device", choices=("sim", "cuda"), default="sim")
    parser.add_argument("--json", metavar="PATH", help="write every outcome as JSON")
    parser.add_argument("--show-failures", type=int, default=30, metavar="N")
    parser.add_argument("--verbose", action="store_true", help="a line for each mutant as it is judged")
    args = parser.parse_args()

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    import torch
    from IPython.testing.globalipapp import get_ipython
    from mutation_runner import Corpus, mutants, summary

    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("mutation_corpus: no CUDA GPU here; use --device sim")
            return 1
        device = "cuda:0"
    else:
        from devinspect import testing

        testing.enable()
        device = "sim:0"
    ip = get_ipython()
    ip.display_formatter.active_types = ip.display_formatter.format_types
    ip.run_line_magic("load_ext", "devinspect")

    programs = []
    if not args.no_transformers:
        import transformers
        from programs import transformers_programs

        transformers.logging.set_verbosity_error()
        programs += transformers_programs()
    if args.examples:
        from example_programs import example_programs

        programs += example_programs(args.examples)
    if args.vision:
        try:
            import timm  # noqa: F401
            import torchvision  # noqa: F401
        except Exception as error:  # a torchvision built for another torch fails at import, not only when missing
            print(f"mutation_corpus: --vision needs torchvision and timm for this torch: {type(error).__name__}: {error}")
            return 1
        from vision_programs import vision_programs

        programs += vision_programs()
    if args.libraries:
        from library_programs import library_programs

        programs += library_programs()
    if args.only:
        wanted = set(args.only.split(","))
        programs = [p for p in programs if p.name in wanted]

    corpus = Corpus(ip, device, tuple(args.entries.split(",")))
    originals, outcomes = [], []
    started = time.perf_counter()
    for program in programs:
        originals.append(corpus.original(program))
        o = originals[-1]
        print(f"{program.name}: {'clean' if o.probe == 'clean' and not o.clean_findings else o.probe}"
              f"{' ' + o.error[:120] if o.error else ''}{'; ' + '; '.join(o.clean_findings) if o.clean_findings else ''}",
              flush=True)
        if o.probe != "clean":
            continue
        for mutant in mutants(program):
            outcomes.append(corpus.run(mutant))
            if args.verbose:
                o = outcomes[-1]
                said = " ".join(f"{e}:{r.verdict}{'' if o.cause_removed.get(e) else '(cause stays)'}"
                                for e, r in o.entries.items())
                print(f"    {mutant.name} {o.probe} {said}", flush=True)
        print(f"  {len(outcomes)} mutants so far, {time.perf_counter() - started:.0f} s", flush=True)
    report(originals, outcomes, args.show_failures, device)
    if args.json:
        Path(args.json).write_text(json.dumps({"programs": [summary(o) for o in originals],
                                               "mutants": [summary(o) for o in outcomes]}, indent=1))
    return 0


def _runs(outcomes: list) -> list[tuple]:
    """(mutant outcome, entry, entry outcome, cause removed) for every entry run that was not skipped."""
    return [(o, e, r, o.cause_removed.get(e, False)) for o in outcomes for e, r in o.entries.items()
            if r.verdict != "skip"]


def _table(title: str, runs: list[tuple], key) -> list[str]:
    groups: dict[str, list] = collections.defaultdict(list)
    for run in runs:
        groups[key(run)].append(run)
    lines = [f"{title:<34} {'runs':>5} {'fix works':>10} {'cause gone':>11}"]
    for name in sorted(groups):
        group = groups[name]
        works = sum(r.verdict == "pass" for _, _, r, _ in group)
        gone = sum(removed for *_, removed in group)
        lines.append(f"{name:<34} {len(group):>5} {works / len(group):>10.1%} {gone / len(group):>11.1%}")
    return lines


def report(originals: list, outcomes: list, show: int, device: str) -> None:
    probes = collections.Counter(o.probe for o in outcomes)
    effect = [o for o in outcomes if o.probe == "effect"]
    runs = _runs(effect)
    works = sum(r.verdict == "pass" for _, _, r, _ in runs)
    gone = sum(removed for *_, removed in runs)
    lost = sum(r.lost for _, _, r, _ in runs)
    invented = sum(r.invented for _, _, r, _ in runs)
    at_rest = [o for o in effect if o.at_rest]
    found = sum(o.at_rest_found for o in at_rest)
    clean = [o for o in originals if o.probe == "clean" and not o.clean_findings]
    print(f"\n== mutation corpus on {device}: {len(originals)} programs, {len(outcomes)} mutants "
          f"({probes['effect']} fail, {probes['equivalent']} change nothing, {probes['other error']} fail for "
          f"another reason) ==")
    print(f"printed fixes that work: {works}/{len(runs)} = {works / max(1, len(runs)):.1%}   (target >= 99%)")
    print(f"fixes that remove the cause: {gone}/{len(runs)} = {gone / max(1, len(runs)):.1%}   (target >= 97%)")
    print(f"lost: {lost}   invented culprits: {invented}   (target 0, 0)")
    print(f"at-rest culprits found by %devices before the cell runs: {found}/{len(at_rest)} = "
          f"{found / max(1, len(at_rest)):.1%}   (target >= 60%)")
    print(f"unmutated programs with no error or warning finding: {len(clean)}/{len(originals)}   (target all)")
    for o in originals:
        if o not in clean:
            print(f"  {o.mutant.program.name}: {o.probe} {o.error[:150]} {'; '.join(o.clean_findings)[:400]}")
    for title, key in (("program", lambda r: f"{r[0].mutant.program.origin}:{r[0].mutant.program.name}"),
                       ("mutation kind", lambda r: r[0].mutant.kind), ("entry point", lambda r: r[1])):
        print()
        print("\n".join(_table(title, runs, key)))
    failures = [(o, e, r, removed) for o, e, r, removed in runs if r.verdict != "pass" or not removed]
    stages = collections.Counter(r.stage or "cause stays" for _, _, r, _ in failures)
    print("\nfailures by stage:", dict(stages.most_common()))
    for o, e, r, _removed in failures[:show]:
        print(f"\n-- {o.mutant.name} [{e}] [{r.stage or 'cause stays'}] {r.reason[:240]}")
        print(f"   mutation: {o.mutant.placement.label[:160]}")
        if r.fix_text:
            print("   fix: " + r.fix_text[:400].replace("\n", "\n        "))
    missed = [o for o in at_rest if not o.at_rest_found]
    if missed:
        print("\nat-rest culprits %devices did not find:")
        for o in missed[:show]:
            print(f"  {o.mutant.name}: {', '.join(o.at_rest[:4])}")


if __name__ == "__main__":
    sys.exit(main())
