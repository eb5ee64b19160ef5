"""The names of a scan's records, kept without a string per item where they follow a pattern.

Most of a large namespace sits in long lists (batches, features, cached activations),
whose items are named ``batches[0]``, ``batches[1]``, and so on. A string per item costs
about 60 bytes, half of what the rest of a record costs, so such a run is kept as its
pattern (:class:`IndexNames`) and its names are spelled only when they are read.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import chain
from typing import Iterable, Iterator, Sequence, overload


class IndexNames(Sequence[str]):
    """``prefix + str(i) + suffix`` for ``i`` in ``range(start, stop)``: ``batches[5]`` ..."""

    __slots__ = ("prefix", "start", "stop", "suffix")

    def __init__(self, prefix: str, start: int, stop: int, suffix: str = "]"):
        self.prefix, self.start, self.stop, self.suffix = prefix, start, max(start, stop), suffix

    def __len__(self) -> int:
        return self.stop - self.start

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> IndexNames: ...

    def __getitem__(self, index: int | slice) -> str | IndexNames:
        if isinstance(index, slice):
            positions = range(self.start, self.stop)[index]
            if positions.step != 1:
                raise ValueError("a run of names is cut by a slice with step 1 only")
            return IndexNames(self.prefix, positions.start, positions.stop, self.suffix)
        position = range(self.start, self.stop)[index]
        return f"{self.prefix}{position}{self.suffix}"

    def __iter__(self) -> Iterator[str]:
        prefix, suffix = self.prefix, self.suffix
        return (f"{prefix}{i}{suffix}" for i in range(self.start, self.stop))

    def __repr__(self) -> str:
        return f"IndexNames({self.prefix!r}, {self.start}, {self.stop}, {self.suffix!r})"


class NameColumn(Sequence[str]):
    """A column of names made of parts, each a list of names or an :class:`IndexNames` run.

    Grows at its end (``+=``), is cut at its end (``del column[n:]``), and reads like a list:
    ``column[i]``, ``column[a:b]`` (a list) and iteration. A name of a run is spelled when read.
    """

    __slots__ = ("_parts", "_ends")

    def __init__(self, names: Iterable[str] = ()):
        self._parts: list[list[str] | IndexNames] = []
        #: ``_ends[k]`` is the position just after part ``k``.
        self._ends: list[int] = []
        self += names

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __iadd__(self, names: Iterable[str]) -> NameColumn:
        if isinstance(names, IndexNames):
            last = self._parts[-1] if self._parts else None
            if type(last) is IndexNames and (last.prefix, last.suffix, last.stop) == (names.prefix, names.suffix,
                                                                                     names.start):
                self._parts[-1] = IndexNames(last.prefix, last.start, names.stop, last.suffix)
                self._ends[-1] += len(names)
            elif len(names):
                self._parts.append(names)
                self._ends.append(len(self) + len(names))
            return self
        names = list(names)
        if not names:
            return self
        if self._parts and type(self._parts[-1]) is list:
            self._parts[-1] += names
            self._ends[-1] += len(names)
        else:
            self._parts.append(names)
            self._ends.append(len(self) + len(names))
        return self

    def _locate(self, i: int) -> tuple[int, int]:
        """(part, position within it) of the name at position ``i`` (0 <= i < len)."""
        k = bisect_right(self._ends, i)
        return k, i - (self._ends[k - 1] if k else 0)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            window = range(len(self))[index]
            if window.step != 1:
                return [self[i] for i in window]
            return list(self._between(window.start, window.stop))
        i = range(len(self))[index]  # IndexError when out of range, as a list's
        k, at = self._locate(i)
        return self._parts[k][at]

    def _between(self, start: int, stop: int) -> Iterator[str]:
        """The names from ``start`` to ``stop``, part by part."""
        if start >= stop:
            return iter(())
        first, _ = self._locate(start)
        pieces = []
        for k in range(first, len(self._parts)):
            begin = self._ends[k - 1] if k else 0
            if begin >= stop:
                break
            pieces.append(self._parts[k][max(start - begin, 0):min(stop, self._ends[k]) - begin])
        return chain.from_iterable(pieces)

    def __iter__(self) -> Iterator[str]:
        return chain.from_iterable(self._parts)

    def pick(self, indexes: Sequence[int]) -> list[str]:
        """The names at ``indexes`` (any order)."""
        if isinstance(indexes, range) and indexes.step == 1:
            return self[indexes.start:indexes.stop]
        if len(self._parts) == 1 and type(self._parts[0]) is list:
            return list(map(self._parts[0].__getitem__, indexes))
        return list(map(self.__getitem__, indexes))

    def __delitem__(self, index: slice) -> None:
        if not isinstance(index, slice) or index.stop is not None or index.step is not None:
            raise TypeError("a column of names is cut at its end only: del column[n:]")
        count = range(len(self))[index].start
        while self._parts and (self._ends[-2] if len(self._ends) > 1 else 0) >= count:
            self._parts.pop()
            self._ends.pop()
        if self._parts and self._ends[-1] > count:
            begin = self._ends[-2] if len(self._ends) > 1 else 0
            part = self._parts[-1]
            self._parts[-1] = part[:count - begin]
            self._ends[-1] = count

    def __repr__(self) -> str:
        return f"<NameColumn of {len(self):,} names in {len(self._parts)} parts>"
