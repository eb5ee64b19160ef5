"""Which calls CUDA refuses when their tensors sit on different devices, as rules the simulated
device applies to a call that mixes devices.

CUDA decides in three places, and so does the simulated device:

1. **The entry point.** PyTorch generates each op's CUDA entry point from its declaration
   (:mod:`.op_declarations`). Unless the op declares ``device_check: NoCheck``, the entry point
   requires every positional and ``out`` tensor argument on one device, a 0-dim host tensor
   included ("… but got index is on cpu, different from other tensors on cuda:0 (when checking
   argument in method wrapper_CUDA__index_select)").
   Keyword-only tensors are not checked there.
2. **The kernel.** A ``NoCheck`` op checks in its kernel, mostly through TensorIterator: every
   operand on the first non-host device, except that a 0-dim host tensor may stand in for a
   number when it is read (never when it is written). Advanced-indexing indices (``Tensor?[]``)
   may be on the host: the kernel moves them to the indexed tensor's device, and refuses device
   indices into a host tensor.
3. **The composite kernel.** An op without a CUDA kernel of its own runs its composite kernel,
   the same code for every device; the ops it calls decide. The simulated device runs that
   composite kernel on its own tensors (:data:`COMPOSITE`), so that where its inner ops put
   their results, and what they refuse, is what CUDA's would.

A few CUDA kernels refuse a host scalar although TensorIterator would take it; that is a fact
of their CUDA code, listed in :data:`KERNEL_REFUSES` with the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any

import torch

from ..identity import DEVICE_TYPE
from .op_declarations import declaration

#: The verdicts of :func:`judge` that do not raise.
RUN, COMPOSITE = "run", "composite"

#: Ops that move data between devices by definition.
CROSS_DEVICE_OPS = frozenset({"copy_", "_to_copy", "_copy_from", "_copy_from_and_resize", "to", "set_"})

#: NoCheck ops whose CUDA kernel refuses, as an operand, a host tensor that TensorIterator's rule
#: would take as a scalar: op -> (the arguments refused, the kernel's message or "" for the
#: mismatch error). Read from PyTorch's CUDA sources (a CPU build has no CUDA kernel to ask):
#: mse_loss, smooth_l1_loss, addcdiv and lerp's self/end are launched with ``gpu_kernel``, which
#: asserts that every operand is on the GPU (lerp takes a host weight, as a scalar);
#: binary_cross_entropy builds a TensorIterator that allows no CPU scalar; addcmul refuses a
#: host self or tensor1 in one check of its own (a host tensor2 is read as a number);
#: masked_fill_ requires its mask on self's device before anything else.
KERNEL_REFUSES: dict[str, tuple[tuple[str, ...], str]] = {
    "mse_loss": (("self", "target"), ""),
    "smooth_l1_loss": (("self", "target"), ""),
    "binary_cross_entropy": (("self", "target", "weight"), ""),
    "addcdiv": (("self", "tensor1", "tensor2"), ""),
    "addcdiv_": (("self", "tensor1", "tensor2"), ""),
    "lerp": (("self", "end"), ""),
    "lerp_": (("self", "end"), ""),
    "addcmul": (("self", "tensor1"), "CPU Scalar support for {argument} argument is not supported when calling "
                                     "addcmul on {device} tensors."),
    "addcmul_": (("self", "tensor1"), "CPU Scalar support for {argument} argument is not supported when calling "
                                      "addcmul on {device} tensors."),
    "masked_fill_": (("self", "mask"), "expected self and mask to be on the same device, but got mask on {mask} and "
                                       "self on {self}"),
}

#: Convolution checks its operands' types on the backend path it picks (cuDNN on CUDA, MKLDNN
#: on the host): the input against the weight, then against the bias. A backend written in
#: Python is sent to ``convolution_overrideable`` instead, which has no such check, so the
#: simulated device makes it, with the messages CUDA gives.
CONVOLUTIONS = frozenset({"convolution", "_convolution"})

_COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd")


def _kind(schema_type: Any) -> str:
    """``tensor``, ``indices`` (a ``Tensor?[]``), ``tensors`` (another tensor list) or ``""``."""
    if isinstance(schema_type, torch.TensorType):
        return "tensor"
    if isinstance(schema_type, torch.OptionalType) and isinstance(schema_type.getElementType(), torch.TensorType):
        return "tensor"
    if isinstance(schema_type, torch.ListType):
        element = schema_type.getElementType()
        if isinstance(element, torch.OptionalType) and isinstance(element.getElementType(), torch.TensorType):
            return "indices"
        if isinstance(element, torch.TensorType):
            return "tensors"
    return ""


@dataclasses.dataclass(frozen=True)
class _Argument:
    """A tensor argument of an op's schema, as the rules need it."""

    index: int
    name: str
    kind: str
    checked: bool  # the entry point checks it (positional or out)
    written: bool  # the op writes it (an in-place self, an out)


