"""Walk a namespace and list every tensor in it, read-only.

The walk never runs user code:

* Types are read with ``type(o)`` and classes through ``type``'s own descriptors
  (``__mro__``, ``__dict__``, ``__name__``, ``__module__``), never ``isinstance``
  (which reads ``o.__class__``, a property can lie) nor attribute access on a class
  (a metaclass ``__getattribute__`` would run). Type membership uses ``id()`` of
  types, so a metaclass ``__hash__``/``__eq__`` is never called.
* Containers are read through the C-level ``dict``/``list``/``tuple``/``set``
  methods; instance attributes through the C ``__dict__`` descriptor and slot member
  descriptors. Keys that are not exact ``str`` are never hashed, compared or asked
  for a method: such an entry is named by position.
* Tensor facts come from ``torch._C.TensorBase``'s own getters with torch-function
  dispatch disabled (no subclass property, no ``__torch_function__``, no mode), and
  the few that dispatch an op (sparse parts) run with Python dispatch disabled, so
  the user's active dispatch modes see nothing.

Nothing is copied, moved, synchronised or printed, CUDA is not initialised, and the
result holds no reference to any user object. devinspect's own objects (earlier
results kept in ``Out``) and the frames of devinspect, IPython and the standard
library in ``sys.last_traceback`` are not walked.
"""

from __future__ import annotations

import ast
import collections
import gc
import inspect
import keyword
import linecache
import re
import sys
import textwrap
import types
import weakref
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch

from . import locations
from . import tensorbase as tb
from .model import (
    HistoryHold,
    LoaderSummary,
    ModuleSummary,
    OptimizerSummary,
    ScanResult,
    Selection,
    TensorRecord,
    Truncation,
    Unregistered,
    device_is_accelerator,
    make_record,
)

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_Module = torch.nn.Module
_Optimizer = torch.optim.Optimizer
_strided = torch.strided
_Lazy = torch.nn.parameter.UninitializedTensorMixin

# type's own descriptors: reading a class through them never runs a metaclass's code.
_TYPE_MRO = type.__dict__["__mro__"].__get__
_TYPE_DICT = type.__dict__["__dict__"].__get__
_TYPE_NAME = type.__dict__["__name__"].__get__
_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__
_TYPE_MODULE = type.__dict__["__module__"].__get__
_FUNCTION_CODE = types.FunctionType.__dict__["__code__"].__get__
_PROXY_REPR = weakref.ProxyType.__repr__
_MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__

#: IPython's output-history names: ``_``, ``__``, ``___``, ``_12``, ``Out``, ``_oh``.
_HISTORY_RE = re.compile(r"^(_{1,3}|_\d+|Out|_oh)$")
#: Names IPython puts in every namespace that never hold user tensors.
_PLUMBING = frozenset({"In", "_ih", "_dh", "exit", "quit", "get_ipython", "__builtins__", "__builtin__"})

_ATOM_TYPES = (int, float, complex, bool, str, bytes, bytearray, type(None), range, slice, type(Ellipsis),
               type(NotImplemented), memoryview)
_ATOM_IDS = frozenset(id(t) for t in _ATOM_TYPES)
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
    weakref.ReferenceType,
    torch.device,
    torch.dtype,
    torch.Size,
    torch.UntypedStorage,
    torch.TypedStorage,
    torch.Stream,
    torch.Event,
)
_PROXY_TYPES = (weakref.ProxyType, weakref.CallableProxyType)
#: Objects from these packages are plumbing, not user data: walking them costs time
#: and never finds a tensor the user made. devinspect's own results (kept in Out) too.
_OPAQUE_PACKAGES = ("IPython.", "ipykernel.", "traitlets.", "zmq.", "tornado.", "jupyter_client.", "asyncio.",
                    "logging.", "devinspect.", "ipywidgets.", "comm.")
#: Attributes every ``nn.Module`` has; anything else in a module's ``__dict__`` is the user's.
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))
#: Forward pre-hooks that recompute a plain tensor attribute before each forward
#: (weight_norm, spectral_norm, pruning) keep its name in one of these attributes.
_RECOMPUTED_NAME_ATTRS = ("name", "_tensor_name")

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


# -- reading types and objects without running their code ---------------------------------


def mro(cls: type) -> tuple[type, ...]:
    return _TYPE_MRO(cls)


def class_dict(cls: type) -> Mapping[str, Any]:
    return _TYPE_DICT(cls)


def type_name(cls: type) -> str:
    name = _TYPE_NAME(cls)
    return name if type(name) is str else "?"


def type_module(cls: type) -> str:
    try:
        module = _TYPE_MODULE(cls)
    except AttributeError:
        return ""
    return module if type(module) is str else ""


def static_class_attr(cls: type, name: str) -> Any:
    """``name`` as found in the class dicts along the MRO (no descriptor is called), or None."""
    for klass in mro(cls):
        for key, value in dict.items(_plain_class_dict(klass)):
            if key == name:
                return value
    return None


_class_dicts: dict[int, tuple[type, dict[str, Any]]] = {}


def _plain_class_dict(klass: type) -> dict[str, Any]:
    """A class's own dict with only exact-``str`` keys (cached by identity while the class lives)."""
    cached = _class_dicts.get(id(klass))
    if cached is not None and cached[0] is klass:
        return cached[1]
    plain = {k: v for k, v in _TYPE_DICT(klass).items() if type(k) is str}
    if len(_class_dicts) > 4096:
        _class_dicts.clear()
    _class_dicts[id(klass)] = (klass, plain)
    return plain


def plain_str(key: Any) -> str | None:
    """An exact ``str`` for a key that is a ``str`` (or a subclass: copied without calling it)."""
    if type(key) is str:
        return key
    if issubclass(type(key), str):
        return str.__str__(key)
    return None


