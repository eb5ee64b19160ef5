"""Widgets and memory of a kernel whose cells are run again and again, as a notebook runs them.

A real kernel (ipykernel through jupyter_client, driven as JupyterLab drives it: the same
``metadata.cellId`` on every run of a cell, see tests/frontend.py) runs each of these cells
``--runs`` times in a row:

* ``%devices`` (the explorer),
* a ``%%gpumem`` cell (its table, plot and dashboard),
* a plain cell that fails with a device mismatch (its explanation and Apply fix panel),
* ``%gpumem`` (the dashboard).

After the first run and then at every ``--every`` runs it prints the widgets alive in the
kernel (``ipywidgets.widgets.widget._instances``), the kernel's resident memory (RSS, from
``/proc``; after ``gc.collect()``) and the wall time per run over the last stretch. Flat
means: a re-run closes what the previous output showed. A last line per cell gives the
growth per run from the second checkpoint to the last (the first runs warm caches up:
imports, the allocator's pool, IPython's own).

Run: ``python benchmarks/widget_lifetime.py [--runs 500] [--every 100] [--cells devices,gpumem_cell,...]``
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from frontend import Cell, Frontend

SETUP = """import torch
from torch import nn
from devinspect import testing
device = testing.enable()
model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(8)]).to(device)
opt = torch.optim.AdamW(model.parameters())
batch = torch.randn(16, 64)
head = nn.Linear(64, 2).to(device)
"""

CELLS = {
    "devices": "%devices",
    "gpumem_cell": "%%gpumem\nx = torch.randn(256, 256, device=device)\ny = (x @ x).relu()\ndel x",
    "explained_error": "features = torch.randn(4, 64)\nscores = head(features)",
    "gpumem": "%gpumem",
}

PROBE = ("__import__('json').dumps([len(__import__('ipywidgets').widgets.widget._instances), "
         "__import__('gc').collect() * 0 + int(open('/proc/self/statm').read().split()[1]) "
         "* __import__('os').sysconf('SC_PAGE_SIZE')])")


def probe(lab: Frontend) -> tuple[int, int]:
    """(widgets alive, RSS in bytes) of the kernel, read by a silent request (it leaves no output)."""
    msg = lab.client.session.msg("execute_request", {
        "code": "", "silent": True, "store_history": False, "user_expressions": {"probe": PROBE},
        "allow_stdin": False, "stop_on_error": False})
    lab.client.shell_channel.send(msg)
    lab._drain(msg["header"]["msg_id"], None)
    reply = lab._reply(msg["header"]["msg_id"])
    value = reply["content"]["user_expressions"]["probe"]
    if value.get("status") != "ok":
        raise RuntimeError(f"the probe failed: {value}")
    widgets, rss = json.loads(ast.literal_eval(value["data"]["text/plain"]))
    return widgets, rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--cells", default=",".join(CELLS), help="which cells, comma-separated: " + ", ".join(CELLS))
    args = parser.parse_args()
    lab = Frontend()
    try:
        for setup in ("%load_ext devinspect", SETUP):
            if lab.run(setup).failed:
                raise SystemExit(f"setup failed: {setup}")
        print(f"{'cell':<16} {'runs':>5} {'widgets':>8} {'RSS MiB':>9} {'s/run':>7}")
        for name in args.cells.split(","):
            cell = Cell(CELLS[name])
            start = time.perf_counter()
            lab.run(cell)
            first = probe(lab)
            print(f"{name:<16} {1:>5} {first[0]:>8,} {first[1] / 2**20:>9.1f} {time.perf_counter() - start:>7.3f}")
            last, mark, since, steady = first, time.perf_counter(), 0, None
            for run in range(2, args.runs + 1):
                lab.run(cell)
                since += 1
                if run % args.every == 0 or run == args.runs:
                    elapsed = (time.perf_counter() - mark) / since
                    last = probe(lab)
                    steady = steady or (run, last)
                    print(f"{name:<16} {run:>5} {last[0]:>8,} {last[1] / 2**20:>9.1f} {elapsed:>7.3f}")
                    mark, since = time.perf_counter(), 0
            if steady is not None and args.runs > steady[0]:
                runs = args.runs - steady[0]
                print(f"{name:<16} growth per run after run {steady[0]}: {(last[0] - steady[1][0]) / runs:+.2f} "
                      f"widgets, {(last[1] - steady[1][1]) / runs / 1024:+.1f} KiB RSS")
    finally:
        lab.close()


if __name__ == "__main__":
    main()
