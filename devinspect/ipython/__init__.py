"""The IPython layer, on top of everything else: the extension's load and unload, one
module per magic family (as IPython's own ``IPython/core/magics/``), and the runner
that runs a ``%%devcheck`` cell as a plain cell would. Only this package imports IPython.
"""

from ..lazy_exports import lazy_surface

_SURFACE = {
    "load": "extension",
    "release_history_here": "extension",
    "unload": "extension",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
