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
    "explanation_panel": "fix_buttons",
    "fix_panel": "fix_buttons",
    "line_memory_widget": "memory_profile_widget",
    "ranks_widget": "rank_views",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
