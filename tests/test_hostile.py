"""Property-based: namespaces full of hostile objects never crash the scan or change them."""

from __future__ import annotations

import collections
import copy
from unittest import mock

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import devinspect


class Boom(Exception):
    pass


class RaisingProperty:
    @property
    def value(self):
        raise Boom("property")


class AnythingGetattr:
    def __getattr__(self, name):
        return torch.zeros(1)


class BrokenDunders:
    def __eq__(self, other):
        raise Boom("eq")

    def __hash__(self):
        raise Boom("hash")

    def __len__(self):
        raise Boom("len")

    def __iter__(self):
        raise Boom("iter")

    def __repr__(self):
        raise Boom("repr")

    def __bool__(self):
        raise Boom("bool")


class BadDict:
    """An object whose __dict__ is not a dict."""

    @property
    def __dict__(self):
        raise Boom("__dict__")


class ClassProperty:
    """A __class__ property that lies to isinstance."""

    @property
    def __class__(self):
        return torch.Tensor


def make_cycle():
    a: list = [torch.zeros(1)]
    a.append(a)
    d: dict = {}
    d["self"] = d
    d["t"] = torch.zeros(1)
    return a, d


def generator():
    yield torch.zeros(1)


leaves = st.sampled_from(
    [
        lambda: torch.zeros(2),
        lambda: torch.nn.Linear(2, 2),
        lambda: RaisingProperty(),
        lambda: AnythingGetattr(),
        lambda: BrokenDunders(),
        lambda: BadDict(),
        lambda: ClassProperty(),
        lambda: mock.Mock(),
        lambda: mock.MagicMock(),
        lambda: make_cycle(),
        lambda: generator(),
        lambda: iter([torch.zeros(1)]),
        lambda: 42,
        lambda: "text",
        lambda: None,
        lambda: torch.zeros(0),
        lambda: torch.eye(3).to_sparse(),
    ]
).map(lambda make: make())

values = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.text(max_size=5), children, max_size=4),
        st.lists(children, max_size=3).map(collections.deque),
    ),
    max_leaves=12,
)


def fingerprint(value, depth=0):
    """Identity-level picture of a value, to check nothing was replaced or mutated."""
    if depth > 6:
        return id(value)
    if type(value) is list:
        return ("list", id(value), len(value), tuple(fingerprint(v, depth + 1) for v in value if v is not value))
    if type(value) is dict:
        return ("dict", id(value), tuple((k, fingerprint(v, depth + 1)) for k, v in value.items() if v is not value))
    if type(value) is tuple:
        return ("tuple", id(value), tuple(fingerprint(v, depth + 1) for v in value))
    if type(value) is collections.deque:
        return ("deque", id(value), len(value))
    if issubclass(type(value), torch.Tensor) and not value.is_sparse:
        return ("tensor", id(value), value.device.type, value.data_ptr())
    return id(value)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), values, max_size=6))
def test_hostile_namespaces_scan_without_raising_or_changing(namespace):
    before = {k: fingerprint(v) for k, v in namespace.items()}
    result = devinspect.scan(namespace, all_objects=False)
    assert {k: fingerprint(v) for k, v in namespace.items()} == before
    # Everything renders and tabulates.
    assert repr(result)
    bundle = result._repr_mimebundle_()
    assert "text/plain" in bundle and "text/html" in bundle
    assert len(result.frame) == len(result.records)
    for r in result.records:
        assert r.kind != "error" or r.note.startswith("could not inspect")


def test_mock_is_not_grown_by_the_scan():
    m = mock.MagicMock()
    children_before = copy.copy(m._mock_children)
    devinspect.scan({"m": m})
    assert m._mock_children == children_before
    assert m.mock_calls == []


def test_very_deep_nesting_is_cut_not_recursed():
    deep: list = []
    for _ in range(50_000):
        deep = [deep]
    result = devinspect.scan({"deep": deep})
    assert any("deeper than" in t.reason for t in result.truncated)


def test_very_large_container_is_walked_within_bounds():
    big = list(range(500_000)) + [torch.zeros(1)]
    result = devinspect.scan({"big": big}, max_items=100_000)
    assert result.truncated[0].skipped == 400_001
    assert result.records == ()


