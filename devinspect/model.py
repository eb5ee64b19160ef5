"""Plain data the collectors produce and the renderers consume.

Everything here is a frozen dataclass of primitives: no record keeps a reference to
a user object, so a result can sit in IPython's ``Out`` history without keeping a
single tensor alive. Sizes are ``*_bytes`` ints; ``None`` means "not measurable"
(never a guessed 0). Human units appear only in :mod:`devinspect.render`.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

#: Record kinds, in the order a table groups them.
KINDS = (
    "parameter",
    "buffer",
    "gradient",
    "attribute",
    "optimizer_state",
    "tensor",
    "unnamed",
    "error",
)

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


@dataclass(frozen=True, slots=True)
class TensorRecord:
    """One tensor reached from the namespace, named the way the user would type it.

    ``nbytes`` is the logical size (elements × element size). ``storage_bytes`` is
    the size of the storage the tensor lives in, counted once per storage: a view
    of a 1 GiB tensor has a small ``nbytes`` and, when it is the first name found
    for that storage, ``storage_bytes`` of 1 GiB; every later name for the same
    storage carries ``alias_of`` (the first name) and counts as 0 in totals.
    """

    name: str
    root: str
    kind: str
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


def _slot_constructor(cls: type) -> Any:
    """A positional constructor for a frozen slotted dataclass that skips ``__init__``.

    The generated ``__init__`` of a frozen dataclass assigns each field through
    ``object.__setattr__``; the walker builds one record per tensor (100,000 in a
    large session), and that cost alone exceeds reading the tensor. This fills the
    same slots through their descriptors; the instance is identical and still frozen.
    """
    from dataclasses import fields

    names = [f.name for f in fields(cls)]
    setters = {f"_set_{name}": getattr(cls, name).__set__ for name in names}
    source = (
        f"def make({', '.join(names)}):\n    record = _new(_cls)\n"
        + "".join(f"    _set_{name}(record, {name})\n" for name in names)
        + "    return record\n"
    )
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls, **setters}
    exec(source, namespace)  # noqa: S102 - source built from the dataclass's own field names
    return namespace["make"]


#: ``make_record(name, root, kind, ...)``: every field of :class:`TensorRecord`, in order.
make_record = _slot_constructor(TensorRecord)


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
    #: Parameters that hold no data yet (``meta`` or lazy), counted separately from ``devices``.
    unmaterialised: int = 0
    #: Set by transformers' ``device_map``: the split across devices is deliberate.
    deliberate_split: bool = False
    #: Parameters an autograd graph has saved (a graph kept alive by a variable or a
    #: traceback): PyTorch refuses to swap those, which a move to or from a Python
    #: device backend (or DTensor) needs. Moves on CUDA/CPU are not affected.
    held_parameters: tuple[str, ...] = ()
    #: The package the module's class comes from (``transformers``), or ``""`` for user code.
    library: str = ""

    @property
    def is_mixed(self) -> bool:
        return len(self.devices) > 1


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


# -- fixes ----------------------------------------------------------------------
#
# A fix is data, never prose parsed back: ``code`` runs as printed in the user's
# namespace, ``edits`` rewrite the user's own source lines, ``action`` is a typed
# request that devinspect.actions carries out (the Apply fix button).


@dataclass(frozen=True, slots=True)
class Move:
    """Move the tensor or module called ``name`` to ``device``, all or nothing.

    A module keeps its Parameter objects (an optimizer holding them stays valid); a
    tensor that is a leaf requiring grad stays a leaf.
    """

    name: str
    device: str
    #: Optimizers whose state for the moved parameters follows them (each to its parameter's device).
    optimizers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RegisterBuffer:
    """Make the plain tensor attribute ``module.attr`` a non-persistent buffer on ``device``."""

    module: str
    attr: str
    device: str


@dataclass(frozen=True, slots=True)
class MoveOptimizerState:
    """Move each state tensor of ``optimizer`` to the device of its own parameter."""

    optimizer: str


@dataclass(frozen=True, slots=True)
class RebuildOptimizer:
    """Replace the optimizer ``optimizer`` with a new one over ``module``'s parameters."""

    optimizer: str
    module: str
    class_path: str
    kwargs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ReleaseHistory:
    """Drop the output-history entries and the last traceback that keep tensors alive."""


@dataclass(frozen=True, slots=True)
class EmptyCache:
    """Return the allocator's cached, unused segments to the driver (``empty_cache()``)."""


@dataclass(frozen=True, slots=True)
class ReleaseGraphs:
    """Detach the namespace tensors ``names`` (their values stay; their autograd graphs go)
    and, with ``traceback``, the last error's frames: what keeps parameters from moving."""

    names: tuple[str, ...] = ()
    traceback: bool = False


