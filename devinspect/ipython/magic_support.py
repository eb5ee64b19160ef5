"""What the magic families share: settings, argument parsing, event callbacks, and how a
magic learns about the cell that called it (its number, whether it shows the value)."""

from __future__ import annotations

import difflib
import dis
import re
import sys
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics
from IPython.core.magic_arguments import parse_argstring

from ..collect import locations

#: How each magic is typed (a cell magic takes two %).
MAGIC_PREFIX = {"devcheck": "%%"}


class DevInspectMagics(Magics):
    """A magic family: a shell, the extension's settings (:class:`~devinspect.ipython.config.DevInspect`)."""

    def __init__(self, shell: Any, settings: Any):
        super().__init__(shell=shell)  # Magics.__init__ adds it to shell.configurables
        self.settings = settings

    def close(self) -> None:
        """Stop what this family started and remove the event callbacks it registered."""

    def _parse(self, magic: Any, line: str) -> Any:
        """parse_argstring, with every mistake (an unbalanced quote too) as a one-line UsageError."""
        name = MAGIC_PREFIX.get(magic.__name__, "%") + magic.__name__
        try:
            return parse_argstring(magic, line)
        except UsageError as exc:
            raise UsageError(f"{name}: {str(exc).split(': error: ')[-1]}") from None
        except ValueError as exc:  # shlex: "No closing quotation"
            raise UsageError(f"{name}: {exc} in {line!r}") from None

    def _ipython_names(self) -> list[str]:
        from ..collect import shell_names

        return shell_names(self.shell)

    def _set_event(self, event: str, callback: Any, on: bool) -> None:
        callbacks = self.shell.events.callbacks[event]
        if on and callback not in callbacks:
            self.shell.events.register(event, callback)
        elif not on and callback in callbacks:
            self.shell.events.unregister(event, callback)


def cell_magic_usage(cls: type) -> None:
    """magic_arguments writes ``%name`` in a magic's usage; a cell magic is typed ``%%name``."""
    for name, prefix in MAGIC_PREFIX.items():
        method = getattr(cls, name)
        method.parser.prog = prefix + name
        method.__doc__ = method.__doc__.replace(f"%{name} [", f"{prefix}{name} [", 1)


#: Shown once a live widget follows its static copy, in JupyterLab and Notebook 7: the static copy
#: hides. Where no widget renders (nbconvert's HTML offline, GitHub, a notebook reopened without
#: its kernel) nothing matches, and the static copy is what shows.
_HIDE_STATIC_BEFORE_LIVE = ("<style>.jp-OutputArea-child:has(.devinspect-static):has(+ .jp-OutputArea-child "
                            ".devinspect-live){display:none}</style>")
LIVE_PLACEHOLDER = "devinspect: the live view needs a running kernel (its static copy is the output above)"


def display_live(widget: Any, fallback: Any, shell: Any = None) -> None:
    """Display ``fallback``'s static rendering, then the live ``widget``, as two outputs.

    One output carrying both would lose the static copy wherever widget state was saved:
    nbconvert then picks the widget's view, which it can only draw with a widget manager
    fetched from a CDN, and a saved notebook on GitHub or offline shows nothing. As two
    outputs, every viewer shows the static copy, and a live frontend shows the widget in
    its place (see ``_HIDE_STATIC_BEFORE_LIVE``). The widget is closed when the cell's output
    is replaced (:mod:`devinspect.ipython.cell_widgets`); ``shell`` is the running shell.
    """
    from IPython import get_ipython
    from IPython.display import display

    from .cell_widgets import shown

    static = dict(fallback._repr_mimebundle_())
    if "text/html" in static:
        static["text/html"] = f'{_HIDE_STATIC_BEFORE_LIVE}<div class="devinspect-static">{static["text/html"]}</div>'
    display(static, raw=True)
    widget.add_class("devinspect-live")
    live = dict(widget._repr_mimebundle_())
    live["text/plain"] = LIVE_PLACEHOLDER
    display(live, raw=True)
    shown(shell if shell is not None else get_ipython(), widget)


def device_argument(magic: str, text: str | None) -> str | None:
    """The one ``-d`` parser of every magic: ``cpu:0`` is cpu, ``cuda`` every CUDA device,
    and a device this process does not have is a UsageError."""
    if text is None:
        return None
    from ..collect import DeviceNameError, parse

    try:
        return parse(text)
    except DeviceNameError as exc:
        raise UsageError(f"{magic}: {exc}") from None


