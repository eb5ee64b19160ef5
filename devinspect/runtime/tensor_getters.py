"""A tensor's facts read through ``torch._C.TensorBase``'s own C getters and methods.

Called directly, they never reach a tensor subclass's Python property of the same name
(``shape``, ``device``, ``nbytes`` …) or its ``__getattribute__``; with torch-function
dispatch disabled around them, no ``__torch_function__`` or mode sees the read either.

A wrapper subclass made with ``dispatch_device``, ``dispatch_layout`` or a
``dispatch_sizes_strides_policy`` answers those getters from its own
``__torch_dispatch__`` (PyTorch calls ``prim.device``, ``prim.layout``, ``aten.sym_size``,
``aten.numel`` on it, whatever is excluded from dispatch). :func:`reading` reads such a
tensor as it was constructed instead: the device of its storage, the sizes and strides
its ``TensorImpl`` holds; no code of the subclass runs.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Iterator

import torch

from .user_modes import beneath_user_modes

_TB = torch._C.TensorBase

device = _TB.__dict__["device"].__get__
dtype = _TB.__dict__["dtype"].__get__
shape = _TB.__dict__["shape"].__get__
layout = _TB.__dict__["layout"].__get__
nbytes = _TB.__dict__["nbytes"].__get__
is_meta = _TB.__dict__["is_meta"].__get__
is_cpu = _TB.__dict__["is_cpu"].__get__
is_nested = _TB.__dict__["is_nested"].__get__
is_quantized = _TB.__dict__["is_quantized"].__get__
requires_grad = _TB.__dict__["requires_grad"].__get__
is_leaf = _TB.__dict__["is_leaf"].__get__
retains_grad = _TB.__dict__["retains_grad"].__get__
grad = _TB.__dict__["_grad"].__get__
grad_fn = _TB.__dict__["grad_fn"].__get__
base = _TB.__dict__["_base"].__get__
dim = _TB.dim
storage = _TB.untyped_storage
use_count = _TB._use_count
is_pinned = _TB.is_pinned

_dispatch_keys = torch._C._dispatch_keys
_Key = torch._C.DispatchKey
_TYPE_MRO = type.__dict__["__mro__"].__get__
_TYPE_DICT = type.__dict__["__dict__"].__get__
_FUNCTION_MODULE = types.FunctionType.__dict__["__module__"].__get__
_CLASSMETHOD_FUNC = classmethod.__dict__["__func__"].__get__
_STATICMETHOD_FUNC = staticmethod.__dict__["__func__"].__get__

_ops = torch.ops


def _overloads(names: tuple[str, ...]) -> frozenset:
    """The ``aten`` overloads named ``op.overload`` that this torch has."""
    found = []
    for name in names:
        op, overload = name.split(".")
        try:
            found.append(getattr(getattr(_ops.aten, op), overload))
        except AttributeError:  # an op a newer torch added (sym_is_contiguous)
            continue
    return frozenset(found)


#: The calls PyTorch makes into a subclass for a metadata read where None means "what the
#: TensorImpl holds" (PyInterpreter falls back to the ``*_default`` getter).
_HELD = _overloads((
    "sym_size.default", "size.default", "sym_stride.default", "stride.default", "numel.default",
    "sym_numel.default", "sym_storage_offset.default", "is_contiguous.default", "is_contiguous.memory_format",
    "sym_is_contiguous.default", "is_strides_like_format.default", "is_non_overlapping_and_dense.default",
))
_DEVICE = _ops.prim.device.default
_LAYOUT = _ops.prim.layout.default
_DIM = _ops.aten.dim.default
_IS_PINNED = _ops.aten.is_pinned.default


def is_tensor(value: object) -> bool:
    """Whether ``value`` is a tensor by its real type (a weak proxy or a lying ``__class__``
    answers ``isinstance`` for its referent or its claim; its type does not)."""
    return issubclass(type(value), _TB)


def dispatches_to_python(t: Any) -> bool:
    """Whether ``t``'s class has a ``__torch_dispatch__`` of its own (its dispatch keys hold
    Python): only such a tensor can answer a metadata getter from Python."""
    return _dispatch_keys(t).has(_Key.Python)


def is_devinspects_own(cls: type) -> bool:
    """Whether ``cls``'s ``__torch_dispatch__`` is devinspect's own code (the simulated
    device's tensors): read statically from the class dicts along the MRO."""
    for klass in _TYPE_MRO(cls):
        found = _TYPE_DICT(klass).get("__torch_dispatch__")
        if found is None:
            continue
        kind = type(found)
        func = (_CLASSMETHOD_FUNC(found) if kind is classmethod else _STATICMETHOD_FUNC(found)
                if kind is staticmethod else found)
        if type(func) is not types.FunctionType:
            return False
        module = _FUNCTION_MODULE(func)
        return type(module) is str and module.startswith("devinspect.")
    return False


class NotRead(RuntimeError):
    """A read that would run an op of a tensor subclass (never done while inspecting)."""


def _layout_held(t: Any) -> Any:
    """The layout a plain ``TensorImpl`` derives from its dispatch keys (as ``TensorImpl::layout``
    does when no policy is set)."""
    keys = _dispatch_keys(t)
    if keys.has(_Key.Sparse):
        return torch.sparse_coo
    if keys.has(_Key.SparseCsr):
        raise NotRead("which compressed sparse layout it has is only known to its class")
    if "Mkldnn" in str(keys):  # the enum names no Mkldnn key; the set's text does
        return torch._mkldnn
    return torch.strided


class AsConstructed:
    """A dispatch mode, on top while devinspect reads, that answers the metadata calls PyTorch
    makes into a subclass with what the tensor holds as constructed, and counts its answers.

    Any other op on a tensor of such a class is refused (:class:`NotRead`); ops on other
    tensors run as they would with Python dispatch disabled (no mode of the user's sees them).
    devinspect's own simulated tensors answer for themselves.
    """

    def __init__(self) -> None:
        self.answered = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        t = args[0] if args else None
        python_tensor = is_tensor(t) and dispatches_to_python(t)
        if python_tensor and is_devinspects_own(type(t)):
            return NotImplemented  # the class's own __torch_dispatch__ answers: it is not the user's
        if python_tensor and (func in _HELD or func is _DEVICE or func is _LAYOUT or func is _DIM
                              or func is _IS_PINNED):
            self.answered += 1
            if func is _DEVICE:
                return storage(t).device  # a wrapper's storage is made on the device it was constructed for
            if func is _LAYOUT:
                return _layout_held(t)
            if func is _DIM:
                with _pushed(self):
                    return len(shape(t))
            if func is _IS_PINNED:
                return False  # its memory, if any, is in tensors it holds
            return None
        for a in (*args, *(kwargs or {}).values()):
            if is_tensor(a) and dispatches_to_python(a) and not is_devinspects_own(type(a)):
                raise NotRead(f"reading this tensor would run {func} of its class")
        with torch._C._DisableTorchDispatch():
            return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _pushed(mode: AsConstructed) -> Iterator[AsConstructed]:
    torch._C._push_on_torch_dispatch_stack(mode)
    try:
        yield mode
    finally:
        torch._C._pop_torch_dispatch_stack(None)


@contextlib.contextmanager
def reading() -> Iterator[AsConstructed]:
    """Torch-function dispatch off and :class:`AsConstructed` on top of the dispatch modes: no
    ``__torch_function__``, no mode of the user's and no subclass's ``__torch_dispatch__`` sees
    a read made inside. The user's modes are taken off their stacks for the while (not merely
    passed over: a mode below ours would see what a subclass of devinspect's own redispatches).
    The mode it yields counts the metadata it answered as constructed."""
    with beneath_user_modes(), torch._C.DisableTorchFunction(), _pushed(AsConstructed()) as mode:
        yield mode