def instance_dict(o: Any) -> dict[str, Any]:
    """``o.__dict__`` read through the C descriptor, keys as exact ``str`` (a ``str`` subclass key is
    copied without calling it; other keys are left out); ``{}`` if none."""
    d = raw_instance_dict(o)
    if d is None:
        return {}
    out = {}
    for key, value in dict.items(d):
        if type(key) is str:
            out[key] = value
        elif issubclass(type(key), str):
            out[str.__str__(key)] = value
    return out


def raw_instance_dict(o: Any) -> dict | None:
    """The object's own ``__dict__`` (exactly a dict), or None when it has none or it is not a dict."""
    for klass in mro(type(o)):
        descriptor = _plain_class_dict(klass).get("__dict__")
        if descriptor is not None:
            if type(descriptor) is types.GetSetDescriptorType:
                try:
                    d = descriptor.__get__(o, type(o))
                except Exception:
                    return None
                return d if type(d) is dict else None
            return None
    return None


def _odd_instance_dict(o: Any) -> str | None:
    """Why ``o``'s ``__dict__`` is not inspected (a dict subclass, a non-dict), or None."""
    for klass in mro(type(o)):
        descriptor = _plain_class_dict(klass).get("__dict__")
        if descriptor is not None:
            if type(descriptor) is not types.GetSetDescriptorType:
                return "its __dict__ is replaced by a class attribute"
            try:
                d = descriptor.__get__(o, type(o))
            except Exception:
                return None
            if type(d) is not dict and issubclass(type(d), dict):
                return f"its __dict__ is a {type_name(type(d))}, not a dict"
            return None
    return None


def slot_values(o: Any) -> list[tuple[str, Any]]:
    """``(name, value)`` of the slot attributes that are set, found as member descriptors
    in the class dicts (never by iterating a ``__slots__`` value, which may be a generator)."""
    out = []
    for klass in mro(type(o)):
        for attr, descriptor in dict.items(_plain_class_dict(klass)):
            if type(descriptor) is types.MemberDescriptorType and attr not in ("__weakref__", "__dict__"):
                try:
                    value = descriptor.__get__(o, klass)
                except AttributeError:
                    continue
                out.append((_unmangle(attr, klass), value))
    return out


def _unmangle(attr: str, klass: type) -> str:
    prefix = "_" + type_name(klass).lstrip("_")
    return attr[len(prefix):] if attr.startswith(prefix + "__") else attr


def _is_opaque_package(vt: type) -> bool:
    return type_module(vt).startswith(_OPAQUE_PACKAGES)


# -- the namespace ---------------------------------------------------------------------------


