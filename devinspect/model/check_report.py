"""What ``%%devcheck`` saw: copies and syncs per line, patterns that cost time, a mismatch explained."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .display import Displayed, text
from .fixes import Finding, Fix
from .records import SourceLine

if TYPE_CHECKING:
    import pandas as pd


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


#: How an operand's name was found: a variable of the namespace; a parameter, buffer, gradient,
#: other tensor attribute or optimizer state reached from one; a local of the user's frame; a
#: tensor made on the failing line or in library code ("created"), a result computed on the
#: line ("result"), a temporary of the line, a value torch.compile traced; for a device error
#: other than a mismatch, the DataLoader, its dataset or the random generator at its cause;
#: "unknown" when nothing names it.
OperandSource = Literal["namespace", "parameter", "buffer", "gradient", "attribute", "optimizer_state", "local",
                        "created", "result", "temporary", "traced", "loader", "dataset", "generator", "unknown"]


@dataclass(frozen=True, slots=True)
class Operand:
    """One tensor input of the op that raised, named in the user's words."""

    name: str | None
    #: How the name was found (see :data:`OperandSource`).
    source: OperandSource
    device: str
    dtype: str
    shape: tuple[Any, ...] | None
    detail: str = ""
    #: How the user's line writes a tensor no name reaches (``the output of model(x)``); shown in
    #: place of a name, never used as one in a fix's code.
    written: str = ""


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
        return text(self)


#: The device errors other than a mismatch, by what caused them.
DEVICE_ERROR_KINDS = {
    "host array": "a tensor on a device read as a host (NumPy) array",
    "pinned device tensor": "pinning a tensor that is on a device already",
    "device tensor in a worker": "a device tensor used in a DataLoader worker process",
    "generator device": "a random generator of another device than the tensor it makes",
    "meta data": "a value read from a tensor on meta, made by a model whose weights were never loaded",
}


@dataclass(frozen=True, slots=True)
class DeviceError:
    """A device error that is not a mismatch, explained: what raised it, the tensors or objects at
    its cause in the user's words, and the fix (one of :data:`DEVICE_ERROR_KINDS`)."""

    kind: str
    error: str
    #: One line: what went wrong, in the user's names (``z.detach().numpy() needs z on the host``).
    what: str
    #: The user's line that raised (the cell's line; the user's function's when it is deeper).
    cell_line: SourceLine | None
    user_frame: SourceLine | None
    #: The tensors (or the loader, the generator) involved, named as the user knows them.
    operands: tuple[Operand, ...]
    #: Why it fails, in a sentence or two.
    cause: str
    fix: Fix | None

    def summary(self) -> str:
        """A few lines for an exception note."""
        return text(self)


@dataclass(frozen=True, repr=False)
class CheckReport(Displayed):
    """What ``%%devcheck`` / :func:`devinspect.check` saw while the code ran.

    ``lines`` has one entry per source line that copied data between devices or made
    the host wait; ``mismatch`` explains a device-mismatch error; ``findings`` names
    patterns that cost time (round trips, syncs in loops, unpinned non-blocking copies,
    the same host tensor copied again and again); ``device_error`` explains any other device
    error (:class:`DeviceError`). ``frame`` has the lines as a DataFrame.
    """

    lines: tuple[LineStats, ...] = ()
    findings: tuple[Finding, ...] = ()
    mismatch: Mismatch | None = None
    error: str | None = None
    elapsed_s: float | None = None
    #: What the code handed to TorchScript (``sm is a TorchScript module (RecursiveScriptModule)``):
    #: it runs in C++, so the copies and syncs inside it are not counted.
    unseen: tuple[str, ...] = ()
    device_error: DeviceError | None = None

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
        return bool(self.findings or self.mismatch or self.device_error)
