"""Every reader of devinspect over a namespace of hostile objects, counted.

For one namespace (a seeded draw of :mod:`hostile_kinds`): the scan, ``--why`` of every tensor name, the
explanation of a device mismatch and of an out-of-memory error whose frames hold the
hostile objects, the memory tally and the per-rank summary run with the tripwire armed.
Counted: hostile code that ran (``user_code``), readers that raised (``crashes``), and
objects still alive once the namespace is dropped (``kept_alive``).
"""

from __future__ import annotations

import gc
import random
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from hostile_kinds import KINDS, Tripwire, build


@dataclass
class FuzzCounts:
    namespaces: int = 0
    user_code: list[str] = field(default_factory=list)
    crashes: list[str] = field(default_factory=list)
    kept_alive: list[str] = field(default_factory=list)

    def add(self, other: FuzzCounts) -> None:
        self.namespaces += other.namespaces
        self.user_code += other.user_code
        self.crashes += other.crashes
        self.kept_alive += other.kept_alive


def _failing_call(device: str, **hostile: Any) -> Any:
    return torch.ones(2, device=device) + torch.ones(2)  # the locals hold every hostile object


def _out_of_memory(**hostile: Any) -> Any:
    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                 "8.00 GiB of which 1.00 GiB is free.")


def _caught(fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    raise AssertionError("expected an error")


def readers(device: str) -> list[tuple[str, Callable[[dict[str, Any]], Any]]]:
    import devinspect
    from devinspect.collect.machine.memory_snapshot import tally_tensors
    from devinspect.collect.namespace.referrers import holders
    from devinspect.diagnose.ranks.rank_summary import summary

    def explained(ns: dict[str, Any]) -> Any:
        hostile = {k: v for k, v in ns.items() if k.startswith("h")}
        return devinspect.explain(_caught(lambda: _failing_call(device, **hostile)), namespace=ns)

    def out_of_memory(ns: dict[str, Any]) -> Any:
        hostile = {k: v for k, v in ns.items() if k.startswith("h")}
        return devinspect.explain(_caught(lambda: _out_of_memory(**hostile)), namespace=ns)

    return [
        ("scan", lambda ns: devinspect.scan(ns)),
        ("scan everything", lambda ns: devinspect.scan(ns, include_hidden=True, all_objects=True)),
        ("--why", lambda ns: [holders(ns, name) for name in _tensor_names(ns)]),
        ("explanation", explained),
        ("out-of-memory", out_of_memory),
        ("memory tally", lambda ns: tally_tensors(ns)),
        ("rank summary", lambda ns: summary(ns)),
    ]


def _tensor_names(ns: dict[str, Any]) -> list[str]:
    """The anchor and every name whose value is a tensor by its real type (what ``--why`` takes)."""
    return ["anchor"] + [name for name, value in ns.items()
                         if name != "anchor" and issubclass(type(value), torch._C.TensorBase)]


def fuzz_namespace(seed: int, device: str = "meta", size: int = 6) -> FuzzCounts:
    """One namespace of ``size`` hostile kinds drawn with ``seed``, through every reader."""
    rng = random.Random(seed)
    names = rng.sample(sorted(KINDS), min(size, len(KINDS)))
    trip = Tripwire()
    counts = FuzzCounts(namespaces=1)
    ns, keep = build(names, trip)
    ns["anchor"] = torch.ones(5)
    watched = _watch(ns)
    trip.armed = True
    for reader_name, read in readers(device):
        try:
            result = read(ns)
            del result
        except Exception as exc:  # a crash is what is counted
            counts.crashes.append(f"{reader_name} on {names}: {type(exc).__name__}: {exc}"[:300])
        if trip.hits:
            counts.user_code += [f"{reader_name} ran {kind}: {what}" for kind, what in trip.hits]
            trip.hits.clear()
    trip.armed = False
    ns.clear()
    del keep
    gc.collect()
    counts.kept_alive += [name for name, ref in watched if ref() is not None]
    return counts


def _watch(ns: dict[str, Any]) -> list[tuple[str, Any]]:
    """Weak references to what the namespace holds (what can be weakly referenced, by exact type)."""
    out = []
    for name, value in ns.items():
        if type(value) in (weakref.ProxyType, weakref.CallableProxyType, list, dict, tuple, frozenset):
            continue
        try:
            out.append((name, weakref.ref(value)))
        except TypeError:
            continue
    return out


def fuzz(count: int, start: int = 0, device: str = "meta") -> FuzzCounts:
    total = FuzzCounts()
    for seed in range(start, start + count):
        total.add(fuzz_namespace(seed, device))
    return total