@dataclasses.dataclass(frozen=True)
class _Op:
    """What the rules need of one op overload, read once from its schema and declaration."""

    rule: str  # "cross", "convolution", "composite", "entry point" or "kernel"
    checked_at_entry: bool  # declared without NoCheck (for a composite: judged so when it cannot run)
    arguments: tuple[_Argument, ...]
    method: str  # the entry point's name, as CUDA's is named (wrapper_CUDA__index_select)
    refused: tuple[str, ...]
    message: str


@functools.lru_cache(maxsize=None)
def _op(func: Any) -> _Op:
    name = func._schema.name.split("::")[-1]
    arguments = tuple(
        _Argument(i, a.name, kind, not a.kwarg_only or a.is_out, a.alias_info is not None and a.alias_info.is_write)
        for i, a in enumerate(func._schema.arguments) if (kind := _kind(a.type)))
    overload = "" if func._overloadname == "default" else func._overloadname
    declared = declaration(func._schema.name, func._overloadname)
    if name in CROSS_DEVICE_OPS:
        rule = "cross"
    elif name in CONVOLUTIONS:
        rule = "convolution"
    elif declared is not None and not declared.cuda_kernel and has_composite(func):
        rule = "composite"
    elif declared is not None and declared.checks_devices:
        rule = "entry point"  # what its kernel then does with keyword-only tensors is its own
    else:
        rule = "kernel"
    refused, message = KERNEL_REFUSES.get(name, ((), ""))
    checked = declared is not None and declared.checks_devices
    return _Op(rule, checked, arguments, f"wrapper_PrivateUse1_{overload}_{name}", refused, message)


def _operands(op: _Op, args: tuple, kwargs: dict) -> list[tuple[_Argument, torch.Tensor]]:
    """(argument, tensor) for every tensor the call passes, in schema order."""
    found = []
    for argument in op.arguments:
        value = args[argument.index] if argument.index < len(args) else kwargs.get(argument.name)
        if argument.kind == "tensor":
            if isinstance(value, torch.Tensor):
                found.append((argument, value))
        elif isinstance(value, (list, tuple)):
            found.extend((argument, v) for v in value if isinstance(v, torch.Tensor))
    return found


def mismatch(first: Any, second: Any) -> RuntimeError:
    """TensorIterator's device-mismatch error (the first non-host device, then the other)."""
    return RuntimeError(
        f"Expected all tensors to be on the same device, but found at least two devices, {first} and {second}!"
    )


def entry_point_mismatch(argument: str, device: Any, common: Any, method: str) -> RuntimeError:
    """A generated entry point's device-mismatch error, worded as PyTorch words it."""
    return RuntimeError(f"Expected all tensors to be on the same device, but got {argument} is on {device}, "
                        f"different from other tensors on {common} (when checking argument in method {method})")


def _check_entry_point(op: _Op, operands: list) -> None:
    common = None
    for argument, tensor in operands:
        if not argument.checked:
            continue
        if common is None:
            common = tensor.device
        elif tensor.device != common:
            raise entry_point_mismatch(argument.name, tensor.device, common, op.method)


def _check_kernel(op: _Op, operands: list) -> None:
    indexed = next((t for a, t in operands if a.kind == "tensor"), None)
    common = next((t.device for a, t in operands if a.kind != "indices" and t.device.type != "cpu"), None)
    for argument, tensor in operands:
        device = tensor.device
        if argument.kind == "indices":
            if indexed is not None and device.type != "cpu" and device != indexed.device:
                raise RuntimeError(
                    f"indices should be either on cpu or on the same device as the indexed tensor ({indexed.device})"
                )
            continue
        if common is None or device == common:
            continue
        refused = argument.name in op.refused
        if device.type == "cpu" and tensor.dim() == 0 and not argument.written and not refused:
            continue  # a host scalar read as a number
        if refused and op.message:
            devices = {a.name: t.device for a, t in operands}
            raise RuntimeError(op.message.format(**devices, argument=argument.name, device=common))
        raise mismatch(common, device)


