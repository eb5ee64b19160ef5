"""The kernel's end of devinspect's JupyterLab extension: one comm, target ``devinspect``.

Either end may open it. Loading devinspect opens one towards the front end (it answers
``hello`` when the extension is there); the extension opens one when it meets a kernel
(a page loaded later, a kernel started with devinspect). Until a front end has said hello,
nothing is read or sent after a cell: a kernel driven by nbclient, VS Code or a terminal pays
nothing, and everything works as without the extension.

After a cell: the accelerators' allocated / reserved / peak bytes and whether the namespace
may have changed (both O(names), :mod:`devinspect.jupyter.lab_state`). The front end asks
for the findings and the largest tensors when it shows them, and the walk runs then, as its
own request. Apply fix in the panel runs :func:`devinspect.actions.apply_fix`. An edit of a
cell made by any Apply fix (under a failed cell, in ``%devices``, in the panel) is sent as
``edit`` once the action has finished; the front end replaces the cell's text in its editor
and says which cells it changed, and the kernel forgets those edits (the editor holds them
now, and an undo there must not bring them back at the next run).

Messages, kernel to front end: ``loaded``, ``memory``, ``scan``, ``applied``, ``edit``;
front end to kernel: ``hello``, ``scan``, ``apply``, ``edited``.
"""

from __future__ import annotations

import asyncio
import difflib
import itertools
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, MutableMapping

from ..runtime import edit_sinks
from ..version import __version__
from .lab_state import NamespaceWatch, device_memory, scan_state

if TYPE_CHECKING:
    from ..actions import PendingEdit

TARGET = "devinspect"
#: Cells whose allocated bytes the panel's history shows.
HISTORY = 60


@dataclass
class KernelAccess:
    """What the link needs from the shell, handed over by the IPython layer."""

    namespace: MutableMapping[str, Any]
    #: IPython's own names (In, Out, _3 …), never walked
    shell_names: Callable[[], list[str]]
    #: the notebook's id of the cell that ran under an execution count, if known
    cell_id_of: Callable[[int], str | None]
    #: keyword arguments for :func:`devinspect.actions.apply_fix` (the displayhook, hidden names)
    apply_kwargs: Callable[[], dict[str, Any]]
    #: the scan behind the panel (:func:`devinspect.scan` with the magics' settings)
    scan: Callable[[], Any]


