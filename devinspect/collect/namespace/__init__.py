"""The walk over a namespace: every tensor, module, optimizer and loader the user's names
reach, named as the user types them, and the reference paths that keep a tensor alive.

Public surface: :func:`scan`, :class:`ScanOptions`, :class:`NameIndex`, :func:`holders`,
:func:`object_at` (a value by its typed path) and the name helpers of :mod:`.names`.
"""

from ...lazy_exports import lazy_surface

_SURFACE = {
    "scan": "scan", "NameIndex": "scan", "module_paths": "scan",
    "ScanOptions": "walk",
    "holders": "referrers",
    "object_at": "path_lookup", "attribute_of": "path_lookup", "item_of": "path_lookup", "MISSING": "path_lookup",
    "namespace_items": "names", "shell_names": "names", "root_of": "names", "literal": "names",
}
__all__ = sorted(_SURFACE)
__getattr__ = lazy_surface(__name__, _SURFACE)