# -- objects that record any call into their own code -----------------------------------------

CALLS: list[str] = []


def record(what: str):
    CALLS.append(what)


class RecordingMeta(type):
    def __getattribute__(cls, name):
        if not name.startswith("__") or name in ("__mro__", "__dict__", "__name__", "__module__", "__slots__"):
            record(f"metaclass __getattribute__ {name}")
        return type.__getattribute__(cls, name)

    def __instancecheck__(cls, obj):
        record("__instancecheck__")
        return type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub):
        record("__subclasscheck__")
        return type.__subclasscheck__(cls, sub)

    def __hash__(cls):
        record("metaclass __hash__")
        return type.__hash__(cls)

    def __eq__(cls, other):
        record("metaclass __eq__")
        return type.__eq__(cls, other)


class WithMeta(metaclass=RecordingMeta):
    def __init__(self):
        self.payload = torch.zeros(2)


class LyingClass:
    @property
    def __class__(self):
        record("__class__ property")
        return dict

    def __init__(self):
        self.t = torch.zeros(1)


class StrKey(str):
    def __hash__(self):
        record("str subclass __hash__")
        return str.__hash__(self)

    def __eq__(self, other):
        record("str subclass __eq__")
        return str.__eq__(self, other)

    def startswith(self, *args):
        record("str subclass startswith")
        return str.startswith(self, *args)

    def isidentifier(self):
        record("str subclass isidentifier")
        return True

    def isdigit(self):
        record("str subclass isdigit")
        return False


class PropertyTensor(torch.Tensor):
    @property
    def shape(self):
        record("tensor subclass shape")
        return super().shape

    @property
    def layout(self):
        record("tensor subclass layout")
        return torch.strided

    @property
    def nbytes(self):
        record("tensor subclass nbytes")
        return 0

    @property
    def requires_grad(self):
        record("tensor subclass requires_grad")
        return False

    def __getattribute__(self, name):
        if name not in ("__class__",):
            record(f"tensor subclass __getattribute__ {name}")
        return super().__getattribute__(name)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        record(f"__torch_function__ {getattr(func, '__name__', func)}")
        return super().__torch_function__(func, types, args, kwargs or {})


class Slotted:
    __slots__ = ("a", "b")

    def __init__(self):
        self.a = torch.zeros(1)


def generator_slots():
    yield "a"
    record("__slots__ generator consumed")


Slotted.__slots__ = generator_slots()  # replaced after the class was made


class FlattenRecorder(torch.Tensor):
    """A wrapper subclass whose flatten hook is user code."""

    @staticmethod
    def __new__(cls, inner):
        t = torch.Tensor._make_wrapper_subclass(cls, inner.shape, dtype=inner.dtype, device=inner.device)
        t.inner = inner
        return t

    def __tensor_flatten__(self):
        record("__tensor_flatten__")
        return ["inner"], None

    @staticmethod
    def __tensor_unflatten__(inner, ctx, size, stride):
        return FlattenRecorder(inner["inner"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        record(f"__torch_dispatch__ {func}")
        raise NotImplementedError


def hostile_objects():
    module = torch.nn.Linear(2, 2)
    module._parameters[StrKey("odd")] = torch.nn.Parameter(torch.zeros(1))
    module.__dict__[StrKey("cache")] = torch.zeros(3)
    holder = type("Holder", (), {})()
    holder.__dict__[StrKey("inside")] = torch.zeros(2)
    return {
        "meta_obj": WithMeta(),
        "meta_cls": WithMeta,
        "liar": LyingClass(),
        "keys": {StrKey("k"): torch.zeros(1), StrKey("j"): [torch.zeros(1)]},
        "prop": torch.zeros(3).as_subclass(PropertyTensor),
        "slotted": Slotted(),
        "wrapped": FlattenRecorder(torch.zeros(2)),
        "module": module,
        "holder": holder,
        StrKey("ns_key"): torch.zeros(2),
    }


def test_hostile_shapes_run_no_user_code():
    ns = hostile_objects()
    CALLS.clear()
    result = devinspect.scan(ns, all_objects=True)
    _ = result.findings, result.frame, repr(result)
    assert CALLS == []
    names = {r.name for r in result.records}
    # The real contents are still found, read statically.
    assert {"meta_obj.payload", "liar.t", "prop", "slotted.a", "wrapped", "module.weight"} <= names
    assert "ns_key" in names and "module.cache" in names and "holder.inside" in names
    assert any(n.startswith("list(keys.values())") for n in names)  # non-exact str keys are named by position
    wrapped = next(r for r in result.records if r.name == "wrapped")
    assert wrapped.storage_bytes == 8  # its inner tensor, found without calling __tensor_flatten__


def test_sparse_and_jagged_tensors_dispatch_nothing_into_the_users_modes():
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    ns = {"coo": torch.eye(3).to_sparse(), "csr": torch.eye(3).to_sparse_csr(),
          "jagged": torch.nested.nested_tensor([torch.ones(2, 3), torch.ones(4, 3)], layout=torch.jagged),
          "strided_nested": torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])}
    with Recorder():
        result = devinspect.scan(ns)
    assert seen == []
    sizes = {r.name: r.storage_bytes for r in result.records}
    assert sizes["coo"] and sizes["csr"] and sizes["jagged"] and sizes["strided_nested"]


