"""%devices and %gpumem in a real JupyterLab in headless Chromium: readable in light and dark
themes, and the %gpumem dashboard's buttons act through the kernel."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lab import (
    colours,
    contrast,
    lab,  # noqa: F401 - the JupyterLab fixture, one per theme
    launch,
    open_notebook,
    run_all,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

CELLS = [
    "%load_ext devinspect",
    "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
    "model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)).to(dev)\n"
    "model[1].to('cpu')\nx = torch.randn(3, 4)",
    "%devices",
    "torch.ones(1000, device=dev)",
    "%gpumem",
]


def test_devices_table_is_readable_in_jupyterlab(lab):  # noqa: F811 - the fixture imported from lab
    from playwright.sync_api import sync_playwright

    theme, server, tmp_path = lab
    url = server.notebook("devices.ipynb", CELLS)
    shot = Path(os.environ.get("DEVINSPECT_SCREENSHOTS", tmp_path)) / f"devices-{theme}.png"
    with sync_playwright() as p:
        browser, page = launch(p)
        try:
            open_notebook(page, url)
            run_all(page, len(CELLS))
            # The explorer (the widget, not its static fallback): its rows and its findings.
            explorer = ".jp-OutputArea-output:has(.jupyter-widgets button:has-text('Apply fix'))"
            page.wait_for_selector(f"{explorer} code:has-text('model[0].weight')", timeout=30_000)
            page.screenshot(path=str(shot), full_page=True)
            text = page.inner_text(explorer)
            assert "model[0].weight" in text and "sim:0" in text and "rows 1–5 of 5" in text
            assert "has parameters/buffers on" in text
            for selector in ("code", ".widget-html span", "button.jupyter-button", ".lm-TabBar-tab"):
                read = first_colours(page, f"{explorer} {selector}")
                ratio = contrast(read["fg"], read["bg"])
                assert ratio >= 4.5, f"{selector} contrast {ratio:.1f} in {theme} theme (screenshot: {shot})"
            check_gpumem_dashboard(page, theme, shot)
        except Exception:
            page.screenshot(path=str(shot), full_page=True)
            raise
        finally:
            browser.close()


def first_colours(page, selector: str) -> dict:
    found = colours(page, selector, limit=1, visible_only=False)
    assert found, f"nothing matches {selector}"
    return found[0]


def check_gpumem_dashboard(page, theme: str, shot: Path) -> None:
    """The %gpumem widget renders (not its text fallback) and a click runs an action in the kernel."""
    button = page.wait_for_selector("button.jupyter-button:has-text('Release history: 3.9 KiB')", timeout=60_000)
    dashboard = page.query_selector(".jp-OutputArea-output:has(button.jupyter-button:has-text('gc.collect()'))")
    text = dashboard.inner_text()
    assert "where the memory is" in text and "cpu this process" in text and "sim:0" in text
    assert page.query_selector(".jp-OutputArea-output .widget-hprogress") is not None  # the bars
    read = first_colours(page, ".jp-OutputArea-output .widget-html td")
    ratio = contrast(read["fg"], read["bg"])
    assert ratio >= 4.5, f"dashboard table contrast {ratio:.1f} in {theme} theme (screenshot: {shot})"
    button.click()
    page.wait_for_selector(".widget-html:has-text('released Out[')", timeout=30_000)
    page.wait_for_selector("button.jupyter-button:has-text('Release history: 0 B')", timeout=30_000)
    page.screenshot(path=str(shot.with_name(f"gpumem-{theme}.png")), full_page=True)
