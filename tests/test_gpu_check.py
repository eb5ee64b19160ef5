"""benchmarks/gpu_check.py, the one command for a GPU: its plumbing, checked without one."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

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
    monkeypatch.setattr(check, "parts", lambda out, dry, seeds: [
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
    monkeypatch.setattr(check, "parts", lambda out, dry, seeds: [
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
    assert statuses["mixing"] == "passed" or statuses["mixing"].startswith("not available")
    assert any("tests collected" in line for line in summary["pytest"]["key_lines"])  # the CUDA cases, collected
    assert len([line for line in summary["oom"]["key_lines"] if line.startswith("PASS")]) == 8
    report = (out / "report.md").read_text()
    assert "## The fix corpus on both devices" in report and "Seeds whose verdict differs" in report
    oom = json.loads((out / "oom_sim.json").read_text())
    assert [c["name"] for c in oom["cases"]] == ["larger than the device", "a local kept by an earlier error"]
