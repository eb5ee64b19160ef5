"""A library of hostile objects, each of which records any of its own code that runs.

Every kind is a function ``make(trip) -> object``: the object it returns calls
``trip(kind, what)`` from every method, property, descriptor, metaclass hook or module
body a reader could run by touching it carelessly (``isinstance``, ``len``, ``repr``,
attribute access, iteration, hashing). A reader that only reads statically never trips.
Making the object trips nothing. Used by the hostile-input tests and ``benchmarks/fuzz.py``.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import types
import weakref
from typing import Any, Callable

import torch

Trip = Callable[[str, str], None]


def _tripping_methods(kind: str, trip: Trip, names: tuple[str, ...]) -> dict[str, Any]:
    def method(name: str) -> Any:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            trip(kind, name)
            raise RuntimeError(f"{kind}: {name} ran")
        return run
    return {name: method(name) for name in names}


_DUNDERS = ("__len__", "__iter__", "__getitem__", "__contains__", "__eq__", "__hash__", "__bool__", "__repr__",
            "__str__", "__format__", "__reduce__", "__reduce_ex__", "__sizeof__", "__dir__")


def proxy_to_module(trip: Trip) -> Any:
    model = torch.nn.Linear(2, 2)
    proxy = weakref.proxy(model)
    return proxy, model  # the caller keeps the module alive (the proxy alone would die)


def proxy_to_tensor(trip: Trip) -> Any:
    t = torch.ones(3)
    return weakref.proxy(t), t


def proxy_dead(trip: Trip) -> Any:
    class Gone:
        pass
    target = Gone()
    proxy = weakref.proxy(target)
    del target
    return proxy, None


def proxy_dead_callable(trip: Trip) -> Any:
    def gone() -> None:
        pass
    proxy = weakref.proxy(gone)
    del gone
    return proxy, None


def lying_class(trip: Trip) -> Any:
    class Liar:
        @property
        def __class__(self):
            trip("lying_class", "__class__")
            return torch.Tensor
    return Liar(), None


def getattr_everything(trip: Trip) -> Any:
    class Anything:
        def __getattr__(self, name):
            trip("getattr_everything", name)
            return torch.zeros(1)
    return Anything(), None


def getattribute_trap(trip: Trip) -> Any:
    class Trap:
        def __init__(self):
            object.__setattr__(self, "t", torch.ones(2))

        def __getattribute__(self, name):
            trip("getattribute_trap", name)
            return object.__getattribute__(self, name)
    return Trap(), None


def _metaclass(trip: Trip, kind: str) -> type:
    class Meta(type):
        def __getattribute__(cls, name):
            if name not in ("__mro__", "__dict__", "__name__", "__qualname__", "__module__"):
                trip(kind, f"metaclass __getattribute__({name})")
            return type.__getattribute__(cls, name)

        def __eq__(cls, other):
            trip(kind, "metaclass __eq__")
            return type.__eq__(cls, other)

        def __hash__(cls):
            trip(kind, "metaclass __hash__")
            return type.__hash__(cls)

        def __instancecheck__(cls, obj):
            trip(kind, "metaclass __instancecheck__")
            return type.__instancecheck__(cls, obj)

        def __repr__(cls):
            trip(kind, "metaclass __repr__")
            return "Meta"
    return Meta


def metaclass_instance(trip: Trip) -> Any:
    meta = _metaclass(trip, "metaclass_instance")
    cls = meta("Odd", (), {"weight": torch.ones(2)})
    return cls(), None


def metaclass_class(trip: Trip) -> Any:
    meta = _metaclass(trip, "metaclass_class")
    return meta("OddClass", (), {"table": torch.ones(3)}), None


def lazy_module(trip: Trip) -> Any:
    class Loader(importlib.abc.Loader):
        def create_module(self, spec):
            return None

        def exec_module(self, module):
            trip("lazy_module", "module body")
            module.value = torch.ones(1)
    spec = importlib.util.spec_from_loader("devinspect_fuzz_lazy", importlib.util.LazyLoader(Loader()))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, None


def impostor_ndarray(trip: Trip) -> Any:
    class ndarray:  # claims to be numpy's
        @property
        def dtype(self):
            trip("impostor_ndarray", "dtype")
            return "float32"

        @property
        def shape(self):
            trip("impostor_ndarray", "shape")
            return (3,)
    ndarray.__module__ = "numpy"
    return ndarray(), None


def impostor_dataframe(trip: Trip) -> Any:
    class DataFrame:
        @property
        def dtypes(self):
            trip("impostor_dataframe", "dtypes")
            return {}

        def __len__(self):
            trip("impostor_dataframe", "__len__")
            return 0
    DataFrame.__module__ = "pandas.core.frame"
    return DataFrame(), None


def _container(base: type, kind: str, trip: Trip, items: Any) -> Any:
    cls = type(f"Tripping{base.__name__.title()}", (base,), _tripping_methods(kind, trip, _DUNDERS + (
        "keys", "items", "values", "__reversed__")))
    return cls(items)


def list_subclass(trip: Trip) -> Any:
    return _container(list, "list_subclass", trip, [torch.ones(2), torch.zeros(3)]), None


def tuple_subclass(trip: Trip) -> Any:
    return _container(tuple, "tuple_subclass", trip, (torch.ones(2),)), None


def dict_subclass(trip: Trip) -> Any:
    return _container(dict, "dict_subclass", trip, {"w": torch.ones(2)}), None


def set_subclass(trip: Trip) -> Any:
    return _container(frozenset, "set_subclass", trip, {1, 2}), None


def tripping_keys(trip: Trip) -> Any:
    class Key(str):
        def __hash__(self):
            trip("tripping_keys", "__hash__")
            return str.__hash__(self)

        def __eq__(self, other):
            trip("tripping_keys", "__eq__")
            return str.__eq__(self, other)
    return {Key("weight"): torch.ones(2)}, None


def descriptor_attribute(trip: Trip) -> Any:
    class Holder:
        @property
        def weight(self):
            trip("descriptor_attribute", "weight")
            return torch.ones(2)
    return Holder(), None


def slots_object(trip: Trip) -> Any:
    class Slotted:
        __slots__ = ("t", "other")

        def __getattr__(self, name):
            trip("slots_object", name)
            raise AttributeError(name)
    s = Slotted()
    s.t = torch.ones(2)
    return s, None


def cycle(trip: Trip) -> Any:
    a: list = [torch.ones(1)]
    b = {"a": a}
    a.append(b)
    a.append(a)
    return a, None


def deep(trip: Trip) -> Any:
    value: Any = torch.ones(1)
    for _ in range(3000):
        value = [value]
    return value, None


def huge(trip: Trip) -> Any:
    return list(range(200_000)) + [torch.ones(1)], None


def tensor_subclass_function(trip: Trip) -> Any:
    class Loud(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            trip("tensor_subclass_function", getattr(func, "__name__", "?"))
            return super().__torch_function__(func, types, args, kwargs or {})
    return torch.ones(3).as_subclass(Loud), None


def tensor_subclass_properties(trip: Trip) -> Any:
    class Lying(torch.Tensor):
        @property
        def shape(self):
            trip("tensor_subclass_properties", "shape")
            return torch.Size([1])

        @property
        def device(self):
            trip("tensor_subclass_properties", "device")
            return torch.device("cpu")
    return torch.ones(3).as_subclass(Lying), None


def _dispatching_wrapper(kind: str, trip: Trip, answer: bool) -> Any:
    """A wrapper subclass made as DTensor-like and quantisation wrappers are: its device, layout
    and sizes are asked of its ``__torch_dispatch__``, which records each call and then answers
    other values than it was constructed with (or raises)."""
    class Wrapper(torch.Tensor):
        @staticmethod
        def __new__(cls, elem):
            w = torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device,
                                                    dispatch_device=True, dispatch_layout=True,
                                                    dispatch_sizes_strides_policy="sizes")
            w.elem = elem
            return w

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            trip(kind, str(func))
            if not answer:
                raise RuntimeError(f"{kind}: {func} ran")
            if func is torch.ops.prim.device.default:
                return torch.device("meta")
            if func is torch.ops.prim.layout.default:
                return torch.strided
            if func is torch.ops.aten.sym_size.default:
                return (99,)
            if func is torch.ops.aten.dim.default:
                return 1
            if func in (torch.ops.aten.numel.default, torch.ops.aten.sym_numel.default):
                return 99
            raise NotImplementedError(str(func))
    return Wrapper(torch.ones(2, 3))


def dispatching_wrapper(trip: Trip) -> Any:
    return _dispatching_wrapper("dispatching_wrapper", trip, answer=True), None


def raising_wrapper(trip: Trip) -> Any:
    return _dispatching_wrapper("raising_wrapper", trip, answer=False), None


def sparse_tensor(trip: Trip) -> Any:
    return torch.eye(3).to_sparse(), None


def nested_tensor(trip: Trip) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), None


def meta_tensor(trip: Trip) -> Any:
    return torch.empty(4, 4, device="meta"), None


def quantized_tensor(trip: Trip) -> Any:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.qint8), None


def escaped_vmap_tensor(trip: Trip) -> Any:
    """A batched tensor kept past the ``vmap`` that made it: its type is plain ``torch.Tensor``,
    yet its storage cannot be read."""
    kept: list[Any] = []
    torch.vmap(lambda x: kept.append(x) or x)(torch.ones(3, 2))
    return kept[0], None


def escaped_grad_tensor(trip: Trip) -> Any:
    """A functorch wrapper kept past the ``torch.func.grad`` call that made it."""
    kept: list[Any] = []
    torch.func.grad(lambda x: kept.append(x) or (x * x).sum())(torch.ones(3))
    return kept[0], None


def scripted_module(trip: Trip) -> Any:
    """A TorchScript module: its tensors live in C++, behind wrappers of its own."""
    return torch.jit.script(torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())), None


def traced_module(trip: Trip) -> Any:
    """A traced module: its tensors sit in a scripted module it keeps, reached through ``__getattr__``."""
    return torch.jit.trace(torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.ones(1, 2)), None


def module_getattr(trip: Trip) -> Any:
    class Wrapper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = torch.nn.Linear(2, 2)

        def __getattr__(self, name):
            trip("module_getattr", name)
            return super().__getattr__(name)
    return Wrapper(), None


def replaced_dict(trip: Trip) -> Any:
    class NoDict:
        __dict__ = {"fake": torch.ones(1)}  # a class attribute named __dict__
    return NoDict(), None


def dict_subclass_dict(trip: Trip) -> Any:
    class Odd:
        pass
    o = Odd()
    object.__setattr__(o, "__dict__", _container(dict, "dict_subclass_dict", trip, {"t": torch.ones(1)}))
    return o, None


def paused_generator(trip: Trip) -> Any:
    def gen():
        t = torch.ones(2)
        trip("paused_generator", "resumed")
        yield t
    return gen(), None


def suspended_generator(trip: Trip) -> Any:
    """A generator paused at a ``yield`` with a tensor among its locals; resuming it records."""
    def gen():
        t = torch.ones(3)
        yield None
        trip("suspended_generator", "resumed")
        yield t
    g = gen()
    next(g)
    return g, None


def mapping_proxy(trip: Trip) -> Any:
    """A read-only view of a dict subclass whose methods record themselves: its tensor is read
    through the dict it shows, with none of them run."""
    return types.MappingProxyType(_container(dict, "mapping_proxy", trip, {"w": torch.ones(2)})), None


def mapping_proxy_of_mapping(trip: Trip) -> Any:
    """A read-only view of a Mapping that is not a dict: reading it would run the Mapping's code."""
    import collections.abc

    class Table(collections.abc.Mapping):
        def __getitem__(self, key):
            trip("mapping_proxy_of_mapping", "__getitem__")
            return torch.ones(1)

        def __iter__(self):
            trip("mapping_proxy_of_mapping", "__iter__")
            return iter(["w"])

        def __len__(self):
            trip("mapping_proxy_of_mapping", "__len__")
            return 1
    return types.MappingProxyType(Table()), None