hostile_leaves = st.sampled_from([WithMeta, LyingClass, PropertyTensor, Slotted, FlattenRecorder, StrKey]).map(
    lambda kind: {WithMeta: WithMeta, LyingClass: LyingClass, Slotted: Slotted,
                  PropertyTensor: lambda: torch.zeros(2).as_subclass(PropertyTensor),
                  FlattenRecorder: lambda: FlattenRecorder(torch.zeros(1)),
                  StrKey: lambda: {StrKey("x"): torch.zeros(1)}}[kind]())
hostile_values = st.recursive(
    hostile_leaves | leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.dictionaries(st.text(max_size=4).map(StrKey), children, max_size=3),
        st.tuples(children, children),
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), hostile_values, max_size=5))
def test_generated_hostile_graphs_run_no_user_code(namespace):
    CALLS.clear()
    result = devinspect.scan(namespace)
    repr(result)
    assert [c for c in CALLS if "property" in c or "meta" in c or "str subclass" in c or "tensor subclass" in c
            or "flatten" in c or "torch_" in c or "generator" in c or "instancecheck" in c] == []


def test_every_reader_in_a_shell_runs_no_user_code_and_makes_no_dict(ip, sim):
    """%devices (-a, --why), a failed cell's explanation, %%devcheck's and %gpumem over hostile
    objects (a metaclass records its hash, eq and instance checks), in containers taken whole
    and beside plain tensors: nothing of the user's runs, and no tensor or OrderedDict is given
    the ``__dict__`` a careless read makes."""
    import gc

    from IPython.utils.capture import capture_output

    loose = [torch.zeros(2) for _ in range(50)]
    model = torch.nn.Linear(2, 2)
    ip.user_ns.update(hostile_objects())
    ip.user_ns.update(torch=torch, dev=sim, records=[WithMeta(), torch.ones(3)], table={"a": WithMeta()},
                      loose=loose, model=model)

    def dicts() -> int:
        return sum(type(r) is dict for o in [*loose, model._parameters] for r in gc.get_referents(o))

    made = dicts()
    CALLS.clear()
    for cell in ("%devices", "%devices -a", "%devices --why records[1]", "%devices --why loose[3]",
                 "y = torch.ones(2, device=dev) + torch.ones(2)", "%%devcheck\ny = torch.ones(2, device=dev) + records[1]",
                 "%gpumem"):
        with capture_output():
            ip.run_cell(cell)
    assert CALLS == [] and dicts() == made


