"""Line events from chosen code objects only, for ``%%gpumem``'s recorder.

Where Python has ``sys.monitoring`` (3.12 and newer), the events are switched on for
those code objects alone: every other function runs at full speed, and every line of
the cell and of the chosen functions is heard.

Before 3.12 the only way to hear lines is ``sys.settrace``, whose hook Python calls for
every new frame of any function (about 0.9 µs each here: a third more time on a
training step of the simulated device, whose dispatch is Python). So there, and
wherever every ``sys.monitoring`` tool id is taken, the cell's own statements carry
markers instead (:func:`mark_statements`: a call before each, at every depth of its
loops and blocks, none inside the functions it defines), and the lines of functions are
read from the stack when the allocator reports an event (:func:`running_lines`), not
followed one by one.

Either tracer tells its listener ``enter(code)`` when a chosen code starts or resumes,
``line(code, number)`` at each new line, and ``leave(code)`` when it returns, yields or
unwinds (the marker tracer: when the next statement's code starts, or at the end).
"""

from __future__ import annotations

import ast
import builtins
import sys
from types import CodeType
from typing import Any, Protocol

from ..model import LineKey


class LineListener(Protocol):
    """Takes ``sys.monitoring``'s own arguments, so that its methods are the callbacks (no
    wrapper call per event): ``enter(code, offset)``, ``line(code, number)``,
    ``leave(code, offset, value)``; the marker tracer passes the code alone."""

    def enter(self, code: CodeType, offset: int = 0) -> None: ...

    def line(self, code: CodeType, number: int) -> None: ...

    def leave(self, code: CodeType, offset: int = 0, value: Any = None) -> None: ...


#: The name the cell's markers call: a builtin while a marked cell runs, gone after.
MARKER = "__devinspect_gpumem_line__"


def _free_tool() -> int | None:
    monitoring = getattr(sys, "monitoring", None)
    if monitoring is None:
        return None
    return next((i for i in (monitoring.PROFILER_ID, 3, 4) if monitoring.get_tool(i) is None), None)


def uses_markers() -> bool:
    """Whether cells are marked (no ``sys.monitoring`` tool free here): compile them with
    :func:`mark_statements` and give the recorder the marker tracer."""
    return _free_tool() is None


def line_tracer(codes: frozenset[CodeType], listener: LineListener, marked: bool) -> Any:
    """A tracer with ``start()`` and ``stop()``: the markers of a ``marked`` cell, else
    ``sys.monitoring`` (a tool id was free when the cell was compiled; if another tool took
    the last one since, the cell runs unprofiled rather than fail)."""
    tool = None if marked else _free_tool()
    if tool is not None:
        return _MonitoringTracer(codes, listener, tool)
    return _MarkerTracer(listener)


def mark_statements(tree: ast.Module) -> ast.Module:
    """``tree`` with a marker call before each statement at every depth of its blocks
    (not inside the functions and classes it defines), on the statement's own line."""
    _Marker().visit(tree)
    return tree


class _Marker(ast.NodeTransformer):
    def _marked(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for statement in body:
            if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.visit(statement)
            call = ast.Expr(ast.Call(ast.Name(MARKER, ast.Load()), [ast.Constant(statement.lineno)], []))
            out.append(ast.copy_location(call, statement))
            ast.fix_missing_locations(call)
            out.append(statement)
        return out

    def generic_visit(self, node: ast.AST) -> ast.AST:
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                setattr(node, field, self._marked(body))
        for child in getattr(node, "handlers", ()) or getattr(node, "cases", ()):
            child.body = self._marked(child.body)
        return node


def running_lines(codes: frozenset[CodeType], outermost: tuple[LineKey, ...], frame: Any) -> tuple[LineKey, ...]:
    """The lines of the chosen functions running now, innermost first, read from the stack
    from ``frame`` up to the cell's own frame (a chosen ``<module>`` code), then
    ``outermost`` (the cell's line the markers say)."""
    lines = []
    while frame is not None:
        code = frame.f_code
        if code in codes:
            if code.co_name == "<module>":
                break  # the cell: its line is the markers'
            lines.append((code.co_filename, code.co_name, frame.f_lineno))
        frame = frame.f_back
    return (*lines, *outermost) if lines else outermost


class _MonitoringTracer:
    def __init__(self, codes: frozenset[CodeType], listener: LineListener, tool: int):
        self.codes, self.listener, self.tool = codes, listener, tool

    def start(self) -> None:
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        events = monitoring.events
        listener, codes = self.listener, self.codes
        monitoring.use_tool_id(self.tool, "devinspect %%gpumem")
        callbacks = {
            events.PY_START: listener.enter,
            events.PY_RESUME: listener.enter,
            events.PY_RETURN: listener.leave,
            events.PY_YIELD: listener.leave,
            events.LINE: listener.line,
            # Unwinding can only be heard everywhere; it happens once per frame an exception leaves.
            events.PY_UNWIND: lambda code, offset, exc: listener.leave(code) if code in codes else None,
        }
        for event, callback in callbacks.items():
            monitoring.register_callback(self.tool, event, callback)
        local = events.PY_START | events.PY_RESUME | events.PY_RETURN | events.PY_YIELD | events.LINE
        for code in codes:
            monitoring.set_local_events(self.tool, code, local)
        monitoring.set_events(self.tool, events.PY_UNWIND)

    def stop(self) -> None:
        monitoring = sys.monitoring  # type: ignore[attr-defined]
        events = monitoring.events
        monitoring.set_events(self.tool, 0)
        for code in self.codes:
            monitoring.set_local_events(self.tool, code, 0)
        for event in (events.PY_START, events.PY_RESUME, events.PY_RETURN, events.PY_YIELD, events.LINE,
                      events.PY_UNWIND):
            monitoring.register_callback(self.tool, event, None)
        monitoring.free_tool_id(self.tool)


class _MarkerTracer:
    """Hears the markers of a marked cell (see :func:`mark_statements`)."""

    def __init__(self, listener: LineListener):
        self.listener = listener
        self.current: CodeType | None = None

    def _marker(self) -> Any:
        """The marker: a closure on locals, called once per statement run (a loop's body too)."""
        listener, line, frame_of = self.listener, self.listener.line, sys._getframe

        def mark(number: int) -> None:
            code = frame_of(1).f_code
            if code is not self.current:  # the next top-level statement: the one before has ended
                if self.current is not None:
                    listener.leave(self.current)
                self.current = code
                listener.enter(code)
            line(code, number)

        return mark

    def start(self) -> None:
        builtins.__dict__[MARKER] = self._marker()

    def stop(self) -> None:
        builtins.__dict__.pop(MARKER, None)
        if self.current is not None:
            self.listener.leave(self.current)
            self.current = None
