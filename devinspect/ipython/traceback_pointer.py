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

from __future__ import annotations

from typing import Any, Callable


class TracebackPointer:
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
