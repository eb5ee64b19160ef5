"""benchmarks/gpu_check.py, the one command for a GPU: its plumbing, checked without one."""

from __future__ import annotations

import datetime
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses read their annotations from there
    spec.loader.exec_module(module)
    return module


def test_a_part_that_fails_or_runs_out_of_time_does_not_stop_the_others(tmp_path, monkeypatch):
    check = gpu_check()
    say = [sys.executable, "-c"]
    monkeypatch.setattr(check, "parts", lambda out, dry, seeds, **_: [
        check.Part("fails", "a part that fails", [*say, "print('FAIL one'); raise SystemExit(3)"], 30, key=(r"^FAIL",)),
        check.Part("sleeps", "a part past its budget", [*say, "import time; time.sleep(60)"], 1),
        check.Part("absent", "a part without what it needs", None, 5, why="needs CUDA"),
        check.Part("passes", "a part that passes", [*say, "print('PASS two')"], 30, key=(r"^PASS",)),
        check.Part("late", "a part in the background", [*say, "print('PASS three')"], 30, key=(r"^PASS",),
                   background=True),
    ])
    outcomes = check.run_all(tmp_path, True, 1, 60, None)
    assert {o.name: o.status for o in outcomes} == {
        "fails": "failed (exit 3)", "sleeps": "timed out after 1 s", "absent": "not available: needs CUDA",
        "passes": "passed", "late": "passed"}
    report = (tmp_path / "report.md").read_text()
    assert "| a part that fails | failed (exit 3) |" in report and "FAIL one" in report and "PASS three" in report
    assert "full output: `passes.txt`" in report and "full output: `absent.txt`" not in report
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["dry_run"] is True and [p["name"] for p in summary["parts"]][-1] == "late"


def test_out_of_time_parts_are_said_not_run(tmp_path, monkeypatch):
    check = gpu_check()
    monkeypatch.setattr(check, "parts", lambda out, dry, seeds, **_: [
        check.Part("first", "the first part", [sys.executable, "-c", "import time; time.sleep(30)"], 5),
        check.Part("second", "the second part", [sys.executable, "-c", "pass"], 30)])
    outcomes = check.run_all(tmp_path, True, 1, 13, None)  # 13 s for all: after the first, under 10 s left
    assert [o.status for o in outcomes] == ["timed out after 5 s", "not run: out of time"]


def test_the_report_compares_the_corpus_seed_by_seed(tmp_path):
    check = gpu_check()
    def run(verdicts):
        return [{"seed": s, "family": "gpt2", "bug": "input", "entry": "plain", "kind": "mismatch", "verdict": v}
                for s, v in enumerate(verdicts)]
    (tmp_path / "fix_corpus_cuda.json").write_text(json.dumps(run(["pass", "fail", "pass", "skip"])))
    (tmp_path / "fix_corpus_sim.json").write_text(json.dumps(run(["pass", "pass", "pass", "skip"])))
    lines = check.corpus_comparison(tmp_path)
    assert "| cuda | 2/3 | 66.7% |" in lines and "| sim | 3/3 | 100.0% |" in lines
    assert lines[-1] == "Seeds whose verdict differs (cuda vs sim): 1 (gpt2-input-plain: fail vs pass)"


@pytest.mark.slow
def test_the_dry_run_runs_every_part_in_its_cpu_form(tmp_path):
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--out", str(out),
                           "--seeds", "1", "--budget", "500"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    summary = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["parts"]}
    statuses = {name: p["status"] for name, p in summary.items()}
    assert done.returncode == 0, statuses
    for name in ("pytest", "gpu_validate", "corpus_cuda", "corpus_sim", "corpus_errors", "oom", "gpumem_replay",
                 "devcheck_overhead"):
        assert statuses[name] == "passed", (name, statuses[name])
    assert statuses["trace"].startswith("not available: needs CUDA")
    assert statuses["gpumem_overhead"].startswith("not available: needs CUDA")
    for dtype in ("float32", "bfloat16"):
        for name in (f"mixing_{dtype}", f"mixing_sim_{dtype}"):
            assert statuses[name] == "passed" or statuses[name].startswith("not available"), (name, statuses[name])
    assert any("tests collected" in line for line in summary["pytest"]["key_lines"])  # the CUDA cases, collected
    assert len([line for line in summary["oom"]["key_lines"] if line.startswith("PASS")]) == 8
    report = (out / "report.md").read_text()
    assert "## The fix corpus on both devices" in report and "Seeds whose verdict differs" in report
    oom = json.loads((out / "oom_sim.json").read_text())
    assert [c["name"] for c in oom["cases"]] == ["larger than the device", "a local kept by an earlier error"]


def test_the_plan_times_alone_first_then_checks_both_devices_side_by_side(tmp_path):
    check = gpu_check()
    plan = check.parts(tmp_path, False, 56)
    names = [p.name for p in plan]
    alone = [p.name for p in plan if not p.background]
    last_alone = max(names.index(n) for n in alone)
    # Nothing that uses the GPU runs beside what is timed or reads its memory: only the simulated
    # device's side (the GPU hidden, niced) has started by then.
    before = [p for p in plan[:last_alone] if p.background]
    assert before and all(p.env["CUDA_VISIBLE_DEVICES"] == "" and p.command[:3] == ["nice", "-n", "19"]
                          for p in before)
    assert {"gpumem_overhead", "gpumem_replay", "devcheck_overhead", "gpu_validate", "oom"} <= set(alone)
    together = {p.name: p for p in plan if p.background}
    pairs = [("corpus_cuda", "corpus_sim"), ("corpus_errors", "errors_sim"),
             *((f"mixing_{d}", f"mixing_sim_{d}") for d in check.DTYPES)]
    for cuda, sim in pairs:
        assert together[sim].env["CUDA_VISIBLE_DEVICES"] == "" and "CUDA_VISIBLE_DEVICES" not in together[cuda].env
        # the same seeds (or ops) on both sides: the commands differ in the device and the file only
        differ = [(a, b) for a, b in zip(together[cuda].command, together[sim].command[3:]) if a != b]
        assert differ and all(a in ("cuda",) or b == "sim" or a.endswith(".json") for a, b in differ), differ
    assert all("--suite-ops" in together[f"mixing_{d}"].command for d in check.DTYPES if d != "float32")
    programs = check.mutation_programs(False)
    assert {f"mutations_cuda_{p}" for p in programs} | {f"mutations_sim_{p}" for p in programs} <= set(together)
    assert {f"mixing_{d}.json" for d in check.DTYPES} <= set(check.FIXTURES)


