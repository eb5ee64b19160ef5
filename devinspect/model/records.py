"""What the walk records: one record per tensor, one summary per module, optimizer and loader.

Everything here is a frozen dataclass (the per-tensor record, a named tuple) of
primitives: no record keeps a reference to a user object, so a result can sit in
IPython's ``Out`` history without keeping a single tensor alive. Sizes are ``*_bytes``
ints; ``None`` means "not measurable" (never a guessed 0). Human units appear only when
something is said or drawn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, get_args

#: What a record is: a module's parameter or buffer, a gradient, another tensor attribute of
#: an object, an optimizer's state, a tensor a name holds, one no name reaches (found by the
#: garbage collector), or a value that could not be read.
RecordKind = Literal["parameter", "buffer", "gradient", "attribute", "optimizer_state", "tensor", "unnamed", "error"]
#: Record kinds, in the order a table groups them.
KINDS: tuple[RecordKind, ...] = get_args(RecordKind)


#: Columns of :attr:`ScanResult.frame`, in order.
FRAME_COLUMNS = (
    "name",
    "root",
    "kind",
    "device",
    "dtype",
    "shape",
    "nbytes",
    "storage_bytes",
    "storage_id",
    "alias_of",
    "requires_grad",
    "type_name",
    "layout",
    "owner",
    "param",
    "note",
)


#: The classes a row names no type for: every tensor is a torch.Tensor, and a parameter's kind
#: already says it is an nn.Parameter. Any other class (DTensor, a user's subclass) is named.
PLAIN_TYPE_NAMES = frozenset({"Tensor", "Parameter"})


class TensorRecord(NamedTuple):
    """One tensor reached from the namespace, named the way the user would type it.

    ``nbytes`` is the logical size (elements × element size). ``storage_bytes`` is
    the size of the storage the tensor lives in, counted once per storage: a view
    of a 1 GiB tensor has a small ``nbytes`` and, when it is the first name found
    for that storage, ``storage_bytes`` of 1 GiB; every later name for the same
    storage carries ``alias_of`` (the first name) and counts as 0 in totals.

    The one record type that is a named tuple rather than a frozen dataclass: the walk
    makes one per tensor (100,000 or more in a large session), and a tuple is made in
    a seventh of the time a frozen dataclass's fields take to fill. It is as immutable.
    """

    name: str
    root: str
    kind: RecordKind
    device: str
    dtype: str | None
    shape: tuple[Any, ...] | None
    nbytes: int | None
    storage_bytes: int | None
    storage_id: int | None
    alias_of: str | None = None
    requires_grad: bool = False
    type_name: str = "Tensor"
    layout: str = "strided"
    #: Name of the module owning a parameter/buffer/attribute (``""`` for the root).
    owner: str | None = None
    #: For gradients and optimizer state: the name of the parameter they belong to.
    param: str | None = None
    #: Anything unusual: "sparse_coo", "lazy: shape unknown", "could not inspect: …".
    note: str | None = None
    #: Reached only through IPython's output history or ``sys.last_traceback``.
    hidden: bool = False
    #: False for a tensor computed by autograd (it has a ``grad_fn``); moving a leaf
    #: that requires grad must keep it a leaf.
    is_leaf: bool = True

    @property
    def counted_bytes(self) -> int:
        """Bytes this record adds to a total: 0 for aliases and unknown sizes."""
        if self.alias_of is not None or self.storage_bytes is None:
            return 0
        return self.storage_bytes

    @property
    def is_accelerator(self) -> bool:
        """True for memory that lives on an accelerator (not cpu, meta or unknown)."""
        return device_is_accelerator(self.device)


def device_is_accelerator(device: str) -> bool:
    """Whether a device string names accelerator memory (``cuda:0``, ``xpu:1``, ``sim:0``)."""
    kind = device.split(":", 1)[0]
    return kind not in ("cpu", "meta", "?", "")


@dataclass(frozen=True, slots=True)
class ModuleSummary:
    """One ``nn.Module`` reached from the namespace and what it holds, per device."""

    name: str
    type_name: str
    parameters: int
    parameter_bytes: int
    buffers: int
    buffer_bytes: int
    gradient_bytes: int
    #: Devices of parameters and buffers, most bytes first.
    devices: tuple[str, ...]
    #: For a module spanning devices: ``(submodule name, device)`` for each
    #: smallest submodule that sits wholly on one device.
    placement: tuple[tuple[str, str], ...] = ()
    #: Tensor attributes ``.to()`` will not move (plain attributes, not registered buffers).
    unregistered: tuple[Unregistered, ...] = ()
    #: Parameters on ``meta`` (no data), counted separately from ``devices`` (a lazy module's are not).
    unmaterialised: int = 0
    #: Parameters and buffers kept off the module by accelerate's offload hooks (meta on purpose).
    offloaded: int = 0
    #: Set by transformers' ``device_map``: the split across devices is deliberate.
    deliberate_split: bool = False
    #: For a dispatched model: ``(part, device, mapped device)`` for each part that is not where
    #: its ``device_map`` says (one set after ``dispatch_model`` has no hook to move its inputs).
    off_map: tuple[tuple[str, str, str], ...] = ()
    #: Parameters an autograd graph has saved (a graph kept alive by a variable or a
    #: traceback): PyTorch refuses to swap those, which a move to or from a Python
    #: device backend (or DTensor) needs. Moves on CUDA/CPU are not affected.
    held_parameters: tuple[str, ...] = ()
    #: The package the module's class comes from (``transformers``), or ``""`` for user code.
    library: str = ""
    #: The method of its class that initialises the whole model again, every tensor as at
    #: construction (``init_weights``), or ``""`` when its class has none.
    initialiser: str = ""
    #: A forward pre-hook (or accelerate's hook) may move its inputs: where they come from differs.
    moves_inputs: bool = False

    @property
    def is_mixed(self) -> bool:
        return len(self.devices) > 1


@dataclass(frozen=True, slots=True)
class TableHolder:
    """An object of the user's own class that is not a module (a sampler, a scheduler, a cache)
    holding tensors in its attributes, as its class's source says they are made and used."""

    name: str
    class_name: str
    #: Attributes its own methods move to a device or make again as they run: kept where they are on purpose.
    self_placed: tuple[str, ...] = ()
    #: ``(attribute, the line that makes it, the line as it reads with the device its class gives
    #: the other tables)``: the edit that makes it where its siblings are.
    made_at: tuple[tuple[str, "SourceLine", str], ...] = ()