@dataclass(frozen=True, slots=True)
class Steps:
    """Several actions, in order (two operands of one failed op, say); each is all-or-nothing."""

    actions: tuple[Any, ...]


Action = (Move | RegisterBuffer | MoveOptimizerState | RebuildOptimizer | ReleaseHistory | EmptyCache | ReleaseGraphs
          | Steps)


@dataclass(frozen=True, slots=True)
class SourceEdit:
    """Rewrite one line of the user's own source: ``old`` (as written) becomes ``new``
    (an empty ``new`` deletes the line)."""

    where: SourceLine
    old: str
    new: str
    #: Where in the code: ``PositionalEncoding.__init__``, ``forward``.
    context: str = ""


@dataclass(frozen=True, slots=True)
class Fix:
    """How to make a problem go away.

    ``summary`` says it in one line. ``code`` (when present) runs exactly as printed
    in the user's namespace; ``edits`` are changes to the user's own source lines (so
    the problem does not come back next run); ``action`` is what the Apply fix button
    does; ``note`` is advice with no runnable form, or a caveat.
    """

    summary: str
    code: str | None = None
    edits: tuple[SourceEdit, ...] = ()
    action: Action | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """Something probably wrong, said in one line, with the fix.

    ``severity`` is ``"error"`` (will fail or is certainly wrong), ``"warning"``
    (wastes memory or will bite later) or ``"hint"`` (worth a look). ``names`` are
    the records (tensor names) it is about, so a filtered view can show it.
    """

    code: str
    severity: str
    subject: str
    message: str
    fix: Fix | None = None
    storage_bytes: int | None = None
    names: tuple[str, ...] = ()


SEVERITY_ORDER = {"error": 0, "warning": 1, "hint": 2}


@dataclass(frozen=True)
class ScanResult:
    """Everything :func:`devinspect.scan` found, as data.

    ``records`` lists every tensor found (aliases included); ``devices`` sums them
    per device with each storage counted once; ``frame`` is the same as a pandas
    DataFrame. :attr:`findings` explains what looks wrong; it is computed once, on
    the whole result. :meth:`select` gives a view of some records (and the findings
    about them) with display settings beside the data.
    """

    records: tuple[TensorRecord, ...]
    modules: tuple[ModuleSummary, ...] = ()
    loaders: tuple[LoaderSummary, ...] = ()
    truncated: tuple[Truncation, ...] = ()
    #: Accelerator storages reachable only through excluded history names or
    #: ``sys.last_traceback``: always measured, even when those names are not listed.
    history: tuple[HistoryHold, ...] = ()
    roots: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    optimizers: tuple[OptimizerSummary, ...] = ()
    #: ``(path, class name)`` of every module and submodule the namespace reaches by name.
    module_types: tuple[tuple[str, str], ...] = ()

    @property
    def devices(self) -> tuple[DeviceTotal, ...]:
        """Per-device totals, most storage bytes first."""
        return device_totals(self.records)

    @property
    def history_bytes(self) -> int:
        """Accelerator bytes held only by output history / the last traceback."""
        return sum(h.storage_bytes for h in self.history)

    @property
    def total_bytes(self) -> int:
        return sum(r.counted_bytes for r in self.records)

    @property
    def findings(self) -> tuple[Finding, ...]:
        """The findings for this result (computed on first use, then kept)."""
        cached = self.__dict__.get("_findings")
        if cached is None:
            from .findings import find

            cached = tuple(find(self))
            object.__setattr__(self, "_findings", cached)
        return cached

    @property
    def frame(self) -> pd.DataFrame:
        """All records as a DataFrame with the columns in :data:`FRAME_COLUMNS`."""
        return records_frame(self.records)

    def select(self, selection: Selection | None = None, display: Display | None = None) -> ScanView:
        """A view of the records (and findings) ``selection`` picks, shown with ``display``."""
        return ScanView(self, selection or Selection(), display or Display())

    def __len__(self) -> int:
        return len(self.records)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return self.select()._repr_mimebundle_(include, exclude)

    def __repr__(self) -> str:
        return repr(self.select())


def device_totals(records: tuple[TensorRecord, ...] | list[TensorRecord]) -> tuple[DeviceTotal, ...]:
    """Per-device totals of ``records``, each storage counted once, most bytes first."""
    totals: dict[str, list[int]] = {}
    for r in records:
        t = totals.setdefault(r.device, [0, 0, 0])
        t[0] += 1
        t[1] += r.counted_bytes
        if r.alias_of is None and r.nbytes is not None:
            t[2] += r.nbytes
    out = [DeviceTotal(d, n, s, lg) for d, (n, s, lg) in totals.items()]
    out.sort(key=lambda d: (-d.storage_bytes, d.device))
    return tuple(out)


