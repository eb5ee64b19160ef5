"""Everything that must be checked on a real GPU, in one command, written up as a report.

Run on a machine with one CUDA GPU (about 8 minutes on an H200 with 16 cores; no network):

    python benchmarks/gpu_check.py --out gpu-report [--wheels wheels]

Each part runs in a process of its own, with a time budget; a part that fails or runs out
of time is reported as such and the others go on. First, one at a time on a quiet machine,
what is timed or reads the GPU's memory:

1. The overheads: ``%%gpumem`` on a GPT-2 training step and on 2,000 tiny allocations against
   plain cells (``gpumem_lines.py --device cuda``), CUDA's memory history as %%gpumem tags it
   (a trace of 256 tiny allocations, each entry checked for the tag and the time) and its
   replay on the CPU (``gpumem_cuda_replay.py``), where %%gpumem's time goes
   (``gpumem_phases.py``), ``%%devcheck`` (``devcheck_overhead.py``).
2. ``benchmarks/gpu_validate.py``: %gpumem's figures against allocations of known size; out of
   memory on the real allocator (a request larger than the GPU; a 4 GiB local kept by an
   earlier error's traceback).

Then, side by side (one CPU thread each), what only checks answers, on CUDA and on the
simulated device (in processes with the GPU hidden, ``CUDA_VISIBLE_DEVICES=""``: it refuses to
start beside a real accelerator; these start first, niced, and run all along) from the same seeds:

3. The mismatch corpus (``fix_corpus.py``, ``--seeds`` seeds, 56 by default), the device-error
   corpus (``--corpus errors``: a dropped move, NumPy, pinning, workers, generators; the
   generator fixes only a GPU can run are run too) and the mutation corpus
   (``mutation_corpus.py``, one process per program; the fix printed under the failing cell,
   ``--mutation-entries`` for the other entry points).
4. The mixing tables (``mixing_table.py``, one process per dtype and side) in float32 and in
   the six other dtypes the suite checks the simulated device in (float64, float16, bfloat16,
   complex64, int64, bool; the ops the suite compares in each).
5. ``pytest -k cuda``: every CUDA case of the suite, the parametrised ones and the notebook
   (nbclient) ones included.

The report is a directory (``--out``): ``report.md``, ``summary.json``, each part's full
output (``*.txt``), and the files that become the CPU tests' fixtures once copied to
``tests/fixtures/`` (the report lists them): ``gpumem_cuda.json``, ``mixing_<dtype>.json``,
``oom_cuda.json``, ``cuda_tiny_trace.json``. The report is kept in the repository as
``benchmarks/results/gpu-<date>-<gpu>.md`` (``--results``): the versions, each part's
figures, and every difference between CUDA and the simulated device (each corpus's seeds
whose verdicts differ, each dtype's mixing cases that differ).

The GPU machine has torch, pytest, transformers and pandas but not IPython and the notebook
packages. Fetch them here, for that machine's Python (3.12, Linux x86-64), with
``python benchmarks/gpu_check.py --download-wheels .whl`` (:data:`WHEELS`: each pinned, the
packages they need included), carry the folder, and install them there with ``pip install
--no-index --no-deps --target DIR .whl/*.whl`` and ``PYTHONPATH=DIR``; or pass ``--wheels
DIR`` to install the missing ones from DIR with their dependencies.

``--dry-run`` runs the same plumbing on a machine without a GPU, each part in its CPU form
(the CUDA cases collected, not run; the corpora, the tables and the OOM cases on the
simulated device, on both sides; the overheads on the CPU): ``tests/test_gpu_check.py`` runs it so.
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
#: Wheels the GPU machine lacks, by the module each provides (``--wheels``: installed when missing).
CARRIED = {"IPython": "ipython", "ipywidgets": "ipywidgets", "anywidget": "anywidget", "nbclient": "nbclient",
           "nbformat": "nbformat", "ipykernel": "ipykernel", "jupyter_client": "jupyter_client",
           "expecttest": "expecttest", "nbconvert": "nbconvert"}
#: Those packages and every package they need that the GPU machine's image lacks (its Python 3.12
#: and torch 2.11 have the rest), pinned to the versions the suite runs with here:
#: ``--download-wheels DIR`` fetches them for that machine, to install with ``--no-deps``.
WHEELS = (
    "anywidget==0.11.0", "asttokens==3.0.2", "beautifulsoup4==4.15.0", "bleach==6.4.0", "comm==0.2.3",
    "debugpy==1.8.22", "defusedxml==0.7.1", "executing==2.3.0", "expecttest==0.3.0", "fastjsonschema==2.22.3",
    "ipykernel==7.4.0", "ipython==9.18.1", "ipython-pygments-lexers==1.1.1", "ipywidgets==8.1.9", "jedi==0.20.1",
    "jsonschema==4.26.0", "jsonschema-specifications==2025.9.1", "jupyter-client==8.10.0", "jupyter-core==5.9.1",
    "jupyterlab-pygments==0.3.0", "jupyterlab-widgets==3.0.17", "matplotlib-inline==0.2.2", "mistune==3.4.0",
    "nbclient==0.11.0", "nbconvert==7.17.2", "nbformat==5.11.1", "nest-asyncio2==1.7.4", "pandocfilters==1.5.1",
    "parso==0.8.7", "pexpect==4.9.0", "platformdirs==4.14.8", "prompt-toolkit==3.0.53", "psygnal==0.16.1",
    "ptyprocess==0.7.0", "pure-eval==0.2.4", "pyzmq==27.3.0", "referencing==0.37.0", "rpds-py==2026.9.1",
    "soupsieve==4.1.3", "stack-data==0.6.3", "tornado==6.6.1", "traitlets==5.16.1", "wcwidth==0.9.4",
    "webencodings==0.6.1", "widgetsnbextension==4.0.16",
)
#: The dtypes whose mixing table is captured on CUDA: float32's whole, and the ones the suite
#: checks the simulated device in (each held to its own table once captured).
DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64", "int64", "bool")
#: Files of the report that are fixtures of the CPU tests: where each goes.
FIXTURES = {"gpumem_cuda.json": "tests/fixtures/gpumem_cuda.json",
            **{f"mixing_{dtype}.json": f"tests/fixtures/mixing_{dtype}.json" for dtype in DTYPES},
            "oom_cuda.json": "tests/fixtures/oom_cuda.json",
            "cuda_tiny_trace.json": "tests/fixtures/cuda_tiny_trace.json"}
#: Parts run side by side take one CPU thread each (16 cores, many processes).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
RESULTS = ROOT / "benchmarks" / "results"
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


def mutation_programs(dry: bool) -> list[str]:
    """The mutation corpus's programs, one process each (the first alone in a dry run)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from programs import ARCHITECTURES

    names = [a.name for a in ARCHITECTURES]
    return names[:1] if dry else names


