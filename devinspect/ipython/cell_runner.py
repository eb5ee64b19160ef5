"""Running a ``%%devcheck`` cell the way IPython runs a plain cell, under the device check."""

from __future__ import annotations

import re
import sys
import time
from typing import Any, Callable

from ..runtime import beneath_user_modes, tracebacks
from .magic_support import is_result_type, running_cell_number


class CheckedCell:
    """One %%devcheck run: compiled and run the way IPython runs a cell, under the check.

    The body is compiled here (with the shell's compiler flags, input and AST
    transformers) under the cell's own execution count, so tracebacks and the report
    say "Cell In[N], line L" with the lines as the user sees them (the magic's line is
    line 1). It runs in the user's namespace; its last expression is shown through the
    display hook, as in a plain cell (``;`` suppresses it). Every exception — errors,
    KeyboardInterrupt, SystemExit, a SyntaxError at compile time — propagates out of
    the magic unchanged, so the shell fails the cell exactly as it would without
    the check; the report is shown first.
    """

    #: The cell magic's name, as the cell's first line says it.
    magic = "devcheck"

    def __init__(self, shell: Any, args: Any, line: str, cell: str,
                 explained: Callable[[BaseException], None] | None = None):
        self.shell, self.args, self.line, self.cell = shell, args, line, cell
        self.explained = explained
        self.number = running_cell_number(shell)
        self.source = f"%%{self.magic}{(' ' + line.strip()) if line.strip() else ''}\n{cell}"
        self.transformed = shell.transform_cell(cell)
        self.needs_await = bool(shell.should_run_async(cell, transformed_cell=self.transformed,
                                                       preprocessing_exc_tuple=None))
        self.filename = shell.compile.cache(self.source, self.number, raw_code=self.source)
        self.codes = self._compile()  # a SyntaxError fails the cell before anything runs
        self.mode = self._observer()
        self.start = 0.0

    def _observer(self) -> Any:
        """What watches the cell run: entered before its first statement, left after its last."""
        from ..observe import DeviceCheckMode

        filename = self.filename
        return DeviceCheckMode(self.shell.user_ns, lambda frame: frame.f_code.co_filename == filename
                               and frame.f_code.co_name == "<module>", tidy_tracebacks=True)

    def _transformed(self, tree: Any) -> Any:
        """The cell's syntax tree as it will run (after IPython's own transformers)."""
        return tree

    def _compile(self) -> list[Any]:
        import ast as ast_module

        flags = getattr(ast_module, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0) if self.needs_await else 0
        # A blank first line stands for the magic's line: line numbers are the cell's own.
        tree = self.shell.compile.ast_parse("\n" + self.transformed, filename=self.filename)
        tree = self._transformed(self.shell.transform_ast(tree))
        body = list(tree.body)
        last = None
        if body and isinstance(body[-1], ast_module.Expr) and \
                not self.shell.displayhook.semicolon_at_end_of_expression(self.transformed):
            last = body.pop()
        codes = []
        with self.shell.compile.extra_flags(flags):
            # One code per statement, as IPython runs a cell: only statements that await become
            # coroutines, so what the others raise (StopIteration) reaches the cell unchanged.
            for node in body:
                codes.append(self.shell.compile(ast_module.Module([node], []), self.filename, "exec"))
            if last is not None:
                codes.append(self.shell.compile(ast_module.Interactive([last]), self.filename, "single"))
        return codes

    def run(self) -> Any:
        __tracebackhide__ = True
        error = None
        self.start = time.perf_counter()
        self.mode.__enter__()
        try:
            for code in self.codes:
                exec(code, self.shell.user_global_ns, self.shell.user_ns)
        except BaseException as exc:
            error = exc
            tracebacks.tidy_traceback(exc, self.filename)  # drawn as a plain cell's traceback
            raise
        finally:
            self._finish(error)
        return self._result()

    async def run_async(self) -> Any:
        __tracebackhide__ = True
        import inspect

        self.start = time.perf_counter()
        self.mode.__enter__()
        try:
            for code in self.codes:
                value = eval(code, self.shell.user_global_ns, self.shell.user_ns)
                if inspect.CO_COROUTINE & code.co_flags:
                    await value
        except BaseException as exc:
            # Reported before the traceback is tidied: a mismatch torch.compile met is read
            # from the frames of its tracer.
            self._finish(exc)
            tracebacks.tidy_traceback(exc, self.filename)
            if type(exc) is StopIteration:
                # A StopIteration leaving a coroutine becomes a RuntimeError (PEP 479); a plain
                # cell raises it as it is, so it is handed over and raised outside (raised_after).
                return Raised(exc)
            raise
        self._finish(None)
        return self._result()

    def _finish(self, error: BaseException | None) -> None:
        """Leave the check, then show the report (and, in Jupyter, the fix buttons)."""
        elapsed = time.perf_counter() - self.start
        self.mode.__exit__(None, None, None)  # first: it takes our own mode off the user's stack
        self._report(error, elapsed)

    @beneath_user_modes()  # no mode the user left entered sees devinspect's own work
    def _report(self, error: BaseException | None, elapsed: float) -> None:
        try:
            self.report = self.mode.report(error, elapsed, self._unseen())
            if error is not None and (self.report.mismatch or self.report.device_error) is not None \
                    and self.explained is not None:
                self.explained(error)  # explained here: not again after the cell
            self._store(self.report)
            if not self.args.output and (not self.args.quiet or self.report.has_findings):
                self._display()
        except Exception as exc:  # the report must never replace the cell's outcome
            print(f"devinspect: the report could not be shown ({type(exc).__name__}: {exc})", file=sys.stderr)
            self.report = None

    def _unseen(self) -> tuple[str, ...]:
        """What the cell hands to TorchScript, whose ops no Python mode sees (read statically)."""
        from ..collect import script_calls

        try:
            return tuple(script_calls(self.transformed, self.shell.user_ns))
        except Exception:  # a note that cannot be made is left out
            return ()

    def _store(self, report: Any) -> None:
        """``-v NAME``: the report under NAME, unless the cell itself bound NAME to something else
        (checked before the cell ran too): the cell's value is kept, and the report is not stored."""
        name = self.args.variable
        if not name:
            return
        held = dict.get(self.shell.user_ns, name, None)
        if held is not None and not is_result_type(type(held)):
            print(f"devinspect: -v {name}: the cell made {name} a {type(held).__name__}, which is kept; "
                  "the report is not stored", file=sys.stderr)
            return
        self.shell.user_ns[name] = report

    def _display(self) -> None:
        from IPython.display import display

        report, shell = self.report, self.shell
        display(report)
        explained = report.mismatch or report.device_error
        fix = explained.fix if explained is not None else None
        if fix is not None and fix.action is not None and getattr(shell, "kernel", None) is not None:
            # A widget frontend: the fix as a button, then a re-run of this cell.
            from ..jupyter import fix_panel
            from .cell_widgets import run_here, shown

            source = self.source
            panel = fix_panel(fix, shell.user_ns, run_here(shell, lambda: shell.run_cell(source)), shell=shell)
            display(panel)
            shown(shell, panel)

    def _result(self) -> Any:
        from ..observe import DeviceCheckError

        if self.args.strict and self.report is not None and self.report.has_findings:
            raise DeviceCheckError(self.report)
        return self.report if self.args.output else None


