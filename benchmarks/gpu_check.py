"""Everything that must be checked on a real GPU, in one command, written up as a report.

Run on a machine with one CUDA GPU (about 8 minutes on an H100; no network):

    python benchmarks/gpu_check.py --out gpu-report [--wheels wheels]

Each part runs in a process of its own, with a time budget; a part that fails or runs out
of time is reported as such and the others go on. The parts:

1. ``pytest -k cuda``: every CUDA case of the suite, the parametrised ones (``-m cuda``
   misses them) and the notebook (nbclient) ones included.
2. ``benchmarks/gpu_validate.py``: %gpumem's figures against allocations of known size.
3. The fix corpus (``benchmarks/fix_corpus.py``) on CUDA, ``--seeds`` seeds (56 by default),
   and on the simulated device for the same seeds beside it, in a process with the GPU
   hidden (``CUDA_VISIBLE_DEVICES=""``: the simulated device refuses to start beside a real
   accelerator), run at the same time on the CPU; and the corpus of the other device errors
   (``--corpus errors``: a dropped move, NumPy, pinning, workers, generators) on CUDA, where
   the generator fixes that only a GPU can run are run too.
4. The overheads: ``%%gpumem`` (``gpumem_lines.py --device cuda``, its phases with
   ``gpumem_phases.py --device cuda``, and the replay of the trace captured in part 6),
   ``%%devcheck`` (``devcheck_overhead.py --device cuda``).
5. The mixing table, captured again on CUDA (``benchmarks/mixing_table.py``), "not
   available" where the script is not there.
6. Out of memory on the real allocator (a request larger than the GPU; a 4 GiB local kept
   by an earlier error's traceback) and CUDA's memory history as %%gpumem tags it (a trace
   of 256 tiny allocations, each entry checked for the tag and the time).

The report is a directory (``--out``): ``report.md`` (each part's outcome, time and key
lines), ``summary.json``, each part's full output (``*.txt``), and the files that become
the CPU tests' fixtures once copied to ``tests/fixtures/`` (the report lists them):
``gpumem_cuda.json``, ``mixing_float32.json``, ``oom_cuda.json``, ``cuda_tiny_trace.json``.

The GPU machine has torch and pytest but not IPython, ipywidgets, anywidget, nbclient,
ipykernel or expecttest. Carry them as wheels: on a machine with network, for that
machine's Python (3.12, Linux x86-64)::

    pip download --dest wheels --only-binary=:all: --python-version 3.12 \\
        --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \\
        ipython ipywidgets anywidget nbclient nbformat ipykernel jupyter_client expecttest nbconvert

then copy ``wheels/`` beside the repository and pass ``--wheels wheels``: they are
installed first, from that folder only (``pip install --no-index --find-links``).

``--dry-run`` runs the same plumbing on a machine without a GPU, each part in its CPU form
(the CUDA cases collected, not run; the corpus and the OOM cases on the simulated device;
the overheads on the CPU): ``tests/test_gpu_check.py`` runs it so.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
HIDE_GPU = {"CUDA_VISIBLE_DEVICES": ""}
#: Wheels the GPU machine lacks, by the module each provides.
CARRIED = {"IPython": "ipython", "ipywidgets": "ipywidgets", "anywidget": "anywidget", "nbclient": "nbclient",
           "nbformat": "nbformat", "ipykernel": "ipykernel", "jupyter_client": "jupyter_client",
           "expecttest": "expecttest", "nbconvert": "nbconvert"}
#: Files of the report that are fixtures of the CPU tests: where each goes.
FIXTURES = {"gpumem_cuda.json": "tests/fixtures/gpumem_cuda.json",
            "mixing_float32.json": "tests/fixtures/mixing_float32.json",
            "oom_cuda.json": "tests/fixtures/oom_cuda.json",
            "cuda_tiny_trace.json": "tests/fixtures/cuda_tiny_trace.json"}
GiB = 1 << 30
MiB = 1 << 20


@dataclasses.dataclass
class Part:
    name: str
    title: str
    command: list[str] | None  # None: not available (``why`` says so)
    budget_s: float
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    why: str = ""
    #: Lines of the output worth putting in the report (regular expressions).
    key: tuple[str, ...] = ()
    background: bool = False


@dataclasses.dataclass
class Outcome:
    name: str
    title: str
    status: str  # "passed", "failed (exit N)", "timed out after N s", "not available: …", "not run: out of time"
    seconds: float = 0.0
    command: str = ""
    key_lines: list[str] = dataclasses.field(default_factory=list)


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def parts(out: Path, dry: bool, seeds: int) -> list[Part]:
    """The parts, in order, with their commands for a GPU run or a dry run."""
    corpus_count = str(min(seeds, 2) if dry else seeds)
    corpus = "sim" if dry else "cuda"
    mixing = BENCH / "mixing_table.py"
    pytest_args = ["-m", "pytest", "-k", "cuda", "-p", "no:cacheprovider", "-q", "-rfE"]
    return [
        Part("corpus_sim", "fix corpus, simulated device (the same seeds, GPU hidden)",
             python(str(BENCH / "fix_corpus.py"), "--device", "sim", "--count", corpus_count,
                    "--json", str(out / "fix_corpus_sim.json"), "--show-failures", "10"),
             180 if dry else 420, HIDE_GPU, key=(r"^printed fixes", r"^lost data", r"^invented"), background=True),
        Part("pytest", "pytest -k cuda" + (" (collected only: no GPU)" if dry else ""),
             python(*pytest_args, *(["--collect-only"] if dry else ["--junitxml", str(out / "pytest_cuda.xml")])),
             60 if dry else 200, key=(r"\d+ (passed|failed|tests? collected|selected)", r"^(FAILED|ERROR) ")),
        Part("gpu_validate", "%gpumem's figures (gpu_validate.py)",
             python(str(BENCH / "gpu_validate.py"), *([] if dry else ["--capture", str(out / "gpumem_cuda.json")])),
             30 if dry else 40, key=(r"^(PASS|FAIL) ", r"checks passed", r"no CUDA GPU")),
        Part("corpus_cuda", f"fix corpus, {corpus}" + (" (no GPU: the simulated device)" if dry else ""),
             python(str(BENCH / "fix_corpus.py"), "--device", corpus, "--count", corpus_count,
                    "--json", str(out / f"fix_corpus_{'cuda' if not dry else 'sim_again'}.json"), "--show-failures", "10"),
             180 if dry else 120, HIDE_GPU if dry else {}, key=(r"^printed fixes", r"^lost data", r"^invented")),
        Part("corpus_errors", f"device-error corpus, {corpus}" + (" (no GPU: the simulated device)" if dry else ""),
             python(str(BENCH / "fix_corpus.py"), "--corpus", "errors", "--device", corpus, "--count", corpus_count,
                    "--json", str(out / f"error_corpus_{'cuda' if not dry else 'sim'}.json"), "--show-failures", "10"),
             180 if dry else 120, HIDE_GPU if dry else {}, key=(r"^printed fixes", r"^lost data", r"^invented")),
        Part("oom", "out of memory on the real allocator" + (" (no GPU: the simulated device)" if dry else ""),
             python(str(BENCH / "gpu_check.py"), "--part", "oom", "--out", str(out), *(["--dry-run"] if dry else [])),
             60 if dry else 40, HIDE_GPU if dry else {}, key=(r"^(PASS|FAIL) ",)),
        Part("trace", "CUDA's memory history as %%gpumem tags it",
             None if dry else python(str(BENCH / "gpu_check.py"), "--part", "trace", "--out", str(out)),
             30, why="needs CUDA (the replay below uses tests/fixtures/cuda_tiny_trace.json)",
             key=(r"^(PASS|FAIL) ",)),
        Part("gpumem_replay", "%%gpumem's own cost, the trace replayed on the CPU (gpumem_cuda_replay.py)",
             python(str(BENCH / "gpumem_cuda_replay.py"), "--repeat", "1" if dry else "5",
                    *([] if dry else ["--trace", str(out / "cuda_tiny_trace.json")])),
             60 if dry else 30, key=(r"x +[\d.]+x", r"^ +plain")),
        Part("gpumem_overhead", "%%gpumem against plain cells (gpumem_lines.py --device cuda)",
             None if dry else python(str(BENCH / "gpumem_lines.py"), "--device", "cuda", "--repeat", "5"),
             60, why="needs CUDA (on the CPU it measures the simulated device: benchmarks/gpumem_lines.py)",
             key=(r"^\(i", r"pytorch_memlab")),
        Part("gpumem_phases", "where %%gpumem's time goes, phase by phase (gpumem_phases.py --device cuda)",
             None if dry else python(str(BENCH / "gpumem_phases.py"), "--device", "cuda", "--repeat", "10"),
             60, why="needs CUDA (on the CPU: benchmarks/gpumem_phases.py --device sim)",
             key=(r"^\(i", r"phases of")),
        Part("devcheck_overhead", "%%devcheck against plain cells (devcheck_overhead.py)",
             python(str(BENCH / "devcheck_overhead.py"), "--device", "cpu" if dry else "cuda",
                    "--repeat", "1" if dry else "5"),
             90 if dry else 60, key=(r"^\(i+v?\)",)),
        Part("mixing", "mixing table on CUDA (mixing_table.py)",
             (python(str(mixing), "--help") if dry else
              python(str(mixing), "--device", "cuda", "--dtype", "float32", "--out", str(out / "mixing_float32.json")))
             if mixing.exists() else None,
             20 if dry else 90, why="benchmarks/mixing_table.py is not in this checkout",
             key=(r"agree", r"cases")),
    ]


# -- running the parts ---------------------------------------------------------------------------


def start(part: Part, out: Path) -> tuple[subprocess.Popen, Any]:
    log = open(out / f"{part.name}.txt", "w")  # closed when the part ends
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
           "PYTHONUNBUFFERED": "1", **part.env}
    process = subprocess.Popen(part.command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                               start_new_session=True)
    return process, log


def finish(part: Part, process: subprocess.Popen, log: Any, started: float, budget: float, out: Path) -> Outcome:
    try:
        rc = process.wait(timeout=max(budget - (time.monotonic() - started), 0.1))
        status = "passed" if rc == 0 else f"failed (exit {rc})"
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the part and whatever it started
        process.wait()
        status = f"timed out after {budget:.0f} s"
    log.close()
    text = (out / f"{part.name}.txt").read_text(errors="replace")
    keys = [line.rstrip() for line in text.splitlines() if any(re.search(k, line) for k in part.key)]
    return Outcome(part.name, part.title, status, time.monotonic() - started, " ".join(part.command or []), keys[:40])


def run_all(out: Path, dry: bool, seeds: int, budget: float, only: set[str] | None) -> list[Outcome]:
    deadline = time.monotonic() + budget
    outcomes: list[Outcome] = []
    chosen = [p for p in parts(out, dry, seeds) if only is None or p.name in only]
    background = []
    for part in chosen:
        if part.command is None:
            outcomes.append(Outcome(part.name, part.title, f"not available: {part.why}"))
            write_report(out, outcomes, dry)
            continue
        left = deadline - time.monotonic()
        if left < 10:
            outcomes.append(Outcome(part.name, part.title, "not run: out of time", command=" ".join(part.command)))
            continue
        began = time.monotonic()
        process, log = start(part, out)
        if part.background:
            background.append((part, process, log, began))
            continue
        outcomes.append(finish(part, process, log, began, min(part.budget_s, left), out))
        write_report(out, outcomes, dry)
    for part, process, log, began in background:
        outcomes.append(finish(part, process, log, began, min(part.budget_s, max(deadline - began, 10)), out))
    write_report(out, outcomes, dry)
    return outcomes


# -- the report ------------------------------------------------------------------------------------


def corpus_comparison(out: Path) -> list[str]:
    """The two corpus runs seed by seed: the rates side by side and the seeds whose verdicts differ."""
    runs = {}
    for side, name in (("cuda", "fix_corpus_cuda.json"), ("sim", "fix_corpus_sim.json"),
                       ("sim, again", "fix_corpus_sim_again.json")):
        path = out / name
        if path.exists():
            runs[side] = {o["seed"]: o for o in json.loads(path.read_text())}
    if len(runs) < 2:
        return []
    (a, first), (b, second) = list(runs.items())[:2]
    lines = ["| corpus | printed fixes that worked | rate |", "|---|---|---|"]
    for side, outcomes in ((a, first), (b, second)):
        fixes = [o for o in outcomes.values() if o["kind"] in ("mismatch", "stale") and o["verdict"] != "skip"]
        passed = sum(o["verdict"] == "pass" for o in fixes)
        lines.append(f"| {side} | {passed}/{len(fixes)} | {passed / max(1, len(fixes)):.1%} |")
    differ = [s for s in sorted(set(first) & set(second)) if first[s]["verdict"] != second[s]["verdict"]]
    lines.append("")
    lines.append(f"Seeds whose verdict differs ({a} vs {b}): "
                 + (", ".join(f"{s} ({first[s]['family']}-{first[s]['bug']}-{first[s]['entry']}: "
                              f"{first[s]['verdict']} vs {second[s]['verdict']})" for s in differ) or "none"))
    return lines


def environment(dry: bool) -> list[str]:
    lines = [f"- Python {platform.python_version()} on {platform.node()}"]
    try:
        import torch

        lines.append(f"- torch {torch.__version__}, CUDA {torch.version.cuda}")
        if torch.cuda.is_available() and not dry:
            lines.append(f"- GPU: {torch.cuda.get_device_name(0)}")
    except Exception as exc:  # the report says what it could not read
        lines.append(f"- torch: not importable ({exc})")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    lines.append(f"- devinspect at {commit.stdout.strip() or 'an unknown commit'}")
    return lines


def write_report(out: Path, outcomes: list[Outcome], dry: bool) -> None:
    when = datetime.datetime.now().isoformat(timespec="seconds")
    lines = [f"# devinspect GPU check{' (dry run: no GPU, each part in its CPU form)' if dry else ''}", "",
             f"Written {when} by `python benchmarks/gpu_check.py`.", "", *environment(dry), "",
             "| part | outcome | seconds |", "|---|---|---|"]
    lines += [f"| {o.title} | {o.status} | {o.seconds:.0f} |" for o in outcomes]
    for o in outcomes:
        ran = o.status == "passed" or o.status.startswith(("failed", "timed out"))
        lines += ["", f"## {o.title}", "", o.status + (f"; full output: `{o.name}.txt`" if ran else "")]
        if o.command:
            lines.append(f"`{o.command.replace(str(ROOT) + os.sep, '')}`")
        if o.key_lines:
            lines += ["", "```", *o.key_lines, "```"]
    comparison = corpus_comparison(out)
    if comparison:
        lines += ["", "## The fix corpus on both devices", "", *comparison]
    made = [name for name in FIXTURES if (out / name).exists()]
    lines += ["", "## Fixtures", ""]
    lines += [f"- `{name}` → `{FIXTURES[name]}`" for name in made] or ["- none written by this run"]
    (out / "report.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps({"dry_run": dry, "written": when,
                                                  "parts": [dataclasses.asdict(o) for o in outcomes]}, indent=1))


def install_wheels(folder: Path) -> None:
    import importlib.util

    missing = [wheel for module, wheel in CARRIED.items() if importlib.util.find_spec(module) is None]
    if missing:
        print(f"gpu_check: installing {', '.join(missing)} from {folder}", flush=True)
        subprocess.run(python("-m", "pip", "install", "--no-index", "--find-links", str(folder), *missing), check=True)


# -- parts run in their own process by this script ----------------------------------------------


def oom_part(out: Path, dry: bool) -> int:
    """The two out-of-memory cases on the allocator (CUDA's, or the simulated device's in a dry run)."""
    import torch
    from IPython.testing.globalipapp import get_ipython
    from IPython.utils.capture import capture_output

    import devinspect
    from devinspect.render.explanation_text import headline

    if dry:
        from devinspect import testing

        testing.enable(memory="256MiB")
        dev, hidden = "sim:0", 64 * MiB
        module = torch.sim
        capacity = 256 * MiB
    else:
        dev, hidden = "cuda:0", 4 * GiB
        module = torch.cuda
        torch.zeros(1, device=dev)
        capacity = torch.cuda.mem_get_info(0)[1]
    shell = get_ipython()
    shell.run_line_magic("load_ext", "devinspect")
    shell.run_cell(f"import torch\ndev = {dev!r}")
    checks: list[tuple[str, bool]] = []
    cases = []

    def cell(code: str) -> Any:
        with capture_output() as captured:
            result = shell.run_cell(code, store_history=True)
        return result, captured.stdout + "".join(o.data.get("text/plain", "") for o in captured.outputs)

    def case(name: str, result: Any, text: str) -> Any:
        explanation = devinspect.explain(namespace=shell.user_ns)
        cases.append({"name": name, "message": str(result.error_in_exec), "headline": headline(explanation),
                      "explanation": repr(explanation)})
        return explanation.out_of_memory

    result, text = cell(f"big = torch.empty({capacity + (10 * GiB if not dry else 64 * MiB)}, dtype=torch.uint8, "
                        "device=dev)")
    m = case("larger than the device", result, text)
    checks += [("a request larger than the device is an out-of-memory error",
                isinstance(result.error_in_exec, torch.OutOfMemoryError)),
               ("it is said to exceed the device's capacity", m is not None and m.exceeds_capacity),
               ("the headline says no release can make it fit", "no release can make it fit" in cases[-1]["headline"]),
               ("and what would", "what would: a smaller batch" in cases[-1]["headline"])]
    devinspect.release_traceback()
    cell(f"def f():\n    hidden = torch.empty({hidden}, dtype=torch.uint8, device=dev)\n"
         "    raise ValueError('bad shape')\n")
    cell("f()")
    free = capacity - module.memory_reserved(0) if dry else torch.cuda.mem_get_info(0)[0]
    free += module.memory_reserved(0) - module.memory_allocated(0)  # the cache the allocator gives up first
    asked = free + hidden // 2
    result, text = cell(f"x = torch.empty({asked}, dtype=torch.uint8, device=dev)")
    m = case("a local kept by an earlier error", result, text)
    release = m.fixes[0] if m is not None and m.fixes else None
    before = module.memory_allocated(0)
    released = cell(release.code)[0].success if release is not None and release.code else False
    freed = before - module.memory_allocated(0)
    checks += [("the earlier error's local is named", "hidden in f" in cases[-1]["explanation"]
                and "[the traceback of the ValueError from Cell In[" in cases[-1]["explanation"]),
               ("its release leads and says the request then fits", release is not None
                and release.summary.startswith("release the traceback of the ValueError")
                and release.summary.endswith("it fits")),
               ("the printed release runs and frees the local", released and freed == hidden),
               ("the request then fits", cell(f"x = torch.empty({asked}, dtype=torch.uint8, device=dev)")[0].success)]
    cell("del x")
    for label, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'} {label}")
    name = "oom_sim.json" if dry else "oom_cuda.json"
    (out / name).write_text(json.dumps({
        "provenance": f"captured by benchmarks/gpu_check.py on {datetime.date.today().isoformat()}: torch "
                      f"{torch.__version__}, {dev}" + (" (dry run, the simulated device)" if dry else
                                                        f" ({torch.cuda.get_device_name(0)})"),
        "device": dev, "capacity_bytes": capacity, "cases": cases, "checks": dict(checks)}, indent=1))
    return 0 if all(ok for _, ok in checks) else 1


def trace_part(out: Path, count: int = 256) -> int:
    """CUDA's memory history of ``count`` tiny allocations, tagged as %%gpumem tags a line each."""
    import torch

    torch.zeros(1, device="cuda:0")
    tag = torch._C._cuda_setMemoryMetadata
    torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python")
    try:
        t = None
        for i in range(count):
            tag(str(i + 1))
            t = torch.empty(16, device="cuda:0")
        tag("")
        del t
        entries = torch.cuda.memory._snapshot()["device_traces"][0]
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    allocs = [e for e in entries if e.get("action") == "alloc"]
    checks = [("every allocation recorded", len(allocs) >= count),
              ("each carries its tag (the thread's memory metadata)",
               all(type(e.get("user_metadata")) is str and e["user_metadata"].isdigit() for e in allocs[:count])),
              ("each carries its time in µs", all(type(e.get("time_us")) is int for e in entries)),
              ("the tags come in the order they were set",
               [int(e["user_metadata"]) for e in allocs[:count]] == list(range(1, count + 1)))]
    for label, ok in checks:
        print(f"{'PASS' if ok else 'FAIL'} {label}")
    kept = [{k: e[k] for k in ("action", "addr", "size", "stream", "time_us", "user_metadata") if k in e}
            for e in entries]
    provenance = (f"captured on a real GPU by benchmarks/gpu_check.py on {datetime.date.today().isoformat()}: "
                  f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}: {count} torch.empty(16) on cuda:0, "
                  "each after setting the memory metadata to its number, as %%gpumem tags a line")
    lines = ["{", f" \"provenance\": {json.dumps(provenance)},", f" \"count\": {count},", " \"entries\": ["]
    lines += [f"  {json.dumps(e, separators=(',', ':'))}{',' if i < len(kept) - 1 else ''}" for i, e in enumerate(kept)]
    (out / "cuda_tiny_trace.json").write_text("\n".join([*lines, " ]", "}"]) + "\n")  # one entry a line
    return 0 if all(ok for _, ok in checks) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-report"), help="the report's directory")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: each part in its CPU form")
    parser.add_argument("--seeds", type=int, default=56, help="fix corpus seeds on each device (from 0)")
    parser.add_argument("--budget", type=float, default=470, help="seconds for all parts together")
    parser.add_argument("--only", action="append", metavar="PART", help="run only this part (repeatable)")
    parser.add_argument("--wheels", type=Path, help="install the packages the GPU machine lacks from here first")
    parser.add_argument("--part", choices=("oom", "trace"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part == "oom":
        return oom_part(args.out, args.dry_run)
    if args.part == "trace":
        return trace_part(args.out)
    if args.wheels is not None:
        install_wheels(args.wheels)
    if not args.dry_run:
        import torch

        if not torch.cuda.is_available():
            print("gpu_check: no CUDA GPU here; --dry-run runs the plumbing in its CPU form")
            return 1
    outcomes = run_all(args.out, args.dry_run, args.seeds, args.budget, set(args.only) if args.only else None)
    print((args.out / "report.md").read_text())
    return 0 if all(o.status == "passed" or o.status.startswith("not available") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
