"""Why an operand of a failed call is on the wrong device, and what removes that, as data.

A :class:`Cause` is what one cause rule of the failed-call diagnosis says: the line of the
user's code that decided the operand's device (a factory without ``device=``, a loop over
host batches, an assignment moved as a whole), the edit of that line, and the fix. The same
type says how a tensor was made when the check saw it being made (``factory``,
``device_given``, ``package``), and what the fix already covers, so that later rules leave it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .fixes import Fix, SourceEdit
from .records import SourceLine

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