@dataclass(frozen=True, slots=True)
class Unregistered:
    """A tensor kept as a plain attribute of a module (``self.pe = pe``), not a buffer.

    ``name`` is the attribute's full name (``model.pos.pe``), ``owner`` the module's.
    ``class_default`` is True when the module's class also defines the attribute
    (``pe = None``, a lazy-cache pattern): ``register_buffer`` then refuses the name.
    ``assigned_at`` is the line in the class's own source that assigns it, when found.
    """

    name: str
    owner: str
    attr: str
    class_name: str
    class_default: bool = False
    assigned_at: SourceLine | None = None
    #: The class body's line defining the default (``pe = None``), when ``class_default``.
    default_at: SourceLine | None = None
    #: The ``super().__init__()`` line of the class's ``__init__``, where a buffer is registered.
    init_at: SourceLine | None = None
    #: "list", "tuple", "dict" or "set" when the attribute holds tensors in a container, else None.
    container: str | None = None
    #: True when a method of the class other than ``__init__`` assigns it (state its forward pass makes).
    made_while_running: bool = False
    #: True when the class's methods read it and move what they make from it to a device they are
    #: given: host copies kept on purpose.
    moved_as_used: bool = False
    #: True when every read of it in the class's methods moves it to a device first
    #: (``self.pos.to(x.device)``): its own forward moves it on every pass.
    moved_where_read: bool = False