def _check_convolution(args: tuple) -> None:
    tensor, weight, bias = (list(args) + [None, None, None])[:3]
    if not (isinstance(tensor, torch.Tensor) and isinstance(weight, torch.Tensor)):
        return
    if weight.device != tensor.device and tensor.device.type == "cpu" and _host_backend(args) == "Slow3d":
        # The host's own kernel for the input (a 3-D one oneDNN does not take) is then dispatched
        # on the weight's device, which has none: CUDA's error, as an H200 raised it for conv3d.
        backend = "CUDA" if weight.device.type == "cuda" else weight.device.type.upper()
        raise NotImplementedError(f"Could not run 'aten::slow_conv3d_forward' with arguments from the '{backend}' "
                                  "backend. This could be because the operator doesn't exist for this backend.")
    if weight.device != tensor.device:
        host_input = " or input should be a MKLDNN tensor and weight is a dense tensor" if tensor.device.type == "cpu" else ""
        raise RuntimeError(f"Input type ({tensor.type()}) and weight type ({weight.type()}) should be the same{host_input}")
    if isinstance(bias, torch.Tensor) and bias.device != tensor.device:
        raise RuntimeError(f"Input type ({tensor.type()}) and bias type ({bias.type()}) should be the same")


#: Host dtypes whose convolution kernel the host's instruction set chooses: oneDNN takes a
#: bfloat16 or float16 input only on a processor with those instructions (AVX-512 BF16/FP16,
#: AMX, Arm's BF16), a plain kernel elsewhere. The host beside the GPU is not this one, so
#: these are decided as on a host without them: the same answer on every processor.
LOW_PRECISION_HOST_DTYPES = (torch.bfloat16, torch.float16)


def _host_backend(args: tuple) -> str | None:
    """The convolution backend the host picks for ``args`` (aten.convolution's), every operand on
    the host: where the input is on the host, the host's choice decides the kernel, and the
    dispatcher then looks for that kernel on the weight's device. What depends on this processor's
    instruction set (oneDNN's bfloat16 and float16 kernels) is left out: see
    :data:`LOW_PRECISION_HOST_DTYPES`."""
    tensor, weight, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    # A complex convolution is three real ones of the same shapes (their backend decides).
    host = [(t.real if t.is_complex() else t).to("cpu") if isinstance(t, torch.Tensor) else t
            for t in (tensor, weight, bias)]
    low_precision = isinstance(tensor, torch.Tensor) and tensor.dtype in LOW_PRECISION_HOST_DTYPES
    try:
        with _without_onednn() if low_precision else contextlib.nullcontext():
            return torch._C._select_conv_backend(*host, stride, padding, dilation, transposed, output_padding,
                                                 groups, None).name
    except Exception:  # arguments the host refuses: its own error follows
        return None


@contextlib.contextmanager
def _without_onednn() -> Any:
    """oneDNN switched off for the host's choice alone (its other settings left as they are)."""
    was = torch._C._get_mkldnn_enabled()
    torch._C._set_mkldnn_enabled(False)
    try:
        yield
    finally:
        torch._C._set_mkldnn_enabled(was)


def has_composite(func: Any) -> bool:
    name = func.name()
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key) for key in _COMPOSITE_KEYS)


def composite_key(func: Any) -> Any:
    """The dispatch key of ``func``'s composite kernel."""
    name = func.name()
    for key in _COMPOSITE_KEYS:
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return getattr(torch._C.DispatchKey, key)
    raise LookupError(f"{name} has no composite kernel")


def judge(func: Any, args: tuple, kwargs: dict, composite: bool = True) -> str:
    """:data:`RUN` or :data:`COMPOSITE` for a call whose tensors are not all on one simulated
    device, or the device error CUDA raises for it. ``composite=False`` judges an op whose
    composite kernel cannot run on the simulated device by the rule of its kernel instead."""
    op = _op(func)
    if op.rule == "cross":
        return RUN
    if op.rule == "convolution":
        _check_convolution(args)
        return RUN
    if op.rule == "composite" and composite:
        return COMPOSITE
    operands = _operands(op, args, kwargs)
    if op.checked_at_entry:
        _check_entry_point(op, operands)
    else:
        _check_kernel(op, operands)
    return RUN


def is_device_error(exc: BaseException) -> bool:
    """Whether a kernel's error is a device mismatch (of the simulated device or the host)."""
    text = str(exc)
    return "same device" in text or f"{DEVICE_TYPE}:" in text
