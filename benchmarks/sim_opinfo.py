"""The simulated device against the CPU on PyTorch's own op samples (``op_db``).

Runs every op's first ``--samples`` samples in every dtype the CPU supports (float32,
float64, float16, bfloat16, complex64, int64, int32, int8, uint8, bool), output and, for
ops with autograd, gradients; prints the agreement rate (target: at least 99.5%) and every
difference by op, dtype and reason.

Run: ``python benchmarks/sim_opinfo.py [--samples 2] [--dtypes float32] [--ops add,mul] [--json out.json]``
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> int:
    import opinfo_sim
    import torch

    from devinspect import testing

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--dtypes", default="", help="comma-separated, e.g. float32,bfloat16 (default: all)")
    parser.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    parser.add_argument("--json", default="")
    parser.add_argument("--trace", action="store_true", help="print each op's name before it runs")
    args = parser.parse_args()
    try:
        sim = testing.enable()
    except testing.SimulatedDeviceError as exc:  # a GPU in this process: run with CUDA_VISIBLE_DEVICES=""
        print(f"sim_opinfo: {exc}")
        return 1
    wanted = tuple(getattr(torch, d) for d in args.dtypes.split(",")) if args.dtypes else opinfo_sim.ALL_DTYPES
    only = set(args.ops.split(",")) if args.ops else None
    outcomes = []
    started = time.process_time()
    for op in opinfo_sim.op_db():
        if only and op.name not in only:
            continue
        for dtype in opinfo_sim.dtypes_of(op, wanted):
            if args.trace:
                print(f"running {op.name}.{op.variant_test_name} {dtype}", file=sys.stderr, flush=True)
            outcomes.extend(opinfo_sim.compare_op(op, dtype, sim, args.samples))
    spent = time.process_time() - started
    by_part = collections.Counter((o.part, o.agree) for o in outcomes)
    print(f"op_db: {len({o.op for o in outcomes})} ops, {len(outcomes)} comparisons, {spent:.0f} s CPU")
    for part in ("output", "gradient"):
        agree, total = by_part[(part, True)], by_part[(part, True)] + by_part[(part, False)]
        if total:
            print(f"  {part:9} {agree}/{total} agree ({100 * agree / total:.2f}%)")
    agree = sum(o.agree for o in outcomes)
    print(f"  all       {agree}/{len(outcomes)} agree ({100 * agree / max(len(outcomes), 1):.2f}%)  target >= 99.5%")
    per_dtype = collections.defaultdict(lambda: [0, 0])
    for o in outcomes:
        per_dtype[o.dtype][0] += o.agree
        per_dtype[o.dtype][1] += 1
    print("  by dtype: " + ", ".join(f"{d.replace('torch.', '')} {a}/{t}" for d, (a, t) in sorted(per_dtype.items())))
    differences = collections.defaultdict(list)
    for o in outcomes:
        if not o.agree:
            differences[(o.op, o.variant)].append(o)
    print(f"differences ({sum(map(len, differences.values()))} in {len(differences)} ops):")
    for (name, variant), found in sorted(differences.items()):
        dtypes = sorted({o.dtype.replace("torch.", "") for o in found})
        print(f"  {name}{'.' + variant if variant else ''} [{', '.join(dtypes)}] {found[0].part}: {found[0].reason}")
    if args.json:
        Path(args.json).write_text(json.dumps([dataclasses.asdict(o) for o in outcomes]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