def variable_name(magic: str, name: str | None, shell: Any = None) -> None:
    """Refuse a ``-v`` name that is not an identifier, or that is the shell's own (``In``,
    ``Out``, ``get_ipython``, ``_ih`` …): storing a result there would break every later cell."""
    import keyword

    if name is None:
        return
    if not name.isidentifier() or keyword.iskeyword(name):
        raise UsageError(f"{magic}: -v needs a variable name, not {name!r}")
    hidden = getattr(shell, "user_ns_hidden", None) if shell is not None else None
    if type(hidden) is dict and name in hidden:
        raise UsageError(f"{magic}: -v {name}: IPython uses that name itself; choose another")
    user_ns = getattr(shell, "user_ns", None) if shell is not None else None
    if isinstance(user_ns, dict) and name in user_ns:
        from ..collect import type_name

        held = type(dict.__getitem__(user_ns, name))
        if not is_result_type(held):  # an earlier result is replaced, nothing else
            raise UsageError(f"{magic}: -v {name}: {name} already holds a {type_name(held)}, which the result "
                             "would replace; choose another name")


def is_result_type(cls: type) -> bool:
    """Whether ``cls`` is one of devinspect's results (a scan, a report, an explanation: what
    ``-v`` stores), not any other object of devinspect's (a simulated tensor, an error)."""
    from ..collect import type_module

    return type_module(cls).startswith(("devinspect.model.", "devinspect.render."))


def calling_frame() -> Any:
    """The frame of the code that called the magic: the first outside devinspect and IPython."""
    frame = sys._getframe(1)
    while frame is not None and locations.is_tool_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def running_cell_number(shell: Any) -> int:
    """The execution count of the cell now running (the cell that called the magic).

    IPython numbers the cell before running it (9.x) or after (8.x), and not at all
    without history; the calling cell's compiled file name says it in every case.
    """
    frame = calling_frame()
    while frame is not None:
        number = locations.cell_number(frame.f_code.co_filename)
        if number is not None:
            return number
        frame = frame.f_back
    return shell.execution_count


def caller_result_use(frame: Any) -> str:
    """What the code calling the magic does with its value: ``"shown"`` (the cell's last
    expression, which IPython displays), ``"dropped"`` (a statement of its own), or ``"kept"``
    (assigned, ``r = %devices``, or passed on). Read from the instruction after the call."""
    try:
        instructions = [i for i in dis.get_instructions(frame.f_code) if i.opname not in ("CACHE", "EXTENDED_ARG")]
        # f_lasti is the call now running (or an inline cache entry after it).
        current = max(i for i, ins in enumerate(instructions) if ins.offset <= frame.f_lasti)
        after = instructions[current + 1]
    except Exception:  # when unsure, the magic shows its result itself
        return "dropped"
    if after.opname == "PRINT_EXPR" or (after.opname == "CALL_INTRINSIC_1" and after.argrepr == "INTRINSIC_PRINT"):
        return "shown"
    return "dropped" if after.opname == "POP_TOP" else "kept"


def event_loop_running() -> bool:
    import asyncio

    try:
        return asyncio.get_running_loop().is_running()
    except RuntimeError:
        return False


def with_suggestion(message: str, names: list[str], namespace: dict) -> str:
    for name in names:
        top = name.split(".")[0].split("[")[0]
        if top not in namespace:
            candidates = [n for n, v in namespace.items() if type(n) is str and not n.startswith("_") and not callable(v)]
            close = difflib.get_close_matches(top, candidates, n=1)
            if close:
                return f"{message} (did you mean {close[0]!r}?)"
    return message


def cell_numbers(shell: Any) -> Any:
    """filename -> execution count, as IPython's compiler names cells in tracebacks (Cell In[N])."""
    pattern = re.compile(r"In\[(\d+)\]")

    def lookup(filename: str) -> int | None:
        named = shell.compile.format_code_name(filename)
        if not named:
            return None
        m = pattern.fullmatch(named[1])
        return int(m.group(1)) if m else None

    return lookup


def traceback_drawer(shell: Any) -> Any:
    """Draws a traceback as ``shell`` does (for tracebacks tidied of devinspect's own frames)."""

    def draw(exc: BaseException, tb: Any) -> list[str]:
        return shell.InteractiveTB.structured_traceback(type(exc), exc, tb)

    return draw


def error_forgetter(shell: Any) -> Any:
    """Drops the shell's own references to the last error: its traceback formatter keeps the
    traceback, and the last execution result the exception (so its frames stay alive)."""

    def forget() -> None:
        for formatter in (getattr(shell, "InteractiveTB", None), getattr(shell, "SyntaxTB", None)):
            if formatter is not None and getattr(formatter, "tb", None) is not None:
                formatter.tb = None
        result = getattr(shell, "last_execution_result", None)
        if result is not None and getattr(result, "error_in_exec", None) is not None:
            result.error_in_exec = None

    return forget
