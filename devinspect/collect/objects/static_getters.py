"""Reading types and objects without running their code.

* Types are read with ``type(o)`` and classes through ``type``'s own descriptors
  (``__mro__``, ``__dict__``, ``__name__``, ``__module__``), never ``isinstance``
  (which reads ``o.__class__``, a property can lie) nor attribute access on a class
  (a metaclass ``__getattribute__`` would run). Type membership uses ``id()`` of
  types, so a metaclass ``__hash__``/``__eq__`` is never called.
* Containers are read through the C-level ``dict``/``list``/``tuple``/``set``
  methods; instance attributes through the C ``__dict__`` descriptor and slot member
  descriptors. Keys that are not exact ``str`` are never hashed, compared or asked
  for a method.
"""

from __future__ import annotations

import gc
import types
import weakref
from typing import Any, Mapping

import torch

from .container_snapshots import dict_items, mapping_items

# type's own descriptors: reading a class through them never runs a metaclass's code.
_TYPE_MRO = type.__dict__["__mro__"].__get__


_TYPE_DICT = type.__dict__["__dict__"].__get__


_TYPE_NAME = type.__dict__["__name__"].__get__


_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__


_TYPE_MODULE = type.__dict__["__module__"].__get__


FUNCTION_CODE = types.FunctionType.__dict__["__code__"].__get__


#: Each proxy type's own repr (it names the referent's type without calling into it).
_PROXY_REPRS = {weakref.ProxyType: weakref.ProxyType.__repr__,
                weakref.CallableProxyType: weakref.CallableProxyType.__repr__}


def proxy_referent(value: object) -> str | None:
    """The type name of what a ``weakref.proxy`` points to, or None once it is dead.

    A proxy forwards every attribute, ``isinstance`` and operator to its referent, so it is
    only ever read through its own type's repr (which names the referent's type from C).
    """
    text = _PROXY_REPRS[type(value)](value)
    referent = text.split(" to ", 1)[1].rsplit(" at ", 1)[0] if " to " in text else "NoneType"
    return None if referent == "NoneType" else referent


MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__


ATOM_TYPES = (int, float, complex, bool, str, bytes, bytearray, type(None), range, slice, type(Ellipsis),
               type(NotImplemented), memoryview)


ATOM_IDS = frozenset(id(t) for t in ATOM_TYPES)


OPAQUE: tuple[type, ...] = (
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
    # A traced graph and its nodes hold tensors' metadata (fake tensors, example values),
    # not memory; a GraphModule's parameters, buffers and constants are its attributes.
    torch.fx.Graph,
    torch.fx.Node,
    # Type hints (functools.wraps copies a function's __annotations__ into a wrapper's dict).
    types.GenericAlias,
    types.UnionType,
    # C-level descriptors, as a class's __dict__ holds them: they point back at their class.
    types.GetSetDescriptorType,
    types.MemberDescriptorType,
    types.WrapperDescriptorType,
    types.MethodDescriptorType,
    types.ClassMethodDescriptorType,
    types.MethodWrapperType,
)


PROXY_TYPES = (weakref.ProxyType, weakref.CallableProxyType)


#: Objects from these packages are plumbing, not user data: walking them costs time
#: and never finds a tensor the user made. devinspect's own results (kept in Out) too.
_OPAQUE_PACKAGES = ("IPython.", "ipykernel.", "traitlets.", "zmq.", "tornado.", "jupyter_client.", "asyncio.",
                    "logging.", "devinspect.", "ipywidgets.", "comm.", "typing")


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
        for key, value in dict.items(plain_class_dict(klass)):
            if key == name:
                return value
    return None


def plain_class_dict(klass: type) -> dict[str, Any]:
    """A class's own dict with only exact-``str`` keys: a fresh copy each time, so nothing here
    keeps a class (or what its attributes reach) alive after the user drops it. A class's
    ``__dict__`` is a mappingproxy over an exact dict: its ``items`` run no user code."""
    return {k: v for k, v in mapping_items(_TYPE_DICT(klass)) if type(k) is str}


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
    for key, value in dict_items(d):
        if type(key) is str:
            out[key] = value
        elif issubclass(type(key), str):
            out[str.__str__(key)] = value
    return out


def made_instance_dict(o: Any) -> dict[str, Any]:
    """:func:`instance_dict` of a tensor or a dict subclass, ``{}`` where it has not made its
    ``__dict__`` yet: their ``__dict__`` is made on first read, and a reader leaves objects as
    they were. (The garbage collector's view shows the dict once it exists; a key is never a dict.)"""
    if not any(type(r) is dict for r in gc.get_referents(o)[:1 if issubclass(type(o), dict) else None]):
        return {}
    return instance_dict(o)


#: The ``__dict__`` descriptors of torch's base classes, read once: most objects a walk meets
#: are modules and optimizers, whose base's large class dict would otherwise be copied for each.
_TORCH_DICT_DESCRIPTORS = {id(base): base.__dict__["__dict__"] for base in (torch.nn.Module, torch.optim.Optimizer)}

#: ``types.SimpleNamespace`` (and ``argparse``-style namespaces built on it) keeps its dict in a
#: C slot, read by this member descriptor: C code, like the getset descriptor of other classes.
_NAMESPACE_DICT = types.SimpleNamespace.__dict__["__dict__"]


def _dict_descriptor(klass: type) -> Any:
    """The ``__dict__`` entry of ``klass``'s own dict, or None."""
    known = _TORCH_DICT_DESCRIPTORS.get(id(klass))
    return known if known is not None else plain_class_dict(klass).get("__dict__")


def raw_instance_dict(o: Any) -> dict | None:
    """The object's own ``__dict__`` (exactly a dict), or None when it has none or it is not a dict."""
    for klass in mro(type(o)):
        descriptor = _dict_descriptor(klass)
        if descriptor is not None:
            if type(descriptor) is types.GetSetDescriptorType or descriptor is _NAMESPACE_DICT:
                try:
                    d = descriptor.__get__(o, type(o))
                except Exception:
                    return None
                return d if type(d) is dict else None
            return None
    return None


def odd_instance_dict(o: Any) -> str | None:
    """Why ``o``'s ``__dict__`` is not inspected (a dict subclass, a non-dict), or None."""
    for klass in mro(type(o)):
        descriptor = _dict_descriptor(klass)
        if descriptor is not None:
            if type(descriptor) is not types.GetSetDescriptorType and descriptor is not _NAMESPACE_DICT:
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
        for attr, descriptor in dict.items(plain_class_dict(klass)):
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


def is_opaque_package(vt: type) -> bool:
    return type_module(vt).startswith(_OPAQUE_PACKAGES)


def str_items(d: Any) -> list[tuple[str, Any]]:
    """Items of a dict (read with C methods) whose keys are strings, as exact ``str``."""
    if d is None or not issubclass(type(d), dict):
        return []
    out = []
    for key, value in dict_items(d):
        text = plain_str(key)
        if text is not None:
            out.append((text, value))
    return out


def any_items(d: Any) -> list[tuple[Any, Any]]:
    if d is None or not issubclass(type(d), dict):
        return []
    return dict_items(d)


def type_is_one_of(value: object, classes: tuple[type, ...]) -> bool:
    """``type(value) in classes`` by identity: ``in`` compares with ``==``, which runs the
    ``__eq__`` of a user's metaclass."""
    t = type(value)
    return any(t is c for c in classes)
