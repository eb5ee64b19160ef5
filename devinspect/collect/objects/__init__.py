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
    "tensor_facts": "tensor_facts", "shape_of": "tensor_facts",
    "class_dict": "static_getters", "instance_dict": "static_getters", "type_name": "static_getters",
    "static_class_attr": "static_getters", "mro": "static_getters",
    "sequence_items": "container_snapshots", "mapping_items": "container_snapshots",
    "optimizer_summary": "rebuild_recipes",
}
__all__ = sorted(_SURFACE)
__getattr__ = lazy_surface(__name__, _SURFACE)
