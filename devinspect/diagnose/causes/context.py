"""What a cause rule reads: the call that failed, the operand being explained, and what the
causes found before it already cover.

:class:`FailedCall` is built once per failed call (the failure, its user frames, the cell, the
index of the session's names, the named operands, the device they should be on);
:class:`CauseContext` is one question to the rules: the call, the operand (None for the rules over
the whole call), and :class:`Covered`, what the fixes found so far move or make. All three are
frozen: a rule reads them and says what it found in its :class:`~devinspect.model.fixes.Cause`.
"""

from __future__ import annotations

import dataclasses
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ...collect import locations
from ...model import Cause, Operand, SourceLine


@dataclass
class Failure:
    """Where a call failed: what a diagnosis may read, from a live stack (``%%devcheck``, at the
    moment of the error) or from a traceback's frames (after the fact)."""

    namespace: Mapping[str, Any]
    #: The innermost frame at the failure; its ``f_back`` chain is the rest of the stack.
    stack: types.FrameType | None
    #: Which frame is the checked cell (or block) itself.
    is_cell_frame: Callable[[types.FrameType], bool]
    #: The source line a frame is at (a traceback knows the failing line exactly).
    source: Callable[[types.FrameType], SourceLine] = locations.frame_line
    #: How a tensor the check saw being created was made (a factory :class:`Cause`), else None.
    created: Callable[[Any], Cause | None] = lambda _tensor: None
    #: The user's line of the failing call when no frame of it runs (a call torch.compile traced).
    line: SourceLine | None = None


@dataclass(frozen=True)
class NamedOperand:
    """An operand, named, with what its fix needs."""

    operand: Operand
    value: Any
    record: Any = None
    #: The user frame it is a local of, and the local's name.
    frame: Any = None
    local: str | None = None
    #: How it was made, when known (a factory :class:`Cause`).
    created: Cause | None = None
    #: What the explanation shows when the operand is a result never computed (``self.fc(x)``): the
    #: expression; its fix is still chosen from the input that stands in for it.
    shown: Operand | None = None

    @property
    def device(self) -> str:
        return self.operand.device


@dataclass(frozen=True)
class FailedCall:
    """The call that failed on mixed devices, as every rule reads it."""

    failure: Failure
    op: str
    #: The device every operand should be on.
    target: str
    #: The user's frames, innermost first; the innermost; the checked cell's frame.
    frames: tuple[types.FrameType, ...]
    inner: types.FrameType | None
    cell: types.FrameType | None
    cell_file: str | None
    #: The failing line of the cell (a large number when no cell frame runs).
    failing_line: int
    #: The session's names (:class:`~devinspect.collect.namespace.scan.NameIndex`), walked lazily.
    index: Any
    #: ``id(module) -> path`` for the modules the namespace names.
    modules: Mapping[int, str]
    operands: tuple[NamedOperand, ...]

    @property
    def namespace(self) -> Mapping[str, Any]:
        return self.failure.namespace

    def source(self, frame: types.FrameType) -> SourceLine:
        return self.failure.source(frame)

    @property
    def misplaced(self) -> tuple[NamedOperand, ...]:
        return tuple(n for n in self.operands if n.device != self.target)

    def operand_locals(self, frame: Any) -> tuple[str, ...]:
        """The locals of ``frame`` among the operands already on the target: the device to name."""
        return tuple(o.local for o in self.operands if o.local and o.frame is frame and o.device == self.target)


@dataclass(frozen=True)
class Covered:
    """What the causes found so far fix: the next rules leave it."""

    #: Names moved or made on the target (the misplaced operands' own names from the start).
    names: frozenset[str] = frozenset()
    #: Namespace tensors moved because a call passed them.
    passed: frozenset[str] = frozenset()
    #: Models left wholly on the target.
    whole_moves: frozenset[str] = frozenset()
    #: Buffers a method makes anew (fixed on that line).
    replaced: frozenset[str] = frozenset()
    #: Lines edited for a tensor made right in a call.
    lines: frozenset[SourceLine] = frozenset()
    #: The summaries of the fixes found so far.
    summaries: tuple[str, ...] = ()

    def adding(self, cause: Cause | None) -> Covered:
        if cause is None:
            return self
        summaries = self.summaries + tuple(f.summary for f in cause.fixes if f.summary not in self.summaries)
        return Covered(self.names | set(cause.covers), self.passed | set(cause.passed),
                       self.whole_moves | set(cause.whole_moves), self.replaced | set(cause.replaced),
                       self.lines | set(cause.lines), summaries)


@dataclass(frozen=True)
class CauseContext:
    """One question to the cause rules: why ``operand`` of ``call`` is off the target (or, with no
    operand, what else the whole call needs), given what is ``covered`` already."""

    call: FailedCall
    operand: NamedOperand | None = None
    covered: Covered = field(default_factory=Covered)

    @property
    def namespace(self) -> Mapping[str, Any]:
        return self.call.failure.namespace

    @property
    def target(self) -> str:
        return self.call.target

    def about(self, operand: NamedOperand) -> CauseContext:
        """The same question about another operand (one the rule found the cause leads to)."""
        return dataclasses.replace(self, operand=operand)
