"""``%%devcheck``: run a cell once under the device check; ``%devcheck --last``: the last
error explained. A failed plain cell's explanation is failed_cell.py's."""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments

from ..runtime import beneath_user_modes
from .cell_runner import AwaitedCells, CheckedCell
from .failed_cell import FailedCellExplainer
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
    """``%%devcheck`` and ``%devcheck --last``."""

    def __init__(self, shell: Any, settings: Any, explainer: FailedCellExplainer):
        super().__init__(shell, settings)
        #: The failed cell's explanation (failed_cell.py), which a report tells what it explained.
        self.explainer = explainer
        self.failed = explainer.failed

    @magic_arguments()
    @argument("-o", "--output", nargs="?", const=True, default=None, metavar="NAME",
              help="Return the report (a CheckReport, with .frame), as %%timeit -o does. "
                   "(-o NAME still stores it in NAME; use -v NAME.)")
    @argument("-v", "--variable", metavar="NAME", help="Store the report in the variable NAME.")
    @argument("-q", "--quiet", action="store_true", help="Show the report only when something was found.")
    @argument("--strict", action="store_true", help="Raise DeviceCheckError when something was found (for tests).")
    @argument("--last", action="store_true",
              help="As a line magic (%%devcheck --last): explain the last error, a device mismatch or out of memory.")
    @no_var_expand  # a name, a path or code is taken as typed: {…} and $x never run
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

    @beneath_user_modes()  # no mode the user left entered sees devinspect's own work
    def _explain_last(self, args: Any) -> Any:
        """``%devcheck --last``: the explanation of the last error, as shown after a failed cell."""
        if not args.last:
            raise UsageError("%devcheck checks a cell: put %%devcheck on the cell's first line "
                             "(or %devcheck --last to explain the last error)")
        from ..diagnose import explanation_of

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
        self.explainer.show(explanation, rerun=None)
        return explanation if args.output else None

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


cell_magic_usage(DevcheckMagics)


def _shortened(text: str, width: int) -> str:
    """``text`` cut at a word to at most ``width`` characters, with an ellipsis where it was cut."""
    return text if len(text) <= width else text[:width - 1].rsplit(" ", 1)[0] + " …"
