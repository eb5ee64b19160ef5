"""Walk a namespace and list every tensor in it, read-only.

The walk never runs user code: it reads objects through ``type(o)``, the C-level
``dict``/``list`` methods and slot/``__dict__`` descriptors, never through
``getattr``, so properties, ``__getattr__``, ``__iter__``, ``__len__``, ``__eq__``
and ``__hash__`` of user objects are not called, and generators are not consumed.
Tensor facts come from C getters with torch-function dispatch disabled, so neither
tensor subclasses nor active modes see the inspection. Nothing is copied, moved,
synchronised or printed, CUDA is not initialised, and the result holds no reference
to any user object.
"""

from __future__ import annotations

import collections
import gc
import keyword
import re
import sys
import types
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from .model import (
    HistoryHold,
    LoaderSummary,
    ModuleSummary,
    ScanResult,
    TensorRecord,
    Truncation,
    device_is_accelerator,
    make_record,
)

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_Module = torch.nn.Module
_Optimizer = torch.optim.Optimizer
_TensorBase = torch._C.TensorBase
_strided = torch.strided
_Lazy = torch.nn.parameter.UninitializedTensorMixin

#: IPython's output-history names: ``_``, ``__``, ``___``, ``_12``, ``Out``, ``_oh``.
_HISTORY_RE = re.compile(r"^(_{1,3}|_\d+|Out|_oh)$")
#: Names IPython puts in every namespace that never hold user tensors.
_PLUMBING = frozenset({"In", "_ih", "_dh", "exit", "quit", "get_ipython", "__builtins__", "__builtin__"})

_ATOMS = frozenset({int, float, complex, bool, str, bytes, bytearray, type(None), range, slice})
_OPAQUE: tuple[type, ...] = (
    types.ModuleType,
    type,
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    property,
    staticmethod,
    classmethod,
    torch.device,
    torch.dtype,
    torch.Size,
)
#: Objects from these packages are plumbing, not user data: walking them costs time
#: and never finds a tensor the user made.
_OPAQUE_PACKAGES = ("IPython.", "ipykernel.", "traitlets.", "zmq.", "tornado.", "jupyter_client.", "asyncio.", "logging.")
#: Attributes every ``nn.Module`` has; anything else in a module's ``__dict__`` is the user's.
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))

_device_names: dict[Any, str] = {}
_dtype_names: dict[Any, str] = {}


@dataclass(frozen=True)
class ScanOptions:
    """Bounds and switches of a walk. Every bound that cuts something is reported."""

    #: Nesting of containers and plain objects below a root (modules do not count).
    max_depth: int = 8
    #: Items looked at in one container; the rest are reported as skipped.
    max_items: int = 200_000
    #: Objects looked at in the whole walk.
    max_objects: int = 2_000_000
    #: List IPython's history names (``_``, ``_12``, ``Out``) and other ``_`` names.
    include_hidden: bool = False
    #: Also list live tensors no name reaches, found through the garbage collector.
    all_objects: bool = False


def scan(
    namespace: Mapping[str, Any] | None = None,
    roots: Iterable[str] | None = None,
    *,
    include_hidden: bool = False,
    all_objects: bool = False,
    exclude: Iterable[str] = (),
    max_depth: int = ScanOptions.max_depth,
    max_items: int = ScanOptions.max_items,
    max_objects: int = ScanOptions.max_objects,
) -> ScanResult:
    """List every tensor reachable from ``namespace`` (default: the caller's globals).

    ``roots`` restricts the walk to those names (a dotted name such as
    ``model.encoder`` walks ``model`` and keeps what lies below ``model.encoder``).
    ``exclude`` names are never walked (IPython's own variables, say).

    Returns a :class:`~devinspect.model.ScanResult`; its ``storage_bytes`` count
    memory held by PyTorch's caching allocator for these tensors, which is less than
    ``nvidia-smi`` shows (the allocator's free cache, the CUDA context and other
    processes are not tensors).
    """
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    options = ScanOptions(max_depth, max_items, max_objects, include_hidden, all_objects)
    excluded = set(exclude) | _PLUMBING
    prefixes: list[str] = []
    if roots is not None:
        wanted = []
        for root in roots:
            top = re.split(r"[.\[]", root, maxsplit=1)[0]
            if top not in namespace:
                raise LookupError(f"no variable named {top!r}")
            if top not in wanted:
                wanted.append(top)
            if root != top:
                prefixes.append(root)
        user_names = wanted
        history_names = [n for n in namespace if _HISTORY_RE.match(n) and n not in wanted]
    else:
        user_names, history_names = _root_names(namespace, excluded, include_hidden)
    # Out first, so history entries are named Out[12] rather than _12.
    history_names.sort(key=lambda n: (n not in ("Out", "_oh"), n))

    walker = _Walker(options)
    # The walk allocates one record per tensor; letting the cyclic collector run
    # meanwhile re-traverses the whole heap many times for nothing (it doubles the
    # cost of a 100,000-tensor walk). It is paused, never triggered, and restored.
    collector_was_on = gc.isenabled()
    gc.disable()
    try:
        _walk(walker, namespace, roots, user_names, history_names, all_objects)
    finally:
        if collector_was_on:
            gc.enable()
    return _result(walker, user_names, prefixes, include_hidden, all_objects, max_depth)


