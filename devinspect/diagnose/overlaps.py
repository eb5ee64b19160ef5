"""Findings and models that cover the same tensors: a model named twice (``inner`` and the
``wrapped`` that holds it), a hint that repeats what a warning already fixes. Each is said once."""

from __future__ import annotations

from ..model import Finding, ModuleSummary, ScanResult, is_under


def outermost(result: ScanResult, modules: list[ModuleSummary]) -> list[ModuleSummary]:
    """``modules`` less each one whose tensors another holds too (``inner`` inside ``wrapped``): the
    one that holds it, whose parameters sit deeper in it, is the model."""
    records = result.of_kind("parameter", "buffer")
    held = {m.name: frozenset(r.alias_of or r.name for r in records if is_under(r.name, m.name)) for m in modules}
    depth = {m.name: sum(r.name.count(".") + r.name.count("[") for r in records if is_under(r.name, m.name))
             for m in modules}
    return [m for m in modules if not any(o.name != m.name and held[m.name] <= held[o.name]
                                          and (held[m.name] < held[o.name] or depth[o.name] > depth[m.name])
                                          for o in modules)]


def said_once(result: ScanResult, found: list[Finding]) -> list[Finding]:
    """``found`` less the hints of a model on the host whose tensors a warning or an error already
    names (the call that fails moves it): the model is said once."""
    hints = [f for f in found if f.code == "module-on-other-device" and f.severity == "hint" and f.names]
    if not hints:
        return found
    same = {r.name: r.alias_of or r.name for r in result.of_kind("parameter", "buffer")}
    told = {same.get(n, n) for f in found if f.severity in ("error", "warning") for n in f.names}
    repeated = {id(f) for f in hints if {same.get(n, n) for n in f.names} <= told}
    return [f for f in found if id(f) not in repeated]
