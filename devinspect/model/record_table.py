"""The records of one scan kept as columns: :class:`RecordTable`.

A large session holds 100,000 tensors or more, and a record object per tensor costs
about 200 bytes before its name is counted. The table keeps each field as a column
instead: names in a :class:`NameColumn` (a run of list items
kept as its pattern), sizes and storage identities in 8-byte arrays, devices and
dtypes as 2-byte codes, shapes as references to one tuple per distinct shape, and the
fields most records share (root, kind, class, layout, owner, note, flags) as one 4-byte
code for their combination. A :class:`~devinspect.model.records.TensorRecord` is made
only when one is asked for; a reader that needs one field of every record reads
:meth:`RecordTable.column`, which costs a pass over that column alone.
"""

from __future__ import annotations

import operator
from array import array
from bisect import bisect_left, bisect_right
from itertools import chain, compress, repeat
from operator import itemgetter
from typing import Any, Iterable, Iterator, Sequence, overload

from .records import TensorRecord

# -- names: a run of list items kept as its pattern ---------------------------------------------
# Most of a large namespace sits in long lists (batches, features, cached activations), whose
# items are named batches[0], batches[1], and so on. A string per item costs about 60 bytes,
# half of what the rest of a record costs, so such a run is kept as its pattern (IndexNames)
# and its names are spelled only when they are read.


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


# -- the table ------------------------------------------------------------------------------------

#: The fields kept as one code for their combination, in this order.
SHARED_FIELDS = ("root", "kind", "requires_grad", "type_name", "layout", "owner", "param", "note", "hidden",
                 "is_leaf")
_SHARED_AT = {field: i for i, field in enumerate(SHARED_FIELDS)}
#: Array columns and the value that stands for None in each (a size is never negative; no
#: storage is at address 0).
_NUMBERS = {"nbytes": ("q", -1), "storage_bytes": ("q", -1), "storage_id": ("Q", 0)}
_CODED = ("device", "dtype")
#: Records a table keeps as they are before it splits them into its columns.
_PENDING_AT_MOST = 512
#: Sizes and identities below this fit the arrays ("Q" could hold more; no real one is near).
_LIMIT = 1 << 63
_new = tuple.__new__


class _Codes(dict):
    """value -> code, numbered in order of first use; ``values[code]`` is the value."""

    def __init__(self, values: Iterable[Any] = ()):
        super().__init__()
        self.values: list[Any] = []
        for value in values:
            self[value]

    def __missing__(self, value: Any) -> int:
        code = self[value] = len(self.values)
        self.values.append(value)
        return code

    def of(self, values: Sequence[Any]) -> array:
        """The codes of ``values`` as a 2-byte array; a run of one value (most runs: one
        device, one dtype) is coded once."""
        if values and values.count(values[0]) == len(values):
            return array("H", (self[values[0]],)) * len(values)
        return array("H", map(self.__getitem__, values))