def parts(out: Path, dry: bool, seeds: int, mutation_entries: str = "plain") -> list[Part]:
    """The parts, in order, with their commands for a GPU run or a dry run.

    First, one at a time on a quiet GPU, what is timed or reads the GPU's memory; then, side by side
    (one CPU thread each), what only checks answers: the corpora and the mixing tables on CUDA, from
    the same seeds as on the simulated device (the GPU hidden, niced, from the start), and
    ``pytest -k cuda``."""
    count = str(min(seeds, 2) if dry else seeds)
    gpu = "sim" if dry else "cuda"
    gpu_env = {**ONE_THREAD, **(HIDE_GPU if dry else {})}
    sim_env = {**ONE_THREAD, **HIDE_GPU}
    again = "sim_again" if dry else "cuda"  # the GPU side's files in a dry run (the simulated device again)
    mixing = BENCH / "mixing_table.py"
    dtypes = "float32,bfloat16" if dry else ",".join(DTYPES)
    mixing_ops = ["--ops", "add,clamp_min,select_scatter"] if dry else ["--suite-ops"]
    entries = "plain" if dry else mutation_entries
    corpus_keys = (r"^printed fixes", r"^lost data", r"^invented")
    mutation_keys = (r"^printed fixes that work", r"^fixes that remove", r"^lost:")
    pytest_args = ["-m", "pytest", "-k", "cuda", "-p", "no:cacheprovider", "-q", "-rfE"]
    alone = [
        Part("gpumem_overhead", "%%gpumem against plain cells: a GPT-2 step and 2,000 tiny allocations "
             "(gpumem_lines.py --device cuda)",
             None if dry else python(str(BENCH / "gpumem_lines.py"), "--device", "cuda", "--repeat", "5"),
             90, why="needs CUDA (on the CPU it measures the simulated device: benchmarks/gpumem_lines.py)",
             key=(r"^\(i", r"pytorch_memlab", r"x\b")),
        Part("trace", "CUDA's memory history as %%gpumem tags it",
             None if dry else python(str(BENCH / "gpu_check.py"), "--part", "trace", "--out", str(out)),
             30, why="needs CUDA (the replay below uses tests/fixtures/cuda_tiny_trace.json)",
             key=(r"^(PASS|FAIL) ",)),
        Part("gpumem_replay", "%%gpumem's own cost, the trace replayed on the CPU (gpumem_cuda_replay.py)",
             python(str(BENCH / "gpumem_cuda_replay.py"), "--repeat", "1" if dry else "7",
                    *([] if dry else ["--trace", str(out / "cuda_tiny_trace.json")])),
             60 if dry else 40, key=(r"x +[\d.]+x", r"^ +plain")),
        Part("gpumem_phases", "where %%gpumem's time goes, phase by phase (gpumem_phases.py --device cuda)",
             None if dry else python(str(BENCH / "gpumem_phases.py"), "--device", "cuda", "--repeat", "5"),
             45, why="needs CUDA (on the CPU: benchmarks/gpumem_phases.py --device sim)",
             key=(r"^\(i", r"phases of", r"x\)")),
        Part("devcheck_overhead", "%%devcheck against plain cells (devcheck_overhead.py)",
             python(str(BENCH / "devcheck_overhead.py"), "--device", "cpu" if dry else "cuda",
                    "--repeat", "1" if dry else "3"),
             90 if dry else 45, key=(r"^\(i+v?\)",)),
        Part("gpu_validate", "%gpumem's figures (gpu_validate.py)",
             python(str(BENCH / "gpu_validate.py"), *([] if dry else ["--capture", str(out / "gpumem_cuda.json")])),
             30 if dry else 40, key=(r"^(PASS|FAIL) ", r"checks passed", r"no CUDA GPU")),
        Part("oom", "out of memory on the real allocator" + (" (no GPU: the simulated device)" if dry else ""),
             python(str(BENCH / "gpu_check.py"), "--part", "oom", "--out", str(out), *(["--dry-run"] if dry else [])),
             60 if dry else 40, HIDE_GPU if dry else {}, key=(r"^(PASS|FAIL) ",)),
    ]
    together = [
        Part("corpus_sim", "mismatch corpus, simulated device (the same seeds, GPU hidden)",
             python(str(BENCH / "fix_corpus.py"), "--device", "sim", "--count", count,
                    "--json", str(out / "fix_corpus_sim.json"), "--show-failures", "10"),
             300, sim_env, key=corpus_keys, background=True),
        Part("corpus_cuda", f"mismatch corpus, {gpu}" + (" (no GPU: the simulated device)" if dry else ""),
             python(str(BENCH / "fix_corpus.py"), "--device", gpu, "--count", count,
                    "--json", str(out / f"fix_corpus_{again}.json"), "--show-failures", "10"),
             300, gpu_env, key=corpus_keys, background=True),
        Part("errors_sim", "device-error corpus, simulated device (the same seeds, GPU hidden)",
             python(str(BENCH / "fix_corpus.py"), "--corpus", "errors", "--device", "sim", "--count", count,
                    "--json", str(out / "error_corpus_sim.json"), "--show-failures", "10"),
             300, sim_env, key=corpus_keys, background=True),
        Part("corpus_errors", f"device-error corpus, {gpu}" + (" (no GPU: the simulated device)" if dry else ""),
             python(str(BENCH / "fix_corpus.py"), "--corpus", "errors", "--device", gpu, "--count", count,
                    "--json", str(out / f"error_corpus_{again}.json"), "--show-failures", "10"),
             300, gpu_env, key=corpus_keys, background=True),
    ]
    for dtype in dtypes.split(","):  # a process per dtype and side: each table takes a minute or two
        together += [
            Part(f"mixing_sim_{dtype}", f"mixing table in {dtype}, simulated device (GPU hidden)",
                 python(str(mixing), "--device", "sim", "--dtype", dtype, *mixing_ops,
                        "--out", str(out / f"mixing_sim_{dtype}.json")) if mixing.exists() else None,
                 300, sim_env, why="benchmarks/mixing_table.py is not in this checkout", key=(r"cases",),
                 background=True),
            Part(f"mixing_{dtype}", f"mixing table in {dtype}, {gpu} (mixing_table.py)",
                 python(str(mixing), "--device", gpu, "--dtype", dtype, *mixing_ops,
                        "--out", str(out / (f"mixing_dry_{dtype}.json" if dry else f"mixing_{dtype}.json")))
                 if mixing.exists() else None,
                 300, gpu_env, why="benchmarks/mixing_table.py is not in this checkout", key=(r"cases",),
                 background=True)]
    for program in mutation_programs(dry):
        for side, env in (("sim", sim_env), (gpu, gpu_env)):
            name = f"mutations_{'sim' if side == 'sim' and env is sim_env else again}_{program}"
            together.append(Part(
                name, f"mutation corpus, {program}, {'simulated device' if env is sim_env else gpu}",
                python(str(BENCH / "mutation_corpus.py"), "--device", side, "--only", program,
                       "--entries", entries, "--json", str(out / f"{name}.json"),
                       "--show-failures", "5"),
                300, env, key=mutation_keys, background=True))
    together.append(Part("pytest", "pytest -k cuda" + (" (collected only: no GPU)" if dry else ""),
                         python(*pytest_args, *(["--collect-only"] if dry else ["--junitxml", str(out / "pytest_cuda.xml")])),
                         60 if dry else 300, gpu_env,
                         key=(r"\d+ (passed|failed|tests? collected|selected)", r"^(FAILED|ERROR) "), background=True))
    # The simulated device's side needs no GPU: it starts first, niced, and runs all along; the
    # GPU's side starts once nothing is timed.
    hidden = [dataclasses.replace(p, command=["nice", "-n", "19", *p.command] if p.command else None)
              for p in together if p.env.get("CUDA_VISIBLE_DEVICES") == "" and not dry]
    return hidden + alone + [p for p in together if not hidden or p.env.get("CUDA_VISIBLE_DEVICES") != ""]


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


