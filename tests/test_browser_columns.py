"""Columns and code as laid out by a real JupyterLab (headless Chromium), at about 577 px of output
(1024×768 with the file browser open) and at about 1440 px: each column is wide enough for what it
holds, a short value (``optimizer_state``) stays on one line, a name is never split inside one of
its parts (``losses[0]``), and a fix's code wraps only between its tokens."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from lab import (
    JS_OUTPUT_WIDTH,
    JS_WIDER_THAN_OUTPUT,
    cell,
    launch,
    open_narrow,
    run_cell,
    server,  # noqa: F401 - the JupyterLab fixture
    widen,
)

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SETUP = """import torch
from torch import nn
from IPython.display import HTML
import devinspect
from devinspect import testing
from devinspect.render.html import render_scan
dev = testing.enable()
model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)).to(dev)
opt = torch.optim.Adam(model.parameters())
model(torch.randn(3, 8, device=dev)).sum().backward()
opt.step()
head = nn.Linear(4, 2).to(dev)"""

CELLS = [
    "%load_ext devinspect",  # 0
    SETUP,  # 1
    "%devices",  # 2: the explorer
    "HTML(render_scan(devinspect.scan({'model': model, 'opt': opt}).select()))",  # 3: the static table
    "%%gpumem\nlosses = []\nfor step in range(2):\n    weights_of_this_step = torch.randn(64, 64, device=dev)\n"
    "    losses.append((weights_of_this_step @ weights_of_this_step).sum())",  # 4: a profile by line
    "bad = head(torch.randn(2, 4) * torch.ones(2, 4) + torch.zeros(2, 4) - torch.full((2, 4), 0.5) "
    "+ torch.rand(2, 4))",  # 5: fails; its explanation's fix is a long line of code
]

#: Where each line of an element's text breaks as laid out: the characters either side of each break.
JS_BREAKS = """(el) => {
  const out = [];
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  let top = null, before = '';
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rects = range.getClientRects();
      const ch = node.data[i];
      if (!rects.length || ch === '\\n') { before = ch; top = null; continue; }
      const y = rects[0].top;
      if (top !== null && y > top + 2 && !/\\s/.test(ch)) out.push([before, ch]);
      top = y;
      before = ch;
    }
  }
  return out;
}"""
#: A column's cells (header included) in the table of an output: [width px, text] for each.
JS_COLUMN = """([cellIndex, header]) => {
  const cell = [...document.querySelectorAll('.jp-Notebook .jp-Cell')][cellIndex];
  const tables = [...cell.querySelectorAll('table')].filter(t => t.offsetParent !== null);
  for (const table of tables) {
    const heads = [...table.querySelectorAll('thead th')];
    const at = heads.findIndex(th => th.innerText.trim() === header);
    if (at < 0) continue;
    const rows = [...table.querySelectorAll('tbody tr')].filter(tr => tr.children.length === heads.length);
    return [heads[at], ...rows.map(tr => tr.children[at])].map(c => [c.getBoundingClientRect().width, c.innerText]);
  }
  return null;
}"""


def _word(ch: str) -> bool:
    return ch.isalnum() or ch in "_]"


def breaks_inside_words(page, selector: str) -> list[str]:
    """Breaks between two characters of one word (``mode / l``, ``an / d``, ``losses[0 / ]``)."""
    bad = []
    for element in page.query_selector_all(selector):
        if element.is_visible():
            bad += [f"{a}/{b} in {element.inner_text()[:60]!r}" for a, b in page.evaluate(JS_BREAKS, element)
                    if _word(a) and _word(b)]
    return bad


def one_line(page, selector: str, text: str) -> list[float]:
    """The heights of the visible elements matching ``selector`` whose text is ``text``, in lines."""
    return page.eval_on_selector_all(selector, """(els, text) => els
        .filter(e => e.offsetParent !== null && e.innerText.trim() === text)
        .map(e => { const r = document.createRange(); r.selectNodeContents(e);
                    const tops = new Set([...r.getClientRects()].map(x => Math.round(x.top))); return tops.size; })""",
                                      text)


def test_columns_keep_their_values_whole_at_both_widths(server, tmp_path):  # noqa: F811 - the fixture
    from playwright.sync_api import sync_playwright

    shots = Path(os.environ.get("DEVINSPECT_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    url = server.notebook("columns.ipynb", CELLS)
    with sync_playwright() as p:
        browser, page = launch(p)
        try:
            open_narrow(page, url)
            for index in range(len(CELLS)):
                run_cell(page, index)
            page.wait_for_selector(".jp-Cell .devinspect-row", timeout=30_000)  # the explorer, drawn
            width = page.evaluate(JS_OUTPUT_WIDTH)
            assert 560 <= width <= 600, width
            page.screenshot(path=str(shots / "columns-narrow.png"), full_page=True)
            check_layout(page, "narrow")
            width = widen(page)
            assert 1420 <= width <= 1460, width
            page.screenshot(path=str(shots / "columns-wide.png"), full_page=True)
            check_layout(page, "wide")
        except Exception:
            page.screenshot(path=str(shots / "columns-failure.png"), full_page=True)
            raise
        finally:
            browser.close()


def check_layout(page, size: str) -> None:
    """Measured with the window tall enough for every cell (JupyterLab draws only the cells in view);
    its width, which decides every layout checked here, stays as it is."""
    window = page.viewport_size
    page.set_viewport_size({"width": window["width"], "height": 6000})
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    try:
        shots = Path(os.environ.get("DEVINSPECT_SCREENSHOTS", "."))
        if os.environ.get("DEVINSPECT_SCREENSHOTS"):
            for index in (2, 3, 4, 5):
                cell(page, index).screenshot(path=str(shots / f"columns-cell{index}-{size}.png"))
        measure(page, size)
    finally:
        page.set_viewport_size(window)


def measure(page, size: str) -> None:
    """Every measure is taken, then every failure said at once."""
    failures = []
    wider = page.evaluate(JS_WIDER_THAN_OUTPUT)
    if wider:
        failures.append(f"wider than the output: {wider}")
    # The kind column keeps "optimizer_state" on one line, in the explorer and in the static table;
    # at 577 px it folds (in both) to give the names its width.
    kinds = one_line(page, ".jp-Cell .devinspect-kind, .jp-Cell td", "optimizer_state")
    if not set(kinds) <= {1} or bool(kinds) != (size == "wide"):
        failures.append(f"optimizer_state shown {len(kinds)} times, over {sorted(set(kinds))} lines")
    # %%gpumem's short columns hold their values on one line, wide enough for them; no name in
    # "made here, still alive" is split inside one of its parts.
    for header, least in (("line", 40), ("runs", 30), ("made here, still alive", 90)):
        cells = page.evaluate(JS_COLUMN, [4, header]) or [(0, "")]
        print(f"{size}: {header!r} column {[round(w) for w, _ in cells]} px")
        if min(w for w, _ in cells) < least:
            failures.append(f"{header!r} column {cells}")
    for text in ("line 2", "line 4"):
        if not set(one_line(page, ".jp-Cell td", text)) <= {1}:
            failures.append(f"{text} wraps")
    split = breaks_inside_words(page, ".jp-Cell td, .jp-Cell .widget-html span")
    if split:
        failures.append(f"names split inside a part: {split}")
    # The fix's code wraps between tokens only, never inside a name or a keyword.
    fixes = ".jp-Cell pre[style*='white-space']"
    split = breaks_inside_words(page, fixes)
    if not page.query_selector_all(fixes) or split:
        failures.append(f"code split inside a token: {split}")
    print(f"{size}: " + ("\n".join(failures) or "as it should be"))
    assert failures == [], f"{size}: {failures}"
