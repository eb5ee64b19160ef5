"""Takes the README's picture, docs/images/devices.png: %devices in a real JupyterLab (light
theme) in headless Chromium, after the README's first cells. Run from the repository root:

    python docs/images/take_screenshots.py

It needs what the browser tests need: Debian's chromium and playwright (the test extra).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from lab import Lab, launch, open_notebook, run_all  # noqa: E402

CELLS = [
    "%load_ext devinspect",
    "import torch\n"
    "from torch import nn\n"
    "from devinspect import testing\n\n"
    "device = torch.device(\"cuda\") if torch.cuda.is_available() else testing.enable()\n"
    "model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)\n"
    "model[2] = nn.Linear(16, 2)   # a new head, made after model.to(device)\n"
    "x = torch.randn(4, 8)         # a batch never moved",
    "%devices",
]


def main() -> None:
    from playwright.sync_api import sync_playwright

    out = ROOT / "docs" / "images" / "devices.png"
    with tempfile.TemporaryDirectory() as tmp:
        server = Lab(Path(tmp)).start()
        try:
            url = server.notebook("first-session.ipynb", CELLS)
            with sync_playwright() as p:
                browser, page = launch(p, width=1180, height=1000)
                try:
                    open_notebook(page, url)
                    page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
                    run_all(page, len(CELLS))
                    explorer = ".jp-OutputArea-output:has(.jupyter-widgets button:has-text('Apply fix'))"
                    page.wait_for_selector(f"{explorer} code:has-text('model[0].weight')", timeout=60_000)
                    page.wait_for_timeout(500)  # the fonts and the last layout pass
                    cell = page.query_selector(f".jp-Notebook .jp-CodeCell:has({explorer})")
                    cell.screenshot(path=str(out))
                finally:
                    browser.close()
        finally:
            server.stop()
    print(out)


if __name__ == "__main__":
    main()