def namespace_items(namespace: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(name, value)`` pairs of a namespace, names as exact ``str``.

    A dict (or dict subclass, IPython's namespace) is read with the C-level
    ``dict.items``; any other Mapping (MappingProxyType, ChainMap, UserDict) through
    its own ``items()``, since the caller handed it over as the namespace. Keys that
    are not strings are left out: no variable can be typed by them.
    """
    if issubclass(type(namespace), dict):
        pairs = list(dict.items(namespace))
    elif type(namespace) is types.MappingProxyType:
        pairs = list(namespace.items())
    else:
        pairs = list(namespace.items())
    out = []
    for key, value in pairs:
        name = plain_str(key)
        if name is not None:
            out.append((name, value))
    return out


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

    ``namespace`` may be any Mapping of names to values. ``roots`` restricts the walk
    to those names (a dotted name such as ``model.encoder`` walks ``model`` and keeps
    what lies below ``model.encoder``). ``exclude`` names are never walked (IPython's
    own variables, say).

    Returns a :class:`~devinspect.model.ScanResult`; its ``storage_bytes`` count
    memory held by PyTorch's caching allocator for these tensors, which is less than
    ``nvidia-smi`` shows (the allocator's free cache, the CUDA context and other
    processes are not tensors).
    """
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    options = ScanOptions(max_depth, max_items, max_objects, include_hidden, all_objects)
    items = namespace_items(namespace)
    excluded = set(exclude) | _PLUMBING
    prefixes: list[str] = []
    if roots is not None:
        present = {name for name, _ in items}
        wanted: list[str] = []
        for root in roots:
            top = re.split(r"[.\[]", root, maxsplit=1)[0]
            if top not in present:
                raise LookupError(f"no variable named {top!r}")
            if top not in wanted:
                wanted.append(top)
            if root != top:
                prefixes.append(root)
        user = [(n, v) for n, v in items if n in wanted]
        history = [(n, v) for n, v in items if _HISTORY_RE.match(n) and n not in wanted]
    else:
        user, history = _root_items(items, excluded, include_hidden)
    walker = _Walker(options)
    _walk_paused(walker, items, roots is not None, user, history, all_objects)
    return _result(walker, [n for n, _ in user], prefixes, include_hidden, all_objects, max_depth)


def find_tensor(namespace: Mapping[str, Any], name: str, *, exclude: Iterable[str] = ()) -> Any:
    """The live tensor ``%devices`` lists as ``name`` (``model.fc.weight``, ``Out[3]``,
    ``sys.last_traceback:forward.h``, ``<unnamed 2>`` as ``--all`` numbers it); LookupError
    when no such name is listed now. Found by the same read-only walk as the scan."""
    options = ScanOptions(include_hidden=True, all_objects=name.startswith("<unnamed"))
    items = namespace_items(namespace)
    user, history = _root_items(items, set(exclude) | _PLUMBING, True)
    walker = _Walker(options)
    walker.wanted = name
    _walk_paused(walker, items, False, user, history, options.all_objects)
    found, walker.found = walker.found, None
    if found is None:
        raise LookupError(f"no tensor named {name!r} (a name as %devices lists it)")
    return found


def _walk_paused(walker: _Walker, items: list[tuple[str, Any]], restricted: bool, user: list[tuple[str, Any]],
                 history: list[tuple[str, Any]], all_objects: bool) -> None:
    """:func:`_walk` with the cyclic garbage collector paused.

    The walk allocates one record per tensor; letting the collector run meanwhile
    re-traverses the whole heap many times for nothing (it doubles the cost of a
    100,000-tensor walk). It is paused, never triggered, and restored.
    """
    # Out first, so history entries are named Out[12] rather than _12.
    history.sort(key=lambda item: (item[0] not in ("Out", "_oh"), item[0]))
    collector_was_on = gc.isenabled()
    gc.disable()
    try:
        _walk(walker, items, restricted, user, history, all_objects)
    finally:
        if collector_was_on:
            gc.enable()


def _root_items(items: list[tuple[str, Any]], excluded: set[str] | frozenset[str],
                include_hidden: bool) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(user names, IPython history names) of a namespace, without the excluded ones."""
    user, history = [], []
    for name, value in items:
        if name in excluded:
            continue
        if _HISTORY_RE.match(name):
            history.append((name, value))
        elif not name.startswith("_") or include_hidden:
            user.append((name, value))
    return user, history


def _walk_user_roots(walker: _Walker, user: list[tuple[str, Any]]) -> None:
    """Walk the user's names. Call with torch-function dispatch disabled."""

    # Modules first, so parameters get their natural names (model.fc.weight) even when a
    # list of them comes first; then tensors named directly (an optimizer's loose parameter
    # is `w`, not opt.param_groups[0]["params"][0]); optimizers next, so their state is
    # named opt.state[model.fc.weight][...] rather than after a checkpoint dict.
    def rank(item: tuple[str, Any]) -> int:
        vt = type(item[1])
        return 0 if issubclass(vt, _Module) else 1 if issubclass(vt, _Tensor) else 2 if issubclass(vt, _Optimizer) else 3

    for name, value in sorted(user, key=rank):
        walker.root(name, value)
        walker.flush_deferred()


def _walk(walker: _Walker, items: list[tuple[str, Any]], restricted: bool, user: list[tuple[str, Any]],
          history: list[tuple[str, Any]], all_objects: bool) -> None:
    # No torch function (subclass or mode) and no Python dispatch (the user's dispatch
    # modes, a wrapper subclass's __torch_dispatch__) sees any read the walk makes.
    with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
        if restricted:
            # Name parameters after the namespace's modules even when only an
            # optimizer is asked for: opt.state[model.fc.weight], not param_groups[0].
            for name, value in items:
                if not name.startswith("_") and issubclass(type(value), _Module):
                    walker.name_parameters(value, name)
        _walk_user_roots(walker, user)
        walker.hidden = True
        walker.first_hidden = len(walker.records)
        for name, value in history:
            walker.root(name, value)
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
    if prefixes:
        keep = Selection(names=tuple(prefixes)).keeps
        records = [r for r in records if keep(r)]
    return ScanResult(
        records=tuple(records),
        modules=tuple(walker.modules),
        loaders=tuple(walker.loaders),
        truncated=tuple(walker.truncated),
        history=history,
        roots=tuple(user_names),
        options={"include_hidden": include_hidden, "all_objects": all_objects, "max_depth": max_depth,
                 "swap_flag": bool(torch.__future__.get_swap_module_params_on_conversion()),
                 "has_traceback": type(sys.__dict__.get("last_traceback")) is types.TracebackType},
        optimizers=tuple(walker.optimizers),
        module_types=tuple(walker.module_types),
    )


def is_history_name(name: str) -> bool:
    """Whether ``name`` is one of IPython's output-history names (``_``, ``_12``, ``Out``)."""
    return bool(_HISTORY_RE.match(name))


# -- tensor facts ------------------------------------------------------------------------


def tensor_facts(t: Any) -> tuple:
    """(device, dtype, shape, nbytes, storage_bytes, storage_key, layout, note) of a tensor.

    Reads metadata only, through TensorBase's C getters (call with torch-function
    dispatch disabled). ``storage_key`` identifies the memory (views, ``.detach()``
    and ``.data`` share it); ``None`` where there is no real memory to identify.
    """
    cls = type(t)
    if (cls is _Tensor or cls is _Parameter) and t.layout is _strided and not t.is_nested:
        if t.is_meta:
            return ("meta", _dtype_name(t.dtype), tuple(t.shape), t.nbytes, 0, None, "strided", "meta: holds no memory")
        storage = t.untyped_storage()
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
        device = _device_name(tb.device(t))
        return (device, _dtype_name(tb.dtype(t)), None, None, None, None, "strided", "lazy: not initialised yet, size unknown")
    d = instance_dict(t)
    device = _device_name(tb.device(t))
    dtype = _dtype_name(tb.dtype(t))
    if "fake_mode" in d and type_name(cls) == "FakeTensor":
        device = _device_name(d.get("_fake_device") or tb.device(t))
        return (device, dtype, _shape(t), None, 0, None, "strided", "fake tensor: holds no memory")
    layout = tb.layout(t)
    if static_class_attr(cls, "__tensor_flatten__") is not None:
        # A wrapper subclass (DTensor, nested jagged, devinspect's simulated device):
        # its memory is in the inner tensors it keeps as attributes, read statically.
        parts = inner_tensors(t)
        sizes = [tensor_facts(p) for p in parts]
        storage = sum(s[4] for s in sizes if s[4] is not None) if sizes else None
        logical = sum(s[3] for s in sizes if s[3] is not None) if sizes else None
        key = sizes[0][5] if sizes else None
        return (device, dtype, _shape(t), logical, storage, key, _layout_name(layout), None)
    if tb.is_meta(t):
        return ("meta", dtype, _shape(t), None, 0, None, _layout_name(layout), "meta: holds no memory")
    if layout is not _strided:
        # Reading the parts of a sparse tensor dispatches ops: the user's dispatch modes must not see them.
        with torch._C._DisableTorchDispatch():
            if layout is torch.sparse_coo:
                parts = [t._indices(), t._values()]
            elif layout in (torch.sparse_csr, torch.sparse_bsr):
                parts = [t.crow_indices(), t.col_indices(), t.values()]
            elif layout in (torch.sparse_csc, torch.sparse_bsc):
                parts = [t.ccol_indices(), t.row_indices(), t.values()]
            else:
                parts = None
        if parts is not None:
            storages = [tb.storage(p) for p in parts]
            return (
                device,
                dtype,
                _shape(t),
                sum(tb.nbytes(p) for p in parts),
                sum(s.nbytes() for s in storages),
                storages[-1]._cdata,
                _layout_name(layout),
                _layout_name(layout),
            )
    if tb.is_nested(t):
        storage = tb.storage(t)
        return (device, dtype, _shape(t), storage.nbytes(), storage.nbytes(), storage._cdata, "strided", "nested tensor")
    storage = tb.storage(t)
    note = "quantized" if tb.is_quantized(t) else None
    return (device, dtype, _shape(t), tb.nbytes(t), storage.nbytes(), storage._cdata, _layout_name(layout), note)


def inner_tensors(t: Any) -> list:
    """The tensors a wrapper subclass keeps in its instance dict or slots (read, not flattened)."""
    inner = [v for v in dict.values(instance_dict(t)) if issubclass(type(v), _Tensor) and v is not t]
    inner.extend(v for _, v in slot_values(t) if issubclass(type(v), _Tensor) and v is not t)
    return inner


def _shape(t: Any) -> tuple | None:
    try:
        return tuple(int(s) if type(s) is int else str(s) for s in tb.shape(t))
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


# -- names ----------------------------------------------------------------------------------


def _key_text(key: Any) -> str | None:
    """How a dict key is typed in Python, for keys of exact built-in types with a literal form."""
    from .fixes import literal

    kt = type(key)
    if kt is str:
        return literal(key)
    if kt is int or kt is bool or key is None:
        return int.__repr__(key) if kt is int else repr(key)
    if kt is float:
        text = float.__repr__(key)
        return text if text not in ("nan", "inf", "-inf") else None
    if kt is tuple and len(key) < 6:
        inner = [_key_text(k) for k in tuple.__iter__(key)]
        if None not in inner:
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"  # type: ignore[arg-type]
    return None


def _attr_name(parent: str, attr: str) -> str:
    from .fixes import literal

    if attr.isidentifier() and not keyword.iskeyword(attr):
        return f"{parent}.{attr}"
    return f"getattr({parent}, {literal(attr)})"


def _child_name(parent: str, child: str, parent_type: type) -> str:
    """``model.layers[0]``, ``model.blocks["a-b"]``, ``model.fc`` for a module child."""
    from .fixes import literal

    if child.isdigit() and (issubclass(parent_type, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ParameterList))):
        return f"{parent}[{child}]"
    if issubclass(parent_type, (torch.nn.ModuleDict, torch.nn.ParameterDict)) and not (
            child.isidentifier() and not keyword.iskeyword(child)):
        return f"{parent}[{literal(child)}]"
    if child.isdigit():
        return f"{parent}[{child}]" if issubclass(parent_type, torch.nn.Sequential) else f"getattr({parent}, {literal(child)})"
    return _attr_name(parent, child)


def _describe_error(exc: BaseException) -> str:
    try:
        text = BaseException.__str__(exc)  # never a user exception class's own __str__
    except Exception:
        text = ""
    text = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type_name(type(exc))}: {text}"[:200] if text else type_name(type(exc))


