"""Copies of containers that another thread may be changing while they are read.

A notebook's namespace, an object's ``__dict__``, a list a data-loading thread appends
to: a Python loop over the live container fails ("dictionary changed size during
iteration") or pairs a key with another key's value when the container changes between
two of its steps. Every reader therefore takes its view as one copy made in C (no Python
code of ours runs inside it, so no other thread can run either), tried again in the rare
case that the copy itself saw a change (a finalizer run by the garbage collector may
switch threads mid-copy: "dict mutated during update"), and then reads the copy.
"""

from __future__ import annotations

import collections
from itertools import islice
from typing import Any

#: How often a copy is made again after it saw the container change; a container changed on
#: every attempt is reported (the walk makes it an unreadable row), never half read.
COPY_ATTEMPTS = 100

_dict_items, _dict_values = dict.items, dict.values
_list_iter, _tuple_iter, _set_iter, _frozenset_iter = list.__iter__, tuple.__iter__, set.__iter__, frozenset.__iter__
_deque_iter = collections.deque.__iter__


def dict_items(d: Any, limit: int | None = None) -> list[tuple[Any, Any]]:
    """``(key, value)`` pairs of the dict (or dict subclass) ``d`` through ``dict``'s own C
    methods, at most ``limit`` of them; no ``__iter__``, ``__hash__`` or ``__eq__`` runs."""
    for attempt in range(COPY_ATTEMPTS):
        try:
            return list(_dict_items(d)) if limit is None else list(islice(_dict_items(d), limit))
        except RuntimeError:
            if attempt == COPY_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def dict_values(d: Any) -> list[Any]:
    """The values of the dict (or dict subclass) ``d``, through ``dict``'s own C methods."""
    for attempt in range(COPY_ATTEMPTS):
        try:
            return list(_dict_values(d))
        except RuntimeError:
            if attempt == COPY_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def sequence_items(o: Any, vt: type, limit: int | None = None) -> list[Any]:
    """The items of a list, tuple, deque, set or frozenset (or a subclass: read through the
    base type's own iterator, never the subclass's), at most ``limit``."""
    iterate = (_list_iter if issubclass(vt, list) else _tuple_iter if issubclass(vt, tuple)
               else _deque_iter if issubclass(vt, collections.deque) else _set_iter if issubclass(vt, set)
               else _frozenset_iter)
    for attempt in range(COPY_ATTEMPTS):
        try:
            return list(iterate(o)) if limit is None else list(islice(iterate(o), limit))
        except RuntimeError:
            if attempt == COPY_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def mapping_items(mapping: Any) -> list[tuple[Any, Any]]:
    """``(key, value)`` pairs of a Mapping handed over as a namespace (its own ``items()``)."""
    for attempt in range(COPY_ATTEMPTS):
        try:
            return list(mapping.items())
        except RuntimeError:
            if attempt == COPY_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")
