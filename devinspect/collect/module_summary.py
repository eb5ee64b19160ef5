"""One module's summary, from the records the walk made for it: counts, bytes and where it sits."""

from __future__ import annotations

from typing import Any, Sequence

from ..model.records import ModuleSummary, TensorRecord, Unregistered
from .class_source import library_of
from .placement import ON_HOST_NOTE, moves_inputs, off_map, placement_of
from .static import instance_dict, type_name


def module_summary(m: Any, name: str, records: Sequence[TensorRecord], unregistered: list[Unregistered],
                   held: list[str]) -> ModuleSummary:
    """The summary of module ``m`` (named ``name``) whose parameters, buffers, gradients and
    attributes are ``records``; ``held`` are the parameters an autograd graph has saved."""
    placed = [r for r in records if r.kind in ("parameter", "buffer")]
    by_device: dict[str, int] = {}
    owner_devices: dict[str, set[str]] = {}
    unmaterialised = 0
    for r in placed:
        if r.note == ON_HOST_NOTE:
            continue  # PyTorch keeps it on the host whatever device the model is on
        if r.device == "meta" or (r.note or "").startswith("lazy"):
            unmaterialised += 1
        by_device[r.device] = by_device.get(r.device, 0) + (r.storage_bytes or r.nbytes or 0)
        owner_devices.setdefault(r.owner or name, set()).add(r.device)
    devices = tuple(sorted(by_device, key=lambda d: (-by_device[d], d)))
    placement: tuple[tuple[str, str], ...] = ()
    if len(devices) > 1:
        placement = tuple(placement_of(name, owner_devices))
    return ModuleSummary(
        name=name,
        type_name=type_name(type(m)),
        parameters=sum(1 for r in records if r.kind == "parameter"),
        buffers=sum(1 for r in records if r.kind == "buffer"),
        devices=devices,
        placement=placement,
        unregistered=tuple(unregistered),
        unmaterialised=unmaterialised,
        deliberate_split=issubclass(type(instance_dict(m).get("hf_device_map")), dict),
        off_map=off_map(name, instance_dict(m).get("hf_device_map"), owner_devices),
        held_parameters=tuple(held),
        library=library_of(type(m)),
        moves_inputs=moves_inputs(instance_dict(m)),
        **module_bytes(records),
    )


def module_bytes(records: Sequence[TensorRecord]) -> dict[str, int]:
    """The bytes a module's records add to the totals, by kind (memory counted once: an
    alias adds nothing), as :class:`ModuleSummary` names them."""
    return {
        "parameter_bytes": sum(r.counted_bytes for r in records if r.kind == "parameter"),
        "buffer_bytes": sum(r.counted_bytes for r in records if r.kind == "buffer"),
        "gradient_bytes": sum(r.counted_bytes for r in records if r.kind == "gradient"),
    }
