"""PyTorch's own op samples (``op_db``) run on the CPU and on the simulated device, compared.

Each op's samples are made twice from the same seed, on the CPU and on ``sim:0``, and run
on each. They agree when both raise the same exception type,
or both return the same structure with equal values (``torch.testing.assert_close``, NaNs
equal) and the device results on ``sim``. For ops that support autograd and a floating
dtype, the gradients of every input that requires one are compared too.

Used by ``tests/test_sim_opinfo.py`` (a fixed subset) and ``benchmarks/sim_opinfo.py`` (all).
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

ALL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64,
              torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool)


@dataclasses.dataclass
class Outcome:
    op: str
    variant: str
    dtype: str
    sample: int
    part: str  # "output" or "gradient"
    agree: bool
    reason: str = ""


def op_db() -> list[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db as ops
    return list(ops)


def _samples(op: Any, device: torch.device, dtype: torch.dtype, grad: bool, count: int) -> list[Any]:
    """The op's first ``count`` samples made on ``device`` from a fixed seed: the same values on both
    devices (the simulated device draws from the host's generator), and each argument on the device
    the op's authors chose for an accelerator (tensor_split's indices stay on the host).

    As ``op.sample_inputs`` makes them outside a unittest.TestCase (the generator reseeded before each
    sample), without its tracking, which reads the whole call stack's source twice per op."""
    from torch.testing._internal.common_utils import SEED, set_rng_seed

    torch.manual_seed(0)
    made = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        samples = iter(op.sample_inputs_func(op, device, dtype, grad))
        for _ in range(count):
            set_rng_seed(SEED)
            sample = next(samples, None)
            if sample is None:
                break
            made.append(sample)
    return made


def _aligned(host: Any, device_sample: Any, device: torch.device) -> Any:
    """``device_sample`` with the host sample's values: a generator may draw differently per device
    (linalg.ldl_solve draws extra matrices on the CPU only), so the tensors it put on the device are
    the host's copied there; those it left on the host, and every other argument, stay as made."""
    from torch.testing._internal.opinfo.core import SampleInput

    host_parts = (host.input, host.args, host.kwargs)
    device_parts = (device_sample.input, device_sample.args, device_sample.kwargs)
    host_leaves, host_spec = tree_flatten(host_parts)
    leaves, spec = tree_flatten(device_parts)
    if host_spec != spec:
        return device_sample
    merged = []
    for h, d in zip(host_leaves, leaves):
        if isinstance(h, torch.Tensor) and isinstance(d, torch.Tensor) and d.device == device \
                and h.shape == d.shape and h.dtype == d.dtype and not _same_values(h, d):
            # (A tensor with the same values stays as made: it may be a view into a larger storage.)
            moved = h.detach().to(device)
            merged.append(moved.requires_grad_(d.requires_grad) if d.requires_grad else moved)
        else:
            merged.append(d)
    value, args, kwargs = tree_unflatten(merged, spec)
    return SampleInput(value, args=args, kwargs=kwargs)


def _same_values(host: torch.Tensor, on_device: torch.Tensor) -> bool:
    try:
        return torch.equal(host.detach(), on_device.detach().cpu()) or bool(
            torch.isnan(host).all() and torch.isnan(on_device.detach().cpu()).all())
    except Exception:  # a layout equal cannot compare: keep what was made
        return True


