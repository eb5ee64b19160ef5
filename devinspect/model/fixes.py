"""Fixes, findings and the causes behind them, as data.

A fix is data, never prose parsed back: ``code`` runs as printed in the user's
namespace, ``edits`` rewrite the user's own source lines, ``action`` is a typed
request that :mod:`devinspect.actions` carries out (the Apply fix button).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .records import SourceLine


@dataclass(frozen=True, slots=True)
class Move:
    """Move the tensor or module called ``name`` to ``device``, all or nothing.

    A module keeps its Parameter objects (an optimizer holding them stays valid); a
    tensor that is a leaf requiring grad stays a leaf.
    """

    name: str
    device: str
    #: Optimizers whose state for the moved parameters follows them (each to its parameter's device).
    optimizers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RegisterBuffer:
    """Make the plain tensor attribute ``module.attr`` a non-persistent buffer on ``device``."""

    module: str
    attr: str
    device: str


@dataclass(frozen=True, slots=True)
class MoveContainer:
    """Move the tensors in the list, tuple or dict called ``name`` (a variable or a module's
    attribute) to ``device``, keeping the container's type and anything in it that is not a
    tensor; all or nothing."""

    name: str
    device: str


@dataclass(frozen=True, slots=True)
class EditCell:
    """Make ``edit`` in the cell that is running again next (the notebook shows the edited cell)."""

    edit: SourceEdit


@dataclass(frozen=True, slots=True)
class MoveOptimizerState:
    """Move each state tensor of ``optimizer`` to the device of its own parameter."""

    optimizer: str


@dataclass(frozen=True, slots=True)
class RebuildScheduler:
    """A learning-rate scheduler made again for a rebuilt optimizer: ``class_path`` called with
    the optimizer and ``kwargs``, each a Python expression (a literal, or an attribute of the
    old scheduler, read before it is replaced)."""

    name: str
    class_path: str
    kwargs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class RebuildOptimizer:
    """Replace the optimizer ``optimizer`` with a new one over ``module``'s parameters, and every
    scheduler bound to the old one with one bound to the new."""

    optimizer: str
    module: str
    class_path: str
    kwargs: tuple[tuple[str, str], ...] = ()
    schedulers: tuple[RebuildScheduler, ...] = ()


@dataclass(frozen=True, slots=True)
class ReleaseHistory:
    """Drop the output-history entries and the last traceback that keep tensors alive."""


@dataclass(frozen=True, slots=True)
class EmptyCache:
    """Return the allocator's cached, unused segments to the driver (``empty_cache()``)."""


@dataclass(frozen=True, slots=True)
class ReleaseGraphs:
    """Detach the namespace tensors ``names`` (their values stay; their autograd graphs go)
    and, with ``traceback``, the last error's frames: what keeps parameters from moving."""

    names: tuple[str, ...] = ()
    traceback: bool = False


@dataclass(frozen=True, slots=True)
class Steps:
    """Several actions, in order (two operands of one failed op, say); each is all-or-nothing."""

    actions: tuple[Any, ...]


Action = (Move | RegisterBuffer | MoveContainer | EditCell | MoveOptimizerState | RebuildOptimizer | ReleaseHistory
          | EmptyCache | ReleaseGraphs | Steps)


@dataclass(frozen=True, slots=True)
class SourceEdit:
    """Rewrite one line of the user's own source: ``old`` (as written) becomes ``new``.

    An empty ``new`` deletes the line; a ``new`` of several lines replaces it with all of
    them, each line after the first indented relative to the line it replaces.
    """

    where: SourceLine
    old: str
    new: str
    #: Where in the code: ``PositionalEncoding.__init__``, ``forward``.
    context: str = ""


@dataclass(frozen=True, slots=True)
class Fix:
    """How to make a problem go away.

    ``summary`` says it in one line. ``code`` (when present) runs exactly as printed
    in the user's namespace; ``edits`` are changes to the user's own source lines (so
    the problem does not come back next run); ``action`` is what the Apply fix button
    does; ``note`` is advice with no runnable form, or a caveat.
    """

    summary: str
    code: str | None = None
    edits: tuple[SourceEdit, ...] = ()
    action: Action | None = None
    note: str | None = None
    #: Whether running the failed cell again after ``action`` can work (Re-run cell is offered
    #: only then): False when the cause is in code that runs before the cell (a class, a model
    #: built in an earlier cell), which the edits change.
    rerun: bool = False


