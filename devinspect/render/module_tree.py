"""A model's module tree with what each node holds, per device: where a split model shows at a glance.

A pure function of a :class:`~devinspect.model.scan_result.ScanResult`: each module and submodule the
namespace reaches becomes a :class:`ModuleNode` with its devices (most bytes first),
the bytes its parameters, buffers and plain tensor attributes hold (an attribute that
``.to()`` leaves behind is still the module's; a meta tensor counts what it would need),
its number of parameter elements, and its children. A node on more than one device is
``mixed``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..model import ScanResult


@dataclass(frozen=True)
class ModuleNode:
    path: str
    type_name: str
    #: Devices of its parameters, buffers and tensor attributes (all below it), most bytes first.
    devices: tuple[str, ...]
    bytes: int
    parameters: int
    children: tuple[str, ...] = ()
    depth: int = 0

    @property
    def mixed(self) -> bool:
        return len(self.devices) > 1


def parent_of(path: str) -> str | None:
    """``model.encoder`` for ``model.encoder.layers[0]``; None for a name without a parent."""
    cut = max(path.rfind("."), path.rfind("["))
    return path[:cut] if cut > 0 else None


def module_tree(result: ScanResult) -> dict[str, ModuleNode]:
    """Every module path -> its node, in walk order (roots before their children)."""
    types = dict(result.module_types)
    per_device: dict[str, dict[str, int]] = {path: {} for path in types}
    elements: dict[str, int] = {path: 0 for path in types}
    for r in result.of_kind("parameter", "buffer", "attribute"):
        if r.owner is None or r.alias_of is not None:
            continue
        size = r.storage_bytes if r.device != "meta" else (r.nbytes or 0)
        count = math.prod(s for s in r.shape if isinstance(s, int)) if r.kind == "parameter" and r.shape else 0
        path: str | None = r.owner
        while path is not None:
            if path in per_device:
                devices = per_device[path]
                devices[r.device] = devices.get(r.device, 0) + (size or 0)
                elements[path] += count
            path = parent_of(path)
    children: dict[str, list[str]] = {path: [] for path in types}
    for path in types:
        parent = parent_of(path)
        while parent is not None and parent not in types:
            parent = parent_of(parent)
        if parent is not None:
            children[parent].append(path)
    nodes: dict[str, ModuleNode] = {}

    def depth(path: str) -> int:
        d, parent = 0, parent_of(path)
        while parent is not None:
            d += parent in types
            parent = parent_of(parent)
        return d

    for path, type_name in types.items():
        devices = per_device[path]
        nodes[path] = ModuleNode(
            path=path, type_name=type_name,
            devices=tuple(sorted(devices, key=lambda d: (-devices[d], d))),
            bytes=sum(devices.values()), parameters=elements[path], children=tuple(children[path]),
            depth=depth(path),
        )
    return nodes


def roots(nodes: dict[str, ModuleNode]) -> list[ModuleNode]:
    return [n for n in nodes.values() if n.depth == 0]
