"""The notebook experience in a real JupyterLab (headless Chromium): every control does what it
says in the kernel, and the outputs fit and read well at about 577 px of output (1024×768 with the
file browser open) and at about 1440 px, in the light and the dark theme; screenshots of each."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from lab import (
    JS_CELL_HAS_ERROR,
    JS_OUTPUT_WIDTH,
    JS_OVERFLOWS,
    JS_WIDER_THAN_OUTPUT,
    cell,
    cell_text,
    colours,
    contrast,
    lab,  # noqa: F401 - the JupyterLab fixture, one per theme
    launch,
    open_notebook,
    run_cell,
    wait_idle,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SETUP = """import torch
from torch import nn
from devinspect import testing
dev = testing.enable()
model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.Linear(4, 2)).to(dev)
model[2] = nn.Linear(4, 2)  # a new head, on the CPU: the model is split
x = torch.randn(3, 4)
head = nn.Linear(4, 2).to(dev)
z = torch.randn(2, 4)
pool = [torch.zeros(i + 1) for i in range(30)]
padding_mask_for_the_longest_sequence_ab = torch.ones(2, 8)  # a name of 40 characters"""

CELLS = [
    "%load_ext devinspect",  # 0
    SETUP,  # 1
    "%devices",  # 2
    "%%devcheck\nout = head(z)",  # 3: fails until z moves
    "torch.ones(1000, device=dev)",  # 4: kept in Out
    "%gpumem",  # 5
    "%gpumem --track",  # 6
    "grown = torch.ones(4096, device=dev) + torch.zeros(4096, device=dev) * torch.ones(4096, device=dev) "
    "+ torch.full((4096,), 0.5, device=dev)",  # 7: a line longer than the history's code column
    "%gpumem --untrack\n%gpumem --history",  # 8
    "print('x on', x.device, '| model on', sorted({str(p.device) for p in model.parameters()}), "
    "'| z on', z.device)",  # 9: what the kernel holds
    "bad = head(torch.randn(2, 4))",  # 10: a plain cell that fails: its explanation comes first
    "%%devcheck\nfor step in range(3):\n    value = head(z).sum().item()   # a host sync on every step, and a comment "
    "long enough to be cut where a narrow table ends",  # 11: the per-line table
    "%%gpumem\nw = torch.randn(256, 1024, device=dev)\nv = (w @ w.T).relu()   # a line long enough to be cut where a "
    "narrow table ends, surely it is\ndel w",  # 12: a memory profile: its table, plot and dashboard
    "testing.enable(memory='64MiB')\ncache = [torch.randn(1024, 1024, device=dev) for _ in range(8)]\n"
    "def step(x):\n    hidden = x @ x.T\n    return hidden.repeat(64, 1)",  # 13
    "out = step(cache[0])",  # 14: out of memory, explained
    "%devices --why cache[0]",  # 15: what keeps it alive
]
PROBE = 9
FAILING = 10
#: Window sizes: JupyterLab at 1024×768 with the file browser open leaves about 577 px for outputs;
#: at 1620 px without it, about 1440 px.
NARROW, WIDE = (1024, 768), (1620, 1000)
LONG_NAME = "padding_mask_for_the_longest_sequence_ab"


