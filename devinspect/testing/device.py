"""The simulated device ``sim``: a PrivateUse1 backend written in Python, its tensor class,
kernels and device module (see :mod:`devinspect.testing`)."""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from typing import Any, Callable

import torch
from torch.utils._pytree import tree_flatten, tree_map

from ..runtime import tidy_traceback, warning_places
from . import forks, generators, moves, pinned, real_devices, storages
from . import streams as stream_module
from .allocator import Allocator, Block
from .identity import DEVICE_COUNT, DEVICE_TYPE
from .ops import autocast, device_rules, gradients, op_declarations, plain_paths, recurrent
from .storage_books import StorageBooks, parse_capacity
from .streams import DeviceContext, SimEvent, SimStream, StreamContext, streams

_lock = threading.Lock()
_enabled = False

class SimulatedDeviceError(RuntimeError):
    """The simulated device cannot be set up in this process."""


_books = [StorageBooks(Allocator(f"{DEVICE_TYPE}:{i}")) for i in range(DEVICE_COUNT)]
_UNCHANGED: Any = object()


def _index(device: Any) -> int:
    if device is None:
        return torch.sim.current_device()  # type: ignore[attr-defined]
    if isinstance(device, int):
        index = device
    else:
        d = torch.device(device)
        if d.type != DEVICE_TYPE:
            raise ValueError(f"{d} is not a simulated device")
        index = d.index if d.index is not None else torch.sim.current_device()  # type: ignore[attr-defined]
    if not 0 <= index < len(_books):
        raise ValueError(f"there are {len(_books)} simulated devices; index {index} is out of range")
    return index


def _allocator(device: Any = None) -> Allocator:
    return _books[_index(device)].allocator


def memory_observers(device: Any = None) -> list[Callable[[str, int, int], None]]:
    """The simulated allocator's event observers for ``device``: append ``observer(action,
    address, size)`` to hear each alloc, free, segment_alloc and segment_free, and remove
    it when done."""
    return _allocator(device).observers


def requested_bytes(address: int, device: Any = None) -> int | None:
    """The bytes asked for by the live allocation at ``address`` (what CUDA's memory history
    records as an event's size, where the counters count the whole block)."""
    return _allocator(device).requested_at(address)


def storage_addresses(storage_key: int) -> tuple[int, ...]:
    """The addresses of the allocator blocks that hold the simulated storage whose
    ``untyped_storage()._cdata`` is ``storage_key`` (of its host data; the scan's storage
    key); empty for any other."""
    for books in _books:
        entry = books.storages.get(storage_key)
        if entry is not None:
            return tuple(block.address for block in entry[0])
    return ()


