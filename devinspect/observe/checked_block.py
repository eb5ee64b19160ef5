"""``devinspect.check()``: the device check of ``%%devcheck`` around a block of code, for
scripts and tests."""

from __future__ import annotations

import contextlib
import sys
import time
from typing import Any, Iterator, Mapping

from ..model import CheckReport
from .mode import DeviceCheckMode


@contextlib.contextmanager
def check(namespace: Mapping[str, Any] | None = None, *, strict: bool = False) -> Iterator[_Handle]:
    """Check the block for device mismatches, copies and host syncs.

    ::

        with devinspect.check() as c:
            train_step()
        c.report            # a CheckReport: per-line copies/syncs, findings, mismatch

    A device error raised in the block (a mismatch, or another one devinspect explains) gets
    the diagnosis as an exception note and propagates unchanged. With ``strict=True`` findings raise
    :class:`DeviceCheckError` after the block.
    """
    caller = sys._getframe(2)
    if namespace is None:
        namespace = caller.f_globals
    code = caller.f_code
    handle = _Handle()
    mode = DeviceCheckMode(namespace, lambda frame: frame.f_code is code)
    start = time.perf_counter()
    try:
        with mode:
            yield handle
    except BaseException as exc:
        handle.report = mode.report(exc, time.perf_counter() - start)
        attach_note(exc, handle.report)
        raise
    handle.report = mode.report(None, time.perf_counter() - start)
    if strict and handle.report.has_findings:
        raise DeviceCheckError(handle.report)


class _Handle:
    """What ``with check() as c`` gives: ``c.report`` once the block is done."""

    report: CheckReport | None = None


class DeviceCheckError(AssertionError):
    """Raised by ``strict`` checks when the code copied or synced in a way worth fixing."""

    def __init__(self, report: CheckReport):
        self.report = report
        problems = [f.message for f in report.findings]
        for explained in (report.device_error, report.mismatch):
            if explained is not None:
                problems.insert(0, explained.summary().splitlines()[0])
        super().__init__("devinspect found device problems:\n" + "\n".join(f"- {p}" for p in problems))

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback through devinspect's own frames.
        return [f"DeviceCheckError: {self}"]


def attach_note(exc: BaseException, report: CheckReport) -> None:
    """Add the diagnosis of a device error to the exception as a note (for scripts, where nothing
    else shows it)."""
    explained = report.mismatch or report.device_error
    if explained is None:
        return
    note = "devinspect: " + explained.summary()
    with contextlib.suppress(Exception):
        if hasattr(exc, "add_note"):
            exc.add_note(note)
        else:  # Python 3.10: the same list add_note keeps (PEP 678), which IPython and exceptiongroup print
            notes = exc.__dict__.setdefault("__notes__", [])
            if type(notes) is list:
                notes.append(note)
