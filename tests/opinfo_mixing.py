"""Which calls raise a device error when one operand is on the host: the mixing table.

PyTorch's own op samples (``op_db``), made on an accelerator (``cuda:0`` or ``sim:0``) from
seed 0, the first two per op. For every sample with at least two tensor operands, each
tensor operand in turn (the input, a positional argument, the first tensor of a tensor-list
argument, a keyword argument) is moved to the host and the op is called, then the device is
synchronised. Each case is keyed ``"{op.name}.{op.variant_test_name}#{sample}#{position}"``
with position ``input``, ``input/0``, ``arg/I``, ``arg/I/0`` or ``kw/NAME``, and answered
``ok`` (it ran), ``device`` (it raised an error whose message names devices) or
``other:<ErrorClass>``.

A table captured on a real GPU is the reference the simulated device is held to
(``tests/fixtures/mixing_float32.json``; ``benchmarks/mixing_table.py`` captures and compares).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from typing import Any

import opinfo_sim
import torch


def _is_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor)


def _first_tensor(items: Any) -> int | None:
    if not isinstance(items, (list, tuple)):
        return None
    return next((i for i, x in enumerate(items) if _is_tensor(x)), None)


def _count(value: Any) -> int:
    if _is_tensor(value):
        return 1
    if isinstance(value, (list, tuple)):
        return sum(_is_tensor(x) for x in value)
    return 0


def operand_count(sample: Any) -> int:
    """The tensor operands of a sample: tensors passed directly or inside a list argument."""
    return _count(sample.input) + sum(_count(a) for a in sample.args) + sum(_count(v) for v in sample.kwargs.values())


def positions(sample: Any) -> Iterator[str]:
    """Every position of a tensor operand that one case moves to the host, in call order."""
    if _is_tensor(sample.input):
        yield "input"
    elif _first_tensor(sample.input) is not None:
        yield "input/0"
    for i, arg in enumerate(sample.args):
        if _is_tensor(arg):
            yield f"arg/{i}"
        elif _first_tensor(arg) is not None:
            yield f"arg/{i}/0"
    for name, value in sample.kwargs.items():
        if _is_tensor(value):
            yield f"kw/{name}"


def _operand_on(value: Any, inner: bool, other: str = "cpu") -> Any:
    if not inner:
        return value.detach().to(other)
    i = _first_tensor(value)
    items = list(value)
    items[i] = items[i].detach().to(other)
    return type(value)(items) if isinstance(value, tuple) else items


def moved(sample: Any, position: str, other: str = "cpu") -> tuple[Any, tuple, dict]:
    """(input, args, kwargs) of ``sample`` with the operand at ``position`` on the host (or on ``other``:
    ``meta``, a tensor with a shape and no data)."""
    value, args, kwargs = sample.input, list(sample.args), dict(sample.kwargs)
    part, _, rest = position.partition("/")
    if part == "input":
        value = _operand_on(value, inner=bool(rest), other=other)
    elif part == "arg":
        index, _, inner = rest.partition("/")
        args[int(index)] = _operand_on(args[int(index)], inner=bool(inner), other=other)
    else:
        kwargs[rest] = _operand_on(kwargs[rest], inner=False, other=other)
    return value, tuple(args), kwargs


def names_devices(message: str, device_type: str) -> bool:
    """Whether an error's message is about devices: "same device", the host (``cpu``) or a device
    (``cuda:0``) named, or convolution's "Input type … and weight type …"."""
    return ("same device" in message or "cpu" in message or f"{device_type}:" in message
            or ("Input type" in message and "weight type" in message))


def answer(op: Any, value: Any, args: tuple, kwargs: dict, device: torch.device) -> str:
    """``ok``, ``device`` or ``other:<ErrorClass>`` for one call of ``op``."""
    module = torch.get_device_module(device.type)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(value, *args, **kwargs)
            module.synchronize()
    except Exception as exc:  # the table records what each call raises
        return "device" if names_devices(str(exc), device.type) else f"other:{type(exc).__name__}"
    return "ok"


@dataclasses.dataclass(frozen=True)
class Case:
    key: str
    answer: str


@dataclasses.dataclass
class Table:
    """A captured table: its cases, and the samples the device cannot run even with every
    operand on it (they say nothing about mixing devices: CUDA-only ops on another device)."""

    cases: dict[str, str] = dataclasses.field(default_factory=dict)
    unrunnable: list[str] = dataclasses.field(default_factory=list)  # "op.variant#sample"