# -- where a module's attribute is assigned in its own source ---------------------------------


def attribute_assignment(cls: type, attr: str) -> tuple[type, Any] | None:
    """(class, SourceLine) of the line in the user's class that assigns ``self.<attr>``.

    Reads only source text (linecache) and code objects; prefers ``__init__``.
    """
    found = None
    for klass in mro(cls):
        if klass is _Module or klass is object:
            break
        for name, value in dict.items(_plain_class_dict(klass)):
            if type(value) is not types.FunctionType:
                continue
            code = _FUNCTION_CODE(value)
            if not locations.is_user_code(code):
                continue
            line = _assignment_line(code, attr)
            if line is not None and (found is None or name == "__init__"):
                found = (klass, line)
                if name == "__init__":
                    return found
    return found


def class_source_lines(cls: type, attr: str) -> tuple[Any, Any]:
    """(the class-body line defining ``attr``, the ``super().__init__()`` line of ``__init__``)
    in the user's own source of ``cls``, each a SourceLine or None. Reads source text only."""
    for klass in mro(cls):
        if klass is _Module or klass is object:
            break
        functions = [v for v in dict.values(_plain_class_dict(klass)) if type(v) is types.FunctionType]
        codes = [_FUNCTION_CODE(f) for f in functions]
        codes = [c for c in codes if locations.is_user_code(c)]
        if not codes:
            continue
        filename = codes[0].co_filename
        lines = linecache.getlines(filename)
        try:
            tree = ast.parse("".join(lines))
        except (SyntaxError, ValueError):
            continue
        first = min(c.co_firstlineno for c in codes if c.co_filename == filename)
        node = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == type_name(klass)
                     and n.lineno <= first <= (n.end_lineno or first)), None)
        if node is None:
            continue
        default = None
        for statement in node.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target] if isinstance(
                statement, ast.AnnAssign) and statement.value is not None else []
            if any(isinstance(t, ast.Name) and t.id == attr for t in targets) and statement.lineno == statement.end_lineno:
                default = locations.source_line(filename, statement.lineno, type_name(klass))
        init = None
        init_def = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        for statement in init_def.body if init_def is not None else ():
            call = statement.value if isinstance(statement, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__"
                    and statement.lineno == statement.end_lineno):
                init = locations.source_line(filename, statement.lineno, "__init__")
                break
        return default, init
    return None, None


