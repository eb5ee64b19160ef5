"""The edited text of a cell whose fix was applied runs when that cell runs again.

Apply fix on an edit of the failed cell records the edit (:mod:`devinspect.actions.cells`).
The notebook still holds the old text and sends it when the cell runs again. The kernel
cannot change the editor; it can ask the notebook to (``set_next_input`` with
``replace=True`` on the execute reply), and JupyterLab honours that only on a reply whose
status is ok. So the edit is made where a cell enters the shell, before IPython reads it:
``shell.run_cell`` and ``shell.run_cell_async`` get the edited text as their raw cell. Every
path ipykernel and IPython take goes through one of them (ipykernel calls ``run_cell`` on
its synchronous path and ``run_cell_async`` with a cell it transformed itself on its async
path; ``run_cell`` hands its own transform to ``run_cell_async``), and whatever reads the
cell after that (the input transformers, the compiler, the history, the traceback's source
lines) reads the text that runs.

An edit stays pending until a run of it succeeds (the notebook then shows the edited text),
so the old text in the editor keeps running as edited while it fails for another reason; a
run of the same cell with any other text (the user typed) drops it. A cell is the
notebook's cell id where the front end sends one (JupyterLab's ``metadata.cellId``), and the
cell's exact text everywhere.
"""

from __future__ import annotations

import functools
import sys
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..actions import PendingEdit

#: The module that records edits: until something imported it, no cell has an edit to run.
_EDITS = "devinspect.actions.cells"

#: Execution counts whose cell ids are kept (a cell edited longer ago runs by its text alone).
_REMEMBERED_RUNS = 2000


class EditedCells:
    """Installs the two entry points on one shell (instance attributes, put back on uninstall)."""

    def __init__(self, shell: Any):
        self.shell = shell
        #: execution count -> the notebook's id of the cell that ran under it
        self.cell_ids: OrderedDict[int, str] = OrderedDict()
        self._before: dict[str, tuple[bool, Any, Any]] = {}  # name -> (had its own, before, ours)
        self._handed_on: str | None = None  # the edited text run_cell passes on to run_cell_async

    # -- installing ------------------------------------------------------------------

    def install(self) -> None:
        if self._before:
            return
        shell = self.shell
        for name, make in (("run_cell", self._sync_entry), ("run_cell_async", self._async_entry)):
            before = getattr(shell, name, None)
            if before is None:
                continue
            ours = functools.wraps(before)(make(before))  # the same signature, for ipykernel's parameter check
            ours.inert = False
            self._before[name] = (name in shell.__dict__, before, ours)
            setattr(shell, name, ours)

    def uninstall(self) -> None:
        shell = self.shell
        for name, (had_own, before, ours) in self._before.items():
            if shell.__dict__.get(name) is ours:
                if had_own:
                    setattr(shell, name, before)
                else:
                    delattr(shell, name)
            else:  # another wrapper came after ours and calls it: it only passes the cell on now
                ours.inert = True
        self._before.clear()

    # -- the two entry points ---------------------------------------------------------

    def _sync_entry(self, before: Any) -> Any:
        def run_cell(raw_cell: Any, *args: Any, **kwargs: Any) -> Any:
            chain = self._chain(run_cell, raw_cell, kwargs)
            if not chain:
                return self._remembered(before(raw_cell, *args, **kwargs))
            edited = chain[-1].edited
            self._handed_on = edited
            try:
                result = before(edited, *args, **kwargs)
            finally:
                self._handed_on = None
            return self._ran(chain, self._remembered(result))

        return run_cell

    def _async_entry(self, before: Any) -> Any:
        async def run_cell_async(raw_cell: Any, *args: Any, **kwargs: Any) -> Any:
            chain = self._chain(run_cell_async, raw_cell, kwargs)
            if not chain:
                return self._remembered(await before(raw_cell, *args, **kwargs))
            edited = chain[-1].edited
            if kwargs.get("transformed_cell") is not None:
                # Transformed by the caller from the old text: transformed again from the text that runs.
                try:
                    kwargs["transformed_cell"], kwargs["preprocessing_exc_tuple"] = self.shell.transform_cell(edited), None
                except Exception:  # IPython shows it as the cell's error, as for any cell
                    kwargs["transformed_cell"], kwargs["preprocessing_exc_tuple"] = edited, sys.exc_info()
            return self._ran(chain, self._remembered(await before(edited, *args, **kwargs)))

        return run_cell_async

    # -- what runs ---------------------------------------------------------------------

    def _chain(self, entry: Any, raw_cell: Any, kwargs: dict) -> list[PendingEdit]:
        """The pending edits that turn ``raw_cell`` into the text to run, in order (an edit of the
        edited text follows the first); forgets the edits of this cell that no longer apply."""
        cells = sys.modules.get(_EDITS)
        if cells is None or entry.inert or type(raw_cell) is not str or raw_cell is self._handed_on:
            return []
        try:
            pending = cells.pending_edits()
            if not pending:
                return []
            cell_id = kwargs.get("cell_id")
            ids = self.cell_ids

            def same_cell(edit: PendingEdit) -> bool:
                known = ids.get(edit.cell) if edit.cell is not None else None
                return known is None or cell_id is None or known == cell_id

            chain: list[PendingEdit] = []
            text = raw_cell.rstrip()
            while True:
                edit = next((e for e in reversed(pending) if e.original == text and same_cell(e) and e not in chain),
                            None)
                if edit is None:
                    break
                chain.append(edit)
                text = edit.edited.rstrip()
            if cell_id is not None:
                for edit in pending:
                    if edit not in chain and edit.cell is not None and ids.get(edit.cell) == cell_id:
                        cells.forget(edit)  # the cell now runs other text: that edit is of text gone
                        print(f"devinspect: the edit Apply fix recorded for this cell (Cell In[{edit.cell}]) was "
                              "dropped: you changed the cell since, so it runs as you wrote it", file=sys.stderr)
            return chain
        except Exception:  # never break a cell: it runs as sent
            return []

    def _remembered(self, result: Any) -> Any:
        """Note which notebook cell ran under the result's execution count."""
        try:
            info = result.info
            if info.store_history and not info.silent and info.cell_id is not None \
                    and isinstance(result.execution_count, int):
                self.cell_ids[result.execution_count] = info.cell_id
                while len(self.cell_ids) > _REMEMBERED_RUNS:
                    self.cell_ids.popitem(last=False)
        except Exception:  # an older IPython's result without these fields
            pass
        return result

    def _ran(self, chain: list[PendingEdit], result: Any) -> Any:
        """After the edited text ran: the notebook is asked to show it; a run that succeeded
        ends the edit, one that failed keeps it for the next run of the text the editor holds."""
        cells = sys.modules[_EDITS]
        edited = chain[-1].edited
        try:
            self.shell.set_next_input(edited, replace=True)
            if getattr(result, "success", False):
                for edit in chain:
                    cells.forget(edit)
            else:
                first = chain[0]
                print(f"devinspect: this run ran the cell as Apply fix edited it (Cell In[{first.cell}]); where the "
                      "notebook still shows the earlier text, the edited text runs again on the next run of this cell",
                      file=sys.stderr)
        except Exception:  # the cell's own outcome stands
            pass
        return result