class LabLink:
    """Every comm of one kernel to devinspect's front end, and what it has been sent."""

    def __init__(self, kernel: KernelAccess):
        self.kernel = kernel
        self.comms: list[Any] = []  # comms whose front end said hello
        self._opened: list[Any] = []  # every comm of ours, live or not
        self.history: deque[dict[str, Any]] = deque(maxlen=HISTORY)
        self.watch = NamespaceWatch()
        self.stale = True
        self._findings: tuple[Any, ...] = ()
        self._queued: list[PendingEdit] = []
        self._serial = itertools.count(1)
        self._manager: Any = None

    # -- installing ----------------------------------------------------------------------

    def install(self) -> None:
        try:
            import comm
        except ImportError:  # no Jupyter kernel around: nothing to link to
            return
        try:
            self._manager = comm.get_comm_manager()
            self._manager.register_target(TARGET, self._opened_by_front_end)
            opened = comm.create_comm(target_name=TARGET, data={"type": "loaded", "version": __version__})
        except Exception:  # a shell without a kernel (terminal IPython) has no front end
            return
        self._track(opened)
        edit_sinks.add(self)

    def uninstall(self) -> None:
        edit_sinks.remove(self)
        if self._manager is not None:
            try:
                self._manager.unregister_target(TARGET, self._opened_by_front_end)
            except Exception:
                pass
        for opened in self._opened:
            try:
                opened.close(data={"type": "unloaded"})
            except Exception:
                pass
        self._opened.clear()
        self.comms.clear()

    def _opened_by_front_end(self, opened: Any, msg: dict) -> None:
        self._track(opened)
        self._received(opened, msg)

    def _track(self, opened: Any) -> None:
        self._opened.append(opened)
        opened.on_msg(lambda msg: self._received(opened, msg))
        opened.on_close(lambda _msg: self._closed(opened))

    def _closed(self, opened: Any) -> None:
        self._opened = [c for c in self._opened if c is not opened]
        self.comms = [c for c in self.comms if c is not opened]

    # -- after every cell ------------------------------------------------------------------

    def after_cell(self, cell_text: str, execution_count: int | None) -> None:
        """Send the accelerators' memory (and whether the findings may be stale) to the front end."""
        if not self.comms:
            return
        devices = device_memory()
        if self.watch.changed(self.kernel.namespace, cell_text, self.kernel.shell_names()):
            self.stale = True
        self.history.append({"count": execution_count, "allocated": {d["device"]: d["allocated"] for d in devices}})
        self._send({"type": "memory", "devices": devices, "history": list(self.history), "stale": self.stale,
                    "count": execution_count})

    # -- what the front end asks -------------------------------------------------------------

    def _received(self, opened: Any, msg: dict) -> None:
        data = (msg.get("content") or {}).get("data") or {}
        kind = data.get("type")
        if kind == "hello":
            if opened not in self.comms:
                self.comms.append(opened)
            opened.send({"type": "memory", "devices": device_memory(), "history": list(self.history),
                         "stale": True, "count": None})
        elif kind == "scan":
            self.send_scan(opened, str(data.get("filter") or ""))
        elif kind == "apply":
            self._apply(opened, data.get("index"))
        elif kind == "edited":
            from ..actions import cells as cell_edits  # an edit was made: actions are loaded already

            done = set(data.get("cells") or ())
            for edit in cell_edits.pending_edits():
                if edit.cell is not None and self.kernel.cell_id_of(edit.cell) in done:
                    cell_edits.forget(edit)  # the editor holds it now; its undo must stay an undo

    def send_scan(self, opened: Any, text_filter: str) -> None:
        started = time.perf_counter()
        try:
            result = self.kernel.scan()
            state = scan_state(result, text_filter)
            self._findings = tuple(result.findings)
            state["ms"] = round((time.perf_counter() - started) * 1000, 1)
        except Exception as exc:  # said in the panel, never raised into the session
            state = {"type": "scan", "error": f"{type(exc).__name__}: {exc}", "findings": [], "tensors": [],
                     "matching": 0, "total": 0, "filter": text_filter}
        self.stale = False
        opened.send(state)

    def _apply(self, opened: Any, index: Any) -> None:
        from .. import actions

        if not isinstance(index, int) or not 0 <= index < len(self._findings) or self._findings[index].fix is None:
            opened.send({"type": "applied", "index": index, "ok": False,
                         "message": "that finding is gone: the panel shows the findings again (nothing was changed)"})
            return
        from .fix_buttons import shown_in_editors

        fix = self._findings[index].fix
        try:
            result = actions.apply_fix(self.kernel.namespace, fix.action, **self.kernel.apply_kwargs())
            ok, message = result.ok, result.message + shown_in_editors(fix, result)
        except Exception as exc:
            ok, message = False, f"{type(exc).__name__}: {exc}"
        opened.send({"type": "applied", "index": index, "ok": ok, "message": message})
        self.stale = True
        self._send({"type": "memory", "devices": device_memory(), "history": list(self.history), "stale": True,
                    "count": None})

    # -- the edit sink (devinspect.actions.cells) -----------------------------------------------

    def offer(self, edit: PendingEdit) -> bool:
        if not self.comms or edit.cell is None or self.kernel.cell_id_of(edit.cell) is None:
            return False
        if not self._queued:
            _soon(self._flush)
        self._queued.append(edit)
        return True

    def withdraw(self, edit: PendingEdit) -> None:
        self._queued = [e for e in self._queued if e is not edit]

    def _flush(self) -> None:
        queued, self._queued = self._queued, []
        if not queued:
            return
        cells = []
        for edit in queued:
            cells.append({"cell_id": self.kernel.cell_id_of(edit.cell), "count": edit.cell, "old": edit.original,
                          "new": edit.edited, "lines": changed_lines(edit.original, edit.edited)})
        self._send({"type": "edit", "edit_id": f"{id(self)}-{next(self._serial)}", "cells": cells})

    def _send(self, data: dict[str, Any]) -> None:
        for opened in list(self.comms):
            try:
                opened.send(data)
            except Exception:  # a comm whose front end went away
                self._closed(opened)


def changed_lines(old: str, new: str) -> list[int]:
    """The lines of ``new`` (1-based) that are not in ``old`` as they were."""
    lines: list[int] = []
    matcher = difflib.SequenceMatcher(a=old.split("\n"), b=new.split("\n"), autojunk=False)
    for tag, _i1, _i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "insert"):
            lines.extend(range(j1 + 1, j2 + 1))
    return lines


def _soon(callback: Callable[[], None]) -> None:
    """Run ``callback`` once the request being handled has finished (a whole Apply fix, all its
    steps, committed or undone); at once where no event loop runs (a terminal, a test)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None:
        try:
            from tornado.ioloop import IOLoop  # ipykernel's own loop, when it calls us outside a coroutine

            IOLoop.current(instance=False).add_callback(callback)  # type: ignore[union-attr]
            return
        except Exception:
            callback()
            return
    loop.call_soon(callback)