def _assignment_line(code: types.CodeType, attr: str) -> Any:
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return None
    start = code.co_firstlineno - 1
    block = inspect.getblock(lines[start:])
    try:
        tree = ast.parse(textwrap.dedent("".join(block)))
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if (isinstance(target, ast.Attribute) and target.attr == attr and isinstance(target.value, ast.Name)
                    and target.value.id == "self"):
                return locations.source_line(code.co_filename, start + node.lineno, code.co_name)
    return None


# -- the walker ----------------------------------------------------------------------------


class _Walker:
    """One walk's state. Holds user objects only by ``id()`` while it runs."""

    def __init__(self, options: ScanOptions):
        self.options = options
        self.records: list[TensorRecord] = []
        self.modules: list[ModuleSummary] = []
        self.loaders: list[LoaderSummary] = []
        self.optimizers: list[OptimizerSummary] = []
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
        self._held: list[str] = []
        self.module_types: list[tuple[str, str]] = []
        #: find_tensor's name: the one object this walk keeps a reference to, when it is met.
        self.wanted: str | None = None
        self.found: Any = None

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
            d = instance_dict(module)
            for pname, p in _str_items(d.get("_parameters")):
                if p is not None:
                    self._param_names.setdefault(id(p), _child_name(path, pname, type(module)))
            for cname, child in _str_items(d.get("_modules")):
                if child is not None:
                    stack.append((child, _child_name(path, cname, type(module))))

    def traceback(self) -> None:
        """Measure the locals of the user's and libraries' frames in ``sys.last_traceback``.

        Frames of devinspect, IPython and the standard library are skipped: they hold
        the tools' own objects (argument parsers, the check itself), not the user's.
        """
        tb = sys.__dict__.get("last_traceback")
        seen_frames = 0
        while type(tb) is types.TracebackType and seen_frames < 64:
            frame = tb.tb_frame
            seen_frames += 1
            if frame.f_locals is not frame.f_globals and not locations.is_tool_file(frame.f_code.co_filename):
                label = f"sys.last_traceback:{frame.f_code.co_name}"
                for key, value in list(dict.items(frame.f_locals)) if type(frame.f_locals) is dict else ():
                    if type(key) is str and key != "__tracebackhide__":
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
        if id(vt) in _ATOM_IDS:
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
        if issubclass(vt, _PROXY_TYPES):
            if "to NoneType at" in _PROXY_REPR(value):
                self._error_record(value, name, root, ReferenceError("a dead weakref.proxy (its object is gone)"))
            return
        if depth >= self.options.max_depth:
            if self._may_hold_tensors(vt):
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
                storage_bytes=None, storage_id=None, type_name=type_name(type(value)),
                note=f"could not inspect: {_describe_error(exc)}", hidden=self.hidden,
            )
        )

    @staticmethod
    def _may_hold_tensors(vt: type) -> bool:
        return not issubclass(vt, _OPAQUE) and id(vt) not in _ATOM_IDS

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
        if name == self.wanted:
            self.found = t
        if facts is None:
            facts = tensor_facts(t)
        device, dtype, shape, nbytes, storage_bytes, key, layout, facts_note = facts
        alias = self._tensor_first.get(tid)
        same_object = alias is not None
        cls = type(t)
        # A Parameter of a tensor subclass keeps its class and is marked by _is_param.
        if kind == "tensor" and cls is not _Tensor and (cls is _Parameter or "_is_param" in instance_dict(t)):
            kind = "parameter"
        if alias is None and key is not None:
            alias = self._storage_first.get(key)
        if alias is None:
            self._tensor_first[tid] = name
            if key is not None:
                self._storage_first[key] = name
        elif tid not in self._tensor_first:
            self._tensor_first[tid] = alias
        requires_grad = tb.requires_grad(t)
        is_leaf = tb.is_leaf(t) if requires_grad else True
        self.records.append(
            make_record(
                name, root, kind, device, dtype, shape, nbytes, storage_bytes, key, alias, requires_grad,
                type_name(cls), layout, owner, param, note or facts_note, self.hidden, is_leaf,
            )
        )
        # Reading .grad of a non-leaf warns; only leaves (or retain_grad()) have one.
        if requires_grad and kind != "gradient" and not same_object and (is_leaf or tb.retains_grad(t)):
            grad = tb.grad(t)
            if grad is not None:
                self._tensor(grad, f"{name}.grad", root, "gradient", owner, param=name)

    # -- modules -------------------------------------------------------------

    def _module_root(self, m: Any, name: str, root: str) -> None:
        start = len(self.records)
        unregistered: list[Unregistered] = []
        outer_held, self._held = self._held, []  # a module kept in another's plain attribute nests
        try:
            self._module(m, name, root, unregistered, set())
            if not self.hidden:  # modules seen only through history or a traceback make no findings
                self.modules.append(self._summarise(m, name, self.records[start:], unregistered))
        finally:
            self._held = outer_held

    def _module(self, m: Any, name: str, root: str, unregistered: list[Unregistered], seen: set[int]) -> None:
        seen.add(id(m))
        self._visited.add(id(m))
        d = instance_dict(m)
        mt = type(m)
        if not self.hidden:
            self.module_types.append((name, type_name(mt)))
        params = d.get("_parameters")
        if params is not None and not issubclass(type(params), dict):
            # TorchScript modules keep parameters in C++ behind wrappers devinspect does not open.
            self.truncated.append(Truncation(name, f"a {type_name(mt)}: its parameters live in C++ and are not inspected"))
            return
        for pname, p in _str_items(params):
            if p is not None:
                pfull = _child_name(name, pname, mt)
                self._param_names.setdefault(id(p), pfull)
                self._guarded(self._tensor_visit, p, pfull, root, "parameter", name)
                if issubclass(type(p), _Tensor) and tb.use_count(p) > 2:
                    self._held.append(pfull)
        non_persistent = d.get("_non_persistent_buffers_set") or ()
        for bname, b in _str_items(d.get("_buffers")):
            if b is not None:
                note = "non-persistent" if type(non_persistent) is set and bname in non_persistent else None
                self._guarded(self._tensor_visit, b, _child_name(name, bname, mt), root, "buffer", name, note)
        recomputed = _recomputed_attributes(d)
        for attr, value in d.items():
            if attr in _MODULE_INTERNALS:
                continue
            vt = type(value)
            if id(vt) in _ATOM_IDS:
                continue
            full = _attr_name(name, attr)
            if attr in recomputed:
                if issubclass(vt, _Tensor):
                    self._guarded(self._tensor_visit, value, full, root, "attribute", name,
                                  f"recomputed before each forward by {recomputed[attr]}")
                continue
            if issubclass(vt, _Tensor) or issubclass(vt, (list, tuple, dict, set)):
                before = len(self.records)
                self._visit(value, full, root, 1, name)
                if any(r.kind == "attribute" and r.owner == name for r in self.records[before:]):
                    unregistered.append(self._unregistered(mt, full, name, attr))
            elif not issubclass(vt, _OPAQUE):
                self._visit(value, full, root, 1, None)
        for cname, child in _str_items(d.get("_modules")):
            if child is None or id(child) in seen:
                continue
            self._guarded(self._module, child, _child_name(name, cname, mt), root, unregistered, seen)

    def _tensor_visit(self, t: Any, name: str, root: str, kind: str, owner: str | None, note: str | None = None) -> None:
        if issubclass(type(t), _Tensor):
            self._tensor(t, name, root, kind, owner, note=note)

    def _unregistered(self, mt: type, full: str, owner: str, attr: str) -> Unregistered:
        class_default = any(attr in _plain_class_dict(k) for k in mro(mt) if k is not _Module and k is not object)
        where = None
        try:
            found = attribute_assignment(mt, attr)
        except Exception:  # noqa: BLE001 - a source we cannot read just has no edit
            found = None
        if found is not None:
            mt, where = found
        default_at = init_at = None
        if class_default:
            try:
                default_at, init_at = class_source_lines(mt, attr)
            except Exception:  # noqa: BLE001
                pass
        return Unregistered(full, owner, attr, type_name(mt), class_default, where, default_at, init_at)

    def _summarise(self, m: Any, name: str, records: list[TensorRecord], unregistered: list[Unregistered]) -> ModuleSummary:
        placed = [r for r in records if r.kind in ("parameter", "buffer")]
        by_device: dict[str, int] = {}
        owner_devices: dict[str, set[str]] = {}
        unmaterialised = 0
        for r in placed:
            if r.device == "meta" or (r.note or "").startswith("lazy"):
                unmaterialised += 1
            by_device[r.device] = by_device.get(r.device, 0) + (r.storage_bytes or r.nbytes or 0)
            owner_devices.setdefault(r.owner or name, set()).add(r.device)
        devices = tuple(sorted(by_device, key=lambda d: (-by_device[d], d)))
        placement: tuple[tuple[str, str], ...] = ()
        if len(devices) > 1:
            placement = tuple(_placement(name, owner_devices))
        return ModuleSummary(
            name=name,
            type_name=type_name(type(m)),
            parameters=sum(1 for r in records if r.kind == "parameter"),
            parameter_bytes=sum(r.counted_bytes for r in records if r.kind == "parameter"),
            buffers=sum(1 for r in records if r.kind == "buffer"),
            buffer_bytes=sum(r.counted_bytes for r in records if r.kind == "buffer"),
            gradient_bytes=sum(r.counted_bytes for r in records if r.kind == "gradient"),
            devices=devices,
            placement=placement,
            unregistered=tuple(unregistered),
            unmaterialised=unmaterialised,
            deliberate_split=issubclass(type(instance_dict(m).get("hf_device_map")), dict),
            held_parameters=tuple(self._held),
            library=_library_of(type(m)),
        )

    # -- optimizers, loaders, containers, objects -----------------------------

    def _optimizer(self, opt: Any, name: str, root: str) -> None:
        d = instance_dict(opt)
        groups = d.get("param_groups")
        groups = list(list.__iter__(groups)) if issubclass(type(groups), list) else []
        parameters = orphans = 0
        orphan_shapes = []
        for gi, group in enumerate(groups):
            params = dict(_str_items(group)).get("params") if issubclass(type(group), dict) else None
            for pi, p in enumerate(list.__iter__(params) if issubclass(type(params), list) else ()):
                if not issubclass(type(p), _Tensor):
                    continue
                parameters += 1
                if id(p) in self._param_names or id(p) in self._tensor_first:
                    continue
                pname = f'{name}.param_groups[{gi}]["params"][{pi}]'
                self._param_names[id(p)] = pname
                if not self.hidden:
                    orphans += 1
                    orphan_shapes.append(_shape(p) or ())
                self._tensor(p, pname, root, "parameter")
        state = d.get("state")
        if issubclass(type(state), dict):
            for p, entry in dict.items(state):
                pname = self._param_names.get(id(p)) or self._tensor_first.get(id(p)) or "<parameter>"
                if not issubclass(type(entry), dict):
                    continue
                for key, value in dict.items(entry):
                    key_text = _key_text(key) or "<key>"
                    sname = f"{name}.state[{pname}][{key_text}]"
                    if issubclass(type(value), _Tensor):
                        self._guarded(self._tensor, value, sname, root, "optimizer_state", None, pname)
                    else:
                        self._visit(value, sname, root, 2, None)
        if not self.hidden:
            self.optimizers.append(_optimizer_summary(opt, name, d, len(groups), parameters, orphans, orphan_shapes))

    def _object(self, o: Any, name: str, root: str, vt: type, depth: int, owner: str | None) -> None:
        if vt is list or vt is tuple or vt is dict or issubclass(vt, (list, tuple, dict, set, frozenset, collections.deque)):
            self._container(o, vt, name, root, depth, owner)
            return
        if issubclass(vt, _OPAQUE) or _is_opaque_package(vt):
            return
        module = type_module(vt).split(".", 1)[0]
        if module in ("numpy", "pandas"):
            self._foreign_container(o, vt, name, module)
            return
        if issubclass(vt, torch.utils.data.DataLoader):
            d = instance_dict(o)
            batch_size = d.get("batch_size")
            self.loaders.append(LoaderSummary(name, d.get("pin_memory", False) is True,
                                              int.__index__(d["num_workers"]) if type(d.get("num_workers")) is int else 0,
                                              batch_size if type(batch_size) is int else None))
            if "dataset" in d:
                self._visit(d["dataset"], f"{name}.dataset", root, depth + 1, owner)
            return
        odd = _odd_instance_dict(o)
        if odd is not None:
            self.truncated.append(Truncation(name, f"{odd}: not inspected"))
        for attr, value in dict.items(instance_dict(o)):
            if id(type(value)) not in _ATOM_IDS:
                self._visit(value, _attr_name(name, attr), root, depth + 1, owner)
        for attr, value in slot_values(o):
            if id(type(value)) not in _ATOM_IDS:
                self._visit(value, _attr_name(name, attr), root, depth + 1, owner)

    def _foreign_container(self, o: Any, vt: type, name: str, module: str) -> None:
        """numpy and pandas objects hold no tensors unless their cells are Python objects:
        those are reported as not inspected (their elements are not walked)."""
        tname = type_name(vt)
        try:
            if module == "numpy" and tname == "ndarray":
                if o.dtype.kind == "O":
                    self.truncated.append(Truncation(name, "a numpy array of Python objects: its elements are not inspected"))
            elif module == "pandas" and tname == "DataFrame":
                if any(dt.kind == "O" for dt in o.dtypes):
                    self.truncated.append(Truncation(name, "a pandas DataFrame with object columns: its cells are not inspected"))
            elif module == "pandas" and tname == "Series":
                if o.dtype.kind == "O":
                    self.truncated.append(Truncation(name, "a pandas Series of objects: its cells are not inspected"))
        except Exception:  # noqa: BLE001 - a subclass we cannot read is reported as such
            self.truncated.append(Truncation(name, f"a {tname}: not inspected"))

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
                if id(type(value)) in _ATOM_IDS:
                    continue
                child = f"{name}[{key_text}]" if key_text is not None else f"list({name}.values())[{i}]"
                self._visit(value, child, root, depth + 1, owner)
        else:
            if issubclass(vt, (list, tuple)):
                total = list.__len__(o) if issubclass(vt, list) else tuple.__len__(o)
                iterator = list.__iter__(o) if issubclass(vt, list) else tuple.__iter__(o)
                fields = static_class_attr(vt, "_fields") if issubclass(vt, tuple) and vt is not tuple else None
                if not (type(fields) is tuple and tuple.__len__(fields) == total
                        and all(type(f) is str for f in tuple.__iter__(fields))):
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
            atoms, tensor_type, record = _ATOM_IDS, _Tensor, self._tensor
            # The hot loop of a large namespace: tensors are recorded inline, each in
            # its own try so one bad item becomes an error record and the rest go on.
            for i, value in enumerate(iterator):
                if i >= limit:
                    break
                vtype = type(value)
                if id(vtype) in atoms:
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