def test_a_wrapper_that_answers_its_own_metadata_is_read_as_constructed_by_every_reader(ip, sim):
    """A wrapper subclass whose device, layout and sizes are asked of its __torch_dispatch__
    (one answers other values than it was made with, one raises): no reader calls it, each
    row shows what it was constructed with and says so, and neither is an error row."""
    from hostile_kinds import Tripwire, dispatching_wrapper, raising_wrapper
    from IPython.utils.capture import capture_output

    from devinspect.collect.objects.tensor_facts import AS_CONSTRUCTED

    trip = Tripwire()
    answering, _ = dispatching_wrapper(trip)
    raising, _ = raising_wrapper(trip)
    ip.user_ns.update(torch=torch, dev=sim, answering=answering, raising=raising, box={"w": answering},
                      model=torch.nn.Linear(2, 2))
    trip.armed = True
    shown = []
    for cell in ("%devices", "%devices -a", "%devices -f", "%devices answering", "%devices --why answering",
                 "%devices --why raising", "%gpumem", "y = torch.ones(2, device=dev) + torch.ones(2)",
                 "%%gpumem\nz = torch.ones(3, device=dev)",
                 "%%devcheck\ny = torch.ones(2, device=dev) + torch.ones(2)", "r = devinspect_scan()"):
        ip.user_ns["devinspect_scan"] = devinspect.scan
        with capture_output() as captured:
            ip.run_cell(cell)
        shown.append(captured.stdout + "".join(o.data.get("text/plain", "") for o in captured.outputs))
    assert trip.hits == []
    rows = {r.name: r for r in ip.user_ns["r"].records}
    for name in ("answering", "raising", 'box["w"]'):
        row = rows.get(name) or rows[next(n for n in rows if n.startswith("box"))]
        assert (row.kind, row.device, row.shape, row.dtype) == ("tensor", "cpu", (2, 3), "float32")
        assert row.note == AS_CONSTRUCTED and row.storage_bytes == 24  # its inner tensor's memory
    assert "could not inspect" not in shown[0] and "as constructed" in shown[0]
    assert "kept alive by" in shown[5] and "could not inspect" not in shown[5]


def test_a_tensor_in_a_mappingproxy_or_a_paused_generator_is_listed_by_the_name_users_type(ip, sim):
    """Both are read without running anything: the dict a mappingproxy shows, the locals of a
    generator or coroutine paused at a yield or an await. Each row's name, typed back, is the
    tensor; --why names its holder; a generator that has not started, has finished or is
    running has no locals to list, and a proxy over a Mapping of the user's is said to be unread."""
    import types

    from hostile_kinds import Tripwire, mapping_proxy_of_mapping, suspended_generator
    from IPython.utils.capture import capture_output

    trip = Tripwire()
    paused, _ = suspended_generator(trip)
    other_mapping, _ = mapping_proxy_of_mapping(trip)

    async def waiting():
        u = torch.ones(5)
        await types.coroutine(lambda: (yield))()
        return u

    coro = waiting()
    coro.send(None)

    def finished():
        v = torch.ones(6)
        yield v

    done = finished()
    list(done)
    ip.user_ns.update(torch=torch, proxy=types.MappingProxyType({"w": torch.ones(2, device=sim)}), paused=paused,
                      coro=coro, fresh=finished(), done=done, other=other_mapping)
    trip.armed = True
    result = devinspect.scan(ip.user_ns, roots=["proxy", "paused", "coro", "fresh", "done", "other"])
    names = [r.name for r in result.records]
    assert names == ['proxy["w"]', 'paused.gi_frame.f_locals["t"]', 'coro.cr_frame.f_locals["u"]']
    for name in names:
        assert eval(name, ip.user_ns) is devinspect.collect.namespace.scan.find_tensor(ip.user_ns, name)
    assert [t.reason for t in result.truncated] == ["a mappingproxy over another kind of mapping: not inspected"]
    with capture_output() as shown:
        ip.run_cell("%devices -f")
        ip.run_cell('%devices --why paused.gi_frame.f_locals["t"]')
        ip.run_cell('%devices --why proxy["w"]')
    text = shown.stdout + "".join(o.data.get("text/plain", "") for o in shown.outputs)
    assert "sim:0 8 B (1)" in text  # -f counts the proxy's tensor among the device's
    assert 'paused.gi_frame.f_locals["t"]  namespace; a local of the paused generator' in text
    assert 'proxy["w"]  namespace' in text and "no name reaches" not in text
    assert trip.hits == []
    coro.close()

    def scanning_itself():
        mine = torch.ones(7)  # noqa: F841 - the running generator's own local
        yield devinspect.scan({"me": running})

    running = scanning_itself()
    assert [r.name for r in next(running).records] == []  # its frame is running: not read