@dataclass(frozen=True)
class Selection:
    """Which records a view shows: names (a dotted name keeps what lies below it), a
    device (``cpu``, ``cuda`` for every CUDA device, ``cuda:1``) and a kind."""

    names: tuple[str, ...] = ()
    device: str | None = None
    kind: str | None = None

    def keeps(self, r: TensorRecord) -> bool:
        if self.kind is not None and r.kind != self.kind:
            return False
        if self.device is not None and not device_matches(r.device, self.device):
            return False
        if self.names and not any(_under(r.name, n) or _under(r.param or "", n) for n in self.names):
            return False
        return True

    @property
    def everything(self) -> bool:
        return not self.names and self.device is None and self.kind is None


def device_matches(device: str, wanted: str) -> bool:
    """``cuda:1`` matches ``cuda`` and ``cuda:1``; ``cpu:0`` and ``cpu`` are the same device."""
    if wanted == device:
        return True
    kind, _, index = wanted.partition(":")
    if not index:
        return device.split(":", 1)[0] == kind
    return kind == "cpu" and device == "cpu"


@dataclass(frozen=True)
class Display:
    """How a view is rendered: rows shown before "… N more", row order, findings only."""

    max_rows: int = 40
    sort: str = "walk"
    findings_only: bool = False


@dataclass(frozen=True)
class ScanView:
    """Some records of a :class:`ScanResult`, the findings about them, and how to show them.

    Findings come from the whole result (computed once) and are kept when any record
    they are about is selected, so ``%devices -k optimizer_state`` still shows the
    optimizer-state finding.
    """

    result: ScanResult
    selection: Selection = field(default_factory=Selection)
    display: Display = field(default_factory=Display)

    @property
    def records(self) -> tuple[TensorRecord, ...]:
        cached = self.__dict__.get("_records")
        if cached is None:
            keeps = self.selection.keeps
            cached = self.result.records if self.selection.everything else tuple(r for r in self.result.records if keeps(r))
            object.__setattr__(self, "_records", cached)
        return cached

    @property
    def findings(self) -> tuple[Finding, ...]:
        everything = self.result.findings
        if self.selection.everything:
            return everything
        shown = {r.name for r in self.records}
        names = self.selection.names
        return tuple(
            f for f in everything
            if any(n in shown for n in f.names)
            or (not f.names and self.selection.device is None and self.selection.kind is None
                and (not names or any(_under(f.subject, n) for n in names)))
        )

    @property
    def devices(self) -> tuple[DeviceTotal, ...]:
        return device_totals(self.records)

    @property
    def modules(self) -> tuple[ModuleSummary, ...]:
        names = self.selection.names
        if not names:
            return self.result.modules
        return tuple(m for m in self.result.modules if any(_under(m.name, n) or _under(n, m.name) for n in names))

    @property
    def optimizers(self) -> tuple[OptimizerSummary, ...]:
        return self.result.optimizers

    @property
    def history(self) -> tuple[HistoryHold, ...]:
        return self.result.history

    @property
    def history_bytes(self) -> int:
        return self.result.history_bytes

    @property
    def total_bytes(self) -> int:
        return sum(r.counted_bytes for r in self.records)

    @property
    def options(self) -> dict[str, Any]:
        return self.result.options

    @property
    def frame(self) -> pd.DataFrame:
        return records_frame(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        from .render import html, text

        return {"text/plain": text.render_scan(self), "text/html": html.render_scan(self)}

    def __repr__(self) -> str:
        from .render import text

        return text.render_scan(self)


def _under(name: str, prefix: str) -> bool:
    """Whether ``name`` is ``prefix`` or lies below it (``model.fc`` under ``model``)."""
    return name == prefix or (name.startswith(prefix) and len(name) > len(prefix) and name[len(prefix)] in ".[")


def records_frame(records: tuple[TensorRecord, ...] | list[TensorRecord]) -> pd.DataFrame:
    import pandas as pd

    columns = [*FRAME_COLUMNS, "hidden", "is_leaf"]
    row_of = operator.attrgetter(*columns)
    frame = pd.DataFrame([row_of(r) for r in records], columns=columns)
    for column in ("nbytes", "storage_bytes", "storage_id"):
        frame[column] = frame[column].astype("Int64")
    return frame


# -- %%devcheck -----------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class LineStats:
    """Copies and host syncs attributed to one source line while a check ran.

    ``h2d``/``d2h``/``d2d`` are host→device, device→host and device→device copies
    (count, bytes). ``syncs`` counts operations that make the host wait for the
    device, by kind (``.item()``, ``bool()``, ``.cpu()``, ``print`` …).
    """

    where: SourceLine
    #: The line of the checked cell (or ``with check()`` block) through which this line ran.
    cell_line: int | None
    h2d_count: int = 0
    h2d_bytes: int = 0
    d2h_count: int = 0
    d2h_bytes: int = 0
    d2d_count: int = 0
    d2d_bytes: int = 0
    syncs: tuple[tuple[str, int], ...] = ()
    #: Libraries whose code made these copies or syncs, called from this line (``torch``, ``transformers``).
    inside: tuple[str, ...] = ()

    @property
    def sync_count(self) -> int:
        return sum(n for _, n in self.syncs)

    @property
    def transfer_bytes(self) -> int:
        return self.h2d_bytes + self.d2h_bytes + self.d2d_bytes


@dataclass(frozen=True, slots=True)
class Operand:
    """One tensor input of the op that raised, named in the user's words."""

    name: str | None
    #: How the name was found: namespace, parameter, buffer, attribute, local, created, unknown.
    source: str
    device: str
    dtype: str
    shape: tuple[Any, ...] | None
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Mismatch:
    """A device-mismatch error explained: which op, where, which variables, and the fix."""

    op: str
    error: str
    devices: tuple[str, ...]
    operands: tuple[Operand, ...]
    #: The line of the checked cell (or block) that was running.
    cell_line: SourceLine | None
    #: The innermost line of user code, when it is not the cell line (a user function).
    user_frame: SourceLine | None
    module_path: str | None
    target_device: str | None
    fix: Fix | None

    def summary(self) -> str:
        """A few lines for an exception note."""
        from .render.check_text import mismatch_lines

        return "\n".join(mismatch_lines(self))


@dataclass(frozen=True)
class CheckReport:
    """What ``%%devcheck`` / :func:`devinspect.check` saw while the code ran.

    ``lines`` has one entry per source line that copied data between devices or made
    the host wait; ``mismatch`` explains a device-mismatch error; ``findings`` names
    patterns that cost time (round trips, syncs in loops, unpinned non-blocking copies,
    the same host tensor copied again and again). ``frame`` has the lines as a DataFrame.
    """

    lines: tuple[LineStats, ...] = ()
    findings: tuple[Finding, ...] = ()
    mismatch: Mismatch | None = None
    error: str | None = None
    elapsed_s: float | None = None

    @property
    def totals(self) -> dict[str, int]:
        out = {"h2d_count": 0, "h2d_bytes": 0, "d2h_count": 0, "d2h_bytes": 0, "d2d_count": 0, "d2d_bytes": 0, "syncs": 0}
        for s in self.lines:
            for key in ("h2d_count", "h2d_bytes", "d2h_count", "d2h_bytes", "d2d_count", "d2d_bytes"):
                out[key] += getattr(s, key)
            out["syncs"] += s.sync_count
        return out

    @property
    def worst_lines(self) -> tuple[LineStats, ...]:
        """Lines ordered by how much they cost: syncs first, then bytes moved."""
        return tuple(sorted(self.lines, key=lambda s: (-s.sync_count, -s.transfer_bytes)))

    def costliest(self, limit: int) -> tuple[LineStats, ...]:
        """The ``limit`` costliest lines, shown in the order the code reads."""
        keep = {id(s) for s in self.worst_lines[:limit]}
        return tuple(s for s in self.lines if id(s) in keep)

    @property
    def frame(self) -> pd.DataFrame:
        import pandas as pd

        rows = []
        for s in self.lines:
            rows.append(
                {
                    "file": s.where.file, "line": s.where.line, "function": s.where.function, "cell_line": s.cell_line,
                    "code": s.where.text, "h2d_count": s.h2d_count, "h2d_bytes": s.h2d_bytes,
                    "d2h_count": s.d2h_count, "d2h_bytes": s.d2h_bytes, "d2d_count": s.d2d_count,
                    "d2d_bytes": s.d2d_bytes, "syncs": s.sync_count,
                    "sync_kinds": ", ".join(f"{k}×{n}" for k, n in s.syncs),
                }
            )
        return pd.DataFrame(rows, columns=[
            "file", "line", "function", "cell_line", "code", "h2d_count", "h2d_bytes", "d2h_count", "d2h_bytes",
            "d2d_count", "d2d_bytes", "syncs", "sync_kinds",
        ])

    @property
    def has_findings(self) -> bool:
        return bool(self.findings or self.mismatch)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        from .render import check_html, check_text

        return {"text/plain": check_text.render_check(self), "text/html": check_html.render_check(self)}

    def __repr__(self) -> str:
        from .render import check_text

        return check_text.render_check(self)
