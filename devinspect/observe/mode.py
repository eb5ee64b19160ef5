"""The scoped torch mode behind ``%%devcheck``: transfers, host syncs and device mismatches.

A :class:`~torch.overrides.TorchFunctionMode` does the work. It sees every tensor
call made from Python (``.item()``, ``.to()``, ``.numpy()``, printing) at about a
microsecond per call and, unlike a dispatch mode, leaves ``torch.compile`` alone.

Being invisible comes first:

* The mode sits at the *bottom* of the torch-function mode stack and only ever
  removes itself, so modes the cell enters, leaves open or exits run as without it.
* Nothing is attached to user tensors: no weakref, no attribute. What the check
  remembers about data (where host memory came from, what created a tensor) is
  keyed by the tensor's *storage*, validated by a weak reference to the storage
  object, which ``torch.utils.swap_tensors`` and ``Module.to`` never look at.
* Its own bookkeeping runs with subclass torch-function handlers disabled and can
  never raise into the cell; the user's exceptions (every ``BaseException``) pass
  through untouched.

The copies autograd makes in the backward pass (a gradient going back across devices
through ``.to()``) are counted by a hook on the autograd node of each such ``.to()``
the check sees, and on those of a graph made before it (see :mod:`.gradient_copies`).
Copies and syncs go to the innermost line of the user's own code (never library code); when
a call raises and its tensor inputs sit on different devices (decided from the
inputs, never from the message), the operands are named in the user's words and the
fix comes from :mod:`devinspect.diagnose.fix_builders`.
"""

from __future__ import annotations

import contextlib
import sys
import types
import weakref
from collections import defaultdict
from typing import Any, Callable, Mapping

import torch
from torch.overrides import TorchFunctionMode

from ..collect import first_line, locations, names_a_device, object_at, op_name, tensor_inputs, type_is_one_of
from ..diagnose import Failure, diagnose, repeated_transfer, round_trip, sync_in_loop, unpinned_non_blocking
from ..model import SEVERITY_ORDER, Cause, CheckReport, Finding, LineStats, Mismatch, SourceLine
from ..runtime import beneath_user_modes, tensor_getters, tracebacks, warning_places
from .fast_paths import FastPaths
from .gradient_copies import GradientCopies

_T = torch.Tensor


_NO_SUBCLASS = torch._C.DisableTorchFunctionSubclass
_is_compiling = torch.compiler.is_compiling


_SYNC_METHODS = {
    "item": ".item()", "__float__": "float()", "__int__": "int()", "__bool__": "bool()", "__index__": "int()",
    "tolist": ".tolist()", "__repr__": "print", "__str__": "print", "__format__": "print",
    "nonzero": "nonzero", "masked_select": "masked_select", "unique": "unique", "argwhere": "nonzero",
    "equal": "torch.equal", "allclose": "allclose", "is_nonzero": "is_nonzero",
}


_FACTORIES = frozenset({
    "ones", "zeros", "empty", "full", "rand", "randn", "randint", "arange", "linspace", "eye", "tensor", "as_tensor",
    "asarray", "new_tensor", "ones_like", "zeros_like", "empty_like", "full_like", "rand_like", "randn_like",
})


#: Methods that copy a tensor to a device named by the method (``.cuda()``); the name a
#: PrivateUse1 backend takes (``.sim()``) joins them, and :data:`_INTERESTING`, when a check starts.
_DEVICE_METHODS = {"cuda", "xpu", "mps"}


_INTERESTING = {*_SYNC_METHODS, "numpy", "__array__", "to", "cpu", "type_as", "copy_", "__getitem__", "__setitem__",
                "where", "backward", *_DEVICE_METHODS, *_FACTORIES}


#: Calls that can only sync or copy when their tensor is on an accelerator: on a plain
#: host tensor they take the path of any other op.
_QUIET_ON_HOST = frozenset({*_SYNC_METHODS, "numpy", "__array__", "__getitem__"})


#: Results of .item()/.tolist() remembered to recognise the same values coming back.
_REMEMBERED_VALUES = 256


#: Lists longer than this are not fingerprinted (the cost would show in the cell).
_FINGERPRINT_MAX = 4096


#: A line whose host syncs repeat at least this often is flagged as syncing in a loop.
LOOP_SYNCS = 10


