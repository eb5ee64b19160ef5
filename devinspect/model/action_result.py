"""What an action says it did: plain data, shown through the renderers' registry."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .display import Displayed


@dataclass(frozen=True, repr=False)
class ActionResult(Displayed):
    """What an action did. ``ok`` is False when nothing was changed; ``message`` says why.

    ``nbytes`` is the memory the action moved, released or freed. ``follow_up`` is
    an action that would let this one succeed (release the autograd graphs that hold
    parameters PyTorch refuses to swap), for a button to offer. A failure that could not
    be wholly undone lists in ``left`` what stays changed (``message`` says so too);
    ``detail`` is what failed and why, without those closing words. ``idle`` marks an
    action that found nothing to do (the state already with its parameters): nothing
    changed, and as a step of a larger fix it is no failure.
    """

    ok: bool
    message: str
    nbytes: int = 0
    follow_up: Any = None
    detail: str | None = None
    left: tuple[str, ...] = ()
    idle: bool = False
