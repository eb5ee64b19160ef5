"""A million tensors: the scan, ``%devices`` and the explorer, measured side by side in one run.

Namespace: a 200-block model, its AdamW state, and N loose small tensors in lists of
100,000 (each under the walk's 200,000-item bound per container, so nothing is cut):
``batches[3][41]`` is a name the user would type.

- bare id walk: a walk from the namespace that collects the ids of the same tensors
  and names nothing: the floor for any walk that names.
- facts read: the id walk, then every fact a record holds read through TensorBase's C
  getters and dropped (``scan.py``'s floor for any scan through PyTorch's Python API).
- scan: ``devinspect.scan`` (names, aliases, modules, optimizer state).
- %devices: the magic in an IPython shell (scan, findings, text and HTML tables).
- explorer: the live table a notebook shows (its frame, first page, module tree) built
  from the same result, and the bytes it adds (``tracemalloc``: what it keeps and its
  peak while it is built).

Prints medians of CPU time (``time.process_time``) over --repeat rounds, interleaved,
each ratio next to its target: %devices <= 1.3x the scan; %devices with the explorer
<= 2x the scan and <= +300 MiB.

Run: ``python benchmarks/million.py [--tensors 1000000] [--repeat 3]``
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import statistics
import time
import tracemalloc
from typing import Any, Callable

import torch
from scan import build_namespace, bytes_per_record, facts_read, id_walk, shell_with

import devinspect

PER_LIST = 100_000
MiB = 2**20


def spread_namespace(tensors: int) -> dict[str, Any]:
    namespace = build_namespace(0)
    del namespace["tensors"]
    namespace["batches"] = [[torch.zeros(4) for _ in range(min(PER_LIST, tensors - start))]
                            for start in range(0, tensors, PER_LIST)]
    return namespace


def cpu_seconds(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.process_time()
    fn()
    return time.process_time() - start


def explorer_of(view: Any, namespace: dict[str, Any]) -> Any:
    from devinspect.jupyter.devices_explorer import DevicesExplorer

    return DevicesExplorer(view, lambda: view, namespace, ["cpu"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    namespace = spread_namespace(args.tensors)
    ip = shell_with(namespace)
    view = devinspect.scan(namespace).select()
    print(f"torch {torch.__version__}, {len(view.records):,} records, cut: {bool(view.result.truncated)}, "
          f"median of {args.repeat}, CPU time")

    def magic() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            ip.run_cell("%devices", store_history=False)

    steps = {
        "bare id walk": lambda: id_walk(namespace),
        "facts read": lambda: facts_read(namespace),
        "scan": lambda: devinspect.scan(namespace),
        "%devices": magic,
        "explorer": lambda: explorer_of(view, namespace),
    }
    for fn in steps.values():
        fn()  # warm up
    times: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(args.repeat):
        for label, fn in steps.items():
            times[label].append(cpu_seconds(fn))
    med = {label: statistics.median(values) for label, values in times.items()}
    scan = med["scan"]
    print(f"bare id walk        {med['bare id walk'] * 1e3:9.0f} ms")
    print(f"facts read          {med['facts read'] * 1e3:9.0f} ms   {med['facts read'] / med['bare id walk']:.2f}x the id walk: "
          f"reading alone, nothing named or recorded")
    print(f"scan                {scan * 1e3:9.0f} ms   {scan / med['bare id walk']:.2f}x the id walk (target <= 3x), "
          f"{scan / med['facts read']:.2f}x the facts read")
    magic = med["%devices"]
    print(f"%devices            {magic * 1e3:9.0f} ms   {magic / scan:.2f}x the scan (target <= 1.3x)")
    print(f"explorer            {med['explorer'] * 1e3:9.0f} ms")
    with_explorer = magic + med["explorer"]
    print(f"%devices + explorer {with_explorer * 1e3:9.0f} ms   {with_explorer / scan:.2f}x the scan "
          f"(target <= 2x)")

    retained, peak, _ = bytes_per_record(namespace)
    print(f"scan memory         {retained:9.0f} B per record kept, {peak:.0f} B at the walk's peak "
          f"(target <= 150 B per record)")
    result = devinspect.scan(namespace)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        explorer = explorer_of(result.select(), namespace)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"explorer memory     {(kept - before) / MiB:9.0f} MiB kept, {(peak - before) / MiB:.0f} MiB at its peak"
          f"  (target <= +300 MiB)")
    del explorer


if __name__ == "__main__":
    main()