def _root_names(namespace: Mapping[str, Any], excluded: set[str] | frozenset[str],
                include_hidden: bool) -> tuple[list[str], list[str]]:
    """(user names, IPython history names) of a namespace, without the excluded ones."""
    user_names, history_names = [], []
    for n in list(dict.keys(namespace)):
        if n in excluded or not isinstance(n, str):
            continue
        if _HISTORY_RE.match(n):
            history_names.append(n)
        elif not n.startswith("_") or include_hidden:
            user_names.append(n)
    return user_names, history_names


def _walk_user_roots(walker: _Walker, namespace: Mapping[str, Any], user_names: list[str]) -> None:
    """Walk the user's names. Call with torch-function dispatch disabled."""

    # Modules first, so parameters get their natural names (model.fc.weight)
    # even when a list of them comes first; optimizers next, so their state is
    # named opt.state[model.fc.weight][...] rather than after a checkpoint dict.
    def rank(name: str) -> int:
        vt = type(dict.get(namespace, name))
        return 0 if issubclass(vt, _Module) else 1 if issubclass(vt, _Optimizer) else 2

    for name in sorted(user_names, key=rank):
        walker.root(name, dict.get(namespace, name))
        walker.flush_deferred()


def _walk(walker: _Walker, namespace: Mapping[str, Any], roots: Any, user_names: list[str],
          history_names: list[str], all_objects: bool) -> None:
    with torch._C.DisableTorchFunction():
        if roots is not None:
            # Name parameters after the namespace's modules even when only an
            # optimizer is asked for: opt.state[model.fc.weight], not param_groups[0].
            for name, value in list(dict.items(namespace)):
                if isinstance(name, str) and not name.startswith("_") and issubclass(type(value), _Module):
                    walker.name_parameters(value, name)
        _walk_user_roots(walker, namespace, user_names)
        walker.hidden = True
        walker.first_hidden = len(walker.records)
        for name in history_names:
            walker.root(name, dict.get(namespace, name))
        walker.traceback()
        walker.flush_deferred()
        walker.hidden = False
        if all_objects:
            walker.unnamed()


def _result(walker: _Walker, user_names: list[str], prefixes: list[str], include_hidden: bool,
            all_objects: bool, max_depth: int) -> ScanResult:
    records = walker.records
    hidden = records[walker.first_hidden :] if walker.first_hidden is not None else []
    history = tuple(
        HistoryHold(r.name, r.device, r.storage_bytes)
        for r in hidden
        if r.hidden and r.alias_of is None and r.storage_bytes and device_is_accelerator(r.device)
    )
    if not include_hidden and hidden:
        records = [r for r in records if not r.hidden]
    result = ScanResult(
        records=tuple(records),
        modules=tuple(walker.modules),
        loaders=tuple(walker.loaders),
        truncated=tuple(walker.truncated),
        history=history,
        roots=tuple(user_names),
        options={"include_hidden": include_hidden, "all_objects": all_objects, "max_depth": max_depth},
    )
    for prefix in prefixes:
        result = result.filter(prefix=prefix)
    return result


def is_history_name(name: str) -> bool:
    """Whether ``name`` is one of IPython's output-history names (``_``, ``_12``, ``Out``)."""
    return bool(_HISTORY_RE.match(name))


