"""Loading and unloading the extension: the magic families, the settings, and every hook,
registered once per shell and removed exactly (``%reload_ext`` leaves one of each)."""

from __future__ import annotations

import sys
from typing import Any

from traitlets import TraitError

from ..collect import locations
from ..runtime import tracebacks
from .cell_runner import awaiting_magic_cells
from .cell_widgets import CellWidgets
from .config import DevInspect
from .devcheck_magics import DevcheckMagics
from .devices_magics import DevicesMagics
from .edited_cells import EditedCells
from .failed_cell import FailedCellExplainer, register_hooks, unregister_hooks
from .gpumem_magics import GpumemMagics
from .lab_panel import lab_link
from .magic_support import cell_numbers, error_forgetter, traceback_drawer


def settings_of(shell: Any) -> DevInspect:
    """The settings from the shell's configuration; a value there that a setting refuses (a
    negative limit in ``ipython_config.py``) is said in one line, and the defaults stand."""
    try:
        return DevInspect(parent=shell)
    except TraitError as exc:
        print(f"devinspect: {exc}; using the default settings", file=sys.stderr)
        return DevInspect()


class Loaded:
    """What one shell has registered: the settings, the magic families and the hooks."""

    def __init__(self, shell: Any):
        self.settings = settings_of(shell)  # %config DevInspect
        shell.configurables.append(self.settings)
        self.failed_cell = FailedCellExplainer(shell, self.settings)
        self.families = (DevicesMagics(shell, self.settings), DevcheckMagics(shell, self.settings, self.failed_cell),
                         GpumemMagics(shell, self.settings))
        self.cell_numbers = cell_numbers(shell)
        self.forget_error = error_forgetter(shell)
        self.draw_traceback = traceback_drawer(shell)
        self.edited_cells = EditedCells(shell)
        self.cell_widgets = CellWidgets(shell)
        self.lab = lab_link(shell, self.settings, self.edited_cells)


#: One per shell; loading again is a no-op.
_loaded: dict[int, Loaded] = {}


def loaded(shell: Any) -> Loaded | None:
    """What the extension registered in ``shell``, or None when it is not loaded there."""
    return _loaded.get(id(shell))


def load(shell: Any) -> None:
    """Register the magics once per shell; a second call does nothing."""
    if id(shell) in _loaded:
        return
    here = Loaded(shell)
    for family in here.families:
        shell.register_magics(family)
    shell.input_transformers_cleanup.append(awaiting_magic_cells(shell))
    locations.register_cell_numbers(here.cell_numbers)
    tracebacks.register_drawer(here.draw_traceback)
    tracebacks.error_holders.append(here.forget_error)
    register_hooks(here.failed_cell)
    here.edited_cells.install()
    here.cell_widgets.install()
    _loaded[id(shell)] = here
    here.lab.install()


def unload(shell: Any) -> None:
    """Remove what :func:`load` registered; harmless when nothing is loaded."""
    here = _loaded.pop(id(shell), None)
    if here is None:
        return
    here.lab.uninstall()
    unregister_hooks(here.failed_cell)
    here.edited_cells.uninstall()
    cells = sys.modules.get("devinspect.actions.cells")
    if cells is not None:
        cells.forget_pending()  # an edit recorded while loaded never runs after an unload and reload
    here.cell_widgets.uninstall()
    for family in here.families:
        family.close()
    locations.unregister_cell_numbers(here.cell_numbers)
    tracebacks.unregister_drawer(here.draw_traceback)
    if here.forget_error in tracebacks.error_holders:
        tracebacks.error_holders.remove(here.forget_error)
    shell.input_transformers_cleanup[:] = [t for t in shell.input_transformers_cleanup
                                           if not getattr(t, "devinspect", False)]
    manager = shell.magics_manager
    for family in here.families:
        for kind, table in family.magics.items():
            for name in table:
                bound = manager.magics[kind].get(name)
                if getattr(bound, "__self__", None) is family:
                    del manager.magics[kind][name]
        if manager.registry.get(type(family).__name__) is family:
            del manager.registry[type(family).__name__]
    ours = {id(here.settings), *map(id, here.families)}
    shell.configurables[:] = [c for c in shell.configurables if id(c) not in ours]


def release_history_here() -> Any:
    """Release history in the running IPython session (or the last traceback in plain Python)."""
    from .. import actions

    try:
        from IPython import get_ipython
    except ImportError:
        shell = None
    else:
        shell = get_ipython()
    if shell is None:
        return actions.release_traceback()
    return actions.release_history(shell.user_ns, shell.displayhook, shell.user_ns_hidden)