@dataclass(frozen=True, slots=True)
class OptimizerSummary:
    """An optimizer reached from the namespace, and where its parameters come from.

    ``orphans`` counts parameters that no module in the namespace owns and no name
    reaches (typical after the model's cell ran again: the optimizer still holds the
    old model's parameters). ``rebuild_kwargs`` are the constructor arguments that
    differ from the class's defaults, as Python literals, for a runnable rebuild.
    """

    name: str
    type_name: str
    #: How the class is reached in code (``torch.optim.AdamW``), or None when unknown.
    class_path: str | None
    parameters: int
    groups: int
    orphans: int
    orphan_shapes: tuple[tuple[int, ...], ...] = ()
    rebuild_kwargs: tuple[tuple[str, str], ...] | None = ()
    #: Where it has orphans: the name of each parameter it updates, in group order (an orphan's
    #: is its place, ``opt.param_groups[0]["params"][4]``).
    held: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SchedulerSummary:
    """A learning-rate scheduler reached from the namespace, and the optimizer it drives.

    ``optimizer`` is that optimizer's name (None when no name reaches it). ``rebuild_kwargs``
    are the constructor arguments to make it again for another optimizer, each a Python
    expression (a literal, or an attribute of this scheduler); None when one is unknown.
    """

    name: str
    type_name: str
    class_path: str | None
    optimizer: str | None
    rebuild_kwargs: tuple[tuple[str, str], ...] | None = ()


@dataclass(frozen=True, slots=True)
class ModelCall:
    """A namespace variable passed to a namespace module in the session's latest cell that calls
    it (``model(feats)``; ``[model(t) for t in shards]`` passes ``shards``, a ``container``)."""

    module: str
    argument: str
    #: "list", "tuple" or "dict" when the call walks the argument's items, else None.
    container: str | None
    where: SourceLine
    #: Where the argument is a local the function moves before the call (``data = data.to(device)``):
    #: the device it moves to (the argument then names that local, not a namespace variable).
    moved_to: str = ""
    #: Where the argument goes to another call with the model's output (``F.cross_entropy(model(x),
    #: labels)``): that call, as written; it meets the output on the model's device.
    with_output_to: str = ""
    #: Where the argument meets the model's output in the cell's arithmetic (``f - flow_truth``, with
    #: ``f`` an item of ``flows = model(a, b)``): that expression, as written.
    with_output_in: str = ""


@dataclass(frozen=True, slots=True)
class DroppedMove:
    """A statement of the session's latest cells that moves a tensor and drops the result
    (``x.to(dev)``: ``Tensor.to`` returns a moved copy and leaves ``x`` where it was)."""

    #: The tensor as the statement names it (``x``, ``batch["ids"]``), and the statement itself.
    target: str
    statement: str
    #: The device it moves to, as read when the cells were read ("" when it could not be read).
    device: str
    where: SourceLine


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """A call in one of the session's latest cells that passes several namespace tensors to a
    function (``F.linear(x, w, b)``): they must share a device when it runs again."""

    callee: str
    arguments: tuple[str, ...]
    where: SourceLine


@dataclass(frozen=True, slots=True)
class LoaderSummary:
    """A ``torch.utils.data.DataLoader`` reached from the namespace."""

    name: str
    pin_memory: bool
    num_workers: int
    batch_size: int | None


@dataclass(frozen=True, slots=True)
class DeviceTotal:
    """What the named tensors hold on one device (each storage counted once)."""

    device: str
    tensors: int
    storage_bytes: int
    logical_bytes: int


@dataclass(frozen=True, slots=True)
class Truncation:
    """A part of the namespace the walk did not go into, and why."""

    name: str
    reason: str
    skipped: int | None = None


@dataclass(frozen=True, slots=True)
class HistoryHold:
    """Accelerator memory kept alive only by IPython's output history or a traceback."""

    name: str
    device: str
    storage_bytes: int


@dataclass(frozen=True, slots=True)
class SourceLine:
    """A line of code: in a file, or in a notebook cell (``cell`` is its execution count).

    ``label`` names it the way IPython's tracebacks do: ``Cell In[3], line 8`` for a
    cell, ``models/gpt.py:42`` for a file, with ``in forward`` for a function.
    """

    file: str
    line: int
    function: str
    text: str = ""
    #: The execution count of the notebook cell this line is in, or None for a file.
    cell: int | None = None

    @property
    def where(self) -> str:
        if self.cell is not None:
            return f"Cell In[{self.cell}], line {self.line}"
        return f"{_short_path(self.file)}:{self.line}"

    @property
    def label(self) -> str:
        return self.where if self.function in ("<module>", "") else f"{self.where} in {self.function}"


def _short_path(path: str) -> str:
    parts = path.replace("\\", "/").split("/")
    return "/".join(parts[-2:]) if len(parts) > 2 else path