#: How sure and how bad: an error (will fail or is certainly wrong), a warning (wastes memory
#: or will bite later), a hint (worth a look).
Severity = Literal["error", "warning", "hint"]


#: What a finding is about, one word each: over a scan (``%devices``), over a checked cell's copies
#: and syncs (``%%devcheck``), and across the ranks of a distributed job.
FindingCode = Literal[
    "mixed-device-module", "module-on-other-device", "partly-materialised-module", "unregistered-tensor-attribute",
    "optimizer-state-device", "stale-optimizer", "input-on-other-device", "dropped-move", "held-by-output-history",
    "held-by-traceback", "loader-not-pinned", "not-walked", "could-not-inspect", "host-table-in-object",
    "round-trip", "sync-in-loop", "repeated-transfer", "non-blocking-unpinned",
    "skew", "desync", "foreign context", "versions", "failed rank"]


@dataclass(frozen=True, slots=True)
class Finding:
    """Something probably wrong, said in one line, with the fix.

    ``severity`` is ``"error"`` (will fail or is certainly wrong), ``"warning"``
    (wastes memory or will bite later) or ``"hint"`` (worth a look). ``names`` are
    the records (tensor names) it is about, so a filtered view can show it; ``ranks`` the
    ranks of a distributed job it is about (a finding across ranks).
    """

    code: FindingCode
    severity: Severity
    subject: str = ""
    message: str = ""
    fix: Fix | None = None
    storage_bytes: int | None = None
    names: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()


SEVERITY_ORDER: dict[Severity, int] = {"error": 0, "warning": 1, "hint": 2}

# -- causes: why an operand of a failed call is on the wrong device ------------------------------
# A Cause is what one cause rule of the failed-call diagnosis says: the line of the user's code
# that decided the operand's device (a factory without device=, a loop over host batches, an
# assignment moved as a whole), the edit of that line, and the fix. The same type says how a
# tensor was made when the check saw it being made (factory, device_given, package), and what
# the fix already covers, so that later rules leave it.

#: How a line decides a device: "factory" (a call without device=), "loop" (a for loop's
#: target), "value" (any other assignment, moved as a whole), "inside" (a function or class of
#: the user's the line calls makes it), "comprehension" (the container a comprehension walks).
MadeBy = Literal["factory", "loop", "value", "inside", "comprehension"]


@dataclass(frozen=True)
class Cause:
    """The line of user code that decides an operand's device, the edit there, and the fix."""

    where: SourceLine | None = None
    made_by: MadeBy = "factory"
    edit: SourceEdit | None = None
    #: Whether the line is in the cell that failed (its edit can be made there and run again).
    in_failed_cell: bool = False
    #: More edits of the same cause (the factory lines of a function the line calls).
    also: tuple[SourceEdit, ...] = ()
    #: The names the line binds together (``s, a, r = buffer.sample(8)``): what one fix moves.
    together: tuple[str, ...] = ()
    #: The torch factory that made the tensor (``zeros``), whether it was given a device, and the
    #: package it ran in when library code called it from the user's line.
    factory: str = ""
    device_given: bool = False
    package: str = ""
    #: What removes the cause; None where the rule knows the cause but no fix can be written.
    fix: Fix | None = None
    #: Further fixes the same cause needs, one per tensor (the other inputs one call passes).
    more: tuple[Fix, ...] = ()
    #: Whether its fixes go before those found so far (a model moved: the larger change first).
    leading: bool = False
    #: Names the fix moves or makes on the target (namespace tensors, models moved whole, buffers a
    #: method makes anew): the rules after this one leave them.
    covers: tuple[str, ...] = ()
    #: Namespace tensors the fix moves because a call passed them: the other tensors that call
    #: passes would fail next.
    passed: tuple[str, ...] = ()
    #: The user's lines edited because a call on them makes a tensor right there (``model(torch.ones(2))``).
    lines: tuple[SourceLine, ...] = ()
    #: Models the fix leaves wholly on the target: what the user's lines pass them must follow.
    whole_moves: tuple[str, ...] = ()
    #: Buffers a method makes anew on every call: fixed on that line, never moved.
    replaced: tuple[str, ...] = ()

    @property
    def fixes(self) -> tuple[Fix, ...]:
        return ((self.fix,) if self.fix is not None else ()) + self.more

    @property
    def edits(self) -> tuple[SourceEdit, ...]:
        return ((self.edit,) if self.edit is not None else ()) + self.also