def _library_of(cls: type) -> str:
    """The top-level package of a class that comes from a library, or ``""`` for user code."""
    module = type_module(cls)
    top = module.split(".", 1)[0]
    if not top or top == "__main__":
        return ""
    imported = sys.modules.get(top)
    if not issubclass(type(imported), types.ModuleType):
        return ""
    # The module's own dict, read through ModuleType's descriptor (a lazy module's __getattr__ is not asked).
    path = _MODULE_DICT(imported).get("__file__")
    return top if type(path) is str and locations.is_library_file(path) else ""


def _str_items(d: Any) -> list[tuple[str, Any]]:
    """Items of a dict (read with C methods) whose keys are strings, as exact ``str``."""
    if d is None or not issubclass(type(d), dict):
        return []
    out = []
    for key, value in dict.items(d):
        text = plain_str(key)
        if text is not None:
            out.append((text, value))
    return out


def _recomputed_attributes(d: dict[str, Any]) -> dict[str, str]:
    """Tensor attributes a forward pre-hook recomputes (weight_norm, spectral_norm, pruning):
    ``{attribute: what recomputes it}``. They are not unregistered buffers."""
    out: dict[str, str] = {}
    for _hid, hook in _str_or_any_items(d.get("_forward_pre_hooks")):
        hook_dict = instance_dict(hook)
        for key in _RECOMPUTED_NAME_ATTRS:
            attr = hook_dict.get(key)
            if type(attr) is str:
                out[attr] = type_name(type(hook))
    return out


