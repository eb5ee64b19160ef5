"""Every factory that takes ``device=`` gives on the simulated device what it gives on the CPU.

The factories are enumerated from the operator schemas (every ``aten`` op with a
``device`` keyword), not picked by hand, so a factory added to PyTorch is tested here
the day it appears. Arguments come from each argument's name and type.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from devinspect import testing

# Factories with no counterpart to compare, and why.
NOT_COMPARED = {
    "aten::Generator": "makes a generator, not a tensor",
    "aten::_make_dep_token": "a tracing token, not data",
    "aten::_assert_tensor_metadata": "an assertion, returns nothing",
    "aten::_to_copy": "a copy, tested with the moves",
    "aten::to": "a copy, tested with the moves",
    "aten::from_file": "reads a file into host memory",
    "aten::_cudnn_init_dropout_state": "cuDNN's own state, on CUDA only",
    "aten::_efficientzerotensor": "an internal zero tensor of autograd",
    # TorchScript spellings of torch.tensor/as_tensor: the Python ones are tested below.
    "aten::tensor": "TorchScript only",
    "aten::as_tensor": "TorchScript only",
}
# Layouts the simulated device does not hold (it is dense, as the README says).
NOT_DENSE = ("sparse", "quantized", "_affine_quantized", "per_channel")

SIZE = [2, 3]
INT_ARGS = {"n": 5, "m": 4, "end": 7, "high": 9, "low": 2, "window_length": 6, "steps": 5, "row": 4, "col": 5,
            "offset": 1, "index_dtype": 0}
NUMBER_ARGS = {"start": 1, "end": 9, "step": 2, "fill_value": 7, "s": 3}
FLOAT_ARGS = {"d": 0.5, "mean": 0.0, "std": 1.0, "alpha": 0.5, "beta": 0.3, "base": 2.0}
LIST_ARGS = {"size": SIZE, "stride": [1, 2], "physical_layout": [1, 0]}


def _factory_schemas() -> list:
    found = []
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::") or schema.name in NOT_COMPARED:
            continue
        if any(word in schema.name for word in NOT_DENSE) or any(a.is_out for a in schema.arguments):
            continue
        if any(a.name == "device" and a.kwarg_only for a in schema.arguments):
            found.append(schema)
    return found


SCHEMAS = _factory_schemas()


def _argument(arg, device: torch.device):
    kind = str(arg.type)
    if kind == "Tensor":
        if arg.name == "self":
            return torch.arange(6.0).reshape(SIZE).to(device)
        value = {"start": 1.0, "end": 9.0, "high": 5}.get(arg.name, 3)
        return torch.tensor(value).to(device)  # the Tensor_Scalar spellings take 0-dim tensors
    if kind == "List[int]":
        return LIST_ARGS[arg.name]
    if kind == "int":
        return INT_ARGS[arg.name]
    if kind in ("number", "Scalar"):
        return NUMBER_ARGS[arg.name]
    if kind == "float":
        return FLOAT_ARGS[arg.name]
    if kind == "bool":
        return False
    raise LookupError(f"no sample for {arg.name}: {kind}")


def _call(schema, device: torch.device, dtype: torch.dtype | None):
    packet = getattr(torch.ops.aten, schema.name.split("::")[1])
    op = getattr(packet, schema.overload_name or "default")
    positional = [_argument(a, device) for a in schema.arguments if not a.kwarg_only]
    keywords = {"device": device}
    names = {a.name for a in schema.arguments}
    if "generator" in names:
        keywords["generator"] = None
    if dtype is not None and "dtype" in names:
        keywords["dtype"] = dtype
    torch.manual_seed(0)  # the simulated device draws from the host's generator: same seed, same numbers
    return op(*positional, **keywords)


def _dtypes(schema) -> list:
    if not any(a.name == "dtype" for a in schema.arguments):
        return [None]
    if "randperm" in schema.name or "randint" in schema.name or "indices" in schema.name:
        return [None, torch.int32, torch.float32]
    if "window" in schema.name or "linspace" in schema.name or "logspace" in schema.name or "freq" in schema.name:
        return [None, torch.float64, torch.bfloat16]
    return [None, torch.float16, torch.bfloat16, torch.int64, torch.bool]


CASES = [(s, dt) for s in SCHEMAS for dt in _dtypes(s)]


def _label(case) -> str:
    schema, dtype = case
    return f"{schema.name[6:]}.{schema.overload_name or 'default'}-{str(dtype).replace('torch.', '') if dtype else 'default'}"


def _same(on_sim: torch.Tensor, on_host: torch.Tensor, sim: torch.device, values: bool) -> None:
    assert on_sim.device == sim
    assert on_sim.shape == on_host.shape and on_sim.dtype == on_host.dtype
    assert on_sim.stride() == on_host.stride()
    if values:
        assert torch.equal(on_sim.cpu(), on_host), (on_sim.cpu(), on_host)


def test_the_factories_are_found_from_the_schemas():
    names = {s.name for s in SCHEMAS}
    assert {"aten::arange", "aten::eye", "aten::linspace", "aten::full", "aten::randperm", "aten::tril_indices",
            "aten::kaiser_window", "aten::zeros_like", "aten::rand"} <= names
    assert len(CASES) > 150


@pytest.mark.parametrize("case", CASES, ids=_label)
def test_every_factory_matches_the_host(sim, case):
    schema, dtype = case
    try:
        on_host = _call(schema, torch.device("cpu"), dtype)
    except RuntimeError as exc:  # a combination the CPU refuses too (randperm in bool, say)
        with pytest.raises(type(exc)):
            _call(schema, sim, dtype)
        return
    on_sim = _call(schema, sim, dtype)
    _same(on_sim, on_host, sim, values="empty" not in schema.name)


PYTHON_FACTORIES = {
    "tensor from a list": lambda dev: torch.tensor([[1, 2], [3, 4]], device=dev),
    "tensor from floats": lambda dev: torch.tensor([1.5, -2.0], dtype=torch.float16, device=dev),
    "tensor from a scalar": lambda dev: torch.tensor(3.25, device=dev),
    "tensor from bools": lambda dev: torch.tensor([True, False], device=dev),
    "tensor from numpy": lambda dev: torch.tensor(np.arange(6).reshape(2, 3), device=dev),
    "as_tensor from numpy": lambda dev: torch.as_tensor(np.linspace(0, 1, 5), device=dev),
    "as_tensor from a list": lambda dev: torch.as_tensor([1, 2, 3], dtype=torch.int8, device=dev),
    "as_tensor from a tensor": lambda dev: torch.as_tensor(torch.arange(4), device=dev),
    "from_numpy then to": lambda dev: torch.from_numpy(np.arange(4.0, dtype=np.float32)).to(dev),
    "tensor from a noncontiguous array": lambda dev: torch.tensor(np.arange(12).reshape(3, 4).T, device=dev),
}


@pytest.mark.parametrize("name", PYTHON_FACTORIES)
def test_python_factories_match_the_host(sim, name):
    make = PYTHON_FACTORIES[name]
    _same(make(sim), make("cpu"), sim, values=True)


def test_arange_and_eye_have_their_elements():
    # They fill an empty tensor through out= kernels that resize it: the size must follow.
    sim = testing.enable()
    assert torch.arange(5, device=sim).tolist() == [0, 1, 2, 3, 4]
    assert torch.eye(2, 3, device=sim).sum().item() == 2


def test_an_out_argument_is_resized_as_on_the_host(sim):
    out = torch.empty(0, device=sim)
    torch.add(torch.ones(3, device=sim), 1, out=out)
    assert out.shape == (3,) and out.tolist() == [2.0, 2.0, 2.0]