def tensor_facts(t: Any) -> tuple:
    """(device, dtype, shape, nbytes, storage_bytes, storage_key, layout, note) of a tensor.

    Reads metadata only. ``storage_key`` identifies the memory (views, ``.detach()``
    and ``.data`` share it); ``None`` where there is no real memory to identify.
    """
    cls = type(t)
    if (cls is _Tensor or cls is _Parameter) and t.layout is _strided and not t.is_nested:
        storage = t.untyped_storage()
        if t.is_meta:
            return ("meta", _dtype_name(t.dtype), tuple(t.shape), t.nbytes, 0, None, "strided", "meta: holds no memory")
        device, dtype = t.device, t.dtype
        return (
            _device_names.get(device) or _device_name(device),
            _dtype_names.get(dtype) or _dtype_name(dtype),
            tuple(t.shape),
            t.nbytes,
            storage.nbytes(),
            storage._cdata,
            "strided",
            "quantized" if t.is_quantized else None,
        )
    return _unusual_tensor_facts(t, cls)


def _unusual_tensor_facts(t: Any, cls: type) -> tuple:
    if issubclass(cls, _Lazy):
        device = _device_name(_TensorBase.device.__get__(t))
        return (device, _dtype_name(_TensorBase.dtype.__get__(t)), None, None, None, None, "strided", "lazy: not initialised yet, size unknown")
    d = _instance_dict(t)
    if "fake_mode" in d and cls.__name__ == "FakeTensor":
        device = _device_name(d.get("_fake_device") or _TensorBase.device.__get__(t))
        dtype = _dtype_name(_TensorBase.dtype.__get__(t))
        return (device, dtype, _shape(t), None, 0, None, "strided", "fake tensor: holds no memory")
    layout = t.layout
    device = _device_name(_TensorBase.device.__get__(t))
    dtype = _dtype_name(_TensorBase.dtype.__get__(t))
    if is_traceable_wrapper_subclass(t):
        parts = _inner_tensors(t)
        sizes = [tensor_facts(p) for p in parts]
        storage = sum(s[4] for s in sizes if s[4] is not None) if sizes else None
        logical = sum(s[3] for s in sizes if s[3] is not None) if sizes else None
        key = sizes[0][5] if sizes else None
        return (device, dtype, _shape(t), logical, storage, key, _layout_name(layout), None)
    if layout is torch.sparse_coo:
        parts = [t._indices(), t._values()]
    elif layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = [t.crow_indices(), t.col_indices(), t.values()]
    elif layout in (torch.sparse_csc, torch.sparse_bsc):
        parts = [t.ccol_indices(), t.row_indices(), t.values()]
    else:
        parts = None
    if parts is not None:
        storages = [p.untyped_storage() for p in parts]
        return (
            device,
            dtype,
            tuple(t.shape),
            sum(p.nbytes for p in parts),
            sum(s.nbytes() for s in storages),
            storages[-1]._cdata,
            _layout_name(layout),
            _layout_name(layout),
        )
    if t.is_nested:
        storage = t.untyped_storage()
        return (device, dtype, _shape(t), storage.nbytes(), storage.nbytes(), storage._cdata, "strided", "nested tensor")
    storage = t.untyped_storage()
    note = "quantized" if t.is_quantized else None
    return (device, dtype, tuple(t.shape), t.nbytes, storage.nbytes(), storage._cdata, _layout_name(layout), note)


def _inner_tensors(t: Any) -> list:
    attrs, _ctx = t.__tensor_flatten__()
    d = _instance_dict(t)
    inner = []
    for attr in attrs:
        if attr in d:
            value = d[attr]
        else:  # kept in __slots__ (DTensor's _local_tensor)
            descriptor = _static_class_attr(type(t), attr)
            if type(descriptor) is not types.MemberDescriptorType:
                continue
            value = descriptor.__get__(t, type(t))
        if issubclass(type(value), _Tensor):
            inner.append(value)
    return inner


def _shape(t: Any) -> tuple | None:
    try:
        return tuple(int(s) if isinstance(s, int) else str(s) for s in _TensorBase.shape.__get__(t))
    except Exception:
        return None