class _Counts:
    __slots__ = ("where", "cell_line", "h2d", "d2h", "d2d", "syncs", "inside")

    def __init__(self, where: SourceLine, cell_line: int | None):
        self.where, self.cell_line = where, cell_line
        self.h2d = [0, 0]
        self.d2h = [0, 0]
        self.d2d = [0, 0]
        self.syncs: dict[str, int] = defaultdict(int)
        self.inside: set[str] = set()


class _StorageTags:
    """Facts about tensor memory, keyed by storage and never attached to a tensor.

    An entry is valid only while a weak reference to the storage object it was made
    for still points at the tensor's storage; entries of dead storages are dropped,
    and data pointers serve to recognise the same memory seen through numpy
    (``.numpy()`` then ``torch.from_numpy``).
    """

    def __init__(self, by_pointer: bool = False) -> None:
        #: storage key -> (weak reference to the storage, fact); read directly on the hot path.
        self.entries: dict[int, tuple[weakref.ref, Any]] = {}
        self._pointers: dict[int, int] = {} if by_pointer else None  # type: ignore[assignment]

    def set(self, t: Any, value: Any) -> None:
        storage = _storage(t)
        if storage is None:
            return
        key = storage._cdata
        pointers = self._pointers

        def forget(_ref: Any, key: int = key) -> None:
            entry = self.entries.pop(key, None)
            if entry is not None and pointers is not None:
                for ptr in [p for p, k in pointers.items() if k == key]:
                    del pointers[ptr]

        self.entries[key] = (weakref.ref(storage, forget), value)
        if pointers is not None:
            with contextlib.suppress(Exception):
                pointers[storage.data_ptr()] = key

    def get(self, t: Any) -> Any:
        storage = _storage(t)
        if storage is None:
            return None
        entry = self.entries.get(storage._cdata)
        if entry is not None and entry[0]() is storage:
            return entry[1]
        if self._pointers:
            with contextlib.suppress(Exception):
                key = self._pointers.get(storage.data_ptr())
                entry = self.entries.get(key) if key is not None else None
                if entry is not None and entry[0]() is not None and entry[0]().data_ptr() == storage.data_ptr():
                    return entry[1]
        return None


def _storage(t: Any) -> Any:
    """The storage holding ``t``'s data (the inner tensor's for a wrapper subclass), or None."""
    try:
        if type(t) is _T or type(t) is torch.nn.Parameter:
            return tensor_getters.storage(t) if tensor_getters.layout(t) is torch.strided else None
        from ..collect import inner_tensors

        inner = inner_tensors(t)
        return _storage(inner[0]) if inner else tensor_getters.storage(t)
    except Exception:  # no storage of its own (meta, sparse, a functional wrapper)
        return None


def _on_accelerator(t: Any) -> bool:
    """Whether tensor ``t``'s memory is an accelerator's (not the host's, not meta)."""
    return tensor_getters.device(t).type not in ("cpu", "meta")


def _current_index(device_type: str) -> int:
    """The index of the current device of a type (what ``.to("cuda")`` means), 0 when unknown."""
    with contextlib.suppress(Exception):
        return int(getattr(torch, device_type).current_device())  # torch.cuda, or a backend's module
    with contextlib.suppress(Exception):
        accelerator = torch.accelerator.current_accelerator()
        if accelerator is not None and accelerator.type == device_type:
            return int(torch.accelerator.current_device_index())
    return 0


def _is_pinned(t: Any) -> bool:
    with contextlib.suppress(Exception):
        return bool(tensor_getters.is_pinned(t))
    return False


def _nbytes(t: Any) -> int:
    """Bytes a copy of ``t`` moves; never raises (sparse, nested and meta tensors included)."""
    try:
        if type(t) is _T and tensor_getters.layout(t) is torch.strided:
            return int(tensor_getters.nbytes(t))
        from ..collect import tensor_facts

        with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
            facts = tensor_facts(t)
        return int(facts[3] or 0)
    except Exception:
        return 0


