"""The widgets devinspect showed in each cell's output, closed when that output is replaced.

A notebook clears a cell's output when the cell runs again, but the kernel keeps every
widget until it is closed: a ``%devices`` cell run 30 times kept 30 explorers (hundreds of
widgets each) alive. Each widget view devinspect displays is filed under the notebook's id
of the cell whose output shows it (``metadata.cellId``, which JupyterLab and Notebook 7
send); when that cell runs again, the widgets of its previous output are closed first. A
cell run inside another (a panel that runs its cell where no notebook can) shows its
widgets in the output of the run around it, and its own earlier widgets are closed
before it runs again. Only devinspect's own widgets are closed: a user's are theirs.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable

#: The registry of each shell devinspect is loaded in.
_registries: weakref.WeakKeyDictionary[Any, CellWidgets] = weakref.WeakKeyDictionary()


class CellWidgets:
    def __init__(self, shell: Any):
        self.shell = shell
        #: where widgets go: a cell id, or a key of a run inside a panel; None where no one knows
        self._running: list[Any] = []
        self.by_output: dict[Any, list[Any]] = {}

    def install(self) -> None:
        self.shell.events.register("pre_run_cell", self.before_cell)
        self.shell.events.register("post_run_cell", self.after_cell)
        _registries[self.shell] = self

    def uninstall(self) -> None:
        for event, callback in (("pre_run_cell", self.before_cell), ("post_run_cell", self.after_cell)):
            if callback in self.shell.events.callbacks[event]:
                self.shell.events.unregister(event, callback)
        if _registries.get(self.shell) is self:
            del _registries[self.shell]

    def before_cell(self, info: Any = None) -> None:
        cell_id = getattr(info, "cell_id", None)
        if cell_id is None:
            # A cell run inside another shows in the output of the one around it.
            self._running.append((info, self._running[-1][1] if self._running else None))
            return
        self._running.append((info, cell_id))
        self.close(cell_id)  # the notebook has cleared that output: its widgets go

    def after_cell(self, result: Any = None) -> None:
        info = getattr(result, "info", None)
        if self._running and self._running[-1][0] is info:
            self._running.pop()
        elif getattr(info, "cell_id", None) is not None:
            self.close(info.cell_id)  # an empty cell runs without pre_run_cell; its old output is gone too

    def shown(self, widget: Any) -> None:
        """File ``widget`` (displayed now) under the output it shows in."""
        output = self._running[-1][1] if self._running else None
        if output is not None:
            self.by_output.setdefault(output, []).append(widget)

    def close(self, output: Any) -> int:
        """Close the widgets shown in ``output``; how many widgets were closed."""
        shown = self.by_output.pop(output, None)
        if not shown:
            return 0
        try:
            from ..jupyter import close_all

            return close_all(shown)
        except Exception:  # a widget that cannot close must not stop the cell
            return 0

    def run_here(self, run: Callable[[], Any]) -> Callable[[], Any]:
        """``run`` (a run of a cell inside a panel), closing what its previous call showed, and
        filing what this one shows under the panel's run."""
        key = object()

        def again() -> Any:
            self.close(key)
            self._running.append((None, key))
            try:
                return run()
            finally:
                self._running.pop()

        return again


def shown(shell: Any, widget: Any) -> None:
    """Note that ``widget`` was displayed in the output of the cell ``shell`` runs now."""
    registry = _registries.get(shell)
    if registry is not None:
        registry.shown(widget)


def run_here(shell: Any, run: Callable[[], Any]) -> Callable[[], Any]:
    """See :meth:`CellWidgets.run_here`; ``run`` itself where the extension is not loaded."""
    registry = _registries.get(shell)
    return registry.run_here(run) if registry is not None else run
