"""DTensor parameters and their placements, read statically from instance dicts and slots
(no property or ``__getattr__`` of the user's runs)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import torch

from ...model import DTensorPlacement
from ..namespace import namespace_items
from .static_getters import instance_dict, slot_values, static_class_attr, str_items


def dtensor_placements(namespace: Mapping[str, Any], roots: set[str] | None, exclude: Iterable[str] = (),
                       limit: int | None = None) -> tuple[DTensorPlacement, ...]:
    """DTensor parameters of the modules the namespace names (and DTensors it names
    directly). With ``roots``, only those names are looked into."""
    found: list[DTensorPlacement] = []
    seen: set[int] = set()

    def visit(prefix: str, module: Any, depth: int) -> None:
        if id(module) in seen or depth > 32:
            return
        seen.add(id(module))
        d = instance_dict(module)
        for attr, value in str_items(d.get("_parameters")):
            placement = placement_of(f"{prefix}.{attr}", value)
            if placement is not None:
                found.append(placement)
        for attr, child in str_items(d.get("_modules")):
            if isinstance(child, torch.nn.Module):
                visit(f"{prefix}.{attr}", child, depth + 1)

    excluded = set(exclude)
    for name, value in namespace_items(namespace):
        if name.startswith("_") or name in excluded or (roots is not None and name not in roots):
            continue
        if isinstance(value, torch.nn.Module):
            visit(name, value, 0)
        else:
            placement = placement_of(name, value)
            if placement is not None:
                found.append(placement)
    return tuple(found[:limit])


def placement_of(name: str, value: Any) -> DTensorPlacement | None:
    import torch


    if not isinstance(value, torch.Tensor) or not _keeps_a_spec(type(value)):
        return None
    d = {**instance_dict(value), **dict(slot_values(value))}  # DTensor keeps them in slots
    spec, local = d.get("_spec"), d.get("_local_tensor")
    if spec is None or local is None or not hasattr(spec, "placements"):
        return None
    mesh = spec.mesh
    names = getattr(mesh, "mesh_dim_names", None)
    return DTensorPlacement(
        name=name, mesh_shape=tuple(int(s) for s in mesh.shape), mesh_dim_names=tuple(names) if names else None,
        mesh_device_type=str(mesh.device_type), placements=tuple(_placement_name(p) for p in spec.placements),
        global_shape=tuple(int(s) for s in spec.shape), local_shape=tuple(int(s) for s in local.shape))


def _keeps_a_spec(cls: type) -> bool:
    """DTensor and its subclasses: a ``_spec`` slot or attribute in a class dict (read statically;
    not cached: a cache keyed by the class would keep it alive and hash it through its metaclass)."""

    return static_class_attr(cls, "_spec") is not None


def _placement_name(p: Any) -> str:
    """``Shard(0)``, ``Replicate()``, ``Partial(sum)``: how PyTorch's docs write them."""
    kind = type(p).__name__
    if hasattr(p, "dim") and "Shard" in kind:
        return f"{kind}({p.dim})"
    if "Partial" in kind:
        return f"Partial({getattr(p, 'reduce_op', 'sum')})"
    return f"{kind}()"