class _BackendModule:
    """What ``torch.sim`` answers: always available, never initialising anything real."""

    def __init__(self) -> None:
        self._current = 0

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return True

    def device_count(self) -> int:
        return DEVICE_COUNT

    def current_device(self) -> int:
        return self._current

    def set_device(self, index: int) -> None:
        self._current = int(index)

    def _is_in_bad_fork(self) -> bool:
        return forks.in_bad_fork

    def manual_seed_all(self, seed: int) -> None:
        pass

    def synchronize(self, device: Any = None) -> None:
        pass  # every kernel has finished when it returns

    # Autocast and checkpointing ask the device module what a GPU's module answers.

    def get_amp_supported_dtype(self) -> list[torch.dtype]:
        return [torch.float16, torch.bfloat16]

    def is_bf16_supported(self, including_emulation: bool = True) -> bool:
        return True

    # Random numbers on the simulated device are drawn from the host's generator, so the
    # device's own state is the host's (what checkpointing saves and restores).

    def get_rng_state(self, device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def initial_seed(self) -> int:
        return torch.initial_seed()

    def device(self, device: Any) -> DeviceContext:
        """``with torch.sim.device(1):`` as ``torch.cuda.device``."""
        return DeviceContext(self, _index(device))

    # Streams and events, as torch.cuda's: work on the simulated device is done when its call
    # returns, so a stream is always idle and an event records the host's clock.

    @property
    def Stream(self) -> type:  # named as torch.cuda.Stream
        return SimStream

    @property
    def Event(self) -> type:  # named as torch.cuda.Event
        return SimEvent

    def current_stream(self, device: Any = None) -> SimStream:
        return streams.current(_index(device))

    def default_stream(self, device: Any = None) -> SimStream:
        return streams.default(_index(device))

    def set_stream(self, stream: SimStream) -> None:
        streams.set(stream)

    def stream(self, stream: SimStream | None) -> StreamContext:
        return StreamContext(stream)

    # The memory calls, named as torch.cuda names them (see the module's docstring).

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        return _allocator(device).memory_stats()

    def memory_allocated(self, device: Any = None) -> int:
        return _allocator(device).allocated

    def memory_reserved(self, device: Any = None) -> int:
        return _allocator(device).reserved

    def max_memory_allocated(self, device: Any = None) -> int:
        return _allocator(device).peak_allocated

    def max_memory_reserved(self, device: Any = None) -> int:
        return _allocator(device).peak_reserved

    def reset_peak_memory_stats(self, device: Any = None) -> None:
        _allocator(device).reset_peaks()

    # Allocation events, for line profilers (``%%gpumem``): what CUDA's memory history records.

    def memory_observers(self, device: Any = None) -> list[Callable[[str, int, int], None]]:
        return memory_observers(device)

    def storage_addresses(self, storage_key: int) -> tuple[int, ...]:
        return storage_addresses(storage_key)

    def empty_cache(self) -> None:
        for books in _books:
            books._busy = True
            try:
                books.allocator.empty_cache()
            finally:
                books._busy = False
                books._drain()

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        """(free, total) bytes, as ``torch.cuda.mem_get_info``."""
        allocator = _allocator(device)
        if allocator.capacity is None:
            raise RuntimeError("the simulated device has no capacity (devinspect.testing.enable(memory='8GiB') "
                               "sets one)")
        return allocator.free_bytes() or 0, allocator.capacity


class SimTensor(torch.Tensor):
    """A tensor on a simulated device; its data is a CPU tensor in ``_data``.

    It is a traceable wrapper subclass (``__tensor_flatten__``), so tools that know
    how to look inside DTensor or nested tensors see its real size.
    """

    _data: torch.Tensor

    @staticmethod
    def __new__(cls, data: torch.Tensor, device: torch.device | None = None, *,
                requires_grad: bool | None = None) -> Any:
        if device is None:
            # Called as a parameter's class: a parameter moved to the device has this class,
            # and library code rebuilds one as ``type(p)(tensor, requires_grad=...)`` (accelerate's
            # offload hooks), which on a GPU is ``nn.Parameter(tensor, ...)``: so it is here too.
            return torch.nn.Parameter(data, True if requires_grad is None else requires_grad)
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls,
            data.shape,
            strides=data.stride(),
            storage_offset=data.storage_offset(),
            dtype=data.dtype,
            layout=data.layout,
            device=device,
            requires_grad=False,
            dispatch_sizes_strides_policy="sizes",  # see _METADATA_OPS
        )
        wrapper._data = data
        # The lazy conjugate and negative bits live on the tensor, not its data: a GPU tensor
        # made by conj() carries them, and resolve_conj() reads them from the tensor.
        if data.is_conj():
            torch._C._set_conj(wrapper, True)
        if data.is_neg():
            torch._C._set_neg(wrapper, True)
        return wrapper

    def __init__(self, data: torch.Tensor, device: torch.device | None = None, *,
                 requires_grad: bool | None = None) -> None:
        pass

    def __reduce_ex__(self, protocol: int) -> tuple:
        # Saved as PyTorch saves a tensor of a backend without storage: its host data, dtype,
        # device and requires_grad, rebuilt by a function torch.load allows with weights_only
        # (a CUDA checkpoint loads that way too), and map_location applies.
        with torch._C.DisableTorchFunctionSubclass():
            data = self._data.detach()
        if self.__dict__.get("_is_param"):  # a Parameter stays one, as torch.load gives it back from a GPU
            return (torch._utils._rebuild_parameter, (_wrap(data, self.device), self.requires_grad, OrderedDict()))
        return (torch._utils._rebuild_device_tensor_from_cpu_tensor,
                (data, self.dtype, str(self.device), self.requires_grad))

    def __tensor_flatten__(self) -> tuple[list[str], torch.device]:
        return ["_data"], self.device

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: torch.device, outer_size: Any, outer_stride: Any) -> SimTensor:
        return _wrap(inner["_data"], ctx)

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        __tracebackhide__ = True  # a GPU's kernels do not show in a traceback either
        warning_places.keep_first()
        try:
            return _function(func, args, kwargs or {})
        except Exception as exc:
            tidy_traceback(exc, kernel=True)
            raise

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        __tracebackhide__ = True
        try:
            return _dispatch(func, args, kwargs or {})
        except Exception as exc:
            tidy_traceback(exc, kernel=True)  # as on a GPU, whose kernels raise from C++: no frame of this module shows
            raise