def run_all(out: Path, dry: bool, seeds: int, budget: float, only: set[str] | None,
            results: Path | None = None, mutation_entries: str = "plain") -> list[Outcome]:
    deadline = time.monotonic() + budget
    outcomes: list[Outcome] = []
    gpu = gpu_name(dry)
    chosen = [p for p in parts(out, dry, seeds, mutation_entries=mutation_entries) if only is None or p.name in only]
    background = []
    for part in chosen:
        if part.command is None:
            outcomes.append(Outcome(part.name, part.title, f"not available: {part.why}"))
            write_report(out, outcomes, dry, gpu=gpu)
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
        write_report(out, outcomes, dry, gpu=gpu)
    for part, process, log, began in background:
        outcomes.append(finish(part, process, log, began, min(part.budget_s, max(deadline - began, 10)), out))
    kept = write_report(out, outcomes, dry, results, gpu=gpu)
    if kept is not None:
        print(f"gpu_check: the report is kept as {kept.relative_to(ROOT) if kept.is_relative_to(ROOT) else kept}")
    return outcomes


# -- the report ------------------------------------------------------------------------------------


#: Each corpus's two runs: (title, the GPU side's file, the simulated device's), as the parts write them.
CORPORA = {"mismatches": ("The mismatch corpus", ("fix_corpus_cuda.json", "fix_corpus_sim_again.json"),
                          "fix_corpus_sim.json"),
           "errors": ("The device-error corpus", ("error_corpus_cuda.json", "error_corpus_sim_again.json"),
                      "error_corpus_sim.json")}


