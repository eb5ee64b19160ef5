"""devinspect.scan against the bare limit and a peer, measured side by side in one run.

Namespace: a 200-block model (Linear + LayerNorm per block), its AdamW state after
one step, and N loose small tensors in a list (N = 20,000 and 100,000).

- bare loop: a garbage-collector walk reading device, dtype, shape, storage identity
  and storage bytes of every tensor, de-duplicating storages. It names nothing and
  finds nothing: the floor for any inspector.
- devinspect.scan: the full walk (names, aliases, modules, optimizer state).
- MemReporter: pytorch_memlab's ``MemReporter(model).report()`` (model only; it
  cannot take a namespace). Install it for the benchmark only:
  ``pip install --no-deps pytorch_memlab calmsize``.
- %devices end to end: scan + findings + text and HTML rendering in an IPython shell.
- %devices again and again: the same cell run 12 times as a notebook runs it, every
  result kept in IPython's Out; the 12th call must cost what the first did (devinspect
  never walks its own earlier results), on a 400-layer model and on 100,000 tensors.

- bare id walk: a walk from the namespace that collects the ids of the same tensors and
  names nothing: the floor for any walk that names.
- facts read: the id walk, then the facts each record holds (device, dtype, shape, logical
  bytes, storage identity and bytes, requires_grad) read for every tensor found through
  TensorBase's C getters, one ``map`` pass per fact, with no name, record or alias made:
  the floor for any scan that reads through PyTorch's Python API.

Prints medians of CPU time (``time.process_time``) over several rounds, the steps
compared with each other run in turn within each round, and the ratios. Targets on the 2-core
development machine: scan <= 1.3x bare loop and <= 3x the id walk; <= 150 B per record (tracemalloc);
>= 3x faster than MemReporter;
%devices end to end < 0.5 s on the 20,000-tensor namespace.

Run: ``python benchmarks/scan.py [--repeat 7] [--sizes 20000 100000]``
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import io
import statistics
import time
from typing import Any, Callable

import torch
from torch import nn

import devinspect


def build_namespace(loose: int) -> dict[str, Any]:
    torch.manual_seed(0)
    blocks = []
    for _ in range(200):
        blocks += [nn.Linear(64, 64), nn.LayerNorm(64)]
    model = nn.Sequential(*blocks)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(8, 64)).sum().backward()
    opt.step()
    tensors = [torch.zeros(4) for _ in range(loose)]
    return {"model": model, "opt": opt, "tensors": tensors, "x": torch.randn(8, 64)}


def bare_loop() -> int:
    seen: set[int] = set()
    rows = []
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            key = storage._cdata
            if key in seen:
                continue
            seen.add(key)
            rows.append((obj.device, obj.dtype, tuple(obj.shape), key, storage.nbytes()))
    return len(rows)


def id_walk(namespace: dict[str, Any]) -> int:
    """The floor for naming: a walk from the namespace that collects the ids of the same
    tensors (containers, modules' parameters, buffers and submodules, optimizers' state
    and groups), naming and reading nothing."""
    return len(tensors_by_id(namespace))


def tensors_by_id(namespace: dict[str, Any]) -> dict[int, torch.Tensor]:
    found: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    stack = list(namespace.values())
    while stack:
        value = stack.pop()
        if isinstance(value, torch.Tensor):
            found[id(value)] = value
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, dict):
            stack.extend(value.values())
            stack.extend(k for k in value if isinstance(k, torch.Tensor))
        elif isinstance(value, nn.Module):
            stack.extend(value._parameters.values())
            stack.extend(value._buffers.values())
            stack.extend(value._modules.values())
        elif isinstance(value, torch.optim.Optimizer):
            stack.append(value.state)
            stack.append(value.param_groups)
    return found


def facts_read(namespace: dict[str, Any]) -> int:
    """The id walk, then each fact a record holds read for every tensor it found, one C-level
    pass per fact (the reads the scan itself makes, without naming or recording anything)."""
    tensors = list(tensors_by_id(namespace).values())
    base = torch._C.TensorBase
    # Each value is read and dropped at once (nothing kept, so no collector work either).
    for name in ("device", "dtype", "shape", "nbytes", "requires_grad"):
        collections.deque(map(base.__dict__[name].__get__, tensors), maxlen=0)
    storages = list(map(base.untyped_storage, tensors))
    collections.deque(map(torch._C.StorageBase.__dict__["_cdata"].__get__, storages), maxlen=0)
    collections.deque(map(torch._C.StorageBase.nbytes, storages), maxlen=0)
    return len(tensors)


def interleaved_medians(steps: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median CPU seconds of each step over ``repeat`` rounds, every round running each step
    once in turn, so a change in the machine's load falls on all of them alike."""
    for fn in steps.values():
        fn()  # warm up (imports, caches)
    times: dict[str, list[float]] = {label: [] for label in steps}
    for _ in range(repeat):
        for label, fn in steps.items():
            gc.collect()
            start = time.process_time()
            fn()
            times[label].append(time.process_time() - start)
    return {label: statistics.median(values) for label, values in times.items()}


def median_time(fn: Callable[[], Any], repeat: int) -> float:
    """Median CPU seconds of this process (``time.process_time``) over ``repeat`` calls."""
    fn()  # warm up (imports, caches)
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.process_time()
        fn()
        times.append(time.process_time() - start)
    return statistics.median(times)