def _device_name(device: Any) -> str:
    name = _device_names.get(device)
    if name is None:
        name = _device_names[device] = str(device)
    return name


def _dtype_name(dtype: Any) -> str:
    name = _dtype_names.get(dtype)
    if name is None:
        name = _dtype_names[dtype] = str(dtype).removeprefix("torch.")
    return name


def _layout_name(layout: Any) -> str:
    return str(layout).removeprefix("torch.")


def _instance_dict(o: Any) -> dict:
    """``o.__dict__`` read through the C descriptor, or ``{}``; never runs user code."""
    for klass in type(o).__mro__:
        descriptor = klass.__dict__.get("__dict__")
        if descriptor is not None:
            if type(descriptor) is types.GetSetDescriptorType:
                try:
                    d = descriptor.__get__(o, type(o))
                except Exception:
                    return {}
                return d if type(d) is dict else {}
            return {}
    return {}


def _slot_values(o: Any) -> list[tuple[str, Any]]:
    """``(name, value)`` of the ``__slots__`` attributes that are set."""
    out = []
    for klass in type(o).__mro__:
        slots = klass.__dict__.get("__slots__")
        if slots is None:
            continue
        if isinstance(slots, str):
            slots = (slots,)
        for slot in slots:
            if not isinstance(slot, str) or slot in ("__dict__", "__weakref__"):
                continue
            attr = f"_{klass.__name__.lstrip('_')}{slot}" if slot.startswith("__") and not slot.endswith("__") else slot
            descriptor = klass.__dict__.get(attr)
            if type(descriptor) is types.MemberDescriptorType:
                try:
                    out.append((slot, descriptor.__get__(o, klass)))
                except AttributeError:
                    pass
    return out


def _static_class_attr(cls: type, name: str) -> Any:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    return None


def _key_text(key: Any) -> str | None:
    """How a dict key is typed in Python, for keys that have a literal form."""
    kt = type(key)
    if kt is str:
        return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if kt is int or kt is bool or key is None:
        return repr(key)
    if kt is float:
        return float.__repr__(key)
    if kt is tuple and len(key) < 6:
        inner = [_key_text(k) for k in key]
        if None not in inner:
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"
    return None


def _attr_name(parent: str, attr: str) -> str:
    if attr.isidentifier() and not keyword.iskeyword(attr):
        return f"{parent}.{attr}"
    return f"getattr({parent}, {_key_text(attr)})"


def _child_name(parent: str, child: str, parent_obj: Any) -> str:
    """``model.layers[0]``, ``model.blocks["a-b"]``, ``model.fc`` for a module child."""
    if child.isdigit():
        return f"{parent}[{child}]"
    if isinstance(parent_obj, (torch.nn.ModuleDict, torch.nn.ParameterDict)) and not child.isidentifier():
        return f"{parent}[{_key_text(child)}]"
    return _attr_name(parent, child)


def _describe_error(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        text = ""
    text = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type(exc).__name__}: {text}"[:200] if text else type(exc).__name__


