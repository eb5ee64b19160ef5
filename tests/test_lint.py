"""The code is checked by ruff as CI runs it: the rules and import order in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_package_tests_and_benchmarks_pass_ruff():
    """Every rule pyproject.toml selects holds, and no `# noqa` stays that ruff does not need."""
    run = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise",
         "devinspect", "tests", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 0, f"ruff check found problems (ruff check --fix fixes those marked [*]):\n{run.stdout}{run.stderr}"