def corpus_comparison(out: Path, corpus: str = "mismatches") -> list[str]:
    """A corpus's two runs seed by seed: the rates side by side and the seeds whose verdicts differ."""
    _, gpu_files, sim_file = CORPORA[corpus]
    runs = {}
    for side, name in ((("cuda", gpu_files[0]), ("sim", sim_file), ("sim, again", gpu_files[1]))):
        path = out / name
        if path.exists():
            runs[side] = {o["seed"]: o for o in json.loads(path.read_text())}
    if len(runs) < 2:
        return []
    (a, first), (b, second) = list(runs.items())[:2]
    lines = ["| corpus | printed fixes that worked | rate |", "|---|---|---|"]
    for side, outcomes in ((a, first), (b, second)):
        fixes = [o for o in outcomes.values() if o["kind"] in ("mismatch", "stale") and o["verdict"] != "skip"]
        if corpus != "mismatches":
            fixes = [o for o in outcomes.values() if o["verdict"] != "skip"]
        passed = sum(o["verdict"] == "pass" for o in fixes)
        lines.append(f"| {side} | {passed}/{len(fixes)} | {passed / max(1, len(fixes)):.1%} |")
    differ = [s for s in sorted(set(first) & set(second)) if first[s]["verdict"] != second[s]["verdict"]]
    lines.append("")
    lines.append(f"Seeds whose verdict differs ({a} vs {b}): "
                 + (", ".join(f"{s} ({first[s]['family']}-{first[s]['bug']}-{first[s]['entry']}: "
                              f"{first[s]['verdict']} vs {second[s]['verdict']})" for s in differ) or "none"))
    return lines