def bytes_per_record(namespace: dict[str, Any]) -> tuple[float, float, int]:
    """(retained, peak) bytes per record of one scan, by ``tracemalloc``: what the result keeps,
    and the most the walk held at once while it ran (its own bookkeeping included)."""
    import tracemalloc

    devinspect.scan(namespace)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = devinspect.scan(namespace)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    count = len(result.records)
    return (current - before) / count, (peak - before) / count, count


def memreporter(model: nn.Module) -> Callable[[], None] | None:
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            from pytorch_memlab import MemReporter
    except ImportError:
        return None

    def run() -> None:
        with contextlib.redirect_stdout(io.StringIO()):
            MemReporter(model).report()

    return run


def shell_with(namespace: dict[str, Any]) -> Any:
    """The test shell with devinspect loaded and exactly ``namespace`` as the user's variables."""
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()
    if "devices" not in ip.magics_manager.magics["line"]:
        ip.run_line_magic("load_ext", "devinspect")
    for name in [n for n in ip.user_ns if not n.startswith("_") and n not in ip.user_ns_hidden]:
        del ip.user_ns[name]
    ip.user_ns.get("Out", {}).clear()
    ip.user_ns.update(namespace)
    gc.collect()
    return ip


def devices_magic(namespace: dict[str, Any]) -> Callable[[], None]:
    ip = shell_with(namespace)

    def run() -> None:
        # As a kernel runs the cell: the magic scans, finds and renders text and HTML once.
        with contextlib.redirect_stdout(io.StringIO()):
            ip.run_cell("%devices", store_history=False)

    return run


def repeated_devices(namespace: dict[str, Any], calls: int = 12) -> tuple[list[float], bool]:
    """Seconds of each of ``calls`` %devices cells (results kept in Out), and whether a bound cut the walk."""
    ip = shell_with(namespace)
    times = []
    for _ in range(calls):
        with contextlib.redirect_stdout(io.StringIO()):
            start = time.process_time()
            ip.run_cell("%devices", store_history=True)
            times.append(time.process_time() - start)
    cut = bool(devinspect.scan(ip.user_ns, include_hidden=True).truncated)
    shell_with({})
    return times, cut


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sizes", type=int, nargs="+", default=[20_000, 100_000])
    args = parser.parse_args()
    print(f"torch {torch.__version__}, devinspect {devinspect.__version__}, median of {args.repeat}")
    for size in args.sizes:
        ns = build_namespace(size)
        result = devinspect.scan(ns)
        print(f"\n== 200-block model + AdamW state + {size:,} loose tensors: {len(result.records):,} records ==")
        medians = interleaved_medians({
            "bare": bare_loop, "walk": lambda: id_walk(ns), "facts": lambda: facts_read(ns),
            "scan": lambda: devinspect.scan(ns),
        }, args.repeat)
        bare, walk, facts, scan = medians["bare"], medians["walk"], medians["facts"], medians["scan"]
        print(f"bare gc loop            {bare * 1e3:9.1f} ms")
        print(f"bare id walk            {walk * 1e3:9.1f} ms")
        print(f"facts read              {facts * 1e3:9.1f} ms   {facts / walk:.2f}x the id walk: reading alone, "
              f"nothing named or recorded   ratio scan/facts read = {scan / facts:.2f}x")
        print(f"devinspect.scan         {scan * 1e3:9.1f} ms   ratio scan/gc loop = {scan / bare:.2f}x  (target <= 1.3x)"
              f"   ratio scan/id walk = {scan / walk:.2f}x  (target <= 3x)")
        retained, peak, _ = bytes_per_record(ns)
        print(f"memory per record       {retained:9.0f} B kept by the result, {peak:.0f} B at the walk's peak"
              f"  (target <= 150 B)")
        reporter = memreporter(ns["model"])
        if reporter is not None:
            medians = interleaved_medians({
                "model_only": lambda: devinspect.scan({"model": ns["model"], "opt": ns["opt"]}), "mem": reporter,
            }, args.repeat)
            model_only, mem = medians["model_only"], medians["mem"]
            print(f"scan (model + opt only) {model_only * 1e3:9.1f} ms")
            print(f"MemReporter(model)      {mem * 1e3:9.1f} ms   ratio MemReporter/scan = {mem / model_only:.1f}x  (target >= 3x)")
        else:
            print("MemReporter             not installed (pip install --no-deps pytorch_memlab calmsize)")
        end_to_end = median_time(devices_magic(ns), args.repeat)
        print(f"%devices end to end     {end_to_end * 1e3:9.1f} ms   (target < 500 ms at 20,000)")
        ns = result = None  # free them before the next size
        gc.collect()
    print("\n== %devices again and again, every result kept in Out ==")
    deep = nn.Sequential(*(nn.Linear(8, 8) for _ in range(400)))
    for label, namespace in (("400-layer model", {"model": deep}),
                             ("100,000 tensors", {"tensors": [torch.zeros(1) for _ in range(100_000)]})):
        times, cut = repeated_devices(namespace)
        first, last = statistics.median(times[:3]), statistics.median(times[-3:])
        print(f"{label:22s} calls 1-3 {first * 1e3:8.1f} ms   calls 10-12 {last * 1e3:8.1f} ms   "
              f"ratio {last / first:.2f}x (target ~1.0)   walk cut short: {cut}")


if __name__ == "__main__":
    main()
