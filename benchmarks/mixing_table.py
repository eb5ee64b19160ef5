"""Which calls raise a device error with one operand on the host: capture the table, compare two.

On ``--device cuda`` (a GPU) or ``--device sim`` (the simulated device), runs PyTorch's op
samples (``op_db``, the first two per op, seed 0) with each tensor operand moved to the host in
turn (``--other meta``: to the meta device, a shape without data, as a model built under
``torch.device("meta")`` holds), and records ``ok``, ``device`` or ``other:<ErrorClass>`` per case (``tests/opinfo_mixing.py``
says how). ``--out`` writes the table with the torch version, device name, dtype and date;
``--compare`` prints how often it agrees with a reference table on whether a device error is
raised (target: at least 99.5% against CUDA's), and every case where they differ.

Run: ``python benchmarks/mixing_table.py --device cuda|sim [--dtype float32[,float64,...]]
[--out FILE.json] [--compare FILE.json] [--ops add,mul | --suite-ops] [--other meta]`` (with several
dtypes, ``{dtype}`` in ``--out`` and ``--compare`` names each one's file). The simulated device runs in a process without a GPU
(``CUDA_VISIBLE_DEVICES= python benchmarks/mixing_table.py --device sim`` on a GPU machine).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _device(kind: str):
    import torch

    if kind == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("mixing_table: no CUDA GPU in this process; use --device sim")
        return torch.device("cuda:0"), torch.cuda.get_device_name(0)
    from devinspect import testing

    try:
        return testing.enable(), "simulated device (devinspect.testing)"
    except testing.SimulatedDeviceError as exc:
        raise SystemExit(f"mixing_table: {exc}") from None


def _report(agreement, reference: dict, dtype: str, show: int) -> None:
    against = f"{reference.get('device', '?')} (torch {reference.get('torch', '?')}, {reference.get('dtype', 'float32')})"
    print(f"agreement with {against} on whether a device error is raised, {dtype}:")
    print(f"  {agreement.agree}/{agreement.shared} cases agree ({100 * agreement.rate:.2f}%)  target >= 99.5%")
    print(f"  left out: {agreement.unrunnable} cases of samples a device cannot run at all, "
          f"{agreement.only_here} cases only here, {agreement.only_there} only in the reference")
    if agreement.differ:
        print(f"disagreements ({len(agreement.differ)}):")
        for key, here, there in agreement.differ[:show]:
            print(f"  {key:60} here={here:24} reference={there}")


def suite_ops(dtype_name: str) -> set[str] | None:
    """The ops the suite compares in ``dtype_name``: every op in float32, every second op of
    ``op_db`` in the other dtypes (as ``tests/test_sim_mixing.py`` takes them)."""
    import opinfo_sim

    if dtype_name == "float32":
        return None
    return {op.name for i, op in enumerate(opinfo_sim.op_db()) if i % 2}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "sim"), default="sim")
    parser.add_argument("--dtype", default="float32",
                        help="a dtype, or several comma-separated (one process, one table each)")
    parser.add_argument("--out", default="", help="write the captured table here (JSON; {dtype} is replaced "
                                                  "by each dtype's name)")
    parser.add_argument("--compare", default="", help="a reference table (JSON, {dtype} replaced) to compare with")
    parser.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    parser.add_argument("--suite-ops", action="store_true",
                        help="the ops the suite compares: all in float32, every second op in the other dtypes")
    parser.add_argument("--other", choices=("cpu", "meta"), default="cpu",
                        help="where each operand in turn goes: the host (default), or meta (a shape, no data)")
    parser.add_argument("--show", type=int, default=200, help="how many disagreements to list")
    args = parser.parse_args()

    import opinfo_mixing
    import torch

    names = [n.strip() for n in args.dtype.split(",") if n.strip()]
    for name in names:
        if not isinstance(getattr(torch, name, None), torch.dtype):
            raise SystemExit(f"mixing_table: {name!r} is not a torch dtype")
    if len(names) > 1 and args.out and "{dtype}" not in args.out:
        raise SystemExit("mixing_table: with several dtypes, --out names each table with {dtype}")
    device, device_name = _device(args.device)
    for name in names:
        dtype = getattr(torch, name)
        ops = set(args.ops.split(",")) if args.ops else suite_ops(name) if args.suite_ops else None
        started = time.process_time()
        table = opinfo_mixing.capture(device, dtype, ops, other=args.other)
        spent = time.process_time() - started
        answers = sorted(table.cases.values())
        counts = {a: answers.count(a) for a in dict.fromkeys(answers)}
        print(f"mixing table on {device} ({device_name}) with {args.other}, torch {torch.__version__}, {name}: "
              f"{len(table.cases)} cases "
              f"{counts}, {len(table.unrunnable)} samples it cannot run; {spent:.0f} s CPU", flush=True)
        if args.out:
            out = Path(args.out.replace("{dtype}", name))
            out.write_text(json.dumps({
                "device": device.type, "device_name": device_name, "torch": torch.__version__, "dtype": name,
                "other": args.other,
                "python": platform.python_version(), "date": datetime.date.today().isoformat(),
                "cases": table.cases, "unrunnable": table.unrunnable,
            }, indent=0) + "\n")
            print(f"written: {out}")
        if args.compare:
            reference = json.loads(Path(args.compare.replace("{dtype}", name)).read_text())
            agreement = opinfo_mixing.compare(table, reference["cases"], reference.get("unrunnable", ()))
            _report(agreement, reference, name, args.show)
    return 0

if __name__ == "__main__":
    sys.exit(main())
