"""Which calls raise a device error with one operand on the host: capture the table, compare two.

On ``--device cuda`` (a GPU) or ``--device sim`` (the simulated device), runs PyTorch's op
samples (``op_db``, the first two per op, seed 0) with each tensor operand moved to the host in
turn (``--other meta``: to the meta device, a shape without data, as a model built under
``torch.device("meta")`` holds), and records ``ok``, ``device`` or ``other:<ErrorClass>`` per case (``tests/opinfo_mixing.py``
says how). ``--out`` writes the table with the torch version, device name, dtype and date;
``--compare`` prints how often it agrees with a reference table on whether a device error is
raised (target: at least 99.5% against CUDA's), and every case where they differ.

Run: ``python benchmarks/mixing_table.py --device cuda|sim [--dtype float32] [--out FILE.json]
[--compare FILE.json] [--ops add,mul] [--other meta]``. The simulated device runs in a process without a GPU
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "sim"), default="sim")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--out", default="", help="write the captured table here (JSON)")
    parser.add_argument("--compare", default="", help="a reference table (JSON) to compare with")
    parser.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    parser.add_argument("--other", choices=("cpu", "meta"), default="cpu",
                        help="where each operand in turn goes: the host (default), or meta (a shape, no data)")
    parser.add_argument("--show", type=int, default=200, help="how many disagreements to list")
    args = parser.parse_args()

    import opinfo_mixing
    import torch

    dtype = getattr(torch, args.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise SystemExit(f"mixing_table: {args.dtype!r} is not a torch dtype")
    device, name = _device(args.device)
    started = time.process_time()
    table = opinfo_mixing.capture(device, dtype, set(args.ops.split(",")) if args.ops else None, other=args.other)
    spent = time.process_time() - started
    answers = sorted(table.cases.values())
    counts = {a: answers.count(a) for a in dict.fromkeys(answers)}
    print(f"mixing table on {device} ({name}) with {args.other}, torch {torch.__version__}, {args.dtype}: "
          f"{len(table.cases)} cases "
          f"{counts}, {len(table.unrunnable)} samples it cannot run; {spent:.0f} s CPU")
    if args.out:
        Path(args.out).write_text(json.dumps({
            "device": device.type, "device_name": name, "torch": torch.__version__, "dtype": args.dtype,
            "other": args.other,
            "python": platform.python_version(), "date": datetime.date.today().isoformat(),
            "cases": table.cases, "unrunnable": table.unrunnable,
        }, indent=0) + "\n")
        print(f"written: {args.out}")
    if args.compare:
        reference = json.loads(Path(args.compare).read_text())
        agreement = opinfo_mixing.compare(table, reference["cases"], reference.get("unrunnable", ()))
        _report(agreement, reference, args.dtype, args.show)
    return 0


if __name__ == "__main__":
    sys.exit(main())
