"""The README and docs/: short enough to read, every link leads somewhere, the commands they
show are the ones that run (CI's test command; the quickstart's JupyterLab as root, headless)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target); a target ends at the first space (a title may follow).
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)


def prose(text: str) -> str:
    """The text without fenced code blocks or inline code, where a [x](y) is code, not a link."""
    return re.sub(r"`[^`\n]*`", "", FENCE.sub("", text))


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered -1, -2, …"""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_the_readme_is_at_most_250_lines():
    lines = README.read_text().count("\n")
    assert lines <= 250, f"README.md has {lines} lines: move the detail into docs/"


def test_docs_has_a_page_for_each_magic_and_topic():
    expected = {"devices", "devcheck", "gpumem", "after-the-fact", "simulated-device", "distributed",
                "bug-reports", "how-it-is-built", "development", "jupyterlab"}
    assert expected <= {p.stem for p in PAGES}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_leads_to_a_file_and_heading_that_exist(page):
    """Relative links only (no network): the file, or the folder, exists in the repository,
    and an #anchor names a heading of the page it points to."""
    broken = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:: not followed here
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists() or ROOT not in where.parents and where != ROOT:
            broken.append(f"{target}: no such file in the repository")
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
            broken.append(f"{target}: no heading #{anchor} in {where.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(broken)


def test_the_link_checker_finds_a_broken_link_and_a_missing_heading(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A `%magic`: its page\n\n[ok](#a-magic-its-page) [gone](#nowhere) `[code](nowhere.md)`\n")
    assert anchors(page) == {"a-magic-its-page"}
    assert LINK.findall(prose(page.read_text())) == ["#a-magic-its-page", "#nowhere"]


def test_the_readme_shows_the_test_command_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    command = re.search(r"^test_command='([^']+)'", ci, re.M).group(1)
    assert command in README.read_text()


def quickstart_command() -> str:
    """The README's first command: the one that sets up and opens the quickstart."""
    first = re.search(r"```bash\n(.*?)\n```", README.read_text(), re.S).group(1)
    assert "notebooks/quickstart.ipynb" in first and first.count("\n") == 0, first
    return first


@pytest.mark.slow
def test_the_quickstart_command_serves_jupyterlab_as_root_and_headless(tmp_path):
    """The README's first command, from its JupyterLab step on (the environment it sets up is
    this one), started as the tests run (as root in CI, as a container user is) with no
    display and no browser: its server answers, and stops when told."""
    launch = quickstart_command().split("&&")[-1].strip()
    words = shlex.split(launch)
    assert words[0] == ".venv/bin/jupyter", launch
    words[0] = str(Path(sys.executable).with_name("jupyter"))
    runtime = tmp_path / "runtime"
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(runtime),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    log = tmp_path / "jupyterlab.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(words, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            status = wait_for_status(server, runtime, log)
            assert status["started"], status
        finally:
            server.terminate()
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    assert server.returncode is not None


def wait_for_status(server: subprocess.Popen, runtime: Path, log: Path, seconds: float = 120) -> dict:
    """The server's /api/status, reached through the address and token it writes in its runtime folder."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"jupyter lab stopped ({server.returncode}):\n{log.read_text(errors='replace')[-3000:]}")
        for info in runtime.glob("jpserver-*.json"):
            try:
                found = json.loads(info.read_text())
                request = urllib.request.Request(f"{found['url'].rstrip('/')}/api/status",
                                                 headers={"Authorization": f"token {found['token']}"})
                with urllib.request.urlopen(request, timeout=5) as response:
                    return json.loads(response.read())
            except (OSError, ValueError, KeyError):
                pass
        time.sleep(0.25)
    pytest.fail(f"jupyter lab did not answer in {seconds} s:\n{log.read_text(errors='replace')[-3000:]}")