class _Walker:
    """One walk's state. Holds user objects only by ``id()`` while it runs."""

    def __init__(self, options: ScanOptions):
        self.options = options
        self.records: list[TensorRecord] = []
        self.modules: list[ModuleSummary] = []
        self.loaders: list[LoaderSummary] = []
        self.truncated: list[Truncation] = []
        self.hidden = False
        #: Index of the first record found through history names or the traceback.
        self.first_hidden: int | None = None
        self._storage_first: dict[int, str] = {}
        self._tensor_first: dict[int, str] = {}
        self._visited: set[int] = set()
        self._param_names: dict[int, str] = {}
        self._deferred: list[tuple[str, str, Any]] = []
        self._budget = options.max_objects
        self._out_of_budget = False

    # -- roots --------------------------------------------------------------

    def root(self, name: str, value: Any) -> None:
        self._visit(value, name, name, 0, None)

    def flush_deferred(self) -> None:
        while self._deferred:
            name, root, opt = self._deferred.pop(0)
            self._guarded(self._optimizer, opt, name, root)

    def name_parameters(self, m: Any, name: str) -> None:
        """Learn the names of a module's parameters without recording anything."""
        stack, seen = [(m, name)], set()
        while stack:
            module, path = stack.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            d = _instance_dict(module)
            for pname, p in dict.items(d.get("_parameters") or {}):
                if p is not None:
                    self._param_names.setdefault(id(p), _child_name(path, pname, module))
            for cname, child in dict.items(d.get("_modules") or {}):
                if child is not None:
                    stack.append((child, _child_name(path, cname, module)))

    def traceback(self) -> None:
        """Walk the locals of the frames in ``sys.last_traceback`` (kept after an error)."""
        tb = getattr(sys, "last_traceback", None)
        seen_frames = 0
        while tb is not None and seen_frames < 64:
            frame = tb.tb_frame
            seen_frames += 1
            if frame.f_locals is not frame.f_globals:
                label = f"sys.last_traceback:{frame.f_code.co_name}"
                for key, value in list(frame.f_locals.items()):
                    if isinstance(key, str):
                        self._visit(value, f"{label}.{key}", "sys.last_traceback", 1, None)
            tb = tb.tb_next

    def unnamed(self) -> None:
        """Tensors alive in the process that no name reaches (garbage-collector walk)."""
        count = 0
        objects = gc.get_objects()
        try:
            for o in objects:
                if issubclass(type(o), _Tensor) and id(o) not in self._tensor_first:
                    try:
                        facts = tensor_facts(o)
                    except Exception:
                        continue
                    key = facts[5]
                    if key is not None and key in self._storage_first:
                        continue
                    count += 1
                    self._tensor(o, f"<unnamed {count}>", "<unnamed>", "unnamed", facts=facts)
        finally:
            del objects

    # -- dispatch ------------------------------------------------------------

    def _visit(self, value: Any, name: str, root: str, depth: int, owner: str | None) -> None:
        vt = type(value)
        if vt in _ATOMS:
            return
        if issubclass(vt, _Tensor):
            self._guarded(self._tensor, value, name, root, "attribute" if owner is not None else "tensor", owner)
            return
        if self._out_of_budget:
            return
        self._budget -= 1
        if self._budget < 0:
            self._out_of_budget = True
            self.truncated.append(Truncation(name, f"object budget of {self.options.max_objects:,} reached"))
            return
        oid = id(value)
        if oid in self._visited:
            return
        if issubclass(vt, _Module):
            self._visited.add(oid)
            self._guarded(self._module_root, value, name, root)
            return
        if issubclass(vt, _Optimizer):
            self._visited.add(oid)
            self._deferred.append((name, root, value))
            return
        if depth >= self.options.max_depth:
            if self._may_hold_tensors(value, vt):
                self.truncated.append(Truncation(name, f"deeper than {self.options.max_depth} levels"))
            return
        self._visited.add(oid)
        self._guarded(self._object, value, name, root, vt, depth, owner)

    def _guarded(self, fn: Any, value: Any, name: str, root: str, *args: Any) -> None:
        """Run one step; an object that cannot be inspected becomes an error record."""
        try:
            fn(value, name, root, *args)
        except RecursionError:
            self.truncated.append(Truncation(name, "nested too deeply to follow"))
        except Exception as exc:  # noqa: BLE001 - any failure is reported as data
            self._error_record(value, name, root, exc)

    def _error_record(self, value: Any, name: str, root: str, exc: BaseException) -> None:
        self.records.append(
            TensorRecord(
                name=name, root=root, kind="error", device="?", dtype=None, shape=None, nbytes=None,
                storage_bytes=None, storage_id=None, type_name=type(value).__name__,
                note=f"could not inspect: {_describe_error(exc)}", hidden=self.hidden,
            )
        )

    @staticmethod
    def _may_hold_tensors(value: Any, vt: type) -> bool:
        return not issubclass(vt, _OPAQUE) and vt not in _ATOMS

    # -- tensors -------------------------------------------------------------

    def _tensor(
        self,
        t: Any,
        name: str,
        root: str,
        kind: str = "tensor",
        owner: str | None = None,
        param: str | None = None,
        note: str | None = None,
        facts: tuple | None = None,
    ) -> None:
        tid = id(t)
        if facts is None:
            facts = tensor_facts(t)
        device, dtype, shape, nbytes, storage_bytes, key, layout, facts_note = facts
        alias = self._tensor_first.get(tid)
        same_object = alias is not None
        cls = type(t)
        # A Parameter of a tensor subclass keeps its class and is marked by _is_param.
        if kind == "tensor" and cls is not _Tensor and (cls is _Parameter or "_is_param" in _instance_dict(t)):
            kind = "parameter"
        if alias is None and key is not None:
            alias = self._storage_first.get(key)
        if alias is None:
            self._tensor_first[tid] = name
            if key is not None:
                self._storage_first[key] = name
        elif tid not in self._tensor_first:
            self._tensor_first[tid] = alias
        requires_grad = t.requires_grad
        self.records.append(
            make_record(
                name, root, kind, device, dtype, shape, nbytes, storage_bytes, key, alias, requires_grad,
                cls.__name__, layout, owner, param, note or facts_note, self.hidden,
            )
        )
        # Reading .grad of a non-leaf warns; only leaves (or retain_grad()) have one.
        if requires_grad and kind != "gradient" and not same_object and (t.is_leaf or t.retains_grad):
            grad = t._grad
            if grad is not None:
                self._tensor(grad, f"{name}.grad", root, "gradient", owner, param=name)

    # -- modules -------------------------------------------------------------

    def _module_root(self, m: Any, name: str, root: str) -> None:
        start = len(self.records)
        unregistered: list[tuple[str, str]] = []
        self._module(m, name, root, unregistered, set())
        self.modules.append(self._summarise(m, name, self.records[start:], unregistered))

    def _module(self, m: Any, name: str, root: str, unregistered: list[tuple[str, str]], seen: set[int]) -> None:
        seen.add(id(m))
        self._visited.add(id(m))
        d = _instance_dict(m)
        params = d.get("_parameters") or {}
        for pname, p in dict.items(params):
            if p is not None:
                pfull = _child_name(name, pname, m)
                self._param_names.setdefault(id(p), pfull)
                self._tensor(p, pfull, root, "parameter", name)
        buffers = d.get("_buffers") or {}
        non_persistent = d.get("_non_persistent_buffers_set") or ()
        for bname, b in dict.items(buffers):
            if b is not None:
                note = "non-persistent" if bname in non_persistent else None
                self._tensor(b, _child_name(name, bname, m), root, "buffer", name, note=note)
        for attr, value in dict.items(d):
            if attr in _MODULE_INTERNALS or type(value) in _ATOMS:
                continue
            vt = type(value)
            if issubclass(vt, _Tensor) or isinstance(value, (list, tuple, dict, set)):
                before = len(self.records)
                self._visit(value, _attr_name(name, attr), root, 1, name)
                if any(r.kind == "attribute" and r.owner == name for r in self.records[before:]):
                    unregistered.append((_attr_name(name, attr), type(m).__name__))
            elif not issubclass(vt, _OPAQUE):
                self._visit(value, _attr_name(name, attr), root, 1, None)
        children = d.get("_modules") or {}
        for cname, child in dict.items(children):
            if child is None or id(child) in seen:
                continue
            self._module(child, _child_name(name, cname, m), root, unregistered, seen)

    def _summarise(self, m: Any, name: str, records: list[TensorRecord], unregistered: list[tuple[str, str]]) -> ModuleSummary:
        placed = [r for r in records if r.kind in ("parameter", "buffer")]
        by_device: dict[str, int] = {}
        owner_devices: dict[str, set[str]] = {}
        for r in placed:
            by_device[r.device] = by_device.get(r.device, 0) + (r.storage_bytes or 0)
            owner_devices.setdefault(r.owner or name, set()).add(r.device)
        devices = tuple(sorted(by_device, key=lambda d: (-by_device[d], d)))
        placement: tuple[tuple[str, str], ...] = ()
        if len(devices) > 1:
            placement = tuple(_placement(name, owner_devices))
        return ModuleSummary(
            name=name,
            type_name=type(m).__name__,
            parameters=sum(1 for r in records if r.kind == "parameter"),
            parameter_bytes=sum(r.counted_bytes for r in records if r.kind == "parameter"),
            buffers=sum(1 for r in records if r.kind == "buffer"),
            buffer_bytes=sum(r.counted_bytes for r in records if r.kind == "buffer"),
            gradient_bytes=sum(r.counted_bytes for r in records if r.kind == "gradient"),
            devices=devices,
            placement=placement,
            unregistered=tuple(unregistered),
        )

    # -- optimizers, loaders, containers, objects -----------------------------

    def _optimizer(self, opt: Any, name: str, root: str) -> None:
        d = _instance_dict(opt)
        groups = d.get("param_groups") or []
        for gi, group in enumerate(list.__iter__(groups) if isinstance(groups, list) else ()):
            params = dict.get(group, "params", []) if isinstance(group, dict) else []
            for pi, p in enumerate(list.__iter__(params) if isinstance(params, list) else ()):
                if issubclass(type(p), _Tensor) and id(p) not in self._param_names:
                    pname = f'{name}.param_groups[{gi}]["params"][{pi}]'
                    self._param_names[id(p)] = pname
                    if id(p) not in self._tensor_first:
                        self._tensor(p, pname, root, "parameter")
        state = d.get("state") or {}
        if not isinstance(state, dict):
            return
        for p, entry in dict.items(state):
            pname = self._param_names.get(id(p)) or self._tensor_first.get(id(p)) or "<parameter>"
            if not isinstance(entry, dict):
                continue
            for key, value in dict.items(entry):
                key_text = _key_text(key) or "<key>"
                sname = f"{name}.state[{pname}][{key_text}]"
                if issubclass(type(value), _Tensor):
                    self._tensor(value, sname, root, "optimizer_state", param=pname)
                else:
                    self._visit(value, sname, root, 2, None)

    def _object(self, o: Any, name: str, root: str, vt: type, depth: int, owner: str | None) -> None:
        if vt is list or vt is tuple or vt is dict or issubclass(vt, (list, tuple, dict, set, frozenset, collections.deque)):
            self._container(o, vt, name, root, depth, owner)
            return
        if issubclass(vt, _OPAQUE) or vt.__module__.startswith(_OPAQUE_PACKAGES):
            return
        if issubclass(vt, torch.utils.data.DataLoader):
            d = _instance_dict(o)
            self.loaders.append(
                LoaderSummary(name, bool(d.get("pin_memory", False)), int(d.get("num_workers", 0) or 0), d.get("batch_size"))
            )
            if "dataset" in d:
                self._visit(d["dataset"], f"{name}.dataset", root, depth + 1, owner)
            return
        for attr, value in dict.items(_instance_dict(o)):
            if isinstance(attr, str) and type(value) not in _ATOMS:
                self._visit(value, _attr_name(name, attr), root, depth + 1, owner)
        for attr, value in _slot_values(o):
            if type(value) not in _ATOMS:
                self._visit(value, _attr_name(name, attr), root, depth + 1, owner)

    def _container(self, o: Any, vt: type, name: str, root: str, depth: int, owner: str | None) -> None:
        limit = self.options.max_items
        if issubclass(vt, dict):
            total = dict.__len__(o)
            items = dict.items(o)
            for i, (key, value) in enumerate(items):
                if i >= limit:
                    break
                key_text = _key_text(key)
                if issubclass(type(key), _Tensor):
                    self._visit(key, f"list({name})[{i}]", root, depth + 1, owner)
                if type(value) in _ATOMS:
                    continue
                child = f"{name}[{key_text}]" if key_text is not None else f"list({name}.values())[{i}]"
                self._visit(value, child, root, depth + 1, owner)
        else:
            if issubclass(vt, (list, tuple)):
                total = list.__len__(o) if issubclass(vt, list) else tuple.__len__(o)
                iterator = list.__iter__(o) if issubclass(vt, list) else tuple.__iter__(o)
                fields = _static_class_attr(vt, "_fields") if issubclass(vt, tuple) else None
                if not (isinstance(fields, tuple) and len(fields) == total):
                    fields = None
                prefix = f"{name}["
            elif issubclass(vt, collections.deque):
                total = collections.deque.__len__(o)
                iterator = collections.deque.__iter__(o)
                fields, prefix = None, f"{name}["
            else:
                total = set.__len__(o) if issubclass(vt, set) else frozenset.__len__(o)
                iterator = set.__iter__(o) if issubclass(vt, set) else frozenset.__iter__(o)
                fields, prefix = None, f"list({name})["
            kind = "attribute" if owner is not None else "tensor"
            atoms, tensor_type, record = _ATOMS, _Tensor, self._tensor
            # The hot loop of a large namespace: tensors are recorded inline, each in
            # its own try so one bad item becomes an error record and the rest go on.
            for i, value in enumerate(iterator):
                if i >= limit:
                    break
                vtype = type(value)
                if vtype in atoms:
                    continue
                child = f"{name}.{fields[i]}" if fields is not None else f"{prefix}{i}]"
                if issubclass(vtype, tensor_type):
                    try:
                        record(value, child, root, kind, owner)
                    except Exception as exc:  # noqa: BLE001 - reported as data
                        self._error_record(value, child, root, exc)
                else:
                    self._visit(value, child, root, depth + 1, owner)
        if total > limit:
            self.truncated.append(Truncation(name, f"more than {limit:,} items", total - limit))


