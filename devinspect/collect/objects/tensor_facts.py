"""A tensor's facts (device, dtype, shape, bytes, the memory it lives in), read without dispatch.

Tensor facts come from ``torch._C.TensorBase``'s own getters with torch-function
dispatch disabled (no subclass property, no ``__torch_function__``, no mode), and
the few that dispatch an op (sparse parts) run with Python dispatch disabled, so
the user's active dispatch modes see nothing.
"""

from __future__ import annotations

from typing import Any

import torch

from ...runtime import tensor_getters
from .static_getters import instance_dict, slot_values, static_class_attr, type_module, type_name

_Tensor = torch.Tensor
_TB = torch._C.TensorBase
_storage_data_ptr = torch._C.StorageBase.data_ptr
_Parameter = torch.nn.Parameter
_strided = torch.strided
_Lazy = torch.nn.parameter.UninitializedTensorMixin


class _Names(dict):
    """``str`` of a device or dtype, made once per distinct value: ``names[device]`` (or a
    ``map`` of ``names.__getitem__`` over a column) costs a dict lookup."""

    def __init__(self, spell: Any):
        super().__init__()
        self._spell = spell

    def __missing__(self, key: Any) -> str:
        name = self[key] = self._spell(key)
        return name


#: ``device_names[torch.device("cuda", 0)]`` is ``"cuda:0"``.
device_names = _Names(str)
#: ``dtype_names[torch.float32]`` is ``"float32"``.
dtype_names = _Names(lambda dtype: str(dtype).removeprefix("torch."))


def fake_device_of(attributes: dict) -> torch.device | None:
    """The device a FakeTensor stands for, from its instance dict: ``_fake_device`` behind a
    property in newer torch, the plain attribute ``fake_device`` in torch 2.10."""
    for key in ("_fake_device", "fake_device"):
        found = attributes.get(key)
        if type(found) is torch.device:
            return found
    return None


def tensor_facts(t: Any) -> tuple:
    """(device, dtype, shape, nbytes, storage_bytes, storage_key, layout, note) of a tensor.

    Reads metadata only, through TensorBase's C getters (call with torch-function
    dispatch disabled). ``storage_key`` identifies the memory (views, ``.detach()``
    and ``.data`` share it); ``None`` where there is no real memory to identify.
    """
    cls = type(t)
    if (cls is _Tensor or cls is _Parameter) and t.layout is _strided and not t.is_nested:
        if t.is_meta:
            return ("meta", dtype_name(t.dtype), tuple(t.shape), t.nbytes, 0, None, "strided", "meta: holds no memory")
        storage = t.untyped_storage()
        device, dtype = t.device, t.dtype
        return (
            device_names[device],
            dtype_names[dtype],
            tuple(t.shape),
            t.nbytes,
            storage.nbytes(),
            storage._cdata,
            "strided",
            "quantized" if t.is_quantized else None,
        )
    return _unusual_tensor_facts(t, cls)


#: The note on a tensor whose class answers metadata reads from its ``__torch_dispatch__``.
AS_CONSTRUCTED = "as constructed: its __torch_dispatch__ may report another device or shape"


def _unusual_tensor_facts(t: Any, cls: type) -> tuple:
    if tensor_getters.dispatches_to_python(t) and not tensor_getters.is_devinspects_own(cls):
        # Its device, layout or sizes may be answered by the class's __torch_dispatch__: read as
        # constructed instead (no code of the subclass runs), and said so when that happened.
        with tensor_getters.reading() as reader:
            facts = _held_tensor_facts(t, cls)
        # PyTorch's own wrappers (jagged nested tensors, FakeTensor) construct what they report.
        if reader.answered and facts[7] is None and not type_module(cls).startswith("torch."):
            facts = (*facts[:7], AS_CONSTRUCTED)
        return facts
    return _held_tensor_facts(t, cls)