def _str_or_any_items(d: Any) -> list[tuple[Any, Any]]:
    if d is None or not issubclass(type(d), dict):
        return []
    return list(dict.items(d))


def _optimizer_summary(opt: Any, name: str, d: dict[str, Any], groups: int, parameters: int, orphans: int,
                       orphan_shapes: list) -> OptimizerSummary:
    cls = type(opt)
    tname = type_name(cls)
    class_path = f"torch.optim.{tname}" if getattr(torch.optim, tname, None) is cls else None
    return OptimizerSummary(
        name=name, type_name=tname, class_path=class_path, parameters=parameters, groups=groups, orphans=orphans,
        orphan_shapes=tuple(tuple(s) for s in orphan_shapes),
        rebuild_kwargs=_rebuild_kwargs(cls, d.get("defaults")) if class_path else None,
    )


def _rebuild_kwargs(cls: type, defaults: Any) -> tuple[tuple[str, str], ...] | None:
    """Constructor arguments (as literals) whose values differ from a torch optimizer's defaults.

    None when one cannot be written as a literal (a tensor learning rate, say).
    """
    if not issubclass(type(defaults), dict):
        return None
    try:
        signature = inspect.signature(cls.__init__)  # torch's own class: reading it runs no user code
    except (TypeError, ValueError):
        return None
    out = []
    values = dict(_str_items(defaults))
    for pname, parameter in signature.parameters.items():
        if pname in ("self", "params") or pname not in values:
            continue
        value = values[pname]
        if parameter.default is not inspect.Parameter.empty and _same_literal(value, parameter.default):
            continue
        text = _literal_value(value)
        if text is None:
            return None
        out.append((pname, text))
    return tuple(out)