def _placement(name: str, owner_devices: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The largest submodules that each sit on one device, for a mixed-device module."""
    subtree: dict[str, set[str]] = {}
    for owner, devices in owner_devices.items():
        path = owner
        while True:
            subtree.setdefault(path, set()).update(devices)
            if path == name or len(path) <= len(name):
                break
            cut = max(path.rfind("."), path.rfind("["))
            if cut <= 0:
                break
            path = path[:cut]
    out: list[tuple[str, str]] = []

    def children_of(path: str) -> list[str]:
        return sorted(p for p in subtree if p != path and p.startswith(path) and p[len(path)] in ".[" and
                      max(p.rfind("."), p.rfind("[")) == len(path))

    def descend(path: str) -> None:
        devices = subtree.get(path, set())
        if len(devices) == 1:
            out.append((path, next(iter(devices))))
            return
        if path in owner_devices and len(owner_devices[path]) > 1:
            for device in sorted(owner_devices[path]):
                out.append((path, device))
        elif path in owner_devices:
            out.append((path, next(iter(owner_devices[path]))))
        for child in children_of(path):
            descend(child)

    descend(name)
    return out


_KIND_SOURCE = {"parameter": "parameter", "buffer": "buffer", "attribute": "attribute", "gradient": "gradient",
                "optimizer_state": "optimizer_state", "tensor": "namespace"}


def tensor_names(namespace: Mapping[str, Any], tensors: list) -> list[tuple[str, str, bool] | None]:
    """``(name, source, is_view)`` for each tensor as the namespace reaches it, or None.

    ``source`` is how the name was found: ``parameter``, ``buffer``, ``attribute``
    (a module tensor ``.to()`` does not move), ``gradient``, ``optimizer_state`` or
    ``namespace``. ``is_view`` is True when the tensor itself has no name but shares
    the memory of the named one (``x[:2]``, ``self.pe[:n]``). History names are not used.
    """
    walker = _Walker(ScanOptions())
    # Only the user's names: neither history nor an earlier error's traceback may name an operand.
    user_names, _history = _root_names(namespace, _PLUMBING, include_hidden=False)
    with torch._C.DisableTorchFunction():
        _walk_user_roots(walker, namespace, user_names)
    kind_of = {r.name: r.kind for r in walker.records}
    out: list[tuple[str, str, bool] | None] = []
    for t in tensors:
        name = walker._tensor_first.get(id(t))
        is_view = False
        if name is None:
            try:
                key = tensor_facts(t)[5]
            except Exception:
                key = None
            name = walker._storage_first.get(key) if key is not None else None
            is_view = name is not None
        if name is None:
            out.append(None)
        else:
            out.append((name, _KIND_SOURCE.get(kind_of.get(name, "tensor"), "namespace"), is_view))
    return out


def module_paths(namespace: Mapping[str, Any]) -> dict[int, str]:
    """``id(module) -> path`` (``model.encoder.layers[0]``) for modules the namespace reaches by name."""
    paths: dict[int, str] = {}
    for name, value in list(dict.items(namespace)):
        if not isinstance(name, str) or name.startswith("_") or not issubclass(type(value), _Module):
            continue
        stack = [(value, name)]
        while stack:
            module, path = stack.pop()
            if id(module) in paths:
                continue
            paths[id(module)] = path
            for cname, child in dict.items(_instance_dict(module).get("_modules") or {}):
                if child is not None:
                    stack.append((child, _child_name(path, cname, module)))
    return paths
