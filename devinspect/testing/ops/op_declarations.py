"""What PyTorch declares about each ATen operator for CUDA, read from its own operator list.

PyTorch generates each op's CUDA entry point from ``native_functions.yaml`` (shipped with
torch in ``torchgen/packaged``): whether the op has a kernel of its own for CUDA (its
``dispatch`` section names ``CUDA``, or it delegates to a structured ``out`` op that does),
and whether that entry point checks that every tensor argument is on one device
(``device_check``, on unless the op declares ``NoCheck``: TensorIterator ops and a few
others check in their kernels instead). An op with no CUDA kernel runs on CUDA through its
composite kernel, the same code for every device. The simulated device asks these facts
when a call mixes devices, so that it raises where CUDA raises.

The file is read once, on the first call that needs it, by a reader of the few fields used
(a YAML library is not among torch's dependencies).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Declaration:
    """One operator overload's declaration, as far as devices go."""

    cuda_kernel: bool  # CUDA runs a kernel of this op's own (else its composite kernel)
    checks_devices: bool  # that kernel's entry point checks every positional tensor's device
    #: A TensorIterator op (``structured_inherits: TensorIteratorBase``): its meta function checks
    #: that every operand is on one device, so a ``meta`` operand beside a device tensor raises.
    iterates: bool = False


_CUDA = "CUDA"


def _declarations_file() -> Path | None:
    try:
        import torchgen
    except ImportError:  # a torch installed without torchgen: no declarations
        return None
    path = Path(torchgen.__file__).parent / "packaged" / "ATen" / "native" / "native_functions.yaml"
    return path if path.is_file() else None


def _value(line: str) -> str:
    return line.split(":", 1)[1].split("#", 1)[0].strip()


def parse(text: str) -> dict[str, Declaration]:
    """``{"add.Tensor": Declaration, "index_select": ...}`` from the text of native_functions.yaml."""
    raw: dict[str, dict] = {}
    current: dict | None = None
    in_dispatch = False
    for line in text.splitlines():
        if line.startswith("- func:"):
            name = _value(line).split("(", 1)[0].strip()
            current = raw[name] = {"keys": set(), "no_check": False, "delegate": None, "iterates": False}
            in_dispatch = False
        elif current is None or not line.strip() or line.lstrip().startswith("#"):
            continue
        elif line.startswith("    ") and in_dispatch:
            keys = line.split(":", 1)[0]
            current["keys"].update(k.strip() for k in keys.split(","))
        elif line.startswith("  ") and not line.startswith("   "):
            field = line.strip().split(":", 1)[0]
            in_dispatch = field == "dispatch"
            if field == "device_check":
                current["no_check"] = _value(line) == "NoCheck"
            elif field == "structured_delegate":
                current["delegate"] = _value(line)
            elif field == "structured_inherits":
                current["iterates"] = _value(line) == "TensorIteratorBase"
            elif field == "ufunc_inner_loop":
                current["keys"].add(_CUDA)  # its CPU and CUDA kernels are generated from the loop
    declarations = {}
    for name, entry in raw.items():
        delegate = raw.get(entry["delegate"]) if entry["delegate"] else None
        cuda = _CUDA in entry["keys"] or (delegate is not None and _CUDA in delegate["keys"])
        iterates = entry["iterates"] or (delegate is not None and delegate["iterates"])
        declarations[name] = Declaration(cuda_kernel=cuda, checks_devices=not entry["no_check"], iterates=iterates)
    return declarations


@functools.lru_cache(maxsize=1)
def declarations() -> dict[str, Declaration]:
    """Every declared ATen op's :class:`Declaration`, by ``name.overload`` (empty when torch ships none)."""
    path = _declarations_file()
    return parse(path.read_text(encoding="utf-8")) if path is not None else {}


def declaration(qualified_name: str, overload: str) -> Declaration | None:
    """The declaration of ``aten::name`` with ``overload`` (``"default"`` for none), or None."""
    if not qualified_name.startswith("aten::"):
        return None
    name = qualified_name[len("aten::"):]
    return declarations().get(name if overload in ("", "default") else f"{name}.{overload}")
