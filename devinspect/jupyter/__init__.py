"""The live layer: ipywidgets views, dashboards, timers and threads.

Only this package imports ipywidgets (and, beside the IPython layer, traitlets);
:mod:`devinspect.render` stays pure functions of the data.
"""

from ..lazy_exports import lazy_surface

_SURFACE = {
    "DevicesExplorer": "devices_explorer",
    "KernelAccess": "lab_link",
    "LabLink": "lab_link",
    "MemoryDashboard": "memory_dashboard",
    "Watcher": "memory_dashboard",
    "close_all": "lifetime",
    "explanation_panel": "fix_panel",
    "line_memory_widget": "memory_profile_widget",
}
__getattr__ = lazy_surface(__name__, _SURFACE)

# Named like a module of this package, which would shadow a lazy name once imported:
from .fix_panel import fix_panel as fix_panel  # noqa: E402 - after the lazy door
from .ranks_widget import ranks_widget as ranks_widget  # noqa: E402 - after the lazy door