class Raised:
    """An exception a checked async cell raised that may not leave a coroutine as it is."""

    def __init__(self, error: BaseException):
        self.error = error


class AwaitedCells:
    """For a magic family whose cell magic runs awaiting cells on the kernel's loop: the
    input transformer's second statement takes the outcome here (:func:`awaiting_magic_cells`)."""

    #: What the async run of the cell that just ran returned (its value, or :class:`Raised`).
    _async_outcome: Any = None

    def checked_result(self) -> Any:
        """The value of the async cell that just ran, or the StopIteration it raised, raised
        here, outside any coroutine (which would turn it into a RuntimeError)."""
        __tracebackhide__ = True
        outcome, self._async_outcome = self._async_outcome, None
        return raised_after(outcome)


def raised_after(value: Any) -> Any:
    """``value``, or the exception an async checked cell handed over (:class:`Raised`), raised."""
    __tracebackhide__ = True
    if type(value) is Raised:
        error = value.error
        del value
        raise error
    return value


#: The cell magics that run a cell themselves: ``%%devcheck`` and ``%%gpumem``.
_RUNNING_MAGIC_LINE = re.compile(r"^\s*%%(devcheck|gpumem)(?:\s+(.*))?$")


def awaiting_magic_cells(shell: Any) -> Any:
    """An input transformer for %%devcheck and %%gpumem cells, so they run as plain cells would.

    * A body with top-level ``await`` becomes ``await <magics>.devcheck_async(line, body)``
      (``gpumem_async`` for %%gpumem),
      which the kernel runs on its own event loop.
    * A body that does not compile is handed to IPython as it is (a blank line standing
      for the magic's line, so line numbers stay the cell's): IPython then fails the cell
      before it runs and shows the SyntaxError exactly as for a plain cell.

    Any other cell, or anything unexpected, passes through unchanged.
    """
    import ast as ast_module

    def transform(lines: list[str]) -> list[str]:
        try:
            if not lines:
                return lines
            m = _RUNNING_MAGIC_LINE.match(lines[0].rstrip("\n"))
            if m is None:
                return lines
            body = "".join(lines[1:])
            transformed = shell.transform_cell(body)
            awaits = shell.should_run_async(body, transformed_cell=transformed, preprocessing_exc_tuple=None)
            flags = shell.compile.flags | (getattr(ast_module, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0) if awaits else 0)
            try:
                compile("\n" + transformed, "<devcheck>", "exec", flags, dont_inherit=True)
            except (SyntaxError, ValueError):
                return ["\n", *lines[1:]]
            if not awaits:
                return lines
            magic, line = m.group(1), (m.group(2) or "").strip()
            # Two statements, as IPython runs them: only the first is a coroutine, so the second
            # hands over the cell's value, or raises what it raised, StopIteration included.
            magics = f"get_ipython().find_cell_magic({magic!r}).__self__"
            return [f"await {magics}.{magic}_async({line!r}, {body!r})\n", f"{magics}.checked_result()\n"]
        except Exception:  # never break a cell; the magic reports its own errors
            return lines

    transform.devinspect = True  # type: ignore[attr-defined]
    return transform
