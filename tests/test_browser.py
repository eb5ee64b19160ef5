"""%devices and %gpumem in a real JupyterLab in headless Chromium: readable in light and dark
themes, and the %gpumem dashboard's buttons act through the kernel."""

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

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
THEMES = {"light": "JupyterLab Light", "dark": "JupyterLab Dark"}

CELLS = [
    "%load_ext devinspect",
    "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
    "model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)).to(dev)\n"
    "model[1].to('cpu')\nx = torch.randn(3, 4)",
    "%devices",
    "torch.ones(1000, device=dev)",
    "%gpumem",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=sorted(THEMES))
def lab(request, tmp_path):
    # CI sets DEVINSPECT_REQUIRE_BROWSER so that a missing browser fails there instead of skipping.
    required = bool(os.environ.get("DEVINSPECT_REQUIRE_BROWSER"))
    missing = "chromium is not installed (apt-get install chromium)" if CHROMIUM is None else None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing = "playwright is not installed (pip install playwright)"
    if missing:
        (pytest.fail if required else pytest.skip)(missing)
    theme = request.param
    root = tmp_path / "root"
    root.mkdir()
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "themes.jupyterlab-settings").write_text(json.dumps({"theme": THEMES[theme]}))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(notebook, root / "devices.ipynb")
    port = free_port()
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
    }
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
        "--IdentityProvider.token=", "--ServerApp.password=", f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        "--LabApp.extension_manager=readonly",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.append("--allow-root")
    log = open(tmp_path / "jupyterlab.log", "wb")  # a file, not a pipe nobody reads
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status", timeout=2)
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    pytest.fail("JupyterLab did not start:\n" + (tmp_path / "jupyterlab.log").read_text()[-3000:])
                time.sleep(0.5)
        yield theme, f"{url}/lab/tree/devices.ipynb", tmp_path
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def contrast(rgb1: tuple[float, ...], rgb2: tuple[float, ...]) -> float:
    """WCAG contrast ratio of two sRGB colours (0-255)."""

    def luminance(rgb):
        channels = []
        for c in rgb[:3]:
            c = c / 255
            channels.append(c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4)
        return 0.2126 * channels[0] + 0.7152 * channels[1] + 0.0722 * channels[2]

    hi, lo = sorted((luminance(rgb1), luminance(rgb2)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


# The text colour of a table cell and the first opaque background behind it.
COLOURS_JS = """
(el) => {
  const parse = (c) => c.match(/[\\d.]+/g).map(Number);
  let node = el, bg = null;
  while (node) {
    const c = getComputedStyle(node).backgroundColor;
    const v = parse(c);
    if (v.length < 4 || v[3] > 0.5) { bg = v; break; }
    node = node.parentElement;
  }
  return {fg: parse(getComputedStyle(el).color), bg: bg || [255, 255, 255]};
}
"""


def accept_dialogs(page) -> None:
    """Accept JupyterLab's kernel dialogs ("Select Kernel", "Kernel Restarting") if one is open."""
    dialog = page.query_selector(".jp-Dialog .jp-mod-accept")
    if dialog is not None:
        dialog.click()


def run_all_until(page, selector: str, attempts: int = 3):
    """Run All Cells, as a person would, until ``selector`` shows; accept a kernel dialog if one appears."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(attempts):
        try:
            accept_dialogs(page)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
            accept_dialogs(page)
            page.click("#jp-MainMenu >> text=Run", timeout=10_000)
            page.click(".lm-Menu-itemLabel >> text=Run All Cells", timeout=10_000)
            return page.wait_for_selector(selector, timeout=45_000)
        except PlaywrightTimeout:
            if attempt == attempts - 1:
                raise
    return None


def test_devices_table_is_readable_in_jupyterlab(lab):
    from playwright.sync_api import sync_playwright

    theme, url, tmp_path = lab
    shot = Path(os.environ.get("DEVINSPECT_SCREENSHOTS", tmp_path)) / f"devices-{theme}.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"],
        )
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            page.goto(url)
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=30_000)
            table = run_all_until(page, ".jp-OutputArea-output .devinspect table")
            page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=90_000)
            table.scroll_into_view_if_needed()
            page.screenshot(path=str(shot), full_page=True)
            text = table.inner_text()
            assert "model[0].weight" in text and "sim:0" in text
            findings = page.inner_text(".jp-OutputArea-output .devinspect")
            assert "has parameters/buffers on" in findings
            for selector in (".devinspect td code", ".devinspect td", ".devinspect th", ".devinspect li"):
                colours = page.eval_on_selector(selector, COLOURS_JS)
                ratio = contrast(colours["fg"], colours["bg"])
                assert ratio >= 4.5, f"{selector} contrast {ratio:.1f} in {theme} theme (screenshot: {shot})"
            check_gpumem_dashboard(page, theme, shot)
        except Exception:
            page.screenshot(path=str(shot), full_page=True)
            raise
        finally:
            browser.close()


def check_gpumem_dashboard(page, theme: str, shot: Path) -> None:
    """The %gpumem widget renders (not its text fallback) and a click runs an action in the kernel."""
    button = page.wait_for_selector("button.jupyter-button:has-text('Release history: 3.9 KiB')", timeout=60_000)
    dashboard = page.query_selector(".jp-OutputArea-output:has(button.jupyter-button:has-text('gc.collect()'))")
    text = dashboard.inner_text()
    assert "where the memory is" in text and "cpu this process" in text and "sim:0" in text
    assert page.query_selector(".jp-OutputArea-output .widget-hprogress") is not None  # the bars
    colours = page.eval_on_selector(".jp-OutputArea-output .widget-html td", COLOURS_JS)
    ratio = contrast(colours["fg"], colours["bg"])
    assert ratio >= 4.5, f"dashboard table contrast {ratio:.1f} in {theme} theme (screenshot: {shot})"
    button.click()
    page.wait_for_selector(".widget-html:has-text('released Out[')", timeout=30_000)
    page.wait_for_selector("button.jupyter-button:has-text('Release history: 0 B')", timeout=30_000)
    page.screenshot(path=str(shot.with_name(f"gpumem-{theme}.png")), full_page=True)
