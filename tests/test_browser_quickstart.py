"""The quickstart as a reader clicks it in JupyterLab (headless Chromium): it opens unmodified,
and Apply fix then Re-run cell on the error explained after the fact edits the cell and runs it."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from lab import (
    JS_CELL_HAS_ERROR,
    cell,
    launch,
    open_notebook,
    run_cell,
    server,  # noqa: F401 - the JupyterLab fixture
    wait_idle,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

QUICKSTART = Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"
FAILING = "features = torch.randn(4, 32)   # torch.randn makes it on the CPU\nscores = model.head(features)"
EDITED = "features = torch.randn(4, 32, device=device)   # torch.randn makes it on the CPU\nscores = model.head(features)"

JS_SOURCES = "() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.model.sharedModel.getSource())"
JS_TYPES = "() => window.jupyterapp.shell.currentWidget.content.widgets.map(c => c.model.type)"
JS_DIRTY = "() => window.jupyterapp.shell.currentWidget.context.model.dirty"
JS_COUNT = "(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.executionCount"


def test_apply_fix_then_rerun_cell_edits_the_failed_cell_and_runs_it(server, tmp_path):  # noqa: F811 - the fixture
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("DEVINSPECT_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    shutil.copy(QUICKSTART, server.root / "quickstart.ipynb")
    server.post("/api/sessions", {"path": "quickstart.ipynb", "name": "quickstart.ipynb", "type": "notebook",
                                  "kernel": {"name": "python3"}})
    with sync_playwright() as p:
        browser, page = launch(p, width=1024, height=768)
        try:
            open_notebook(page, f"{server.url}/lab/tree/quickstart.ipynb?reset")
            page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
            wait_idle(page)
            # Opened as written: the notebook's metadata is what JupyterLab writes (on this Python).
            kernel_python = json.loads(QUICKSTART.read_text())["metadata"]["language_info"]["version"]
            if kernel_python == page.evaluate(
                    "() => window.jupyterapp.shell.currentWidget.context.model.getMetadata('language_info').version"):
                assert page.evaluate(JS_DIRTY) is False
            sources, types = page.evaluate(JS_SOURCES), page.evaluate(JS_TYPES)
            failing = sources.index(FAILING)
            for index in range(failing + 1):  # every code cell up to the failing one, in order
                if types[index] == "code":
                    run_cell(page, index)
            assert page.evaluate(JS_CELL_HAS_ERROR, failing)
            failed = cell(page, failing)
            failed.scroll_into_view_if_needed()
            failed.locator("button", has_text="Apply fix").click()
            page.wait_for_function(
                f"() => [...document.querySelectorAll('.jp-Notebook .jp-Cell')][{failing}].innerText.includes('becomes:')")
            count = page.evaluate(JS_COUNT, failing)
            failed.locator("button", has_text="Re-run cell").click()
            page.wait_for_function(f"(i) => ({JS_COUNT})(i) !== {json.dumps(count)}", arg=failing, timeout=60_000)
            wait_idle(page)
            page.screenshot(path=str(shots / "quickstart-rerun.png"))
            # The cell ran as edited and succeeded, and its editor shows the edited text.
            assert not page.evaluate(JS_CELL_HAS_ERROR, failing)
            assert page.evaluate(JS_SOURCES)[failing] == EDITED
            assert "device mismatch" not in failed.inner_text()
            # The next cell of the quickstart (the same code, written out) runs too.
            run_cell(page, failing + 2)
            assert not page.evaluate(JS_CELL_HAS_ERROR, failing + 2)
            assert "torch.Size([4, 2])" in cell(page, failing + 2).inner_text()
        except Exception:
            page.screenshot(path=str(shots / "quickstart-failure.png"), full_page=True)
            raise
        finally:
            browser.close()