def mutation_comparison(out: Path) -> list[str]:
    """The mutation corpus on both sides, mutant and entry point by mutant and entry point."""
    sides: dict[str, dict[tuple[str, str], dict]] = {}
    for path in sorted(out.glob("mutations_*.json")):
        side = "sim" if path.name.startswith("mutations_sim_") and not path.name.startswith("mutations_sim_again_") \
            else "cuda" if path.name.startswith("mutations_cuda_") else "sim, again"
        for mutant in json.loads(path.read_text()).get("mutants", []):
            if mutant.get("probe") != "effect":
                continue
            for entry, run in mutant["entries"].items():
                if run["verdict"] != "skip":
                    sides.setdefault(side, {})[(mutant["mutant"], entry)] = run
    if len(sides) < 2:
        return []
    order = [s for s in ("cuda", "sim, again", "sim") if s in sides]
    (a, first), (b, second) = (order[0], sides[order[0]]), (order[-1], sides[order[-1]])
    lines = ["| corpus | printed fixes that work | cause removed | rate |", "|---|---|---|---|"]
    for side, runs in ((a, first), (b, second)):
        works = sum(r["verdict"] == "pass" for r in runs.values())
        gone = sum(bool(r.get("cause_removed")) for r in runs.values())
        lines.append(f"| {side} | {works}/{len(runs)} | {gone}/{len(runs)} | {works / max(1, len(runs)):.1%} |")
    differ = [k for k in sorted(set(first) & set(second)) if first[k]["verdict"] != second[k]["verdict"]]
    lines.append("")
    lines.append(f"Mutants whose verdict differs ({a} vs {b}): "
                 + (", ".join(f"{m} [{e}] ({first[(m, e)]['verdict']} vs {second[(m, e)]['verdict']})"
                              for m, e in differ) or "none"))
    only = sorted(set(first) ^ set(second))
    if only:
        lines.append(f"Judged on one side only (a part that ran out of time): {len(only)}")
    return lines


