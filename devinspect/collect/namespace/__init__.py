"""The walk over a namespace: every tensor, module, optimizer and loader the user's names
reach, named as the user types them, and the reference paths that keep a tensor alive.

Public surface: :func:`scan`, :class:`ScanOptions`, :class:`NameIndex`, :func:`holders`,
:func:`object_at` (a value by its typed path) and the name helpers of :mod:`.names`.
"""

from ...lazy_exports import lazy_surface

_SURFACE = {
    "MISSING": "path_lookup",
    "NameIndex": "scan",
    "ScanOptions": "walk",
    "attr_name": "names",
    "attribute_of": "path_lookup",
    "holders": "referrers",
    "item_of": "path_lookup",
    "literal": "names",
    "literal_value": "names",
    "module_paths": "scan",
    "module_tree_paths": "names",
    "namespace_items": "names",
    "object_at": "path_lookup",
    "root_of": "names",
    "shell_names": "names",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
__all__ = sorted(_SURFACE)
