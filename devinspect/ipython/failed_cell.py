"""A failed cell, in one place: the line drawn at the top of its traceback, its explanation
shown above the traceback (a notebook) or after it (a terminal), made once, shown once, and
kept for ``%devcheck --last``. The extension registers the hooks with :func:`register_hooks`
(and removes them with :func:`unregister_hooks`); ``%%devcheck`` shares the record of what
was said, so its own report is not repeated after the cell."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable

from ..runtime import beneath_user_modes


@dataclass
class FailedCells:
    """What devinspect has done about the error of the cell that failed, keyed by the error's
    identity (a cell that fails again raises a new error object)."""

    #: The error a ``%%devcheck`` report explained already: the cell's end says nothing more.
    reported: int = 0
    #: (error, explanation) made while the traceback was drawn, for the cell's end to show.
    early: tuple[int, Any] | None = None
    #: The error whose explanation went above its traceback (a notebook): not shown again.
    shown_above: int = 0
    #: (error, explanation) made when the cell failed: what ``%devcheck --last`` shows for it.
    last: tuple[int, Any] | None = None

    def new_cell(self) -> None:
        self.shown_above = 0

    def report_explained(self, error: BaseException) -> None:
        """A ``%%devcheck`` report explained ``error``: the explanation after the cell does not repeat it."""
        self.reported = id(error)

    def was_reported(self, error: BaseException) -> bool:
        return id(error) == self.reported

    def take_reported(self, error: BaseException) -> bool:
        """Whether a report explained ``error``; forgotten once asked after its cell."""
        if id(error) != self.reported:
            return False
        self.reported = 0
        return True

    def made_early(self, error: BaseException, explanation: Any) -> None:
        self.early = (id(error), explanation)

    def early_for(self, error: BaseException) -> Any | None:
        """The explanation made while ``error``'s traceback was drawn, if it was."""
        return self.early[1] if self.early is not None and self.early[0] == id(error) else None

    def take_early(self, error: BaseException) -> tuple[bool, Any]:
        """(whether one was made, the explanation) for ``error``, forgotten after the cell."""
        early, self.early = self.early, None
        return (True, early[1]) if early is not None and early[0] == id(error) else (False, None)

    def show_above(self, error: BaseException) -> None:
        self.shown_above = id(error)

    def take_shown_above(self, error: BaseException) -> bool:
        shown, self.shown_above = self.shown_above, 0
        return shown == id(error)

    def remember(self, error: BaseException, explanation: Any) -> None:
        self.last = (id(error), explanation) if explanation else None

    def last_for(self, error: BaseException) -> Any | None:
        """The explanation made when ``error``'s cell failed (from the operands as they were then)."""
        return self.last[1] if self.last is not None and self.last[0] == id(error) else None


class TracebackPointer:
    """What goes before a failed cell's traceback: the explanation (in a notebook), or a
    one-line pointer to the explanation after it (in a terminal).

    The shell draws a traceback through ``_showtraceback(etype, value, stb)``: the terminal
    prints ``stb``, a kernel sends it as the error's ``traceback``. The hook is called first: it
    may display outputs (they reach a notebook before the error output does), and the line it
    returns is put before ``stb``: IPython's traceback stays whole and in place, the exception is untouched,
    and a handler another extension installed with ``set_custom_exc`` is never involved
    (errors it handles never reach ``_showtraceback``). Whatever ``_showtraceback`` was before
    (ipykernel's, or another extension's wrapper) is called with the longer list and put back
    on unload.
    """

    def __init__(self, shell: Any, pointer_line: Callable[[BaseException], str | None]):
        self.shell, self.pointer_line = shell, pointer_line
        self._had_own: bool | None = None  # whether the shell had its own instance attribute before
        self._before: Any = None

    def install(self) -> None:
        if self._had_own is not None:
            return
        self._had_own = "_showtraceback" in self.shell.__dict__
        self._before = self.shell._showtraceback
        self.shell._showtraceback = self.show

    def uninstall(self) -> None:
        if self._had_own is None:
            return
        if self.shell.__dict__.get("_showtraceback") == self.show:
            if self._had_own:
                self.shell._showtraceback = self._before
            else:
                del self.shell._showtraceback
        self._had_own = None

    def show(self, etype: Any, evalue: Any, stb: Any) -> Any:
        try:
            line = self.pointer_line(evalue) if isinstance(evalue, BaseException) else None
        except Exception:  # a pointer must never cost the user their traceback
            line = None
        if line and isinstance(stb, list):
            # Plain and Minimal modes end each entry with its newline (the terminal joins them
            # with nothing); the other modes leave the joining to whoever draws them.
            ends = bool(stb) and isinstance(stb[0], str) and stb[0].endswith("\n")
            stb = [line + "\n" if ends else line, *stb]
        return self._before(etype, evalue, stb)


