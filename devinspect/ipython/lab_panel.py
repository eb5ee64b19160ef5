"""The JupyterLab extension's link, given what it needs from the shell (the IPython side of
:mod:`devinspect.jupyter.lab_link`): the namespace, IPython's own names, the cell ids the
notebook sent, the scan %devices makes, and a refresh after every cell."""

from __future__ import annotations

from typing import Any

from ..jupyter import KernelAccess, LabLink
from .config import DevInspect
from .edited_cells import EditedCells


class LabPanel:
    """Installs the link and its after-cell refresh on one shell."""

    def __init__(self, shell: Any, link: LabLink):
        self.shell, self.link = shell, link

    def install(self) -> None:
        self.link.install()
        if self.after_cell not in self.shell.events.callbacks["post_run_cell"]:
            self.shell.events.register("post_run_cell", self.after_cell)

    def uninstall(self) -> None:
        if self.after_cell in self.shell.events.callbacks["post_run_cell"]:
            self.shell.events.unregister("post_run_cell", self.after_cell)
        self.link.uninstall()

    def after_cell(self, result: Any) -> None:
        try:
            info = result.info
            if info.silent or not info.store_history:
                return
            self.link.after_cell(info.raw_cell or "", result.execution_count)
        except Exception:  # the panel never breaks a cell
            pass


def shell_names(shell: Any) -> list[str]:
    from ..collect import shell_names as names  # imported when first needed (it imports torch)

    return names(shell)


def lab_link(shell: Any, settings: DevInspect, edited_cells: EditedCells) -> LabPanel:
    def scan() -> Any:
        from ..diagnose import scan as scan_namespace

        return scan_namespace(shell.user_ns, include_hidden=bool(settings.include_hidden),
                              exclude=shell_names(shell), max_depth=settings.max_depth, max_items=settings.max_items)

    access = KernelAccess(
        namespace=shell.user_ns,
        shell_names=lambda: shell_names(shell),
        cell_id_of=edited_cells.cell_ids.get,
        apply_kwargs=lambda: {"displayhook": shell.displayhook, "hidden": shell.user_ns_hidden},
        scan=scan,
    )
    return LabPanel(shell, LabLink(access))
