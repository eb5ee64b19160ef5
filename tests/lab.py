"""A real JupyterLab in headless Chromium, for the browser tests.

Deterministic by construction, not by retries: the notebook's kernel session is
created through the server's REST API (and waited for) before the page opens, so
JupyterLab attaches to it and never shows a "Select Kernel" dialog or starts a second
kernel; cells run through JupyterLab's own command registry (``window.jupyterapp``,
exposed by ``--LabApp.expose_app_in_browser``), not by clicking through menus; and
"the cells have run" is read from the notebook model (every code cell has an
execution count and the kernel is idle), not guessed from what appears on screen.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


def require_browser() -> None:
    """Skip without Chromium or playwright, except in CI (DEVINSPECT_REQUIRE_BROWSER), where it fails."""
    required = bool(os.environ.get("DEVINSPECT_REQUIRE_BROWSER"))
    missing = "chromium is not installed (apt-get install chromium)" if CHROMIUM is None else None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = "playwright is not installed (pip install playwright)"
    if missing:
        (pytest.fail if required else pytest.skip)(missing)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """A JupyterLab server on 127.0.0.1 with its config, data and settings in a temporary folder."""

    def __init__(self, tmp_path: Path, theme: str = "light"):
        self.tmp = tmp_path
        self.root = tmp_path / "root"
        self.root.mkdir(exist_ok=True)
        settings = tmp_path / "settings" / "@jupyterlab"
        (settings / "apputils-extension").mkdir(parents=True, exist_ok=True)
        (settings / "apputils-extension" / "themes.jupyterlab-settings").write_text(json.dumps({"theme": THEMES[theme]}))
        # No "what's new" or kernel-choice dialogs: a test sees only what it opens.
        (settings / "apputils-extension" / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False}))
        (settings / "notebook-extension").mkdir(parents=True, exist_ok=True)
        (settings / "notebook-extension" / "panel.jupyterlab-settings").write_text(
            json.dumps({"autoStartDefaultKernel": True}))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / "jupyterlab.log"
        self.server: subprocess.Popen | None = None

    def start(self) -> Lab:
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(self.tmp / "config"),
            "JUPYTER_RUNTIME_DIR": str(self.tmp / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(self.tmp / "settings"),
            "JUPYTERLAB_WORKSPACES_DIR": str(self.tmp / "workspaces"),
        }
        command = [
            sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}", "--IdentityProvider.token=", "--ServerApp.password=",
            f"--ServerApp.root_dir={self.root}", "--LabApp.news_url=", "--LabApp.expose_app_in_browser=True",
            # A local test server that this test drives over REST (no browser cookie to carry a token).
            "--ServerApp.disable_check_xsrf=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate", "--LabApp.extension_manager=readonly",
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            command.append("--allow-root")
        self._log = open(self.log_path, "wb")  # a file, not a pipe nobody reads
        self.server = subprocess.Popen(command, env=env, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait(lambda: self.get("/api/status") is not None, 90, "JupyterLab did not start")
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            try:
                self.server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.server.kill()
            self._log.close()

    def _wait(self, ready, seconds: float, message: str) -> None:
        deadline = time.time() + seconds
        while not ready():
            if time.time() > deadline or (self.server is not None and self.server.poll() is not None):
                pytest.fail(f"{message}:\n" + self.log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.25)

    def get(self, path: str):
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as response:
                return json.loads(response.read() or b"null")
        except OSError:
            return None

    def post(self, path: str, body: dict):
        request = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def notebook(self, name: str, cells: list[str], tags: dict[int, list[str]] | None = None) -> str:
        """Write a notebook and start its kernel session (JupyterLab attaches to it when it opens)."""
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        for index, cell_tags in (tags or {}).items():
            nb.cells[index].metadata["tags"] = cell_tags
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, self.root / name)
        session = self.post("/api/sessions", {"path": name, "name": name, "type": "notebook",
                                              "kernel": {"name": "python3"}})
        kernel = session["kernel"]["id"]
        # The server calls a kernel "starting" until a client connects; the page waits for idle.
        self._wait(lambda: (self.get(f"/api/kernels/{kernel}") or {}).get("execution_state") in
                   ("starting", "idle", "busy"), 90, "the kernel did not start")
        return f"{self.url}/lab/tree/{name}?reset"


# JavaScript run in the page: JupyterLab's own objects, through the exposed application.
JS_READY = """() => {
  const app = window.jupyterapp;
  if (!app || !app.shell) return false;
  const panel = app.shell.currentWidget;
  return !!(panel && panel.sessionContext && panel.sessionContext.session
            && panel.sessionContext.session.kernel && panel.content && panel.content.widgets.length
            && panel.sessionContext.session.kernel.status === 'idle');
}"""
JS_RUN_ALL = "async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }"
JS_DONE = """(expected) => {
  const panel = window.jupyterapp.shell.currentWidget;
  const cells = panel.content.widgets.filter(c => c.model.type === 'code');
  const counts = cells.map(c => c.model.executionCount);
  const idle = panel.sessionContext.session.kernel.status === 'idle';
  return idle && counts.slice(0, expected).every(n => n !== null && n !== undefined);
}"""
JS_RUN_CELL = """async (index) => {
  const panel = window.jupyterapp.shell.currentWidget;
  panel.content.activeCellIndex = index;
  await window.jupyterapp.commands.execute('notebook:run-cell');
}"""


def open_notebook(page, url: str, timeout_ms: int = 90_000) -> None:
    page.goto(url)
    page.wait_for_function(JS_READY, timeout=timeout_ms)


def run_all(page, expected_cells: int, timeout_ms: int = 120_000) -> None:
    """Run every cell through JupyterLab's command; wait until the first ``expected_cells`` have run."""
    page.evaluate(JS_RUN_ALL)
    page.wait_for_function(JS_DONE, arg=expected_cells, timeout=timeout_ms)