def _outcomes(check):
    return [check.Outcome("gpumem_overhead", "%%gpumem against plain cells", "passed", 61.0, "python x.py",
                          ["(i) GPT-2 step: plain 16.0 ms, %%gpumem 18.1 ms, 1.13x"]),
            check.Outcome("trace", "CUDA's memory history", "timed out after 30 s", 30.0, "python y.py", []),
            check.Outcome("mixing_bool", "mixing table in bool, cuda", "not run: out of time")]


def test_the_report_is_kept_by_date_and_gpu_with_each_figure_and_each_difference(tmp_path):
    check = gpu_check()
    out, results = tmp_path / "out", tmp_path / "results"
    out.mkdir()

    def corpus(verdicts):
        return json.dumps([{"seed": s, "family": "gpt2", "bug": "input", "entry": "plain", "kind": "mismatch",
                            "verdict": v} for s, v in enumerate(verdicts)])
    (out / "fix_corpus_cuda.json").write_text(corpus(["pass", "pass", "fail"]))
    (out / "fix_corpus_sim.json").write_text(corpus(["pass", "pass", "pass"]))
    (out / "error_corpus_cuda.json").write_text(corpus(["pass", "fail"]))
    (out / "error_corpus_sim.json").write_text(corpus(["pass", "pass"]))

    def mutants(verdict):
        return json.dumps({"mutants": [{"mutant": "mamba#3", "probe": "effect", "entries": {
            "plain": {"verdict": verdict, "cause_removed": True}, "button": {"verdict": "pass", "cause_removed": True}}}]})
    (out / "mutations_cuda_mamba.json").write_text(mutants("fail"))
    (out / "mutations_sim_mamba.json").write_text(mutants("pass"))

    def table(device, cases):
        return json.dumps({"device": device, "dtype": "bfloat16", "cases": cases, "unrunnable": []})
    (out / "mixing_bfloat16.json").write_text(table("cuda", {"add.#0#input": "ok", "nn.functional.conv3d.#0#input":
                                                              "device"}))
    (out / "mixing_sim_bfloat16.json").write_text(table("sim", {"add.#0#input": "ok", "nn.functional.conv3d.#0#input":
                                                                 "other:NotImplementedError"}))
    kept = check.write_report(out, _outcomes(check), False, results, gpu="NVIDIA H200")
    assert kept == results / f"gpu-{datetime.date.today().isoformat()}-nvidia-h200.md"
    text = kept.read_text()
    assert text == (out / "report.md").read_text().replace(str(ROOT) + "/", "")
    assert "# devinspect GPU check: NVIDIA H200" in text and "## Versions" in text
    assert f"torch {torch.__version__}" in text and "- GPU: NVIDIA H200" in text
    assert "1.13x" in text and "timed out after 30 s" in text and "not run: out of time" in text  # each figure
    assert "Seeds whose verdict differs (cuda vs sim): 2 (gpt2-input-plain: fail vs pass)" in text
    assert "Seeds whose verdict differs (cuda vs sim): 1 (gpt2-input-plain: fail vs pass)" in text  # device errors
    assert "Mutants whose verdict differs (cuda vs sim): mamba#3 [plain] (fail vs pass)" in text
    assert "### bfloat16: 1/2 cases agree (50.00%; misses the 99.5% target)" in text
    assert "- `nn.functional.conv3d.#0#input`: simulated device other:NotImplementedError, CUDA device" in text
    assert "- `mixing_bfloat16.json` → `tests/fixtures/mixing_bfloat16.json`" in text
    assert json.loads((out / "summary.json").read_text())["gpu"] == "NVIDIA H200"


def test_a_report_without_both_sides_says_there_is_nothing_to_compare(tmp_path):
    check = gpu_check()
    assert check.write_report(tmp_path, _outcomes(check), True, gpu="no GPU (dry run)") is None
    text = (tmp_path / "report.md").read_text()
    assert "Nothing to compare: no part wrote both sides." in text and "- none written by this run" in text
    assert check.report_path(tmp_path, "NVIDIA H100 80GB HBM3", datetime.date(2026, 11, 28)).name == \
        "gpu-2026-11-28-nvidia-h100-80gb-hbm3.md"


def test_the_wheels_name_one_version_each_and_cover_what_the_gpu_machine_lacks():
    check = gpu_check()
    names = [w.split("==")[0] for w in check.WHEELS]
    assert len(names) == len(set(names)) and all("==" in w for w in check.WHEELS)
    assert {"ipython", "ipywidgets", "anywidget", "nbclient", "nbformat", "ipykernel", "jupyter-client", "expecttest",
            "nbconvert", "traitlets", "pyzmq", "tornado"} <= set(names)
