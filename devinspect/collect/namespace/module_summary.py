"""One module's summary, from the records the walk made for it: counts, bytes and where it sits,
and the tensor attributes ``.to()`` does not move."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ...model import ModuleSummary, Unregistered
from ..objects import (
    assigned_while_running,
    attribute_assignment,
    class_source_lines,
    instance_dict,
    library_of,
    moved_as_used,
    moved_where_read,
    mro,
    plain_class_dict,
    static_class_attr,
    type_name,
)
from .placement import OFFLOADED_NOTE, ON_HOST_NOTE, moves_inputs, off_map, placement_of

_Module = torch.nn.Module

#: The record fields a summary reads.
SUMMARY_FIELDS = ("kind", "note", "device", "storage_bytes", "nbytes", "owner", "alias_of")


def module_summary(m: Any, name: str, columns: Mapping[str, list], unregistered: list[Unregistered],
                   held: list[str]) -> ModuleSummary:
    """The summary of module ``m`` (named ``name``) from the columns (:data:`SUMMARY_FIELDS`)
    of the records of its parameters, buffers, gradients and attributes; ``held`` are the
    parameters an autograd graph has saved."""
    by_device: dict[str, int] = {}
    owner_devices: dict[str, set[str]] = {}
    unmaterialised = offloaded = 0
    for kind, note, device, storage_bytes, nbytes, owner in zip(*(columns[f] for f in SUMMARY_FIELDS[:6])):
        if kind not in ("parameter", "buffer") or note == ON_HOST_NOTE:
            continue  # a host-side buffer by design: PyTorch keeps it there whatever device the model is on
        if note == OFFLOADED_NOTE:
            offloaded += 1
        elif device == "meta":
            unmaterialised += 1  # a lazy module's parameters are not: its first forward pass makes them
        by_device[device] = by_device.get(device, 0) + (storage_bytes or nbytes or 0)
        owner_devices.setdefault(owner or name, set()).add(device)
    devices = tuple(sorted(by_device, key=lambda d: (-by_device[d], d)))
    placement: tuple[tuple[str, str], ...] = ()
    if len(devices) > 1:
        placement = tuple(placement_of(name, owner_devices))
    kinds = columns["kind"]
    return ModuleSummary(
        name=name,
        type_name=type_name(type(m)),
        parameters=kinds.count("parameter"),
        buffers=kinds.count("buffer"),
        devices=devices,
        placement=placement,
        unregistered=tuple(unregistered),
        unmaterialised=unmaterialised,
        offloaded=offloaded,
        deliberate_split=issubclass(type(instance_dict(m).get("hf_device_map")), dict),
        off_map=off_map(name, instance_dict(m).get("hf_device_map"), owner_devices),
        held_parameters=tuple(held),
        library=library_of(type(m)),
        initialiser=whole_model_initialiser(type(m)),
        moves_inputs=moves_inputs(instance_dict(m)),
        **module_bytes(columns),
    )


def module_bytes(columns: Mapping[str, list]) -> dict[str, int]:
    """The bytes a module's records (their columns) add to the totals, by kind (memory counted
    once: an alias adds nothing), as :class:`ModuleSummary` names them."""
    sums = {"parameter": 0, "buffer": 0, "gradient": 0}
    for kind, alias, size in zip(columns["kind"], columns["alias_of"], columns["storage_bytes"]):
        if kind in sums and alias is None and size:
            sums[kind] += size
    return {"parameter_bytes": sums["parameter"], "buffer_bytes": sums["buffer"], "gradient_bytes": sums["gradient"]}


def only_parameters(value: Any, parameters: Mapping[int, str]) -> bool:
    """Whether an attribute holds only registered parameters themselves (``LSTM._flat_weights``):
    ``.to()`` moves a parameter in place, so such a list never falls behind."""
    vt = type(value)
    items = (list(dict.values(value)) if issubclass(vt, dict) else list(value) if vt is list or vt is tuple
             else [value])
    return bool(items) and all(issubclass(type(t), torch.Tensor) and id(t) in parameters for t in items)


def unregistered_attribute(mt: type, full: str, owner: str, attr: str, vt: type) -> Unregistered:
    """The tensor attribute ``attr`` (``full``) of a module of class ``mt`` that is not a buffer,
    with where its class assigns it and defines a default (what registering it as a buffer must
    edit); ``vt`` is the class of its value."""
    class_default = any(attr in plain_class_dict(k) for k in mro(mt) if k is not _Module and k is not object)
    try:
        running, moved = assigned_while_running(mt, attr), moved_as_used(mt, attr)
        each_read = moved_where_read(mt, attr)
    except Exception:  # a source we cannot read says nothing
        running = moved = each_read = False
    where = None
    try:
        found = attribute_assignment(mt, attr)
    except Exception:  # a source we cannot read just has no edit
        found = None
    if found is not None:
        mt, where = found
    default_at = init_at = None
    if class_default:
        try:
            default_at, init_at = class_source_lines(mt, attr)
        except Exception:
            pass
    container = next((k.__name__ for k in (dict, tuple, list, set) if issubclass(vt, k)), None)
    return Unregistered(full, owner, attr, type_name(mt), class_default, where, default_at, init_at, container,
                        running, moved, each_read)


#: The method name by which a model class offers to initialise all of its tensors again (as
#: transformers' PreTrainedModel does); a module's own reset_parameters covers only itself.
_WHOLE_MODEL_INITIALISER = "init_weights"


def whole_model_initialiser(cls: type) -> str:
    """The whole-model initialiser ``cls`` defines or inherits (read from class dicts), or ``""``."""
    return _WHOLE_MODEL_INITIALISER if static_class_attr(cls, _WHOLE_MODEL_INITIALISER) is not None else ""