def _function(func: Any, args: tuple, kwargs: dict) -> Any:
    """How a simulated tensor answers the calls a GPU tensor answers differently from a CPU one."""
    __tracebackhide__ = True
    if forks.in_bad_fork:
        raise forks.refusal()
    name = getattr(func, "__name__", "")
    if name == "__set__" and moves.is_data_setter(func) and type(args[0]) is SimTensor:
        # model.to("cpu") and the optimizer keep their parameters, as on CUDA (see moves).
        moves.set_data(args[0], args[1])
        return None
    if name == "__repr__" and args and type(args[0]) is SimTensor:
        # Printing shows values like a GPU tensor does (a device-to-host copy). It goes
        # through Tensor.__repr__, so torch-function modes see it, as they do for CUDA.
        with torch._C.DisableTorchFunctionSubclass():
            body = repr(args[0]._data.detach())
        return body[:-1] + f", device='{args[0].device}')" if body.endswith(")") else body
    if name == "tolist" and args and type(args[0]) is SimTensor:
        # As on a GPU: a device-to-host copy, then Python numbers.
        return args[0]._data.tolist()
    if name == "__format__" and args and type(args[0]) is SimTensor:
        # f"{loss:.3f}" works on a GPU scalar; Tensor.__format__ only allows exact Tensors.
        return args[0]._data.__format__(*args[1:])
    if name in ("numpy", "__array__") and args and type(args[0]) is SimTensor:  # np.asarray(t) calls __array__
        if kwargs.get("force") or (len(args) > 1 and args[1] is True):
            return args[0]._data.detach().numpy().copy()  # numpy(force=True) copies to the host first
        raise TypeError(
            f"can't convert {args[0].device} device type tensor to numpy. "
            "Use Tensor.cpu() to copy the tensor to host memory first."
        )
    args, kwargs = gradients.checked(func, args, kwargs)  # a backward pass's first gradients, as CUDA checks them
    with torch._C.DisableTorchFunctionSubclass():
        return func(*args, **kwargs)


# Sizes and strides come from the data (the wrapper's "sizes" policy), so an op that
# resizes its output, as arange and eye do through their out= kernels, resizes the tensor.
_METADATA_OPS = frozenset({
    torch.ops.aten.sym_size.default, torch.ops.aten.sym_stride.default, torch.ops.aten.dim.default,
    torch.ops.aten.sym_numel.default, torch.ops.aten.sym_storage_offset.default,
    torch.ops.aten.is_contiguous.default, torch.ops.aten.is_contiguous.memory_format,
    torch.ops.aten.is_strides_like_format.default, torch.ops.aten.is_non_overlapping_and_dense.default,
})


def _dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    """The simulated device's kernels: the op on the CPU data, a device-mismatch error as CUDA raises it."""
    __tracebackhide__ = True
    if func in _METADATA_OPS:
        return func(_data_of(args[0]), *args[1:])
    if forks.in_bad_fork:
        raise forks.refusal()
    name = func.overloadpacket.__name__
    generators.check(kwargs.get("generator"))  # as CUDA's kernels check a generator's device
    if name in pinned.PINNING:
        raise pinned.refusal(args[0])
    if func is torch.ops.aten.record_stream.default:
        return None  # every kernel has finished when it returns: no memory waits on a stream
    if func is torch.ops.aten.copy_.default:
        dst, src = args[0], args[1]
        with _host_keys():
            _data_of(dst).copy_(_data_of(src), **kwargs)
        return dst
    if name == "_to_copy":
        return _to_copy(*args, **kwargs)
    on: list[torch.device] = []
    mixed = meta = False

    def unwrap(x: Any) -> Any:
        nonlocal mixed, meta
        if type(x) is SimTensor:
            on.append(x.device)
            return x._data
        if isinstance(x, torch.Tensor):
            if x.device.type == DEVICE_TYPE:
                # A tensor torch.compile made on this device while tracing (a fake factory result):
                # it holds no data, so a host stand-in of the same shape takes its place.
                on.append(x.device)
                return x.to("cpu")
            mixed, meta = True, meta or x.is_meta
        return x

    plain_args = tree_map(unwrap, args)
    plain_kwargs = tree_map(unwrap, kwargs)
    if meta and on:
        return _with_meta(func, (args, kwargs), plain_args, plain_kwargs, on[0])
    if mixed or any(d != on[0] for d in on):
        # Tensors on more than one device: raise where CUDA raises (device_rules).
        if device_rules.judge(func, args, kwargs) == device_rules.COMPOSITE:
            done, out = _composite(func, args, kwargs)
            if done:
                return out
    with _host_keys():
        if name == "histc" and plain_args and not plain_args[0].is_floating_point():
            # CUDA counts integer tensors too (MoE routers do); the CPU kernel has floats only.
            out = func(plain_args[0].double(), *plain_args[1:], **plain_kwargs).to(plain_args[0].dtype)
        else:
            out = func(*plain_args, **plain_kwargs)
    if func is torch.ops.aten._local_scalar_dense.default or not on:
        return out
    device = on[0]
    return tree_map(lambda x: _wrap(x, device) if type(x) is torch.Tensor else _rewrap(x, device), out)