class FailedCellExplainer:
    """The explanation of a failed cell in one shell: a device error or an out-of-memory error
    explained once, from the moment its traceback is drawn to the end of its cell."""

    def __init__(self, shell: Any, settings: Any):
        self.shell, self.settings = shell, settings
        #: What has been made and shown for the error of the cell that failed.
        self.failed = FailedCells()
        #: Draws the pointer line (or, in a notebook, the explanation) before the traceback.
        self.pointer = TracebackPointer(shell, self.before_traceback)
        self._running_cell: str | None = None  # the raw text of the cell now running (for its Re-run)

    def note_running_cell(self, info: Any = None) -> None:
        """Before each cell (``pre_run_cell``): its text, for the Re-run button of its explanation."""
        self._running_cell = getattr(info, "raw_cell", None)
        self.failed.new_cell()

    @beneath_user_modes()  # no mode the user left entered sees devinspect's own work
    def explain_after_cell(self, result: Any = None) -> None:
        """After a failed cell (``post_run_cell``): explain a device error or an out-of-memory
        error under its traceback. Any other outcome returns at once (no mode, no hook in the
        cell itself)."""
        error = getattr(result, "error_in_exec", None)
        if error is None or not self.settings.explain_errors:
            return
        if self.failed.take_reported(error):  # a %%devcheck report already said it
            return
        torch = sys.modules.get("torch")
        if torch is None:  # no tensor anywhere: nothing to explain, and no import of torch to pay for
            return
        try:
            made, early = self.failed.take_early(error)
            explanation = early if made else self.explanation(error, torch)
            self.failed.remember(error, explanation)
            if not self.failed.take_shown_above(error) and explanation:
                raw = getattr(getattr(result, "info", None), "raw_cell", None)
                self.show(explanation, rerun=raw)
        except Exception as exc:  # explaining must never add an error of its own
            print(f"devinspect: could not explain the error ({type(exc).__name__}: {exc})", file=sys.stderr)

    def explanation(self, error: BaseException, torch: Any) -> Any:
        from ..collect import shell_names
        from ..diagnose import explanation_of

        # Only the out-of-memory scan needs IPython's own names (a walk of the namespace).
        exclude = shell_names(self.shell) if isinstance(error, torch.OutOfMemoryError) else ()
        return explanation_of(error, self.shell.user_ns, exclude=exclude)

    @beneath_user_modes()  # no mode the user left entered sees devinspect's own work
    def before_traceback(self, error: BaseException) -> str | None:
        """Called as the shell draws ``error``'s traceback (a model call's is 60 lines of torch
        frames: the help must not hide under them). In a notebook the explanation, its fix and
        its buttons are shown now, as outputs above the traceback; in a terminal, which prints
        each output in turn, the explanation follows the traceback and the line returned here
        goes at its top, pointing there."""
        line = self.pointer_line(error)
        early = self.failed.early_for(error)
        if line is None or early is None or getattr(self.shell, "kernel", None) is None:
            return line
        self.failed.show_above(error)
        self.show(early, rerun=self._running_cell)
        return None

    @beneath_user_modes()  # no mode the user left entered sees devinspect's own work
    def pointer_line(self, error: BaseException) -> str | None:
        """One line for the top of the traceback, pointing at the explanation printed after it."""
        torch = sys.modules.get("torch")
        # Device errors raise RuntimeError (a mismatch, pinning, a worker, a generator) or TypeError
        # (a device tensor read as a NumPy array); anything else returns here at once.
        if torch is None or not self.settings.explain_errors or self.failed.was_reported(error):
            return None
        from ..diagnose import chained_errors

        # (or a library's own error raised from one of them: its chain holds the error the call raised)
        if not any(isinstance(e, (RuntimeError, TypeError, torch.OutOfMemoryError)) for e, _ in chained_errors(error)):
            return None
        try:
            explanation = self.explanation(error, torch)
        except Exception:  # the after-cell step says why, once
            return None
        self.failed.made_early(error, explanation)
        if not explanation:
            return None
        from ..render import headline

        return headline(explanation) or None

    def show(self, explanation: Any, rerun: str | None) -> None:
        """Display an explanation; in a widget frontend, its fixes as buttons, then Re-run of ``rerun``."""
        from IPython.display import display

        shell = self.shell
        display(explanation)
        if getattr(shell, "kernel", None) is not None and any(f.action is not None for f in explanation.fixes):
            # A widget frontend: the fixes as buttons (then a re-run of the failed cell).
            try:
                from ..jupyter import explanation_panel
            except ImportError:  # no ipywidgets: the static output is complete
                return
            from .cell_widgets import run_here, shown

            again = run_here(shell, lambda: shell.run_cell(rerun)) if rerun else None
            panel = explanation_panel(explanation, shell.user_ns, again, shell=shell)
            display(panel)
            shown(shell, panel)


def register_hooks(explainer: FailedCellExplainer) -> None:
    """Register the explainer's hooks in its shell: before each cell, as a traceback is drawn,
    and after each cell."""
    explainer.shell.events.register("pre_run_cell", explainer.note_running_cell)
    explainer.shell.events.register("post_run_cell", explainer.explain_after_cell)
    explainer.pointer.install()


def unregister_hooks(explainer: FailedCellExplainer) -> None:
    """Remove what :func:`register_hooks` registered; harmless when it is not registered."""
    explainer.pointer.uninstall()
    for event, callback in (("post_run_cell", explainer.explain_after_cell),
                            ("pre_run_cell", explainer.note_running_cell)):
        if callback in explainer.shell.events.callbacks[event]:
            explainer.shell.events.unregister(event, callback)
