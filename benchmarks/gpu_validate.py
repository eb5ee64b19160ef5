"""Check %gpumem's figures on a real GPU against allocations of known size.

Builds the scenario of ``tests/fixtures/gpumem_cuda.json`` on cuda:0: 256 MiB and
1000 bytes named (the allocator rounds 1000 up to one 1024-byte block), 64 MiB held
by an ``Out`` history entry, a closure holding a 32 MiB leaf and its ``sin()`` (whose
saved input, ``leaf * 2``, keeps its Python object: PyTorch preserves it while autograd
holds it, so the gc walk finds it, as measured on an H100), and a 512 MiB tensor freed
to leave a cached segment.
It prints the snapshot and reconciliation and checks:

* named, history and other-live tensor bytes against the sizes allocated;
* allocated grew by the sizes rounded up to 512-byte blocks, requested by the sizes;
* the saved ``leaf * 2`` is found with the closure's tensors (all three, 96 MiB), and
  "not reachable from Python" is what is left (no negative figure);
* every reconciliation total equals the rows above it;
* empty_cache() released what the snapshot announced.

``--capture PATH`` also writes the raw readings (``memory_stats``, NVML) as a test
fixture, with where and how they were captured.

Run on a GPU machine: ``python benchmarks/gpu_validate.py [--capture tests/fixtures/gpumem_cuda.json]``
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys

import torch

MiB = 1 << 20


def round_block(n: int) -> int:
    return (n + 511) // 512 * 512


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capture", metavar="PATH", help="write the readings as a test fixture")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("gpu_validate: no CUDA GPU here; nothing to validate (the CPU path is covered by the tests).")
        return 0

    from devinspect import actions
    from devinspect.collect.machine.memory_readings import read
    from devinspect.collect.machine.memory_snapshot import build, snapshot, tally_tensors

    torch.zeros(1, device="cuda:0")  # initialise CUDA here, explicitly
    torch.cuda.synchronize()
    base = snapshot({}).device("cuda:0")

    # The scenario of tests/fixtures/gpumem_cuda.json, for real.
    sizes = {"a": 256 * MiB, "b": 1000}  # b: the allocator rounds it to one 1024-byte block
    namespace: dict = {k: torch.empty(n, dtype=torch.uint8, device="cuda:0") for k, n in sizes.items()}
    namespace["Out"] = {3: torch.empty(64 * MiB, dtype=torch.uint8, device="cuda:0")}  # output history
    leaf = torch.ones(8 * MiB, device="cuda:0", requires_grad=True)  # 32 MiB float32
    out = (leaf * 2).sin()  # SinBackward keeps leaf * 2 (32 MiB); its Python object lives on
    closure = (lambda a, b: (lambda: (a, b)))(leaf, out)  # noqa: F841 - alive under no name
    del leaf, out
    big = torch.empty(512 * MiB, dtype=torch.uint8, device="cuda:0")
    del big  # one whole cached 512 MiB segment
    torch.cuda.synchronize()

    tallies = tally_tensors(namespace)
    readings = read()
    snap = build(readings, tallies)
    d = snap.device("cuda:0")
    print(snap)
    print()
    checks = []

    def check(label: str, ok: bool, detail: str) -> None:
        checks.append(ok)
        print(f"{'PASS' if ok else 'FAIL'}  {label}: {detail}")

    t = d.tensors
    check("named tensor bytes", t.named_bytes == sum(sizes.values()), f"{t.named_bytes} == {sum(sizes.values())}")
    check("history bytes", t.history_bytes == 64 * MiB, f"{t.history_bytes} == {64 * MiB}")
    check("closure's tensors and the saved input found by the gc walk", t.other_bytes >= 96 * MiB,
          f"{t.other_bytes} >= {96 * MiB}")
    grown = d.allocated_bytes - base.allocated_bytes
    expected = 256 * MiB + 1024 + 64 * MiB + 3 * 32 * MiB
    check("allocated growth, 512-byte blocks", grown == expected, f"{grown} == {expected}")
    if d.requested_bytes is not None:
        asked = d.requested_bytes - base.requested_bytes
        check("requested growth", asked == expected - 24, f"{asked} == {expected - 24}")
    rows = {r.label.split(" (")[0]: r for r in d.reconciliation}
    unreachable = rows.get("not reachable from Python")
    if unreachable is not None:
        check("'not reachable from Python' is not negative", unreachable.value_bytes >= 0,
              f"{unreachable.value_bytes} >= 0")
    running, adds_up = 0, True
    for r in d.reconciliation:
        if r.total and r.value_bytes != running:
            adds_up = False
            print(f"      {r.label}: {r.value_bytes} != {running}")
        running = r.value_bytes if r.total else running + (r.value_bytes or 0)
    check("reconciliation adds up", adds_up, f"{len(d.reconciliation)} rows")
    if d.process_bytes is not None:
        check("NVML: this process >= reserved", d.process_bytes >= d.reserved_bytes,
              f"{d.process_bytes} >= {d.reserved_bytes}")
    else:
        print(f"NOTE  NVML per-process figures unavailable: {d.driver_status}")

    if args.capture:
        fixture = {
            "provenance": (
                f"captured on a real GPU by benchmarks/gpu_validate.py --capture on "
                f"{datetime.date.today().isoformat()}: {d.name}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
                f"NVML driver {(readings.get('nvml') or {}).get('driver_version')}, host {platform.node()}. "
                "Re-capture with python benchmarks/gpu_validate.py --capture tests/fixtures/gpumem_cuda.json"
            ),
            "scenario": {"named": sizes, "history": {"Out[3]": 64 * MiB}, "other_at_least": 96 * MiB,
                         "unreachable_at_least": 0, "cached_at_least": 512 * MiB,
                         "what": "a, b named; Out[3] history; a closure holding a leaf and its sin(); "
                                 "sin's saved input keeps its Python object; a 512 MiB tensor freed"},
            "tensors": {k: {f: getattr(v, f) for f in ("named_bytes", "history_bytes", "other_bytes", "named_count",
                                                        "history_count", "other_count")}
                        for k, v in tallies.items()},
            "readings": readings,
        }
        with open(args.capture, "w") as f:
            json.dump(fixture, f, indent=1)
        print(f"wrote {args.capture}")

    announced = d.releasable_bytes
    result = actions.empty_cache()
    check("empty_cache released the announced bytes", result.nbytes == announced, f"{result.nbytes} == {announced}")
    print(f"      {result.message}")
    print(f"{sum(checks)}/{len(checks)} checks passed")
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