def _with_meta(func: Any, given: tuple, args: Any, kwargs: Any, device: torch.device) -> Any:
    """An op with a ``meta`` operand beside this device's, as CUDA runs it: the meta dispatch key
    outranks every device's, so the meta kernel runs (an H200's table of such calls: mm, gather,
    embedding and the convolutions run, their result on meta; add, eq and cat raise). An op without
    a CUDA kernel runs its composite kernel, whose ops meet the meta operand one by one; a
    TensorIterator op's meta function finds two devices and raises; any other meta kernel runs
    beside the host's data (the host's key is outranked the same way), and decides."""
    __tracebackhide__ = True
    declared = op_declarations.declaration(func._schema.name, func._overloadname)
    if declared is not None and not declared.cuda_kernel and device_rules.has_composite(func):
        # No kernel of its own on CUDA: its composite kernel's ops meet the meta operand one by one.
        with torch._C.DisableTorchFunctionSubclass():
            return func._op_dk(device_rules.composite_key(func), *given[0], **given[1])
    if declared is not None and declared.iterates:
        first = next(x for x in tree_flatten((args, kwargs))[0] if isinstance(x, torch.Tensor))
        expected, found = ("meta", device) if first.is_meta else (device, "meta")
        raise RuntimeError(f"Tensor on device {found} is not on the expected device {expected}!")
    try:
        with _host_keys():
            out = func(*args, **kwargs)  # the host's data beside meta: the meta kernel's own checks decide
    except Exception as exc:
        exc.args = tuple(re.sub(r"\bcpu\b", str(device), a) if type(a) is str else a for a in exc.args)
        raise exc.with_traceback(None) from None  # raised in the kernel, as CUDA's C++ raises it
    return tree_map(lambda x: _wrap(x, device) if type(x) is torch.Tensor and x.device.type == "cpu" else x, out)


_LAZY_VIEW_KEYS = (torch._C.DispatchKey.Conjugate, torch._C.DispatchKey.Negative, torch._C.DispatchKey.ZeroTensor)


def _host_keys() -> Any:
    """The host kernels run as they would on the CPU: PyTorch leaves the lazy conjugate,
    negative and zero-tensor keys switched off inside ``__torch_dispatch__`` (the wrapper
    answered them), so a host kernel that makes a conjugated view inside (linalg.pinv's
    ``mH``) would read it unconjugated. They are switched back on for the host data."""
    excluded = torch._C._dispatch_tls_local_exclude_set()
    for key in _LAZY_VIEW_KEYS:
        excluded = excluded.remove(key)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), excluded)


def _rewrap(x: Any, device: torch.device) -> Any:
    """An output of a kernel run while torch.compile traces (a fake or functional tensor): on
    the simulated device as well, with no memory booked (it holds none)."""
    if isinstance(x, torch.Tensor) and type(x) is not SimTensor:
        return SimTensor(x, device)
    return x


def _composite(func: Any, args: tuple, kwargs: dict) -> tuple[bool, Any]:
    """(True, result) of ``func``'s composite kernel run on the device's own tensors, as CUDA runs
    an op that has no CUDA kernel: the ops it calls decide where each result lives and which
    device errors are raised. Where that kernel takes a path a backend written in Python cannot
    (convolution's ``convolution_overrideable``) or fails otherwise than on devices, (False, None):
    the op is judged by its own declaration and runs on the host data."""
    try:
        with torch._C.DisableTorchFunctionSubclass():
            return True, func._op_dk(device_rules.composite_key(func), *args, **kwargs)
    except Exception as exc:
        if device_rules.is_device_error(exc):
            raise
    device_rules.judge(func, args, kwargs, composite=False)
    return False, None