def partial_object(trip: Trip) -> Any:
    def f(x, y):
        trip("partial_object", "called")
    return functools.partial(f, torch.ones(1)), None


def raising_everything(trip: Trip) -> Any:
    cls = type("Broken", (), _tripping_methods("raising_everything", trip, _DUNDERS + ("__getattr__",)))
    return cls(), None


def parameter_subclass(trip: Trip) -> Any:
    class OddParameter(torch.nn.Parameter):
        @property
        def grad(self):
            trip("parameter_subclass", "grad")
            return None
    m = torch.nn.Linear(2, 2)
    m.weight = OddParameter(torch.ones(2, 2))
    return m, None


def module_type_object(trip: Trip) -> Any:
    module = types.ModuleType("devinspect_fuzz_module")
    module.__getattr__ = lambda name: trip("module_type_object", name)  # PEP 562 module __getattr__
    module.t = torch.ones(2)
    return module, None


def callable_object(trip: Trip) -> Any:
    class Hook:
        def __call__(self, *args):
            trip("callable_object", "__call__")

        def __get__(self, obj, owner=None):
            trip("callable_object", "__get__")
            return self
    m = torch.nn.Linear(2, 2)
    m.register_forward_pre_hook(Hook())
    return m, None


def dtensor(trip: Trip) -> Any:
    """A DTensor on a one-rank CPU mesh (skipped where torch.distributed cannot start)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    if not dist.is_available():
        return None, None
    if not dist.is_initialized():
        import socket

        with socket.socket() as probe:  # a free port: other processes may run the same fuzz
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        try:
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
        except Exception:  # no process group here: the kind is left out
            return None, None
    mesh = init_device_mesh("cpu", (1,))
    return distribute_tensor(torch.ones(4, 4), mesh), None


#: Every kind, by name.
KINDS: dict[str, Callable[[Trip], tuple[Any, Any]]] = {
    f.__name__: f for f in (
        proxy_to_module, proxy_to_tensor, proxy_dead, proxy_dead_callable, lying_class, getattr_everything,
        getattribute_trap, metaclass_instance, metaclass_class, lazy_module, impostor_ndarray, impostor_dataframe,
        list_subclass, tuple_subclass, dict_subclass, set_subclass, tripping_keys, descriptor_attribute,
        slots_object, cycle, deep, huge, tensor_subclass_function, tensor_subclass_properties, sparse_tensor,
        nested_tensor, meta_tensor, quantized_tensor, module_getattr, replaced_dict, dict_subclass_dict,
        paused_generator, partial_object, raising_everything, parameter_subclass, module_type_object,
        callable_object, dtensor, escaped_vmap_tensor, escaped_grad_tensor, scripted_module, traced_module,
        dispatching_wrapper, raising_wrapper, mapping_proxy, mapping_proxy_of_mapping, suspended_generator,
    )
}


class Tripwire:
    """Collects ``(kind, what)`` for each piece of hostile code that ran."""

    def __init__(self) -> None:
        self.hits: list[tuple[str, str]] = []
        self.armed = False

    def __call__(self, kind: str, what: str) -> None:
        if self.armed:
            self.hits.append((kind, what))


def build(names: list[str], trip: Tripwire) -> tuple[dict[str, Any], list[Any]]:
    """A namespace of the named kinds (``h_<kind>``), and what keeps their referents alive."""
    namespace: dict[str, Any] = {}
    keep: list[Any] = []
    for i, name in enumerate(names):
        value, referent = KINDS[name](trip)
        if value is None and referent is None:
            continue
        namespace[f"h{i}_{name}"] = value
        keep.append(referent)
    return namespace, keep