def mixing_comparison(out: Path) -> list[str]:
    """Each dtype's table on the simulated device against CUDA's: the rate, and every case that differs."""
    sys.path.insert(0, str(ROOT / "tests"))
    import types

    import opinfo_mixing

    lines = []
    for dtype in DTYPES:
        cuda, sim = out / f"mixing_{dtype}.json", out / f"mixing_sim_{dtype}.json"
        if not cuda.exists():
            cuda = out / f"mixing_dry_{dtype}.json"  # a dry run's other side
        if not (cuda.exists() and sim.exists()):
            continue
        reference, here = json.loads(cuda.read_text()), json.loads(sim.read_text())
        table = types.SimpleNamespace(cases=here["cases"], unrunnable=here.get("unrunnable", []))
        agreement = opinfo_mixing.compare(table, reference["cases"], reference.get("unrunnable", ()))
        target = "meets" if agreement.rate >= 0.995 else "misses"
        heading = (f"### {dtype}: {agreement.agree}/{agreement.shared} cases agree ({agreement.rate:.2%}; "
                   f"{target} the 99.5% target)")
        lines += ["", heading, ""]
        lines += [f"- `{key}`: simulated device {mine}, CUDA {theirs}" for key, mine, theirs in agreement.differ] \
            or ["- no case differs"]
    return lines


def gpu_name(dry: bool) -> str:
    """The GPU's name as the driver gives it (``nvidia-smi``: this process never initialises CUDA,
    which would hold a context on the GPU the parts measure)."""
    if dry:
        return "no GPU (dry run)"
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              check=False, capture_output=True, text=True, timeout=30)
        first = done.stdout.strip().splitlines()[0]
        return first.split(",")[0].strip() if done.returncode == 0 and first else "an unknown GPU"
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "an unknown GPU"


def report_path(results: Path, gpu: str, day: datetime.date) -> Path:
    """``benchmarks/results/gpu-<date>-<gpu>.md``: the GPU's name in lower case, words joined by hyphens."""
    slug = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-") or "gpu"
    return results / f"gpu-{day.isoformat()}-{slug}.md"


def environment(dry: bool, gpu: str) -> list[str]:
    """The versions the figures were measured with, read without initialising CUDA."""
    import importlib.metadata

    lines = [f"- Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs"]
    try:
        import torch

        lines.append(f"- torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
                     f"{torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else 'none'}")
        lines.append(f"- the host's CPU kernels: {torch.backends.cpu.get_cpu_capability()}; a 3-D convolution of a "
                     f"bfloat16 host input takes {_host_conv3d_backend(torch)} (the simulated device answers as "
                     "with the plain kernel)")
    except Exception as exc:  # the report says what it could not read
        lines.append(f"- torch: not importable ({exc})")
    lines.append(f"- GPU: {gpu}")
    versions = []
    for package in ("ipython", "ipywidgets", "transformers", "numpy", "pytest"):
        try:
            versions.append(f"{package} {importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{package} not installed")
    lines.append("- " + ", ".join(versions))
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=False, capture_output=True,
                                text=True).stdout.strip()
    except OSError:  # no git there
        commit = ""
    lines.append(f"- devinspect at {commit or 'an unknown commit (no git history here)'}")
    return lines


def _host_conv3d_backend(torch: Any) -> str:
    x, w = torch.ones(1, 1, 2, 2, 2, dtype=torch.bfloat16), torch.ones(1, 1, 1, 1, 1, dtype=torch.bfloat16)
    try:
        return torch._C._select_conv_backend(x, w, None, [1] * 3, [0] * 3, [1] * 3, False, [0] * 3, 1, None).name
    except Exception as exc:
        return f"an unknown kernel ({type(exc).__name__})"