class RecordTable(Sequence[TensorRecord]):
    """Every record of a scan, in walk order, as columns (see the module's text).

    Reads like a tuple of records: ``len``, indexing (a slice gives a tuple), iteration
    and ``==`` with any sequence of records. The walk appends to it, then gives it the
    aliases it found once it is done (:meth:`relink`); a finished table is not changed again.
    """

    __slots__ = ("_pending", "_names", "_shapes", "_shared", "_shared_codes", "_device", "_device_codes", "_dtype",
                 "_dtype_codes", "_nbytes", "_storage_bytes", "_storage_id", "_aliases", "_odd")

    def __init__(self, records: Iterable[TensorRecord] = ()):
        self._names = NameColumn()
        self._shapes: list[Any] = []
        self._shared = array("I")
        self._shared_codes = _Codes()
        self._device = array("H")
        self._device_codes = _Codes()
        self._dtype = array("H")
        self._dtype_codes = _Codes()
        self._nbytes = array("q")
        self._storage_bytes = array("q")
        self._storage_id = array("Q")
        #: index -> the first name of the memory a later record shares (most records have none).
        self._aliases: dict[int, str] = {}
        #: (field, index) -> a size or storage id an array cannot hold (None is not odd).
        self._odd: dict[tuple[str, int], Any] = {}
        #: Records appended one by one, not split into the columns yet: split a few thousand at a
        #: time, or when a read needs the columns (the walk reads back the records it has just
        #: made, a module's, from here as they are).
        self._pending: list[TensorRecord] = []
        for record in records:
            self.append(record)

    # -- building ----------------------------------------------------------

    def append(self, record: TensorRecord) -> None:
        """Add one record."""
        self._pending.append(record)
        if len(self._pending) >= _PENDING_AT_MOST:
            self._flush()

    def _flush(self) -> None:
        """Split the pending records into the columns, a column at a time."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        start = len(self._names)
        (names, roots, kinds, devices, dtypes, shapes, nbytes, storage_bytes, storage_ids, aliases, requires_grad,
         type_names, layouts, owners, params, notes, hidden, is_leaf) = zip(*pending)
        numbers = [self._numbers(field, values, start)
                   for field, values in (("nbytes", nbytes), ("storage_bytes", storage_bytes), ("storage_id", storage_ids))]
        shared = array("I", map(self._shared_codes.__getitem__, zip(
            roots, kinds, requires_grad, type_names, layouts, owners, params, notes, hidden, is_leaf)))
        self._grow(names, shapes, shared, devices, dtypes, *numbers)
        for i in compress(range(len(aliases)), map(operator.is_not, aliases, repeat(None))):
            self._aliases[start + i] = aliases[i]

    def _numbers(self, field: str, values: tuple, start: int) -> array:
        """``values`` as the field's array: in one step when all are ints it holds as they are,
        else one by one, anything else set apart (see :meth:`_set_apart`)."""
        typecode, none = _NUMBERS[field]
        if set(map(type, values)) == {int}:
            try:
                column = array(typecode, values)
            except OverflowError:
                pass
            else:
                if (min(column) > 0 if typecode == "Q" else min(column) >= 0) and max(column) < _LIMIT:
                    return column
        low = 1 if typecode == "Q" else 0
        return array(typecode, [value if type(value) is int and low <= value < _LIMIT
                                else self._set_apart(field, value, start + i) for i, value in enumerate(values)])

    def _set_apart(self, field: str, value: Any, i: int) -> int:
        """The array's stand-in for ``value``: its None, with any other value kept in ``_odd``."""
        if value is not None:
            self._odd[(field, i)] = value
        return _NUMBERS[field][1]

    def extend_plain(self, names: list[str], root: str, kind: str, owner: str | None, hidden: bool,
                     devices: list[str], dtypes: list[str], shapes: list[tuple], nbytes: list[int],
                     storage_bytes: list[int], storage_ids: list[int]) -> None:
        """Add a run of plain tensors (exactly ``torch.Tensor``, strided, no gradient, no
        note, no alias known yet) column by column: the walk's hot path."""
        self._flush()
        count = len(names)
        columns = (array("q", nbytes), array("q", storage_bytes), array("Q", storage_ids))
        if 0 in columns[2] or -1 in columns[0] or -1 in columns[1]:
            raise ValueError("a plain tensor without memory or size")
        shared = self._shared_codes[(root, kind, False, "Tensor", "strided", owner, None, None, hidden, True)]
        self._grow(names, shapes, array("I", (shared,)) * count, devices, dtypes, *columns)

    def _grow(self, names: Iterable[str], shapes: Iterable[Any], shared: array, devices: Sequence[str],
              dtypes: Sequence[str | None], nbytes: array, storage_bytes: array, storage_ids: array) -> None:
        """Append to every column at once (the values already checked for their arrays)."""
        device_codes = self._device_codes.of(devices)
        dtype_codes = self._dtype_codes.of(dtypes)
        self._names += names
        self._shapes += shapes
        self._shared += shared
        self._device += device_codes
        self._dtype += dtype_codes
        self._nbytes += nbytes
        self._storage_bytes += storage_bytes
        self._storage_id += storage_ids

    def storage_ids(self) -> memoryview:
        """Every record's storage identity as an unsigned 64-bit int, 0 for none: a read-only
        view of the column, for work done in bulk."""
        self._flush()
        return memoryview(self._storage_id).toreadonly()

    def aliases(self) -> dict[int, str]:
        """``index -> alias_of`` of every record that has one."""
        self._flush()
        return dict(self._aliases)

    def relink(self, aliases: dict[int, str]) -> list[int]:
        """Give the records these aliases (``index -> first name``; every other record has
        none) and return the indexes whose alias changed, ascending."""
        self._flush()
        old = self._aliases
        changed = sorted(i for i in old.keys() | aliases.keys() if old.get(i) != aliases.get(i))
        self._aliases = dict(aliases)
        return changed

    # -- reading -----------------------------------------------------------

    def __len__(self) -> int:
        return len(self._names) + len(self._pending)

    @overload
    def __getitem__(self, index: int) -> TensorRecord: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[TensorRecord, ...]: ...

    def __getitem__(self, index: int | slice) -> TensorRecord | tuple[TensorRecord, ...]:
        count, split = len(self), len(self._names)
        if isinstance(index, slice):
            indexes = range(count)[index]
            if not indexes or min(indexes[0], indexes[-1]) >= split:
                return tuple(map(self._pending.__getitem__, (i - split for i in indexes)))
            self._flush()
            return tuple(map(self._record, indexes))
        i = index.__index__()
        if i < 0:
            i += count
        if not 0 <= i < count:
            raise IndexError("record index out of range")
        return self._pending[i - split] if i >= split else self._record(i)

    def __iter__(self) -> Iterator[TensorRecord]:
        self._flush()
        return map(self._record, range(len(self._names)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RecordTable, tuple, list)):
            return len(self) == len(other) and all(map(tuple.__eq__, self, other))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<RecordTable of {len(self):,} records>"

    def _record(self, i: int) -> TensorRecord:
        root, kind, requires_grad, type_name, layout, owner, param, note, hidden, is_leaf = \
            self._shared_codes.values[self._shared[i]]
        nbytes, storage_bytes, storage_id = self._nbytes[i], self._storage_bytes[i], self._storage_id[i]
        nbytes = None if nbytes == -1 else nbytes
        storage_bytes = None if storage_bytes == -1 else storage_bytes
        storage_id = None if storage_id == 0 else storage_id
        if self._odd:
            nbytes = self._odd.get(("nbytes", i), nbytes)
            storage_bytes = self._odd.get(("storage_bytes", i), storage_bytes)
            storage_id = self._odd.get(("storage_id", i), storage_id)
        return _new(TensorRecord, (
            self._names[i], root, kind, self._device_codes.values[self._device[i]],
            self._dtype_codes.values[self._dtype[i]], self._shapes[i], nbytes, storage_bytes, storage_id,
            self._aliases.get(i), requires_grad, type_name, layout, owner, param, note, hidden, is_leaf,
        ))

    def column(self, field: str, start: int = 0, stop: int | None = None) -> list[Any]:
        """``[r.<field> for r in self[start:stop]]``, read from that column alone."""
        if field not in TensorRecord._fields:
            raise KeyError(f"no record field {field!r}")
        window = slice(start, stop)
        indexes = range(len(self))[window]
        if indexes and indexes[0] >= len(self._names):  # only records not split yet
            split = len(self._names)
            return list(map(itemgetter(TensorRecord._fields.index(field)),
                            self._pending[indexes.start - split:indexes.stop - split]))
        self._flush()
        if field == "name":
            return self._names[window]
        if field == "shape":
            return self._shapes[window]
        if field in _SHARED_AT:
            at, combinations, codes = _SHARED_AT[field], self._shared_codes.values, self._shared[window]
            if len(codes) < len(combinations):  # a few records of a table with many combinations
                return [combinations[code][at] for code in codes]
            values = [shared[at] for shared in combinations]
            return list(map(values.__getitem__, codes))
        if field in _CODED:
            codes = self._device_codes if field == "device" else self._dtype_codes
            return list(map(codes.values.__getitem__, (self._device if field == "device" else self._dtype)[window]))
        if field == "alias_of":
            indexes = range(len(self._names))[window]
            out: list[Any] = [None] * len(indexes)
            for i, alias in self._aliases.items():
                if indexes.start <= i < indexes.stop:
                    out[i - indexes.start] = alias
            return out
        if field in _NUMBERS:
            column = {"nbytes": self._nbytes, "storage_bytes": self._storage_bytes,
                      "storage_id": self._storage_id}[field][window]
            none = _NUMBERS[field][1]
            out = list(column)
            if none in column:
                out = [None if value == none else value for value in out]
            if self._odd:
                indexes = range(len(self._names))[window]
                for (odd_field, i), value in self._odd.items():
                    if odd_field == field and indexes.start <= i < indexes.stop:
                        out[i - indexes.start] = value
            return out
        raise AssertionError(field)  # every field of TensorRecord is one of the columns above

    def take(self, indexes: Sequence[int]) -> RecordTable:
        """A new table of the records at ``indexes`` (ascending), aliases kept as they are."""
        self._flush()
        out = RecordTable()
        out._names = NameColumn(self._names.pick(indexes))
        out._shapes = list(map(self._shapes.__getitem__, indexes))
        out._shared_codes = _Codes(self._shared_codes.values)
        out._device_codes = _Codes(self._device_codes.values)
        out._dtype_codes = _Codes(self._dtype_codes.values)
        for name in ("_shared", "_device", "_dtype", "_nbytes", "_storage_bytes", "_storage_id"):
            column = getattr(self, name)
            setattr(out, name, array(column.typecode, map(column.__getitem__, indexes)))
        position = {i: n for n, i in enumerate(indexes)} if (self._aliases or self._odd) else {}
        out._aliases = {position[i]: a for i, a in self._aliases.items() if i in position}
        out._odd = {(f, position[i]): v for (f, i), v in self._odd.items() if i in position}
        return out

    def keep_first(self, count: int) -> None:
        """Drop every record after the first ``count``, in place (no column is copied)."""
        self._flush()
        for column in (self._names, self._shapes, self._shared, self._device, self._dtype, self._nbytes,
                       self._storage_bytes, self._storage_id):
            del column[count:]
        self._aliases = {i: alias for i, alias in self._aliases.items() if i < count}
        self._odd = {(field, i): value for (field, i), value in self._odd.items() if i < count}

    def indexes_where(self, field: str, values: Iterable[Any]) -> list[int]:
        """Indexes of the records whose shared ``field`` (see :data:`SHARED_FIELDS`) is one of
        ``values``, ascending: one pass over the 4-byte codes, no record made."""
        self._flush()
        at, values = _SHARED_AT[field], set(values)
        combinations = self._shared_codes.values
        wanted = {code for code, shared in enumerate(combinations) if shared[at] in values}
        if not wanted or len(wanted) == len(combinations):
            return list(range(len(self._shared))) if wanted else []
        if len(combinations) <= 256:
            # Few combinations (the usual case): one byte per record, marked by a translation
            # table in C, then the marked positions picked.
            marks = bytes(1 if code in wanted else 0 for code in range(256))
            return list(compress(range(len(self._shared)), bytes(iter(self._shared)).translate(marks)))
        return list(compress(range(len(self._shared)), map(wanted.__contains__, self._shared)))

    def values_of(self, field: str) -> set[Any]:
        """The values a shared ``field`` (see :data:`SHARED_FIELDS`) takes in this table's
        combinations (a superset of those its records hold)."""
        self._flush()
        at = _SHARED_AT[field]
        return {shared[at] for shared in self._shared_codes.values}

    def device_sums(self) -> dict[str, list[int]] | None:
        """``device -> [records, storage bytes, logical bytes]``: every record counted, the bytes
        of aliases and unknown sizes not. Summed over the arrays (a pass per device in C), or
        None when a value outside the arrays needs the record-by-record sum."""
        self._flush()
        if self._odd:
            return None
        codes, devices = self._device_codes.values, self._device
        used = sorted(set(devices)) if len(codes) > 1 else list(range(len(codes)))
        sums: dict[str, list[int]] = {}
        for code in used:
            if len(used) == 1:
                count = len(devices)
                storage = sum(self._storage_bytes)
                logical = sum(self._nbytes)
            else:
                mask = bytes(map(code.__eq__, devices))
                count = mask.count(1)
                storage = sum(compress(self._storage_bytes, mask))
                logical = sum(compress(self._nbytes, mask))
            sums[codes[code]] = [count, storage, logical]
        # Take back what the sums over-count: aliases' bytes, and the -1 of each unknown size.
        for i in self._aliases:
            totals = sums[codes[devices[i]]]
            totals[1] -= self._storage_bytes[i]
            totals[2] -= self._nbytes[i]
        for column, at in ((self._storage_bytes, 1), (self._nbytes, 2)):
            if -1 in column:
                for i in compress(range(len(column)), map((-1).__eq__, column)):
                    if i not in self._aliases:
                        sums[codes[devices[i]]][at] += 1
        return sums


