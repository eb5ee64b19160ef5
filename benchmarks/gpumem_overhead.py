"""What %gpumem costs: per-cell overhead of --track, and the time of one reading.

Per-cell: a real IPython shell runs the same small cell (``x = sum(range(100))``)
in blocks, untracked and tracked alternately; the medians per cell and their
difference (the tracking hooks: counters read before and after, peaks reset) are
printed side by side, in CPU time (``time.process_time``). Reading: ``memory.read()`` (what a --watch tick does),
``build()``, and the tensor count (a scan with a gc walk) over N loose tensors.

Run: ``python benchmarks/gpumem_overhead.py [--cells 200] [--repeat 7] [--tensors 20000]``
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def per_cell(shell, cells: int) -> float:
    start = time.process_time()
    for _ in range(cells):
        shell.run_cell("x = sum(range(100))", store_history=True, silent=False)
    return (time.process_time() - start) / cells


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tensors", type=int, default=20_000)
    args = parser.parse_args()

    from IPython.testing.globalipapp import get_ipython

    from devinspect.collect.machine import memory_snapshot

    shell = get_ipython()
    shell.run_line_magic("load_ext", "devinspect")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.zeros(1, device="cuda")  # tracking reads CUDA counters only once CUDA is initialised
    per_cell(shell, 20)  # warm up
    plain, tracked = [], []
    for _ in range(args.repeat):
        plain.append(per_cell(shell, args.cells))
        shell.run_line_magic("gpumem", "--track")
        tracked.append(per_cell(shell, args.cells))
        shell.run_line_magic("gpumem", "--untrack")
    p, t = statistics.median(plain), statistics.median(tracked)
    print(f"== per-cell overhead of %gpumem --track ({device}; {args.cells} cells x {args.repeat} blocks) ==")
    print(f"plain cell            {p * 1e6:9.1f} us")
    print(f"tracked cell          {t * 1e6:9.1f} us   overhead {(t - p) * 1e6:+.1f} us per cell, ratio {t / p:.2f}x")

    print(f"\n== one reading ({device}) ==")
    r = median_time(memory_snapshot.read, args.repeat * 3)
    readings = memory_snapshot.read()
    b = median_time(lambda: memory_snapshot.build(readings), args.repeat * 3)
    print(f"memory.read()         {r * 1e3:9.2f} ms   (a --watch tick: counters, NVML, process)")
    print(f"memory.build()        {b * 1e3:9.2f} ms")
    ns = {f"t{i}": torch.zeros(4) for i in range(args.tensors)}
    tally = median_time(lambda: memory_snapshot.tally_tensors(ns), args.repeat)
    print(f"tally_tensors         {tally * 1e3:9.1f} ms   ({args.tensors:,} named tensors, with the gc walk)")


if __name__ == "__main__":
    main()
