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
