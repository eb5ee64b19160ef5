"""The explorer's table work against plain pandas doing the same on the same rows.

For N tensors (a list of small tensors plus a model and its optimizer), the scan's
records are turned into a table three ways, side by side and interleaved:

- build: the explorer's frame (``table_frame``: the shown columns and sizes as text; a
  column's natural-order sort key is made by the first sort on it) against
  ``pandas.DataFrame`` of the same fields, read from the records as plain tuples (made
  once, before any timing: the scan keeps its records as columns);
- build + sort: a new frame's first sort by name (which makes the names' natural-order
  keys) against building the pandas frame and ``sort_values("name")``;
- sort by name: later sorts (the keys kept) against ``sort_values("name")``;
- filter: ``select`` with a filter word (it matches name, device, dtype and kind, then
  sorts by size, the default) against the same four ``str.contains`` and a size sort.

Times are CPU time of this process (``time.process_time``), median of --repeat rounds.
Target: each <= 2x pandas at 100,000 tensors.

Run: ``python benchmarks/explorer.py [--tensors 100000] [--repeat 7]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable

import pandas as pd
import torch
from torch import nn

import devinspect
from devinspect.jupyter.explorer_table import GridState, select, table_frame

TARGET = 2.0


def namespace(tensors: int) -> dict[str, Any]:
    model = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 64)).sum().backward()
    opt.step()
    return {"model": model, "opt": opt, "pool": [torch.zeros(i % 7 + 1) for i in range(tensors)]}


def cpu_seconds(fn: Callable[[], Any]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    records = devinspect.scan(namespace(args.tensors)).select().records
    frame = table_frame(records)
    select(frame, GridState(sort="name"))  # the frame keeps the names' sort keys from now on

    rows = tuple(records)

    def pandas_frame() -> pd.DataFrame:
        return pd.DataFrame({"name": [r.name for r in rows], "kind": [r.kind for r in rows],
                             "device": [r.device for r in rows], "dtype": [r.dtype for r in rows],
                             "shape": [str(list(r.shape or ())) for r in rows],
                             "size": [r.nbytes for r in rows]})

    plain = pandas_frame()
    word = "7"

    def pandas_filter() -> pd.DataFrame:
        rows = plain[plain["name"].str.contains(word, case=False, regex=False)
                     | plain["device"].str.contains(word, case=False, regex=False)
                     | plain["dtype"].str.contains(word, case=False, regex=False)
                     | plain["kind"].str.contains(word, case=False, regex=False)]
        return rows.sort_values("size", ascending=False, kind="stable")

    def first_sort_by_name() -> None:
        select(table_frame(records), GridState(sort="name", descending=False))

    def pandas_build_and_sort() -> None:
        pandas_frame().sort_values("name", kind="stable")

    pairs = {
        "build": (lambda: table_frame(records), pandas_frame),
        "build + sort": (first_sort_by_name, pandas_build_and_sort),
        "sort by name": (lambda: select(frame, GridState(sort="name", descending=False)),
                         lambda: plain.sort_values("name", kind="stable")),
        "filter": (lambda: select(frame, GridState(text=word)), pandas_filter),
    }
    print(f"{len(records):,} rows, median of {args.repeat} rounds, CPU time")
    for label, (ours_fn, theirs_fn) in pairs.items():
        ours_fn(), theirs_fn()  # warm up
        ours, theirs = [], []
        for _ in range(args.repeat):
            ours.append(cpu_seconds(ours_fn))
            theirs.append(cpu_seconds(theirs_fn))
        o, t = statistics.median(ours), statistics.median(theirs)
        ratio = o / t
        print(f"{label:14s} explorer {o * 1e3:8.1f} ms   pandas {t * 1e3:8.1f} ms   ratio {ratio:5.2f}x   "
              f"target <= {TARGET}x {'met' if ratio <= TARGET else 'NOT met'}")


if __name__ == "__main__":
    main()