def launch(playwright, width: int = 1400, height: int = 1000):
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
    return browser, browser.new_page(viewport={"width": width, "height": height})


def contrast(rgb1, rgb2) -> float:
    """WCAG contrast ratio of two sRGB colours (0-255)."""

    def luminance(rgb):
        channels = []
        for c in rgb[:3]:
            c = c / 255
            channels.append(c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
        return 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]

    hi, lo = sorted((luminance(rgb1), luminance(rgb2)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


#: The text colour of an element and the first opaque background behind it; null when the
#: page replaced the element after it was found (a live view re-rendering): read again.
COLOURS_JS = """
(el) => {
  if (!el.isConnected) return null;
  const parse = (c) => (c.match(/[\\d.]+/g) || []).map(Number);
  let node = el, bg = null;
  while (node) {
    const c = getComputedStyle(node).backgroundColor;
    const v = parse(c);
    if (v.length === 3 || v[3] > 0.5) { bg = v; break; }
    node = node.parentElement;
  }
  const fg = parse(getComputedStyle(el).color);
  return fg.length >= 3 ? {fg: fg, bg: bg || [255, 255, 255]} : null;
}
"""


def colours(page, selector: str, limit: int = 12, visible_only: bool = True) -> list[dict]:
    """The colours of the first ``limit`` elements ``selector`` matches (visible ones only,
    unless told), read again from the page when a live view replaced one while they were
    read (the dashboards re-render after every cell)."""
    for _ in range(10):
        found = [element.evaluate(COLOURS_JS) for element in page.query_selector_all(selector)
                 if not visible_only or element.is_visible()][:limit]
        if None not in found:
            return found
    raise AssertionError(f"{selector}: the page kept replacing its elements while their colours were read")


JS_CELL_COUNT = """(index) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
  return cell.model.executionCount;
}"""
JS_IDLE = "() => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'"
JS_CELL_TEXT = """(index) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
  const out = cell.node.querySelector('.jp-Cell-outputWrapper');
  return out ? out.innerText : '';
}"""
JS_CELL_HAS_ERROR = """(index) => {
  const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
  return cell.model.outputs.toJSON().some(o => o.output_type === 'error');
}"""
# Elements wider than their box: the notebook's cells, the buttons in their outputs, and the
# content of HTML widgets (a table row whose columns do not fit shows here, clipped or not).
JS_OVERFLOWS = """() => {
  const bad = [];
  const selector = '.jp-Notebook .jp-Cell, .jp-OutputArea-output button, .jp-OutputArea-output .widget-html-content';
  for (const el of document.querySelectorAll(selector)) {
    if (el.offsetParent === null) continue;  // hidden
    if (el.scrollWidth > el.clientWidth + 1) {
      bad.push((el.className || el.tagName) + ': ' + el.scrollWidth + ' > ' + el.clientWidth + ' ' +
               (el.innerText || '').slice(0, 40));
    }
  }
  return bad;
}"""


#: Parts of outputs that reach past their output's right edge, or scroll sideways: the outermost
#: such element of each, with its cell. What an element cuts (overflow hidden) is not looked into.
JS_WIDER_THAN_OUTPUT = """() => {
  const bad = [];
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-Cell')];
  for (const out of document.querySelectorAll('.jp-OutputArea-output')) {
    if (out.offsetParent === null) continue;
    const edge = out.getBoundingClientRect().right;
    const walk = (el) => {
      if (el !== out && el.offsetParent === null) return;
      const style = getComputedStyle(el);
      const scrolls = ['auto', 'scroll'].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1;
      const box = el.getBoundingClientRect();
      if (scrolls || (box.width > 0 && box.right > edge + 1)) {
        bad.push('cell ' + cells.indexOf(el.closest('.jp-Cell')) + ' ' + el.tagName + ' ' +
                 (scrolls ? 'scrolls ' + el.scrollWidth + ' > ' + el.clientWidth : 'ends at ' + Math.round(box.right) +
                  ' > ' + Math.round(edge)) + ': ' + (el.innerText || '').slice(0, 50).replace(/\\s+/g, ' '));
        return;
      }
      if (['hidden', 'clip'].includes(style.overflowX)) return;
      for (const child of el.children) walk(child);
    };
    walk(out);
  }
  return bad;
}"""
#: The widest output area (px): what the notebook leaves for outputs at this window size.
JS_OUTPUT_WIDTH = ("() => Math.max(...[...document.querySelectorAll('.jp-OutputArea-output')]"
                   ".map(e => e.getBoundingClientRect().width))")


def run_cell(page, index: int, timeout_ms: int = 120_000) -> None:
    """Run one cell through JupyterLab's command and wait until it has run (a new count, kernel idle)."""
    before = page.evaluate(JS_CELL_COUNT, index)
    page.evaluate(JS_RUN_CELL, index)
    page.wait_for_function(f"(i) => ({JS_CELL_COUNT})(i) !== {json.dumps(before)} && ({JS_IDLE})()", arg=index,
                           timeout=timeout_ms)


def cell_text(page, index: int) -> str:
    return page.evaluate(JS_CELL_TEXT, index)


def cell(page, index: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def wait_idle(page, timeout_ms: int = 60_000) -> None:
    page.wait_for_function(JS_IDLE, timeout=timeout_ms)


#: The JupyterLab server of a browser test, once per theme: (theme, server, tmp_path).
@pytest.fixture(params=sorted(THEMES))
def lab(request, tmp_path):
    require_browser()
    server = Lab(tmp_path, request.param).start()
    try:
        yield request.param, server, tmp_path
    finally:
        server.stop()


#: One JupyterLab server in the light theme, for a test that needs no other.
@pytest.fixture
def server(tmp_path):
    require_browser()
    lab = Lab(tmp_path, "light").start()
    try:
        yield lab
    finally:
        lab.stop()


#: Window sizes: JupyterLab at 1024×768 with the file browser open leaves about 577 px for outputs;
#: at 1620 px without it, about 1440 px.
NARROW_WINDOW, WIDE_WINDOW = (1024, 768), (1620, 1000)


def open_narrow(page, url: str) -> None:
    """Open the notebook at 1024×768 with the file browser open."""
    page.set_viewport_size({"width": NARROW_WINDOW[0], "height": NARROW_WINDOW[1]})
    open_notebook(page, url)
    page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")


def widen(page) -> float:
    """The window at 1620 px with the file browser closed, laid out; the width left for outputs (px)."""
    page.set_viewport_size({"width": WIDE_WINDOW[0], "height": WIDE_WINDOW[1]})
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
    page.wait_for_function("() => window.jupyterapp.shell.leftCollapsed")
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    return page.evaluate(JS_OUTPUT_WIDTH)