def screenshots_dir(tmp_path: Path) -> Path:
    out = Path(os.environ.get("DEVINSPECT_SCREENSHOTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_every_control_acts_in_the_kernel_and_everything_fits(lab):  # noqa: F811 - the fixture imported from lab
    from playwright.sync_api import sync_playwright

    theme, server, tmp_path = lab
    shots = screenshots_dir(tmp_path)
    url = server.notebook("experience.ipynb", CELLS)
    with sync_playwright() as p:
        browser, page = launch(p, width=NARROW[0], height=NARROW[1])
        try:
            open_notebook(page, url)
            page.evaluate("() => window.jupyterapp.commands.execute('filebrowser:activate')")
            for index in range(0, 3):
                run_cell(page, index)
            check_explorer(page)
            check_devcheck_apply_and_rerun(page)
            for index in range(4, 9):
                run_cell(page, index)
            check_gpumem_buttons(page)
            check_static_copies_give_way_to_the_live_views(page)
            check_the_explanation_is_seen_first(page)
            for index in range(11, len(CELLS)):
                run_cell(page, index)
            width = page.evaluate(JS_OUTPUT_WIDTH)
            assert 560 <= width <= 600, width  # what a 1024 px screen with the file browser open leaves
            check_fits_and_reads(page, theme, shots, f"{width:.0f}px")
            page.set_viewport_size({"width": WIDE[0], "height": WIDE[1]})
            page.evaluate("() => window.jupyterapp.shell.collapseLeft()")
            page.wait_for_function("() => window.jupyterapp.shell.leftCollapsed")
            settle(page)
            width = page.evaluate(JS_OUTPUT_WIDTH)
            assert 1420 <= width <= 1460, width
            check_fits_and_reads(page, theme, shots, f"{width:.0f}px")
        except Exception:
            page.screenshot(path=str(shots / f"failure-{theme}.png"), full_page=True)
            raise
        finally:
            browser.close()


#: Rows of the explorer's table whose columns do not start under their header's sort button
#: (a long name pushing the other columns right), or whose last column is cut by the row's edge.
JS_MISALIGNED_COLUMNS = """(index) => {
  const explorer = [...document.querySelectorAll('.jp-Notebook .jp-Cell')][index];
  const headerRow = [...explorer.querySelectorAll('.widget-hbox')].find(
      box => [...box.children].filter(c => c.matches('button')).length === 6);
  const lefts = [...headerRow.querySelectorAll('button')].map(b => b.getBoundingClientRect().left);
  const bad = [];
  for (const row of explorer.querySelectorAll('.widget-hbox')) {
    const html = row.querySelector(':scope > .widget-html');
    if (!html || !row.querySelector(':scope > .widget-dropdown') || html.offsetParent === null) continue;
    const grid = html.querySelector('.widget-html-content > div');
    if (!grid) continue;
    const cells = [...grid.children].map(c => c.getBoundingClientRect());
    const edge = html.getBoundingClientRect().right;
    cells.forEach((r, i) => {
      if (Math.abs(r.left - lefts[i]) > 2 || r.right > edge + 1) {
        bad.push(grid.innerText.replace(/\\s+/g, ' ').slice(0, 60) + ' column ' + i);
      }
    });
  }
  return bad;
}"""


#: Text a cell element cuts: wider than its box (clipped or scrolled), or ending in "…".
JS_CLIPPED_TEXT = """() => {
  const bad = [];
  const cells = '.jp-OutputArea-output td, .jp-OutputArea-output th, .jp-OutputArea-output pre, ' +
                '.jp-OutputArea-output .widget-html-content span, .jp-OutputArea-output .widget-html-content code';
  for (const el of document.querySelectorAll(cells)) {
    if (el.offsetParent === null) continue;  // hidden
    if (el.scrollWidth > el.clientWidth + 1) {
      bad.push(el.tagName + ' ' + el.scrollWidth + ' > ' + el.clientWidth + ': ' + (el.innerText || '').slice(0, 50));
    }
  }
  return bad;
}"""


def check_static_copies_give_way_to_the_live_views(page) -> None:
    # The static copy of %devices and %gpumem (for nbconvert and GitHub) is its own output: in a live
    # JupyterLab the widget shows in its place, not both.
    for index in (2, 5):
        static = cell(page, index).locator(".devinspect-static")
        assert static.count() == 1 and not static.first.is_visible()
        assert cell(page, index).locator(".devinspect-live").first.is_visible()


def check_the_explanation_is_seen_first(page) -> None:
    """A plain failed cell at 1024×768: its explanation, fix and Apply fix are in the window without
    scrolling past the traceback, which follows them as a plain kernel's error output."""
    run_cell(page, FAILING)
    assert page.evaluate(JS_CELL_HAS_ERROR, FAILING)
    failed = cell(page, FAILING)
    page.evaluate("(i) => [...document.querySelectorAll('.jp-Notebook .jp-Cell')][i].scrollIntoView({block: 'start'})",
                  FAILING)
    settle(page)
    text = failed.inner_text()
    assert "device mismatch in F.linear" in text and text.index("device mismatch") < text.index("RuntimeError")
    button = failed.locator("button", has_text="Apply fix").first
    box, window = button.bounding_box(), page.viewport_size
    assert box is not None and box["y"] + box["height"] <= window["height"], (box, window)
    kinds = page.evaluate("(i) => window.jupyterapp.shell.currentWidget.content.widgets[i].model.outputs.toJSON()"
                          ".map(o => o.output_type)", FAILING)
    assert kinds[-1] == "error" and kinds.count("error") == 1, kinds


def probe(page) -> str:
    run_cell(page, PROBE)
    return cell_text(page, PROBE)


def check_explorer(page) -> None:
    from playwright.sync_api import expect

    explorer = cell(page, 2)
    rows = explorer.locator(".widget-hbox:has(select) > .widget-html:first-child")
    explorer.locator("button.jupyter-button", has_text=re.compile(r"^name")).click()
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Cell')][2].innerText.includes('name ▲')")
    expect(rows.first).to_have_text(re.compile(r"^\s*head\.bias"), timeout=30_000)  # by name, A to Z
    search = explorer.locator("input[type=text]")
    search.fill("weight")
    search.press("Enter")
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Cell')][2].innerText.includes('rows 1–4 of 4')")
    for i in range(4):
        expect(rows.nth(i)).to_contain_text("weight", timeout=30_000)
    search.fill("x")
    search.press("Enter")
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Cell')][2].innerText.includes('rows 1–1 of 1')")
    # Move to ▾ on the row of x.
    row = explorer.locator(".widget-hbox:has(select)", has=page.locator("code", has_text=re.compile(r"^x$")))
    row.locator("select").select_option("sim:0")
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Cell')][2].innerText.includes('✔ x = x.to(')")
    assert "x on sim:0" in probe(page)
    search.fill("")
    search.press("Enter")
    # Apply fix next to the split model's finding.
    finding = explorer.locator(".widget-vbox", has_text="has parameters/buffers on").last
    finding.locator("button", has_text="Apply fix").click()
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Cell')][2].innerText.includes('✔ moved model')")
    assert "model on ['sim:0']" in probe(page)
    # The tree: open a node, see its children.
    explorer.locator(".p-TabBar-tab, .lm-TabBar-tab", has_text="Modules").click()
    explorer.locator(".widget-hbox", has_text="model[1]").locator("button").first.click()
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Cell')][2].innerText.includes('model[1][0]')")
    explorer.locator(".p-TabBar-tab, .lm-TabBar-tab", has_text="Tensors").click()


def check_devcheck_apply_and_rerun(page) -> None:
    run_cell(page, 3)
    assert page.evaluate(JS_CELL_HAS_ERROR, 3)
    checked = cell(page, 3)
    text = checked.inner_text()
    assert "device mismatch in F.linear" in text and text.count('z = z.to("sim:0")') == 1  # the fix, once
    checked.locator("button", has_text="Apply fix").click()
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Cell')][3].innerText.includes('✔ z = z.to(')")
    count = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets[3].model.executionCount")
    checked.locator("button", has_text="Re-run cell").click()
    # The notebook ran the cell again: a new count, and its old failure and error state are gone.
    page.wait_for_function(
        f"() => window.jupyterapp.shell.currentWidget.content.widgets[3].model.executionCount !== {count}")
    wait_idle(page)
    assert not page.evaluate(JS_CELL_HAS_ERROR, 3)
    assert "device mismatch" not in cell(page, 3).inner_text()
    assert "z on sim:0" in probe(page)


def check_gpumem_buttons(page) -> None:
    dashboard = cell(page, 5)
    status = dashboard.locator(".widget-html").filter(has_text=re.compile("^[✔–✖]"))

    def click(label: str, expect: str) -> None:
        dashboard.locator("button", has_text=label).first.click()
        page.wait_for_function(
            f"() => [...document.querySelectorAll('.jp-Cell')][5].innerText.includes({expect!r})", timeout=30_000)

    click("Release history", "released Out[")
    click("gc.collect()", "gc.collect() found")
    click("Reset peaks", "peaks reset")
    click("empty_cache", "empty_cache() released")
    assert status.count() >= 1
    dashboard.locator("button", has_text="Refresh").click()
    page.wait_for_function(
        "() => ![...document.querySelectorAll('.jp-Cell')][5].innerText.includes('empty_cache() released')")
    history = cell(page, 8)
    assert "memory per cell" in history.inner_text()
    assert history.locator("img.devinspect-plot-light, img.devinspect-plot-dark").count() == 2


def settle(page) -> None:
    """Wait until the browser has laid out and painted what changed (two animation frames)."""
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def screenshot_cells(page, indexes: list[int], shots: Path, suffix: str) -> None:
    """A screenshot of each cell, whole: the window is made tall enough for the tallest while they
    are taken (its width, which decides every layout checked here, stays as it is)."""
    window = page.viewport_size
    page.set_viewport_size({"width": window["width"], "height": 4000})
    settle(page)
    try:
        for index in indexes:
            cell(page, index).screenshot(path=str(shots / f"cell{index}-{suffix}.png"))
    finally:
        page.set_viewport_size(window)
        settle(page)


def check_fits_and_reads(page, theme: str, shots: Path, size: str) -> None:
    from playwright.sync_api import expect

    settle(page)
    page.screenshot(path=str(shots / f"notebook-{size}-{theme}.png"), full_page=True)
    screenshot_cells(page, [2, 3, 5, 8, *range(FAILING, len(CELLS))], shots, f"{size}-{theme}")
    overflowing = page.evaluate(JS_OVERFLOWS)
    assert overflowing == [], f"{size} {theme}: {overflowing}"
    wider = page.evaluate(JS_WIDER_THAN_OUTPUT)
    assert wider == [], f"{size} {theme}: {wider}"
    clipped = page.evaluate(JS_CLIPPED_TEXT)
    assert clipped == [], f"{size} {theme}: {clipped}"
    explorer = cell(page, 2)
    explorer.locator("input[type=text]").fill(LONG_NAME)
    explorer.locator("input[type=text]").press("Enter")
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Cell')][2].innerText.includes('rows 1–1 of 1')")
    shown = explorer.locator(".widget-hbox:has(select) .widget-html code").first
    expect(shown).to_have_text(LONG_NAME, timeout=30_000)  # in full (wrapped if need be), once the page shows it
    assert shown.evaluate("e => e.scrollWidth <= e.clientWidth + 1 && e.parentElement.scrollWidth <= "
                          "e.parentElement.clientWidth + 1")
    cell(page, 2).screenshot(path=str(shots / f"cell2-long-name-{size}-{theme}.png"))
    explorer.locator("input[type=text]").fill("")
    explorer.locator("input[type=text]").press("Enter")
    misaligned = page.evaluate(JS_MISALIGNED_COLUMNS, 2)
    assert misaligned == [], f"{size} {theme}: {misaligned}"
    for selector in (".jp-Cell .widget-html code", ".jp-Cell .widget-html span", ".jp-Cell button.jupyter-button",
                     ".jp-Cell .widget-html td", ".jp-Cell .widget-label", ".jp-Cell .devinspect td"):
        for read in colours(page, selector):
            ratio = contrast(read["fg"], read["bg"])
            assert ratio >= 4.5, f"{selector} contrast {ratio:.1f} in {theme} at {size}"
    # The dark theme gets the dark rendering of the plot, the light theme the light one.
    # What is seen: a plot inside a static copy that a live view replaces is hidden with its copy.
    shown = page.eval_on_selector_all("img[class^=devinspect-plot]",
                                      "els => els.filter(e => e.checkVisibility()).map(e => e.className)")
    assert shown == [f"devinspect-plot-{theme}"] * 2, shown  # %gpumem --history's and %%gpumem's live view
