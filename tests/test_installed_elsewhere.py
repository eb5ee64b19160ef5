"""The user's code told from library code wherever the libraries were installed.

With packages installed in a folder of their own (``pip install --target DIR``, a folder of
wheels on ``PYTHONPATH``) instead of site-packages, IPython's frames were taken for the user's
code: the failed cell was taken to be IPython's, so a fix for a variable the cell itself makes
(a loop's batches, a temporary) moved it once instead of editing the line that makes it, and
running the cell again failed as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import IPython
import pytest

from devinspect.collect.code import locations

TESTS = Path(__file__).parent


def test_a_package_installed_in_a_folder_of_its_own_is_library_code(tmp_path, monkeypatch):
    (tmp_path / "vendored").mkdir()
    (tmp_path / "vendored" / "__init__.py").write_text("")
    (tmp_path / "single.py").write_text("")
    (tmp_path / "mine.py").write_text("")
    record = tmp_path / "vendored-1.0.dist-info"
    record.mkdir()
    (record / "RECORD").write_text("vendored/__init__.py,sha256=x,1\nsingle.py,sha256=y,1\n"
                                   "vendored-1.0.dist-info/RECORD,,\n../../bin/vendored-tool,sha256=z,1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert locations.is_library_file(str(tmp_path / "vendored" / "__init__.py"))
    assert locations.is_library_file(str(tmp_path / "single.py"))
    assert not locations.is_library_file(str(tmp_path / "mine.py"))  # the user's own file beside it
    assert not locations.is_library_file(str(tmp_path / "vendored_too" / "x.py"))


def _shell_installed_in(folder: Path, metadata: bool) -> None:
    """IPython as ``pip install --target folder`` leaves it: the package, and its metadata or not."""
    package = Path(IPython.__file__).parent
    folder.mkdir()
    (folder / "IPython").symlink_to(package, target_is_directory=True)
    if metadata:
        for found in package.parent.glob("ipython-*.dist-info"):
            (folder / found.name).symlink_to(found, target_is_directory=True)


@pytest.mark.slow
@pytest.mark.parametrize("metadata", [True, False], ids=["with-its-metadata", "bare"])
def test_fixes_edit_the_failed_cell_with_the_shell_installed_elsewhere(tmp_path, metadata):
    folder = tmp_path / "deps"
    _shell_installed_in(folder, metadata)
    # A loop over host batches (printed fix, Apply fix) and a temporary made in the cell (printed fix).
    code = (
        "import sys, warnings\nwarnings.filterwarnings('ignore')\n"
        f"sys.path.insert(0, {str(TESTS)!r})\n"
        "import IPython\nassert 'site-packages' not in IPython.__file__, IPython.__file__\n"
        "from devinspect import testing\ntesting.enable()\n"
        "from IPython.testing.globalipapp import get_ipython\n"
        "from scenario_runner import ScenarioRun\nfrom scenarios import generate\n"
        "ip = get_ipython()\nip.run_line_magic('load_ext', 'devinspect')\n"
        "for seed in (426, 272, 342):\n"
        "    s = generate(seed)\n"
        "    o = ScenarioRun(ip, s, 'sim:0').run()\n"
        "    print(s.bug, s.entry, o.verdict, o.stage, o.reason[:200].replace(chr(10), ' '))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=900, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.strip().splitlines()
    assert [line.split()[:3] for line in lines] == [["loop_variable", "plain", "pass"], ["loop_variable", "button", "pass"],
                                                   ["temporary", "plain", "pass"]], out.stdout