def write_report(out: Path, outcomes: list[Outcome], dry: bool, results: Path | None = None,
                 gpu: str | None = None) -> Path | None:
    """``report.md`` and ``summary.json`` in ``out``; with ``results``, the report there too, under the
    date and the GPU's name (returned)."""
    gpu = gpu or gpu_name(dry)
    when = datetime.datetime.now().isoformat(timespec="seconds")
    lines = [f"# devinspect GPU check{' (dry run: no GPU, each part in its CPU form)' if dry else ''}: {gpu}", "",
             f"Written {when} by `python benchmarks/gpu_check.py`.", "", "## Versions", "", *environment(dry, gpu),
             "", "## Parts", "", "| part | outcome | seconds |", "|---|---|---|"]
    lines += [f"| {o.title} | {o.status} | {o.seconds:.0f} |" for o in outcomes]
    for o in outcomes:
        ran = o.status == "passed" or o.status.startswith(("failed", "timed out"))
        lines += ["", f"### {o.title}", "", o.status + (f"; full output: `{o.name}.txt`" if ran else "")]
        if o.command:
            lines.append(f"`{o.command.replace(str(ROOT) + os.sep, '')}`")
        if o.key_lines:
            lines += ["", "```", *o.key_lines, "```"]
    lines += ["", "## Differences between CUDA and the simulated device"]
    comparison = corpus_comparison(out)
    if comparison:
        lines += ["", "### The fix corpus on both devices", "", *comparison]
    errors = corpus_comparison(out, "errors")
    if errors:
        lines += ["", "### The device-error corpus on both devices", "", *errors]
    mutations = mutation_comparison(out)
    if mutations:
        lines += ["", "### The mutation corpus on both devices", "", *mutations]
    try:
        mixing = mixing_comparison(out)
    except Exception as exc:  # the report says what it could not compare
        mixing = ["", f"The mixing tables could not be compared ({type(exc).__name__}: {exc})."]
    if mixing:
        lines += ["", "### The mixing tables, dtype by dtype (simulated device against CUDA)", *mixing]
    if not (comparison or errors or mutations or mixing):
        lines += ["", "Nothing to compare: no part wrote both sides."]
    made = [name for name in FIXTURES if (out / name).exists()]
    lines += ["", "## Fixtures", ""]
    lines += [f"- `{name}` → `{FIXTURES[name]}`" for name in made] or ["- none written by this run"]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    (out / "summary.json").write_text(json.dumps({"dry_run": dry, "written": when, "gpu": gpu,
                                                  "parts": [dataclasses.asdict(o) for o in outcomes]}, indent=1))
    if results is None:
        return None
    results.mkdir(parents=True, exist_ok=True)
    kept = report_path(results, gpu, datetime.date.today())
    kept.write_text(text.replace(str(ROOT) + os.sep, ""))
    return kept


def download_wheels(folder: Path) -> int:
    """:data:`WHEELS` for the GPU machine (CPython 3.12, Linux x86-64), into ``folder``."""
    platforms = [f"--platform={p}" for p in ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
                                              "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                                              "manylinux1_x86_64")]
    return subprocess.run(python("-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                                 "--implementation", "cp", *platforms, "-d", str(folder), *WHEELS),
                          check=False).returncode


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
    parser.add_argument("--budget", type=float, default=480, help="seconds for all parts together")
    parser.add_argument("--results", type=Path, help="where the report is kept as gpu-<date>-<gpu>.md "
                                                     "(default: benchmarks/results; none in a dry run)")
    parser.add_argument("--only", action="append", metavar="PART", help="run only this part (repeatable)")
    parser.add_argument("--wheels", type=Path, help="install the packages the GPU machine lacks from here first")
    parser.add_argument("--mutation-entries", default="plain",
                        help="the mutation corpus's entry points on each side (plain: the fix printed under the "
                             "failing cell; plain,devcheck,devices,button: all four, four times as long)")
    parser.add_argument("--download-wheels", type=Path, metavar="DIR",
                        help="fetch the wheels the GPU machine lacks into DIR (here, with network) and stop")
    parser.add_argument("--part", choices=("oom", "trace"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.download_wheels is not None:
        return download_wheels(args.download_wheels)
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
    results = args.results if args.results is not None else (None if args.dry_run else RESULTS)
    outcomes = run_all(args.out, args.dry_run, args.seeds, args.budget, set(args.only) if args.only else None,
                       results, args.mutation_entries)
    print((args.out / "report.md").read_text())
    return 0 if all(o.status == "passed" or o.status.startswith("not available") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
