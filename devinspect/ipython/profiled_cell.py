"""Running a ``%%gpumem`` cell the way IPython runs a plain cell, its memory recorded line by line."""

from __future__ import annotations

import dataclasses
import inspect
import linecache
import sys
import types
from typing import Any, Callable

import torch
from IPython.core.error import UsageError

from ..observe import LineKey, LineMemoryRecorder, mark_statements, named_allocations, uses_markers
from ..runtime import beneath_user_modes
from .cell_runner import CheckedCell

#: The note on a function's lines known from its allocations alone (no ``sys.monitoring``).
UNFOLLOWED_LINES = "unfollowed lines"


class ProfiledCell(CheckedCell):
    """One %%gpumem run: compiled and run as :class:`CheckedCell` runs a cell (same namespace,
    value, errors, interrupts, top-level await), under a line memory recorder instead of
    the device check."""

    magic = "gpumem"

    def __init__(self, shell: Any, args: Any, line: str, cell: str, device: torch.device,
                 functions: tuple[Any, ...], exclude: Any, live_view: Callable[[Any, Any], Any] | None = None,
                 notes_said: set[str] | None = None):
        self.device, self.exclude, self.live_view = device, exclude, live_view
        #: The session's notes said already (each once in a session, not under every profile).
        self.notes_said = notes_said if notes_said is not None else set()
        #: The code objects of the functions named with -f (and of forward, for a module).
        self.function_codes = frozenset(functions)
        self.marked = uses_markers()
        super().__init__(shell, args, line, cell)

    def _transformed(self, tree: Any) -> Any:
        return mark_statements(tree) if self.marked else tree

    def _observer(self) -> Any:
        return LineMemoryRecorder(self.device, self.function_codes | frozenset(_cell_codes(self.codes)), self.marked)

    def _finish(self, error: BaseException | None) -> None:
        try:
            self.mode.__exit__(None, None, None)  # first: our own recorder leaves the user's stack
        except Exception as exc:  # the profile must never replace the cell's outcome
            print(f"devinspect: the memory profile could not be shown ({type(exc).__name__}: {exc})", file=sys.stderr)
            self.report = None
            return
        self._build_profile(error)

    @beneath_user_modes()  # no mode the user left entered sees devinspect's own work
    def _build_profile(self, error: BaseException | None) -> None:
        from ..collect import first_line
        from ..diagnose import build_profile

        try:
            self.report = build_profile(
                self.mode.recording, _source_text,
                lambda wanted: named_allocations(self.shell.user_ns, self.device, self.exclude, wanted),
                error=first_line(error) if error is not None else None)
            if any(m.runs is None for m in self.report.lines):
                if UNFOLLOWED_LINES in self.notes_said:
                    self.report = dataclasses.replace(self.report, explain_unfollowed=False)
                self.notes_said.add(UNFOLLOWED_LINES)
            self._store(self.report)
            if not self.args.output:
                self._display()
        except Exception as exc:  # the profile must never replace the cell's outcome
            print(f"devinspect: the memory profile could not be shown ({type(exc).__name__}: {exc})", file=sys.stderr)
            self.report = None

    def _display(self) -> None:
        from IPython.display import display

        from ..render import ProfileWithPlot
        from .magic_support import display_live

        if getattr(self.shell, "kernel", None) is not None and self.live_view is not None:
            # A frontend that shows images: the static copy has the plot too (what nbconvert
            # and a notebook opened without a kernel show), made once for both.
            static = ProfileWithPlot(self.report)
            try:
                widget = self.live_view(self.report, static.plot_html)
            except ImportError:  # no ipywidgets: the static output is complete
                widget = None
            if widget is not None:
                display_live(widget, static)
            else:
                display(static)
            return
        display(self.report)

    def _result(self) -> Any:
        return self.report if self.args.output else None


def _cell_codes(codes: list[Any]) -> Any:
    """The cell's statements and the functions (methods too) it defines, at any depth. A
    class body runs once, as its definition: not a line of its own; a comprehension's,
    lambda's or generator expression's memory counts on the line that runs it."""
    pending = list(codes)
    while pending:
        code = pending.pop()
        if code.co_name == "<module>" or code.co_flags & inspect.CO_OPTIMIZED:
            yield code
        pending.extend(c for c in code.co_consts if type(c) is types.CodeType and not c.co_name.startswith("<"))


def _source_text(key: LineKey) -> str:
    """A line's source as the user wrote it (IPython keeps each cell's text in linecache)."""
    return linecache.getline(key[0], key[2]).strip()


def profiled_device(text: str | None) -> torch.device:
    """The device ``-d`` names, else the accelerator in use: a Python backend that tells its
    allocator's events (the simulated device, once enabled), else CUDA, else
    ``torch.accelerator``'s (MPS, XPU). None at all is a UsageError."""
    from .magic_support import device_argument

    named = device_argument("%%gpumem", text)
    if named is not None:
        device = torch.device(named)
        if device.type == "cpu":
            raise UsageError("%%gpumem: profiles accelerator memory; -d cpu has none to profile "
                             "(%gpumem shows this process's resident memory)")
        return device if device.index is not None else torch.device(device.type, 0)
    python_backend = torch._C._get_privateuse1_backend_name()
    module = getattr(torch, python_backend, None) if python_backend != "privateuseone" else None
    if module is not None and callable(getattr(module, "memory_observers", None)):
        return torch.device(python_backend, module.current_device())  # a backend made to be profiled: chosen
    if torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    accelerator = getattr(torch, "accelerator", None)
    current = accelerator.current_accelerator() if accelerator is not None and accelerator.is_available() else None
    if current is not None:
        return torch.device(current.type, accelerator.current_device_index())
    raise UsageError("%%gpumem: no accelerator in this process (no CUDA, MPS, XPU or simulated device), "
                     "so there is no device memory to profile; the cell did not run")


def function_codes(namespace: Any, names: list[str]) -> tuple[Any, ...]:
    """The code objects ``-f NAME`` asks for, read statically: a function, a method, or a
    module (its class's ``forward``) or module class. A name that reads as anything else is a
    UsageError; functions the cell defines itself need no -f (the cell's code is profiled)."""
    from ..collect import MISSING, class_dict, mro, object_at, type_name

    codes = []
    for name in names:
        found = object_at(namespace, name)
        if found is MISSING:
            raise UsageError(f"%%gpumem: -f {name}: no such name here yet (a function this cell defines "
                             "is profiled without -f)")
        value, vt = found, type(found)
        if vt is types.MethodType:
            value = value.__func__
            vt = type(value)
        if issubclass(vt, type) or issubclass(vt, torch.nn.Module):  # by real type: no __class__ asked
            cls = value if issubclass(vt, type) else vt
            value = next((class_dict(c)["forward"] for c in mro(cls) if "forward" in class_dict(c)), None)
            vt = type(value)
        if vt is not types.FunctionType:
            raise UsageError(f"%%gpumem: -f {name} is a {type_name(type(found))}: -f takes "
                             "a function, a method or a module (its forward)")
        codes.append(value.__code__)
    return tuple(codes)