def capture_op(op: Any, device: torch.device, dtype: torch.dtype, samples: int, table: Table,
               other: str = "cpu") -> None:
    """Add one op's cases to ``table`` (none when its samples cannot be made on ``device``)."""
    try:
        made = opinfo_sim._samples(op, device, dtype, grad=False, count=samples)
    except Exception:  # the device cannot hold the op's samples (sparse ones): no cases
        return
    for index, sample in enumerate(made):
        if operand_count(sample) < 2:
            continue
        name = f"{op.name}.{op.variant_test_name}#{index}"
        if answer(op, sample.input, tuple(sample.args), dict(sample.kwargs), device) not in ("ok", "device"):
            table.unrunnable.append(name)
        for position in positions(sample):
            value, args, kwargs = moved(sample, position, other)
            table.cases[f"{name}#{position}"] = answer(op, value, args, kwargs, device)


def capture(device: torch.device, dtype: torch.dtype = torch.float32, ops: set[str] | None = None,
            samples: int = 2, other: str = "cpu") -> Table:
    """The whole table on ``device``, for the ops PyTorch declares ``dtype`` for on CUDA, each operand
    in turn on ``other`` (the host, or ``meta``)."""
    table = Table()
    for op in opinfo_sim.op_db():
        if ops is not None and op.name not in ops:
            continue
        if dtype not in op.supported_dtypes("cuda"):
            continue  # the table is CUDA's: the dtypes PyTorch declares for CUDA
        capture_op(op, device, dtype, samples, table, other)
    return table


@dataclasses.dataclass
class Agreement:
    """How two tables agree on whether each case they share raises a device error."""

    shared: int
    agree: int
    differ: list[tuple[str, str, str]]  # (key, this table's answer, the reference's)
    only_here: int
    only_there: int
    unrunnable: int  # shared cases left out: a sample one of the devices cannot run at all

    @property
    def rate(self) -> float:
        return self.agree / self.shared if self.shared else 1.0


def _sample_of(key: str) -> str:
    return key.rsplit("#", 1)[0]


def compare(table: Table, reference: dict[str, str], reference_unrunnable: list[str] = ()) -> Agreement:
    """``table`` against a reference table's cases (and the samples its device could not run)."""
    cases = table.cases
    skipped = set(table.unrunnable) | set(reference_unrunnable)
    both = set(cases) & set(reference)
    shared = sorted(k for k in both if _sample_of(k) not in skipped)
    differ = [(k, cases[k], reference[k]) for k in shared if (cases[k] == "device") != (reference[k] == "device")]
    return Agreement(len(shared), len(shared) - len(differ), differ, len(set(cases) - set(reference)),
                     len(set(reference) - set(cases)), len(both) - len(shared))


FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures"


@dataclasses.dataclass(frozen=True)
class Reference:
    """CUDA's answers the simulated device is held to in one dtype, and where they come from."""

    cases: dict[str, str]
    unrunnable: tuple[str, ...]
    source: str  # the fixture's file name


def reference_for(dtype: torch.dtype, fixtures: Any = FIXTURES) -> Reference:
    """CUDA's table for ``dtype``: its own (``mixing_<dtype>.json``, captured on a GPU by
    ``benchmarks/gpu_check.py``) where there is one, else float32's, which CUDA answers alike
    except where a dtype takes another path before it picks a kernel (a complex convolution
    compares the input's type with the weight's first: a device error where float32's host
    input meets the missing 3-D kernel)."""
    import json
    from pathlib import Path

    name = str(dtype).removeprefix("torch.")
    own = Path(fixtures) / f"mixing_{name}.json"
    if own.exists():
        table = json.loads(own.read_text())
        if table.get("dtype") != name or table.get("device") != "cuda":
            raise ValueError(f"{own.name} is not CUDA's table in {name} (it says {table.get('device')}, "
                             f"{table.get('dtype')})")
        return Reference(table["cases"], tuple(table.get("unrunnable", ())), own.name)
    table = json.loads((Path(fixtures) / "mixing_float32.json").read_text())
    cases = table["cases"]
    if dtype.is_complex:
        cases = {k: ("device" if k.startswith("nn.functional.conv3d.") and v == "other:NotImplementedError" else v)
                 for k, v in cases.items()}
    return Reference(cases, tuple(table.get("unrunnable", ())), "mixing_float32.json")
