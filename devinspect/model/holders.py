"""Who keeps a tensor alive (``%devices --why``): the reference paths, as data."""

from __future__ import annotations

from dataclasses import dataclass

from .display import Displayed


@dataclass(frozen=True, slots=True)
class Reference:
    """One path that keeps the tensor alive."""

    path: str
    #: What the path starts at: "namespace", "output history", "last error's traceback".
    root: str
    #: The kind of the last link: "closure", "autograd graph", "view", or "" for plain containment.
    via: str = ""
    note: str = ""


@dataclass(frozen=True, repr=False)
class Holders(Displayed):
    """The references that keep ``name``'s tensor alive, and whether the search saw everything."""

    name: str
    device: str
    dtype: str
    shape: tuple[int | str, ...]
    nbytes: int
    references: tuple[Reference, ...]
    #: False when the search stopped at a bound (depth, objects, items of a container) before seeing all.
    complete: bool
    #: Types of objects that refer to the tensor directly but no path from a root reached.
    unreached: tuple[str, ...] = ()
    elapsed_s: float = 0.0
    #: Containers looked at in part: "hay: looked at the first 10,000 of 1,000,000".
    cut: tuple[str, ...] = ()
    #: Whether objects at the depth bound were left unfollowed.
    too_deep: bool = False
    #: Why the tensor's size, device and dtype are unknown ("could not inspect: …"); "" when read.
    unread: str = ""
