"""One object read without running its code: types and class dicts (:mod:`.static_getters`),
a tensor's facts (:mod:`.tensor_facts`, read through :mod:`devinspect.runtime.tensor_getters`), containers copied atomically, the interiors of objects the walk does
not enter attribute by attribute, DTensor placements, TorchScript modules, a module's class
source, and how an optimizer or scheduler is built again.

Public surface: :func:`tensor_facts`, :func:`class_dict`, :func:`instance_dict`,
:func:`type_name`, :func:`static_class_attr`, :func:`sequence_items`, :func:`mapping_items`,
:func:`optimizer_summary`.
"""

from ...lazy_exports import lazy_surface

_SURFACE = {
    "ATOM_IDS": "static_getters",
    "FUNCTION_CODE": "static_getters",
    "MODULE_DICT": "static_getters",
    "OPAQUE": "static_getters",
    "PROXY_TYPES": "static_getters",
    "SCHEDULER_MODULES": "rebuild_recipes",
    "assigned_while_running": "class_source",
    "attribute_assignment": "class_source",
    "class_dict": "static_getters",
    "class_name": "script_modules",
    "class_source_lines": "class_source",
    "dict_items": "container_snapshots",
    "dict_values": "container_snapshots",
    "fake_device_of": "tensor_facts",
    "foreign_container_note": "interiors",
    "instance_dict": "static_getters",
    "is_opaque_package": "static_getters",
    "library_of": "class_source",
    "made_instance_dict": "static_getters",
    "mapping_items": "container_snapshots",
    "moved_as_used": "class_source",
    "moved_where_read": "class_source",
    "mro": "static_getters",
    "odd_instance_dict": "static_getters",
    "optimizer_summary": "rebuild_recipes",
    "paused_frame": "interiors",
    "paused_locals": "interiors",
    "plain_class_dict": "static_getters",
    "plain_str": "static_getters",
    "proxied_dict": "interiors",
    "proxy_referent": "static_getters",
    "recomputed_attributes": "class_source",
    "scheduler_kwargs": "rebuild_recipes",
    "script_members": "script_modules",
    "script_object": "script_modules",
    "script_tensors": "script_modules",
    "sequence_items": "container_snapshots",
    "shape_of": "tensor_facts",
    "slot_values": "static_getters",
    "static_class_attr": "static_getters",
    "str_items": "static_getters",
    "type_is_one_of": "static_getters",
    "type_module": "static_getters",
    "type_name": "static_getters",
    "user_class_attributes": "class_source",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
__all__ = sorted(_SURFACE)