def _held_tensor_facts(t: Any, cls: type) -> tuple:
    if issubclass(cls, _Lazy):
        device = device_name(tensor_getters.device(t))
        return (device, dtype_name(tensor_getters.dtype(t)), None, None, None, None, "strided", "lazy: not initialised yet, size unknown")
    d = instance_dict(t)
    device = device_name(tensor_getters.device(t))
    dtype = dtype_name(tensor_getters.dtype(t))
    if "fake_mode" in d and type_name(cls) == "FakeTensor":
        device = device_name(fake_device_of(d) or tensor_getters.device(t))
        return (device, dtype, shape_of(t), None, 0, None, "strided", "fake tensor: holds no memory")
    layout = tensor_getters.layout(t)
    if static_class_attr(cls, "__tensor_flatten__") is not None:
        # A traceable wrapper subclass (DTensor, nested jagged, devinspect's simulated device).
        return _wrapper_facts(t, device, dtype, layout)
    if tensor_getters.is_meta(t):
        return ("meta", dtype, shape_of(t), None, 0, None, layout_name(layout), "meta: holds no memory")
    if layout is not _strided and not tensor_getters.dispatches_to_python(t):
        # Reading the parts of a sparse tensor dispatches ops: the user's dispatch modes must not see
        # them (nor a subclass's __getattribute__: TensorBase's own methods). A subclass with its own
        # __torch_dispatch__ would be asked for them: its parts are not read.
        with torch._C._DisableTorchDispatch():
            if layout is torch.sparse_coo:
                parts = [_TB._indices(t), _TB._values(t)]
            elif layout in (torch.sparse_csr, torch.sparse_bsr):
                parts = [_TB.crow_indices(t), _TB.col_indices(t), _TB.values(t)]
            elif layout in (torch.sparse_csc, torch.sparse_bsc):
                parts = [_TB.ccol_indices(t), _TB.row_indices(t), _TB.values(t)]
            else:
                parts = None
        if parts is not None:
            storages = [tensor_getters.storage(p) for p in parts]
            return (
                device,
                dtype,
                shape_of(t),
                sum(tensor_getters.nbytes(p) for p in parts),
                sum(s.nbytes() for s in storages),
                storages[-1]._cdata,
                layout_name(layout),
                layout_name(layout),
            )
    if tensor_getters.is_nested(t):
        storage = tensor_getters.storage(t)
        return (device, dtype, shape_of(t), storage.nbytes(), storage.nbytes(), storage._cdata, "strided", "nested tensor")
    storage = tensor_getters.storage(t)
    if not _holds_memory(storage):
        # Any other wrapper subclass: its storage only stands for its size.
        return _wrapper_facts(t, device, dtype, layout)
    note = "quantized" if tensor_getters.is_quantized(t) else None
    return (device, dtype, shape_of(t), tensor_getters.nbytes(t), storage.nbytes(), storage._cdata, layout_name(layout), note)


def _wrapper_facts(t: Any, device: str, dtype: str, layout: Any) -> tuple:
    """A wrapper subclass's facts: its memory is in the inner tensors it keeps as attributes,
    read statically (never through ``__tensor_flatten__``)."""
    sizes = [tensor_facts(p) for p in inner_tensors(t)]
    storage = sum(s[4] for s in sizes if s[4] is not None) if sizes else None
    logical = sum(s[3] for s in sizes if s[3] is not None) if sizes else None
    key = sizes[0][5] if sizes else None
    return (device, dtype, shape_of(t), logical, storage, key, layout_name(layout), None)


def _holds_memory(storage: Any) -> bool:
    """Whether a storage has memory of its own (a wrapper subclass's storage stands for a size
    only: PyTorch refuses to give its data pointer)."""
    try:
        return _storage_data_ptr(storage) != 0 or not storage.nbytes()
    except RuntimeError:
        return False


def inner_tensors(t: Any) -> list:
    """The tensors a wrapper subclass keeps in its instance dict or slots (read, not flattened)."""
    inner = [v for v in dict.values(instance_dict(t)) if issubclass(type(v), _Tensor) and v is not t]
    inner.extend(v for _, v in slot_values(t) if issubclass(type(v), _Tensor) and v is not t)
    return inner


def shape_of(t: Any) -> tuple | None:
    try:
        return tuple(int(s) if type(s) is int else str(s) for s in tensor_getters.shape(t))
    except Exception:
        return None


def device_name(device: Any) -> str:
    return device_names[device]


def dtype_name(dtype: Any) -> str:
    return dtype_names[dtype]


def layout_name(layout: Any) -> str:
    return str(layout).removeprefix("torch.")