class DeviceCheckMode(TorchFunctionMode):
    """Counts copies and syncs per source line and explains device mismatches.

    ``is_cell_frame(frame)`` says which frames are the checked code itself (a notebook
    cell, or the block under ``with check():``); ``namespace`` is where variable names
    are looked up when a mismatch needs explaining.
    """

    def __init__(self, namespace: Mapping[str, Any], is_cell_frame: Callable[[types.FrameType], bool],
                 tidy_tracebacks: bool = False):
        super().__init__()
        self.namespace = namespace
        self.is_cell_frame = is_cell_frame
        #: In IPython: errors whose innermost frame is this mode's are shown without it.
        self.tidy_tracebacks = tidy_tracebacks
        self._lines: dict[tuple[str, int], _Counts] = {}
        self._sources: dict[tuple[types.CodeType, int], SourceLine] = {}
        self._from_device = _StorageTags(by_pointer=True)  # host memory that came from a device -> line
        self._moved = _StorageTags()  # host memory -> times copied to a device
        self._created = _StorageTags()  # tensor memory -> how it was made (a Cause)
        self._values: dict[tuple[type, Any], str] = {}  # .item()/.tolist() results -> line they left the device
        self._flags: list[Finding] = []
        self._flagged: set[tuple[str, str]] = set()
        self._seen_errors: set[int] = set()
        self.mismatch: Mismatch | None = None
        self._backward_where: tuple[SourceLine, int | None, str] | None = None
        self._gradients = GradientCopies(self._gradient_copied, self._bookkeeping_failed)
        self.internal_errors = 0  # bookkeeping failures, never shown to the cell
        self.fast_paths = FastPaths(self)

    # -- entering and leaving: only ever our own entry on the mode stack ---------------

    def __enter__(self) -> DeviceCheckMode:
        backend = torch._C._get_privateuse1_backend_name()
        if backend != "privateuseone" and backend not in _DEVICE_METHODS:
            _DEVICE_METHODS.add(backend)
            _INTERESTING.add(backend)
        above = []
        while torch._C._len_torch_function_stack() > 0:
            above.append(torch._C._pop_torch_function_stack())
        # At the bottom, so the user's modes stay on top of it; only the default device that
        # set_default_device keeps stays below, where torch looks for it when it is set again
        # (a ``with torch.device`` block's is popped from the top when it ends: it stays above).
        if above and above[-1] is getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None):
            torch._C._push_on_torch_function_stack(above.pop())
        torch._C._push_on_torch_function_stack(self)
        for mode in reversed(above):
            torch._C._push_on_torch_function_stack(mode)
        self.fast_paths.install()
        warning_places.install()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.fast_paths.remove()
            warning_places.remove()
        finally:
            self._gradients.remove()  # the user's autograd graph is left as it was
        stack = []
        while torch._C._len_torch_function_stack() > 0:
            stack.append(torch._C._pop_torch_function_stack())
        for mode in reversed(stack):
            if mode is not self:  # modes the cell left open stay, as they would without the check
                torch._C._push_on_torch_function_stack(mode)

    # -- the hot path ----------------------------------------------------------

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        __tracebackhide__ = True  # IPython hides this frame from the user's traceback
        name = getattr(func, "__name__", None)
        if name not in _INTERESTING or (name in _QUIET_ON_HOST and args and type(args[0]) is _T
                                        and args[0].is_cpu):
            # Any other op, or one that can only sync or copy on an accelerator called on a
            # plain host tensor: called as the cell calls it (no keyword dict made per call).
            # Asked before whether torch.compile is tracing (a Python call per op): this path
            # is only the op either way, and its bookkeeping is skipped in a trace below.
            try:
                result = func(*args, **kwargs) if kwargs else func(*args)
            except Exception as exc:
                if not _is_compiling():
                    self._on_error(func, args, kwargs or {}, exc)
                    if self.tidy_tracebacks:
                        tracebacks.tidy_traceback(exc)
                raise
            if self._from_device.entries and not _is_compiling():
                self._propagate(args, result)
            return result
        if _is_compiling():
            # torch.compile traces this mode into its graph: there it is only the op, so compiled
            # code runs as in a plain cell (a mismatch it meets is explained from its error).
            return func(*args, **(kwargs or {}))
        return self._interesting(name, func, args, kwargs or {})

    def _interesting(self, name: str, func: Any, args: tuple, kwargs: dict) -> Any:
        __tracebackhide__ = True
        try:
            with _NO_SUBCLASS():
                before = self._before(name, func, args, kwargs)
        except Exception:  # the check's own failure never reaches the cell
            before, self.internal_errors = None, self.internal_errors + 1
        try:
            if name == "backward":
                # Gradient copies run inside autograd (on its own threads for CUDA): they are
                # counted by hooks on the graph's copy nodes, on the line that called .backward().
                self._backward_where = self._where()
                if args:
                    self._gradients.before_backward(args[0])
                try:
                    result = func(*args, **kwargs)
                finally:
                    self._backward_where = None
            else:
                result = func(*args, **kwargs)
        except Exception as exc:
            self._on_error(func, args, kwargs, exc)
            if self.tidy_tracebacks:
                tracebacks.tidy_traceback(exc)
            raise
        try:
            with _NO_SUBCLASS():
                self._after(name, args, kwargs, result, before)
        except Exception:
            self.internal_errors += 1
        return result

    def _propagate(self, args: tuple, result: Any) -> None:
        """Host results computed from host data that came from a device carry its origin."""
        try:
            if type(result) is not _T:
                return
            with _NO_SUBCLASS():
                if tensor_getters.device(result).type != "cpu":
                    return
                for a in args:
                    if type(a) is _T and tensor_getters.device(a).type == "cpu":
                        origin = self._from_device.get(a)
                        if origin is not None:
                            self._from_device.set(result, origin)
                            return
        except Exception:
            self.internal_errors += 1

    # -- events ----------------------------------------------------------------

    def _before(self, name: str, func: Any, args: tuple, kwargs: dict) -> Any:
        self_t = args[0] if args and tensor_getters.is_tensor(args[0]) else None
        if name in ("numpy", "__array__") and self_t is not None and _on_accelerator(self_t):
            # A device-to-host copy: made by numpy(force=True), needed (and refused) without it.
            self._copy_counted(self._where(), tensor_getters.device(self_t), torch.device("cpu"), _nbytes(self_t), ".numpy()")
            return None
        if name in _SYNC_METHODS and self_t is not None:
            if _on_accelerator(self_t):
                self._sync(_SYNC_METHODS[name])
            return None
        if name == "__getitem__" and self_t is not None and len(args) > 1:
            index = args[1]
            parts = tuple.__iter__(index) if type(index) is tuple else (index,)
            if _on_accelerator(self_t) and any(tensor_getters.is_tensor(i) and tensor_getters.dtype(i) == torch.bool for i in parts):
                self._sync("bool-mask indexing")
            return None
        if name == "where" and self_t is not None and len(args) == 1 and not kwargs and _on_accelerator(self_t):
            self._sync("nonzero")  # torch.where(mask) is torch.nonzero(mask, as_tuple=True)
            return None
        if name in ("to", "cpu", "type_as") or name in _DEVICE_METHODS:
            return self._planned_copy(name, self_t, args, kwargs) if self_t is not None else None
        if name == "__setitem__" and self_t is not None and len(args) > 2 and tensor_getters.is_tensor(args[2]):
            value = args[2]
            self._copy(tensor_getters.device(value), tensor_getters.device(self_t), _nbytes(value), value, False, into=self_t)
        if name == "copy_" and self_t is not None and len(args) > 1 and tensor_getters.is_tensor(args[1]):
            src = args[1]
            non_blocking = bool(kwargs.get("non_blocking", args[2] if len(args) > 2 else False))
            pinned = non_blocking and tensor_getters.device(self_t).type == "cpu" and _is_pinned(self_t)
            self._copy(tensor_getters.device(src), tensor_getters.device(self_t), _nbytes(src), src, non_blocking, into=self_t,
                       waits=not pinned)
        return None

    def _after(self, name: str, args: tuple, kwargs: dict, result: Any, before: Any) -> None:
        self_t = args[0] if args and tensor_getters.is_tensor(args[0]) else None
        if before is not None and tensor_getters.is_tensor(result):
            src, dst = before
            if dst.type == "cpu" and src.type != "cpu":
                self._from_device.set(result, self._where()[0].label)
            if src != dst and tensor_getters.grad_fn(result) is not None:
                self._gradients.forward_copy(tensor_getters.grad_fn(result))
        elif name in ("item", "tolist") and self_t is not None and _on_accelerator(self_t):
            self._remember_value(result)
        elif name in _FACTORIES and tensor_getters.is_tensor(result):
            where = self._where()
            # A device is chosen by device=, by the tensor a ``*_like`` or ``new_*`` call follows,
            # or by torch's default device (the tensor is then on an accelerator without device=).
            given = (kwargs.get("device") is not None or name.endswith("_like") or name.startswith("new_")
                     or _on_accelerator(result))
            # The user's line, the factory, whether it said device=, and the package it ran in (when
            # library code called it from that line).
            self._created.set(result, Cause(where[0], "factory", factory=name, device_given=given,
                                                 package=where[2] or ""))
            if name in ("tensor", "as_tensor", "asarray", "new_tensor"):
                self._tensor_from_data(name, args[1:] if name == "new_tensor" else args, where, given, result)

    def _tensor_from_data(self, name: str, args: tuple, where: tuple[SourceLine, int | None, str],
                          given: bool, result: Any) -> None:
        if args and tensor_getters.is_tensor(args[0]):  # made from a tensor: a copy only between two devices
            self._copy(tensor_getters.device(args[0]), tensor_getters.device(result), _nbytes(result), args[0], False)
            return
        origin = self._value_origin(args[0]) if args else None
        on_device = _on_accelerator(result)
        nbytes = _nbytes(result)
        if on_device and given and nbytes:
            # A copy from host memory that the host waits for (an empty tensor copies nothing).
            self._count(where, "h2d", nbytes)
            self._sync(".new_tensor()" if name == "new_tensor" else f"torch.{name}(…, device=)", where)
            if origin is not None:
                self._round_trip(where[0], origin)
        elif origin is not None and not on_device:
            self._from_device.set(result, origin)  # a host tensor made of values that left the device

    def _remember_value(self, value: Any) -> None:
        key = _fingerprint(value)
        if key is not None:
            if len(self._values) >= _REMEMBERED_VALUES:
                self._values.pop(next(iter(self._values)))
            self._values[key] = self._where()[0].label

    def _value_origin(self, data: Any) -> str | None:
        key = _fingerprint(data)
        return self._values.get(key) if key is not None else None

    def _gradient_copied(self, src: Any, dst: Any, nbytes: int) -> None:
        self._copy_counted(self._backward_where or self._where(), src, dst, nbytes, "backward copy to host")

    def _bookkeeping_failed(self) -> None:
        self.internal_errors += 1

    def _planned_copy(self, name: str, t: Any, args: tuple, kwargs: dict) -> Any:
        src = tensor_getters.device(t)
        non_blocking = bool(kwargs.get("non_blocking", False))
        dtype = None
        if name == "cpu":
            dst = torch.device("cpu")
        elif name == "type_as":
            if len(args) < 2 or not tensor_getters.is_tensor(args[1]):
                return None
            dst, dtype = tensor_getters.device(args[1]), tensor_getters.dtype(args[1])
        elif name in _DEVICE_METHODS:
            index = args[1] if len(args) > 1 else kwargs.get("device")
            dst = torch.device(name, index) if isinstance(index, int) else torch.device(index or name)
        else:
            try:
                dst, dtype, non_blocking, _fmt = torch._C._nn._parse_to(*args[1:], **kwargs)
            except Exception:
                return None
            if dst is None:
                return None
        if dst.index is None and dst.type != "cpu":
            dst = torch.device(dst.type, _current_index(dst.type))  # "cuda" is the current cuda device
        if dst == src:
            return None  # no copy: already there
        nbytes = _nbytes(t)
        if dtype is not None and src.type == "cpu" and tensor_getters.dtype(t) != dtype and tensor_getters.dtype(t).itemsize:
            nbytes = nbytes // tensor_getters.dtype(t).itemsize * dtype.itemsize  # converted on the host, then copied
        # A non-blocking copy to the host lands in pinned memory: the host does not wait for it.
        self._copy(src, dst, nbytes, t, non_blocking, waits=not (non_blocking and name in ("to", "cpu")))
        return (src, dst)

    def _copy(self, src: Any, dst: Any, nbytes: int, source_tensor: Any, non_blocking: bool, into: Any = None,
              waits: bool = True) -> None:
        if src == dst or not nbytes:
            return
        where = self._where()
        direction = self._copy_counted(where, src, dst, nbytes, ".cpu()" if waits else None)
        if direction == "h2d":
            self._host_to_device_checks(where[0], source_tensor, nbytes, non_blocking)
        elif direction == "d2h" and into is not None:
            self._from_device.set(into, where[0].label)

    def _copy_counted(self, where: tuple[SourceLine, int | None, str], src: Any, dst: Any, nbytes: int,
                      sync_kind: str | None) -> str:
        """Count one copy between two different devices; a copy to the host is also a sync,
        unless it is one the host does not wait for (``sync_kind`` None)."""
        src_host, dst_host = src.type == "cpu", dst.type == "cpu"
        direction = "h2d" if src_host and not dst_host else "d2h" if dst_host and not src_host else "d2d"
        self._count(where, direction, nbytes)
        if direction == "d2h" and sync_kind is not None:
            self._sync(sync_kind, where)
        return direction

    def _host_to_device_checks(self, where: SourceLine, t: Any, nbytes: int, non_blocking: bool) -> None:
        origin = self._from_device.get(t)
        if origin is not None:
            self._round_trip(where, origin)
        count = (self._moved.get(t) or 0) + 1
        self._moved.set(t, count)
        if count == 2:
            self._flag(repeated_transfer(where, nbytes))
        if non_blocking:
            if not _is_pinned(t):
                self._flag(unpinned_non_blocking(where))

    def _round_trip(self, where: SourceLine, origin: str) -> None:
        self._flag(round_trip(where, origin))

    def _sync(self, kind: str, where: tuple[SourceLine, int | None, str] | None = None) -> None:
        where = where or self._where()
        self._counts(where).syncs[kind] += 1

    def _count(self, where: tuple[SourceLine, int | None, str], direction: str, nbytes: int) -> None:
        pair = getattr(self._counts(where), direction)
        pair[0] += 1
        pair[1] += int(nbytes)

    def _counts(self, where: tuple[SourceLine, int | None, str]) -> _Counts:
        line, cell_line, inside = where
        key = (line.file, line.line)
        counts = self._lines.get(key)
        if counts is None:
            counts = self._lines[key] = _Counts(line, cell_line)
        if inside:
            counts.inside.add(inside)
        return counts

    def _flag(self, finding: Finding) -> None:
        """Keeps ``finding`` once per kind and line, however many passes meet it."""
        if (finding.code, finding.subject) not in self._flagged:
            self._flagged.add((finding.code, finding.subject))
            self._flags.append(finding)

    # -- where in the user's code --------------------------------------------------

    def _where(self) -> tuple[SourceLine, int | None, str]:
        """(the innermost line of user code, the checked cell's line, the library it ran inside)."""
        frame = sys._getframe(1)
        inner = None
        inside = ""
        cell_line = None
        while frame is not None:
            code = frame.f_code
            if locations.is_user_code(code):
                if inner is None:
                    inner = frame
                if self.is_cell_frame(frame):
                    cell_line = frame.f_lineno
                    break
            elif inner is None and not inside and not locations.is_own_file(code.co_filename):
                inside = locations.package_of(code.co_filename)
            frame = frame.f_back
        if inner is None:
            return SourceLine("<unknown>", 0, ""), None, inside
        return self._source(inner), cell_line, inside

    def _source(self, frame: types.FrameType) -> SourceLine:
        key = (frame.f_code, frame.f_lineno)
        line = self._sources.get(key)
        if line is None:
            line = self._sources[key] = locations.frame_line(frame)
        return line

    # -- device mismatch -------------------------------------------------------------

    def _on_error(self, func: Any, args: tuple, kwargs: dict, exc: BaseException) -> None:
        """Explain a device mismatch, once per error; never raises, never touches the exception."""
        if self.mismatch is not None or id(exc) in self._seen_errors:
            return
        try:
            with tensor_getters.reading():  # beneath the user's modes; no subclass code runs
                tensors = list(tensor_inputs(args, kwargs))
                devices = sorted({str(tensor_getters.device(t)) for t in tensors
                                  if not (tensor_getters.device(t).type == "cpu" and tensor_getters.dim(t) == 0)})
            if len(devices) < 2 or not names_a_device(exc, devices):
                return
            self._seen_errors.add(id(exc))
            try:
                with tensor_getters.reading():
                    failure = Failure(self.namespace, sys._getframe(), self.is_cell_frame, self._source,
                                      self._created.get)
                    self.mismatch = diagnose(failure, op_name(func), tensors, devices, exc)
            except Exception:  # a diagnosis must never hide the user's error
                self.internal_errors += 1
                self.mismatch = Mismatch(
                    op=op_name(func), error=first_line(exc), devices=tuple(devices), operands=(), cell_line=None,
                    user_frame=None, module_path=None, target_device=None, fix=None,
                )
        except Exception:
            self.internal_errors += 1

    def _explained_after(self, error: BaseException) -> Mismatch | None:
        """A mismatch no op of this mode saw fail (torch.compile meets it while tracing, on fake
        tensors): explained from the error and its traceback, as a plain cell's is."""
        from ..diagnose import chained_errors, explain_mismatch

        try:
            # A library may have re-raised it (its own class, its own words): the chain leads to the call.
            for inner, entries in reversed(chained_errors(error)):
                found = explain_mismatch(inner, self.namespace, entries)
                if found is not None:
                    return found
            return None
        except Exception:  # a diagnosis must never hide the user's error
            self.internal_errors += 1
            return None

    def _named_elsewhere_now(self) -> bool:
        """Whether a parameter or buffer the mismatch names holds another device's tensor now."""
        for operand in self.mismatch.operands:
            if operand.name and operand.source in ("parameter", "buffer"):
                now = object_at(self.namespace, operand.name)
                if issubclass(type(now), _T) and str(tensor_getters.device(now)) != operand.device:
                    return True
        return False

    # -- result ---------------------------------------------------------------------------

    @beneath_user_modes()  # no mode the user left entered sees the diagnosis
    def report(self, error: BaseException | None = None, elapsed_s: float | None = None,
               unseen: tuple[str, ...] = ()) -> CheckReport:
        lines = []
        for counts in self._lines.values():
            lines.append(
                LineStats(
                    where=counts.where, cell_line=counts.cell_line,
                    h2d_count=counts.h2d[0], h2d_bytes=counts.h2d[1], d2h_count=counts.d2h[0], d2h_bytes=counts.d2h[1],
                    d2d_count=counts.d2d[0], d2d_bytes=counts.d2d[1],
                    syncs=tuple(sorted(counts.syncs.items(), key=lambda kv: -kv[1])),
                    inside=tuple(sorted(counts.inside)),
                )
            )
        # In the order the code reads: by the checked cell's line, then by file and line.
        lines.sort(key=lambda s: (s.cell_line if s.cell_line is not None else 1 << 30, s.where.file, s.where.line))
        findings = list(self._flags)
        for s in lines:
            if s.sync_count >= LOOP_SYNCS:
                findings.append(sync_in_loop(s))
        findings.sort(key=lambda f: SEVERITY_ORDER.get(f.severity, 9))
        from ..diagnose import chained_errors, explain_device_error

        device_error = next((found for inner, entries in reversed(chained_errors(error))
                             if (found := explain_device_error(inner, self.namespace, entries)) is not None),
                            None) if error is not None else None
        self.mismatch = None if device_error is not None else self.mismatch  # its message names devices too
        unnamed = self.mismatch is None or not any(o.name for o in self.mismatch.operands) or \
            self._named_elsewhere_now()
        if error is not None and device_error is None and (unnamed or not _actionable(self.mismatch)):
            # No op was seen failing (torch.compile met it while tracing), its operands are
            # temporaries no name reaches ((a @ w).sum(0) + b * 2), the names held them only
            # while the op ran (functional_call puts a dict's tensors in a module for the call),
            # or its fix is advice only (a temporary of a helper the cell calls): the failing
            # expression, read from the traceback as a plain cell's is, names them.
            after = self._explained_after(error)
            if after is not None and (self.mismatch is None or any(o.name for o in after.operands)) \
                    and (unnamed or _actionable(after)):
                self.mismatch = after
        return CheckReport(
            lines=tuple(lines), findings=tuple(findings), mismatch=self.mismatch,
            error=first_line(error) if error is not None else None, elapsed_s=elapsed_s, unseen=unseen,
            device_error=device_error)


def _actionable(mismatch: Mismatch) -> bool:
    """Whether a mismatch's fix has code to run or an edit to make."""
    return mismatch.fix is not None and (mismatch.fix.code is not None or bool(mismatch.fix.edits))


def _fingerprint(value: Any) -> tuple[type, Any] | None:
    """A key for a value that left the device (``.item()``, ``.tolist()``), to recognise it coming back.

    Whole numbers below 2**16 are too common to tell apart; long lists cost too much.
    """
    vt = type(value)
    if vt is float:
        return None if value != value or float(value).is_integer() else (float, value)
    if vt is int:
        return (int, value) if abs(value) >= 1 << 16 else None
    if vt is list:
        flat: list = []
        stack = [value]
        while stack:
            item = stack.pop()
            if type(item) is list:
                if len(flat) + len(item) > _FINGERPRINT_MAX:
                    return None
                stack.extend(reversed(item))
            elif type_is_one_of(item, (float, int, bool)):
                flat.append(item)
            else:
                return None
        return (list, tuple(flat)) if flat else None
    return None