def _wrap(data: torch.Tensor, device: torch.device, block: Block | None = None) -> SimTensor:
    """``data`` as a tensor on the simulated ``device``, its memory booked there."""
    forks.used = True
    _books[device.index or 0].track(data, block)
    return SimTensor(data, device)


def _reserve(device: torch.device, nbytes: int) -> Block | None:
    return _books[device.index or 0].reserve(nbytes)


def _storage_bytes(size: Any, stride: Any, dtype: torch.dtype | None) -> int:
    itemsize = (dtype or torch.get_default_dtype()).itemsize
    if any(int(s) == 0 for s in size):
        return 0
    if stride is None:
        return math.prod(int(s) for s in size) * itemsize
    return (1 + sum((int(s) - 1) * int(st) for s, st in zip(size, stride))) * itemsize


def _data_of(t: Any) -> Any:
    return t._data if type(t) is SimTensor else t


def _to_copy(src: torch.Tensor, *, device: Any = None, **kwargs: Any) -> torch.Tensor:
    target = torch.device(device) if device is not None else src.device
    plain = _data_of(src)
    if target.type == DEVICE_TYPE:
        target = _with_index(target)
        block = _reserve(target, _storage_bytes(plain.shape, None, kwargs.get("dtype") or plain.dtype))
        return _wrap(torch.ops.aten._to_copy.default(plain, **kwargs), target, block)
    out = torch.ops.aten._to_copy.default(plain, **kwargs)
    if target.type != "cpu":
        return out.to(target)
    return out


def _with_index(device: torch.device) -> torch.device:
    return device if device.index is not None else torch.device(DEVICE_TYPE, torch.sim.current_device())  # type: ignore[attr-defined]