def _same_literal(a: Any, b: Any) -> bool:
    return type(a) is type(b) and _literal_value(a) == _literal_value(b) and _literal_value(a) is not None


def _literal_value(value: Any) -> str | None:
    vt = type(value)
    if value is None or vt is bool:
        return repr(value)
    if vt is int:
        return int.__repr__(value)
    if vt is float:
        text = float.__repr__(value)
        return text if text not in ("nan", "inf", "-inf") else None
    if vt is str:
        from .fixes import literal

        return literal(value)
    if vt is tuple:
        inner = [_literal_value(v) for v in tuple.__iter__(value)]
        if None in inner:
            return None
        return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"  # type: ignore[arg-type]
    return None


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


# -- lookups used by the %%devcheck diagnosis ------------------------------------------------

_KIND_SOURCE = {"parameter": "parameter", "buffer": "buffer", "attribute": "attribute", "gradient": "gradient",
                "optimizer_state": "optimizer_state", "tensor": "namespace"}


class NameIndex:
    """The user's names for live tensors, and the scan they come from (for explaining errors).

    Built from the user's own names only: neither output history nor an earlier
    error's traceback may name an operand. Valid while the tensors asked about are
    alive (it maps object ids, which is why it is used at once and dropped).
    """

    def __init__(self, namespace: Mapping[str, Any]):
        walker = _Walker(ScanOptions())
        user, _history = _root_items(namespace_items(namespace), _PLUMBING, include_hidden=False)
        collector_was_on = gc.isenabled()
        gc.disable()
        try:
            with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
                _walk_user_roots(walker, user)
        finally:
            if collector_was_on:
                gc.enable()
        self.result = _result(walker, [n for n, _ in user], [], False, False, ScanOptions.max_depth)
        self._by_name = {r.name: r for r in walker.records}
        self._tensor_first = walker._tensor_first
        self._storage_first = walker._storage_first

    def lookup(self, t: Any) -> tuple[TensorRecord, bool] | None:
        """(the record of the name the user knows ``t`` by, whether ``t`` is only a view of it)."""
        name = self._tensor_first.get(id(t))
        is_view = False
        if name is None:
            try:
                with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
                    key = tensor_facts(t)[5]
            except Exception:
                key = None
            name = self._storage_first.get(key) if key is not None else None
            is_view = name is not None
        record = self._by_name.get(name) if name is not None else None
        return (record, is_view) if record is not None else None

    @staticmethod
    def source(record: TensorRecord) -> str:
        if record.kind == "parameter" and record.owner is None:
            return "namespace"  # a loose Parameter, held by a variable (and maybe an optimizer)
        return _KIND_SOURCE.get(record.kind, "namespace")


def tensor_names(namespace: Mapping[str, Any], tensors: list) -> list[tuple[str, str, bool] | None]:
    """``(name, source, is_view)`` for each tensor as the namespace reaches it, or None."""
    index = NameIndex(namespace)
    out: list[tuple[str, str, bool] | None] = []
    for t in tensors:
        found = index.lookup(t)
        out.append(None if found is None else (found[0].name, index.source(found[0]), found[1]))
    return out


def module_paths(namespace: Mapping[str, Any]) -> dict[int, str]:
    """``id(module) -> path`` (``model.encoder.layers[0]``) for modules the namespace reaches by name."""
    paths: dict[int, str] = {}
    for name, value in namespace_items(namespace):
        if name.startswith("_") or not issubclass(type(value), _Module):
            continue
        stack = [(value, name)]
        while stack:
            module, path = stack.pop()
            if id(module) in paths:
                continue
            paths[id(module)] = path
            for cname, child in _str_items(instance_dict(module).get("_modules")):
                if child is not None:
                    stack.append((child, _child_name(path, cname, type(module))))
    return paths
