"""A fix belongs to the objects it was computed for.

A fix names its targets (``model``, ``opt``, ``batch["ids"]``); names are bound again each
time a cell runs. :func:`made_for` records, when the fix is made or shown, which object each
name refers to, by ``id`` only: no strong reference and no weakref (a weakref on a tensor
makes ``torch.utils.swap_tensors`` refuse it later). :func:`rebound` compares, before the fix
is applied, what each name refers to now. Both read the names statically (a variable's
value, an instance's ``__dict__``, a module's parameters, buffers and submodules, a builtin
container's items): none of the user's code runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, MutableMapping

from ..model import (
    Move,
    MoveContainer,
    MoveOptimizerState,
    RebuildOptimizer,
    RegisterBuffer,
    ReleaseGraphs,
    Steps,
)
from .result import UNKNOWN, NamePath


@dataclass(frozen=True)
class MadeFor:
    """``(name, id of what it referred to)`` for each name a fix acts on, and its root variable."""

    identities: tuple[tuple[str, int], ...] = ()


def names_of(action: Any) -> Iterator[str]:
    """The names a typed action acts on (each step's, for several steps)."""
    if isinstance(action, Steps):
        for step in action.actions:
            yield from names_of(step)
    elif isinstance(action, (Move, MoveContainer)):
        yield action.name
        yield from getattr(action, "optimizers", ())
    elif isinstance(action, RegisterBuffer):
        yield action.module
    elif isinstance(action, MoveOptimizerState):
        yield action.optimizer
    elif isinstance(action, RebuildOptimizer):
        yield action.module
        yield action.optimizer
    elif isinstance(action, ReleaseGraphs):
        yield from action.names


def _paths(name: Any) -> list[tuple[str, NamePath]]:
    """The name and its root variable, each with its path (none for what is not a name)."""
    if not isinstance(name, str):
        return []
    try:
        path = NamePath(name)
    except ValueError:
        return []
    out = [(path.root, NamePath(path.root))]
    if path.steps:
        out.append((name, path))
    return out


def made_for(namespace: MutableMapping[str, Any], action: Any) -> MadeFor:
    """What each name ``action`` acts on refers to now (by id), as far as it reads statically."""
    seen: dict[str, int] = {}
    for name in names_of(action):
        for text, path in _paths(name):
            value = path.read_statically(namespace)
            if value is not UNKNOWN and text not in seen:
                seen[text] = id(value)
    return MadeFor(tuple(seen.items()))


def rebound(namespace: MutableMapping[str, Any], recorded: MadeFor) -> str | None:
    """Why the fix no longer fits (a name now refers to another object, or to nothing), or None.
    A root variable is compared before the paths through it, so the message names what the
    user rebound."""
    for text, was in recorded.identities:
        value = NamePath(text).read_statically(namespace)
        if value is UNKNOWN or id(value) != was:
            if value is UNKNOWN and not NamePath(text).steps and not dict.__contains__(namespace, text):
                return f"{text} no longer exists, and this fix was made for it: run the cell again to get a fix"
            return f"{text} is not the {text} this fix was made for: run the cell again to get a fix for it"
    return None