def _run(op: Any, sample: Any, device: torch.device) -> tuple[Any, Any, BaseException | None]:
    args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
    torch.manual_seed(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return (args, kwargs), op(*args, **kwargs), None
    except Exception as exc:  # the comparison is of what each device raises
        return (args, kwargs), None, exc


def _host(x: Any) -> Any:
    return x.detach().cpu() if isinstance(x, torch.Tensor) else x


def _uninitialised(op: Any) -> bool:
    """empty, empty_like, new_empty…: their values are whatever the memory held."""
    return "empty" in op.name


def _differs(on_sim: Any, on_cpu: Any, sim: torch.device, values: bool = True) -> str:
    sim_leaves, sim_spec = tree_flatten(on_sim)
    cpu_leaves, cpu_spec = tree_flatten(on_cpu)
    if sim_spec != cpu_spec:
        return f"structure {sim_spec} vs {cpu_spec}"
    for a, b in zip(sim_leaves, cpu_leaves):
        if isinstance(b, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                return f"{type(a).__name__} where the CPU gives a tensor"
            if b.device.type == "cpu" and a.device != sim and b.numel() > 0 and a.dim() > 0:
                return f"result on {a.device}"
            if not values:
                if (a.shape, a.dtype) != (b.shape, b.dtype):
                    return f"{tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}"
                continue
            try:
                torch.testing.assert_close(_host(a), _host(b), equal_nan=True, check_device=False, check_layout=False)
            except AssertionError as exc:
                return str(exc).splitlines()[0][:160]
        elif a != b and not (isinstance(a, float) and isinstance(b, float) and a != a and b != b):
            return f"{a!r} vs {b!r}"
    return ""


def _gradients(inputs: Any, out: Any) -> list[Any] | None:
    leaves = [x for x in tree_flatten(inputs)[0] if isinstance(x, torch.Tensor) and x.requires_grad]
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor) and o.requires_grad]
    if not leaves or not outs:
        return None
    total = sum((o.real if o.is_complex() else o).float().sum() for o in outs)
    return list(torch.autograd.grad(total, leaves, allow_unused=True))


def compare_op(op: Any, dtype: torch.dtype, sim: torch.device, samples: int = 2) -> Iterator[Outcome]:
    """The outcomes of ``op``'s first ``samples`` samples in ``dtype``, output and gradient."""
    name, variant = op.name, op.variant_test_name
    grad = op.supports_autograd and (dtype.is_floating_point or dtype.is_complex) and dtype in op.supported_backward_dtypes("cpu")
    on_host = _samples(op, torch.device("cpu"), dtype, grad, samples)
    try:
        on_device = _samples(op, sim, dtype, grad, samples)
    except Exception as exc:  # the device cannot even hold the samples (sparse ones)
        yield Outcome(name, variant, str(dtype), -1, "output", False,
                      f"samples: {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
        return
    for i, (host_sample, sample) in enumerate(zip(on_host, on_device)):
        cpu_inputs, on_cpu, cpu_error = _run(op, host_sample, torch.device("cpu"))
        sim_inputs, on_sim, sim_error = _run(op, _aligned(host_sample, sample, sim), sim)
        if cpu_error is not None or sim_error is not None:
            same = cpu_error is not None and sim_error is not None and type(cpu_error) is type(sim_error)
            reason = "" if same else (f"sim raised {type(sim_error).__name__}: {str(sim_error).splitlines()[0][:120]}"
                                      if sim_error is not None else f"only the CPU raised {type(cpu_error).__name__}")
            yield Outcome(name, variant, str(dtype), i, "output", same, reason)
            continue
        reason = _differs(on_sim, on_cpu, sim, values=not _uninitialised(op))
        yield Outcome(name, variant, str(dtype), i, "output", not reason, reason)
        if not grad or reason:
            continue
        try:
            cpu_grads = _gradients(cpu_inputs, on_cpu)
        except Exception:  # no gradient on the CPU either: nothing to compare
            continue
        if cpu_grads is None:
            continue
        try:
            sim_grads = _gradients(sim_inputs, on_sim)
        except Exception as exc:
            yield Outcome(name, variant, str(dtype), i, "gradient", False,
                          f"sim backward raised {type(exc).__name__}: {str(exc).splitlines()[0][:120]}")
            continue
        reason = _differs(sim_grads, cpu_grads, sim)
        yield Outcome(name, variant, str(dtype), i, "gradient", not reason, reason)


def dtypes_of(op: Any, wanted: tuple = ALL_DTYPES) -> list[torch.dtype]:
    supported = op.supported_dtypes("cpu")
    return [d for d in wanted if d in supported]