def _register_kernels() -> None:
    def empty_memory_format(size, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
        target = _with_index(torch.device(device))
        block = _reserve(target, _storage_bytes(size, None, dtype))  # before the host memory is taken
        data = torch.empty(size, dtype=dtype, memory_format=memory_format or torch.contiguous_format)
        return _wrap(data, target, block)

    def empty_strided(size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
        target = _with_index(torch.device(device))
        block = _reserve(target, _storage_bytes(size, stride, dtype))
        return _wrap(torch.empty_strided(size, stride, dtype=dtype), target, block)

    def copy_from(src, dst, non_blocking=False):
        # Reached without __torch_dispatch__ when torch.tensor(data, device=...) fills
        # its new tensor with the Python dispatch key excluded.
        _data_of(dst).copy_(_data_of(src))
        return dst

    def copy_from_and_resize(src, dst):
        data = _data_of(dst)
        data.resize_(src.shape)
        _books[dst.device.index or 0].track(data)  # books any growth of the storage
        data.copy_(_data_of(src))
        return dst

    for qualname in _host_factories():
        torch.library.impl(qualname, "privateuseone")(_kernel(_host_factory(qualname)))
    for op, kernel in (("aten::empty.memory_format", empty_memory_format), ("aten::empty_strided", empty_strided),
                       ("aten::_copy_from", copy_from), ("aten::_copy_from_and_resize", copy_from_and_resize)):
        torch.library.impl(op, "privateuseone")(_kernel(kernel))


def _host_factories() -> list[str]:
    """Every dense factory (an ``aten`` op with a ``device`` keyword and no tensor input), read
    from the operator schemas: some reach a device only through kernels a backend written in
    Python cannot have (tril_indices, kaiser_window's DispatchStub)."""
    found = []
    for schema in torch._C._jit_get_all_schemas():
        name = schema.name
        if not name.startswith("aten::") or name in ("aten::empty", "aten::empty_strided") or "sparse" in name:
            continue
        if "quantized" in name or "cudnn" in name or any(a.is_out for a in schema.arguments):
            continue
        if any("Tensor" in str(a.type) or "Generator" == str(a.type) for a in schema.arguments if not a.kwarg_only):
            continue
        takes_device = any(a.name == "device" and a.kwarg_only for a in schema.arguments)
        if takes_device and str(schema.returns[0].type) == "Tensor":
            found.append(f"{name}.{schema.overload_name}" if schema.overload_name else name)
    return found


def _host_factory(qualname: str) -> Any:
    """A factory run on the host, its result then held by the simulated device: the same
    shape, dtype and values as on the CPU (random ones draw from the host's generator)."""
    name, _, overload = qualname[len("aten::"):].partition(".")
    op = getattr(getattr(torch.ops.aten, name), overload or "default")

    def factory(*args: Any, device: Any = None, pin_memory: Any = None, **kwargs: Any) -> torch.Tensor:
        generators.check(kwargs.get("generator"))
        target = _with_index(torch.device(device))
        block = _reserve(target, _result_bytes(op, args, kwargs))  # before the host memory is taken
        return _wrap(op(*args, device="cpu", **kwargs), target, block)

    factory.__name__ = name
    return factory


def _result_bytes(op: Any, args: tuple, kwargs: dict) -> int:
    """The bytes a factory's result will take, from a run on the meta device (no memory)."""
    try:
        shape = op(*args, device="meta", **{k: v for k, v in kwargs.items() if k != "generator"})
    except Exception:  # an op with no meta kernel: booked after the fact
        return 0
    return shape.numel() * shape.dtype.itemsize


def _kernel(kernel: Any) -> Any:
    """A kernel whose errors (running out of simulated memory) show no frame of this module,
    as a GPU's kernels raise from C++."""

    def run(*args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        try:
            if forks.in_bad_fork:
                raise forks.refusal()
            return kernel(*args, **kwargs)
        except Exception as exc:
            tidy_traceback(exc, kernel=True)
            raise

    run.__name__ = kernel.__name__
    return run


#: The oldest torch whose PrivateUse1 backend can be written in Python.
OLDEST_TORCH = (2, 10)


def _python_backend_setup() -> Any:
    """PyTorch's hook for a PrivateUse1 backend written in Python, or a one-line error naming the torch it needs."""
    from torch.utils import backend_registration

    setup = getattr(backend_registration, "_setup_privateuseone_for_python_backend", None)
    if setup is None:
        needed = ".".join(map(str, OLDEST_TORCH))
        raise SimulatedDeviceError(
            f"the simulated device needs torch {needed} or newer (this is torch {torch.__version__}); "
            f"pip install 'torch>={needed}'"
        )
    return setup


def enable(memory: str | int | None = _UNCHANGED) -> torch.device:
    """Register the simulated device (once per process) and return ``sim:0``.

    ``memory`` is each simulated device's capacity: ``"8GiB"``, ``"512MiB"``, a number of
    bytes, or None for no limit (the default). Left out, the capacity stays as it is, so
    ``enable()`` in library code never lifts a limit a notebook set.

    Backward passes then run on the calling thread
    (``torch.autograd.set_multithreading_enabled(False)``): autograd's per-device
    worker thread for a Python backend makes the interpreter abort at exit
    ("terminate called without an active exception") in about half the runs.

    Raises :class:`SimulatedDeviceError`, having changed nothing, when a real accelerator
    (a visible GPU) is in this process: PyTorch would take the simulated device for the
    process's accelerator, for good, and the GPU's backward passes would fail (use the
    simulated device in a process that hides the GPUs: ``CUDA_VISIBLE_DEVICES=""``); when
    another PrivateUse1 backend already owns the slot; or when this torch is older than 2.10
    (it cannot host a backend written in Python).
    """
    global _enabled
    capacity = parse_capacity(memory) if memory is not _UNCHANGED else None  # a wrong size fails before anything
    with _lock:
        if not _enabled:
            current = torch._C._get_privateuse1_backend_name()
            if current not in ("privateuseone", DEVICE_TYPE):
                raise SimulatedDeviceError(
                    f"PrivateUse1 is already registered as {current!r}; the simulated device needs it"
                )
            found = real_devices.real_accelerator()
            if found is not None:
                raise SimulatedDeviceError(real_devices.refusal(found))
            _setup = _python_backend_setup()
            if current == "privateuseone":
                _setup(DEVICE_TYPE, backend_module=_BackendModule())
            _register_kernels()
            moves.install(SimTensor)
            autocast.install()
            storages.install()
            stream_module.install()
            recurrent.install()
            plain_paths.install(SimTensor)
            pinned.install()
            torch.autograd.set_multithreading_enabled(False)
            forks.install()
            warning_places.install()  # a warning an op raises names the user's line, as on a GPU
            _enabled = True
        if memory is not _UNCHANGED:
            for books in _books:
                books.allocator.capacity = capacity
    return torch.device(DEVICE_TYPE, 0)


def is_enabled() -> bool:
    """Whether :func:`enable` has run in this process."""
    return _enabled


def device(index: int = 0) -> torch.device:
    """``sim:{index}``, enabling the simulated device first if needed."""
    enable()
    if not 0 <= index < DEVICE_COUNT:
        raise ValueError(f"there are {DEVICE_COUNT} simulated devices; index {index} is out of range")
    return torch.device(DEVICE_TYPE, index)