def spans_touched(spans: Sequence[tuple[int, int]], indexes: list[int]) -> list[int]:
    """Positions of the ``(start, stop)`` spans that hold one of the (ascending) ``indexes``."""
    touched = []
    for n, (start, stop) in enumerate(spans):
        at = bisect_left(indexes, start)
        if at < len(indexes) and indexes[at] < stop:
            touched.append(n)
    return touched


def record_column(records: Sequence[TensorRecord], field: str) -> list[Any]:
    """``[r.<field> for r in records]``: a table's column, or one C-level pass over records
    (they are tuples)."""
    if isinstance(records, RecordTable):
        return records.column(field)
    return list(map(itemgetter(TensorRecord._fields.index(field)), records))


def size_keys(records: Sequence[TensorRecord]) -> list[int]:
    """The bytes each record is ordered by: what its memory holds (0 for an alias), or for a
    meta tensor what it would need. Read from the columns (no record made): the storage
    sizes, then the few aliases and meta tensors set apart."""
    sizes = record_column(records, "storage_bytes")
    if None in sizes:
        sizes = [size or 0 for size in sizes]
    devices = record_column(records, "device")
    if "meta" in set(devices):
        for i in compress(range(len(devices)), map("meta".__eq__, devices)):
            sizes[i] = records[i].nbytes or 0
    for i in compress(range(len(sizes)), map(operator.is_not, record_column(records, "alias_of"), repeat(None))):
        sizes[i] = 0
    return sizes
