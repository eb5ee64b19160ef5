"""``%%devcheck``: run a cell once under the device check; ``%devcheck --last`` and the
explanation shown under a failed plain cell."""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .cell_runner import AwaitedCells, CheckedCell
from .failed_cells import FailedCells
from .magic_support import (
    DevInspectMagics,
    caller_result_use,
    calling_frame,
    cell_magic_usage,
    event_loop_running,
    variable_name,
)


@magics_class
class DevcheckMagics(DevInspectMagics, AwaitedCells):
    """``%%devcheck``, ``%devcheck --last``, and explanations after a failed cell."""

    def __init__(self, shell: Any, settings: Any):
        super().__init__(shell, settings)
        #: The failed cell's explanation, from its traceback's pointer line to its display.
        self.failed = FailedCells()
        self._running_cell: str | None = None  # the raw text of the cell now running (for its Re-run)
        self._set_event("pre_run_cell", self._note_running_cell, True)

    @magic_arguments()
    @argument("-o", "--output", nargs="?", const=True, default=None, metavar="NAME",
              help="Return the report (a CheckReport, with .frame), as %%timeit -o does. "
                   "(-o NAME still stores it in NAME; use -v NAME.)")
    @argument("-v", "--variable", metavar="NAME", help="Store the report in the variable NAME.")
    @argument("-q", "--quiet", action="store_true", help="Show the report only when something was found.")
    @argument("--strict", action="store_true", help="Raise DeviceCheckError when something was found (for tests).")
    @argument("--last", action="store_true",
              help="As a line magic (%%devcheck --last): explain the last error, a device mismatch or out of memory.")
    @line_cell_magic
    def devcheck(self, line: str, cell: str | None = None) -> Any:
        """Run the cell once under a device check: name the variables behind a device
        mismatch, and count host↔device copies and host syncs per source line.

        The cell runs as it would without the check: the same namespace, history,
        output, value and errors (an error, an interrupt or a SyntaxError fails the
        cell, so "Run All" stops there). When it raises a device-mismatch error, the
        report above the traceback names each input as you wrote it (``x``,
        ``model.fc1.weight``, ``mask`` in ``forward``) and gives the fix once, with an
        Apply fix button in Jupyter. Copies and syncs are counted for ``.to()``,
        ``.cpu()``, ``.item()``, ``float()``/``bool()`` of tensors, ``.tolist()``,
        printing, ``nonzero`` and boolean-mask indexing, on the line of your code that
        made them (also inside library calls); round trips, syncs in loops, repeated
        copies of the same tensor and non-blocking copies from unpinned memory are flagged.

        Examples::

            %%devcheck
            for x, y in loader:
                loss = loss_fn(model(x.to(device)), y.to(device))
                print(loss.item())

            %%devcheck -v report --quiet
            train_one_epoch()

            %devcheck --last           # explain the error the last cell raised
        """
        __tracebackhide__ = True  # the user's traceback starts in their cell, not here
        args = self._devcheck_args(line)
        if cell is None:
            return self._explain_last(args)
        if args.last:
            raise UsageError("%%devcheck: --last explains the last error and takes no cell; "
                             "use %devcheck --last on a line of its own")
        run = CheckedCell(self.shell, args, line, cell, self.failed.report_explained)
        if run.needs_await and event_loop_running():
            # Only reached when the cell was not rewritten by awaiting_magic_cells (a direct call).
            raise UsageError("%%devcheck: this cell awaits; run it as a cell (%%devcheck on its first line) "
                             "so the kernel can run it on its event loop")
        return run.run()

    async def devcheck_async(self, line: str, cell: str) -> Any:
        """``%%devcheck`` for a cell with top-level ``await``, run on the kernel's event loop.

        A %%devcheck cell whose body awaits is rewritten (by an input transformer that
        loading the extension registers) into ``await`` of this method, so the kernel
        runs it as an async cell instead of blocking its own loop.
        """
        __tracebackhide__ = True
        run = CheckedCell(self.shell, self._devcheck_args(line), line, cell, self.failed.report_explained)
        self._async_outcome = await run.run_async()

    def _explain_last(self, args: Any) -> Any:
        """``%devcheck --last``: the explanation of the last error, as shown after a failed cell."""
        if not args.last:
            raise UsageError("%devcheck checks a cell: put %%devcheck on the cell's first line "
                             "(or %devcheck --last to explain the last error)")
        from ..diagnose.errors.explainer import explanation_of

        variable_name("%devcheck", args.variable, self.shell)
        error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if error is None:
            raise UsageError("%devcheck --last: no error to explain (no cell has failed, or its traceback "
                             "was released)")
        if isinstance(error, UsageError):  # IPython keeps a magic's usage error as the last error too
            raise UsageError("%devcheck --last: the last error was a magic's usage error "
                             f"({_shortened(str(error).splitlines()[0], 80)}), not a failed computation: nothing to explain")
        made = self.failed.last_for(error)
        if made is not None and (made.mismatch or made.device_error) is not None:
            # A mismatch is explained from the failing call's operands: as they were when the cell
            # failed, not from whatever the same names hold now (y = y.to(dev) since then).
            explanation = made
        else:
            explanation = explanation_of(error, self.shell.user_ns, exclude=self._ipython_names())
        if args.variable:
            self.shell.user_ns[args.variable] = explanation
        if args.output and caller_result_use(calling_frame()) != "dropped":
            return explanation  # IPython shows it, once, or the code keeps it
        self._show_explanation(explanation, rerun=None)
        return explanation if args.output else None

    def _explain_after_cell(self, result: Any = None) -> None:
        """After a failed cell: explain a device error or an out-of-memory error under its
        traceback. Any other outcome returns at once (no mode, no hook in the cell itself)."""
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
            explanation = early if made else self._explanation(error, torch)
            self.failed.remember(error, explanation)
            if not self.failed.take_shown_above(error) and explanation:
                raw = getattr(getattr(result, "info", None), "raw_cell", None)
                self._show_explanation(explanation, rerun=raw)
        except Exception as exc:  # explaining must never add an error of its own
            print(f"devinspect: could not explain the error ({type(exc).__name__}: {exc})", file=sys.stderr)

    def _explanation(self, error: BaseException, torch: Any) -> Any:
        from ..diagnose.errors.explainer import explanation_of

        # Only the out-of-memory scan needs IPython's own names (a walk of the namespace).
        exclude = self._ipython_names() if isinstance(error, torch.OutOfMemoryError) else ()
        return explanation_of(error, self.shell.user_ns, exclude=exclude)

    def _note_running_cell(self, info: Any = None) -> None:
        self._running_cell = getattr(info, "raw_cell", None)
        self.failed.new_cell()

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
        self._show_explanation(early, rerun=self._running_cell)
        return None

    def pointer_line(self, error: BaseException) -> str | None:
        """One line for the top of the traceback, pointing at the explanation printed after it."""
        torch = sys.modules.get("torch")
        # Device errors raise RuntimeError (a mismatch, pinning, a worker, a generator) or TypeError
        # (a device tensor read as a NumPy array); anything else returns here at once.
        if torch is None or not self.settings.explain_errors or self.failed.was_reported(error) \
                or not isinstance(error, (RuntimeError, TypeError, torch.OutOfMemoryError)):
            return None
        try:
            explanation = self._explanation(error, torch)
        except Exception:  # the after-cell step says why, once
            return None
        self.failed.made_early(error, explanation)
        if not explanation:
            return None
        from ..render.explanation_text import headline

        return headline(explanation) or None

    def _show_explanation(self, explanation: Any, rerun: str | None) -> None:
        from IPython.display import display

        shell = self.shell
        display(explanation)
        if getattr(shell, "kernel", None) is not None and any(f.action is not None for f in explanation.fixes):
            # A widget frontend: the fixes as buttons (then a re-run of the failed cell).
            try:
                from ..jupyter.fix_panel import explanation_panel
            except ImportError:  # no ipywidgets: the static output is complete
                return
            from .cell_widgets import run_here, shown

            again = run_here(shell, lambda: shell.run_cell(rerun)) if rerun else None
            panel = explanation_panel(explanation, shell.user_ns, again, shell=shell)
            display(panel)
            shown(shell, panel)

    def _devcheck_args(self, line: str) -> Any:
        args = self._parse(self.devcheck, line)
        if isinstance(args.output, str):
            if args.variable:
                raise UsageError("%%devcheck: -o NAME and -v NAME both store the report; use -v NAME")
            print(f"%%devcheck: -o NAME is deprecated; use -v {args.output} (stores the report), "
                  "or -o alone (returns it)")
            args.variable, args.output = args.output, None
        variable_name("%%devcheck", args.variable, self.shell)
        return args

    def close(self) -> None:
        self._set_event("post_run_cell", self._explain_after_cell, False)
        self._set_event("pre_run_cell", self._note_running_cell, False)


cell_magic_usage(DevcheckMagics)


def _shortened(text: str, width: int) -> str:
    """``text`` cut at a word to at most ``width`` characters, with an ellipsis where it was cut."""
    return text if len(text) <= width else text[:width - 1].rsplit(" ", 1)[0] + " …"
