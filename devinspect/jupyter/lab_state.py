"""What the Devices side panel of devinspect's JupyterLab extension shows, as JSON-able data.

Two readings of different cost. :func:`device_memory` reads the allocator counters of every
accelerator device (microseconds; never initialises a device, never imports torch); it runs
after every cell. :class:`NamespaceWatch` tells, just as cheaply, whether a cell may have
changed what a scan would find: a name bound to another object, a name gone or new, or a
name the cell's text mentions (``model.to(dev)`` rebinds nothing). Only then does the panel
ask for :func:`scan_state` (findings and the largest tensors), which walks the namespace.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

#: Tensors listed in the panel (the largest first).
LARGEST = 40

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def device_memory() -> list[dict[str, Any]]:
    """Allocated, reserved and peak bytes of each accelerator device (CUDA only once initialised;
    a PrivateUse1 or XPU/MPS backend through ``torch.accelerator``); empty without torch."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    from ..collect import accelerator_call

    kinds: list[tuple[str, int]] = []
    try:
        if torch.cuda._is_compiled() and torch.cuda.is_initialized():
            kinds.append(("cuda", torch.cuda.device_count()))
        accelerator = getattr(torch, "accelerator", None)
        current = accelerator.current_accelerator() if accelerator is not None else None
        if current is not None and current.type != "cuda":
            backend = getattr(torch, current.type, None)
            initialised = getattr(backend, "is_initialized", None)
            if not callable(initialised) or initialised():
                kinds.append((current.type, int(accelerator.device_count())))
    except Exception:  # a backend that cannot answer shows no device
        return []
    devices = []
    for kind, count in kinds:
        for index in range(count):
            entry: dict[str, Any] = {"device": f"{kind}:{index}"}
            for key, name in (("allocated", "memory_allocated"), ("reserved", "memory_reserved"),
                              ("peak", "max_memory_allocated")):
                try:
                    entry[key] = int(accelerator_call(kind, name, index))
                except Exception:  # missing is data: None
                    entry[key] = None
            devices.append(entry)
    return devices


@dataclass
class NamespaceWatch:
    """The identity of every value the namespace names, as of the last cell."""

    seen: dict[str, int] = field(default_factory=dict)

    def changed(self, namespace: Mapping[str, Any], cell_text: str, skip: Iterable[str] = ()) -> bool:
        """Whether the namespace may hold other tensors than after the last call: O(names)."""
        skipped = set(skip)
        now = {name: id(value) for name, value in namespace.items() if name not in skipped and name[:1] != "_"}
        changed = now != self.seen
        self.seen = now
        if changed:
            return True
        return any(word in now for word in set(_IDENTIFIER.findall(cell_text or "")))


def finding_data(index: int, finding: Any) -> dict[str, Any]:
    fix = finding.fix
    return {"index": index, "severity": finding.severity, "subject": finding.subject, "message": finding.message,
            "fix": fix.summary if fix is not None else None,
            "can_apply": fix is not None and fix.action is not None}


def tensor_data(record: Any) -> dict[str, Any]:
    return {"name": record.name, "device": record.device, "dtype": record.dtype,
            "shape": list(record.shape) if record.shape is not None else None,
            "bytes": record.storage_bytes if record.alias_of is None else 0, "kind": record.kind}


def scan_state(result: Any, text_filter: str = "", limit: int = LARGEST) -> dict[str, Any]:
    """Findings and the largest tensors of a scan, those whose name holds ``text_filter``."""
    wanted = text_filter.strip().lower()
    records = [r for r in result.records if not wanted or wanted in r.name.lower()]
    records.sort(key=lambda r: (-(r.nbytes or 0), r.name))
    return {
        "type": "scan",
        "findings": [finding_data(i, f) for i, f in enumerate(result.findings)],
        "tensors": [tensor_data(r) for r in records[:limit]],
        "matching": len(records),
        "total": len(result.records),
        "filter": text_filter,
    }
