"""Rules over a scan: what is probably wrong, in one line each, with the fix as code.

Each rule is a plain function of a :class:`~devinspect.model.ScanResult`; none looks
at live objects, so every rule can be tested from hand-made records.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Callable, Iterator

from .model import SEVERITY_ORDER, Finding, ScanResult, TensorRecord, device_is_accelerator
from .render.units import human_bytes

#: Variable names that usually hold a model's inputs or targets.
INPUT_NAMES = frozenset(
    {
        "x", "y", "X", "Y", "xb", "yb", "x_batch", "y_batch", "batch", "inputs", "input", "input_ids",
        "labels", "label", "targets", "target", "mask", "attention_mask", "images", "imgs", "image",
        "features", "data", "sample", "samples", "tokens", "ids", "src", "tgt", "y_true", "y_pred",
    }
)

Rule = Callable[[ScanResult], Iterator[Finding]]


def find(result: ScanResult) -> list[Finding]:
    """All findings for ``result``, most severe first."""
    found: list[Finding] = []
    for rule in RULES:
        found.extend(rule(result))
    found.sort(key=lambda f: SEVERITY_ORDER.get(f.severity, 9))
    return found


def mixed_device_modules(result: ScanResult) -> Iterator[Finding]:
    """A model whose parameters and buffers span devices."""
    for module in result.modules:
        if not module.is_mixed:
            continue
        where = ", ".join(f"{name} on {device}" for name, device in module.placement[:6])
        if len(module.placement) > 6:
            where += f", … ({len(module.placement) - 6} more)"
        main = module.devices[0]
        yield Finding(
            code="mixed-device-module",
            severity="error",
            subject=module.name,
            message=f"{module.name} ({module.type_name}) has parameters/buffers on {' and '.join(module.devices)}: {where}",
            fix=f'{module.name}.to("{main}")',
        )


def unregistered_tensor_attributes(result: ScanResult) -> Iterator[Finding]:
    """Tensors stored as plain module attributes: ``model.to()`` leaves them behind."""
    module_device = {m.name: m.devices[0] for m in result.modules if m.devices}
    class_of = {attr: cls for m in result.modules for attr, cls in m.unregistered}
    roots_of = {m.name for m in result.modules}
    seen: set[tuple[str, str]] = set()
    for r in result.records:
        if r.kind != "attribute" or r.owner is None or r.alias_of is not None:
            continue
        attr = _attribute_of(r.name, r.owner)
        if (r.owner, attr) in seen:
            continue
        seen.add((r.owner, attr))
        root = next((m for m in roots_of if r.owner == m or r.owner.startswith((m + ".", m + "["))), None)
        model_device = module_device.get(root) if root else None
        elsewhere = model_device is not None and model_device != r.device
        direct = r.name == f"{r.owner}.{attr}"
        if direct:
            fix = (
                f'# in {class_of.get(f"{r.owner}.{attr}", "the module class")}.__init__:\nself.register_buffer("{attr}", {attr})\n'
                f"# or now, for this object:\n"
                f'{r.owner}.register_buffer("{attr}", {r.owner}.__dict__.pop("{attr}"))'
            )
        else:
            fix = (
                f"# keep each tensor as a registered buffer (or use nn.ParameterList/ParameterDict):\n"
                f'for i, t in enumerate({r.owner}.{attr}):\n    {r.owner}.register_buffer(f"{attr}_{{i}}", t)'
            )
        where = f" It is on {r.device} while {root} is on {model_device}." if elsewhere else ""
        yield Finding(
            code="unregistered-tensor-attribute",
            severity="error" if elsewhere else "warning",
            subject=f"{r.owner}.{attr}",
            message=f"{r.owner}.{attr} is a plain tensor attribute, not a buffer: .to() and state_dict() skip it.{where}",
            fix=fix,
            storage_bytes=r.storage_bytes,
        )


def _attribute_of(name: str, owner: str) -> str:
    rest = name[len(owner) + 1 :] if name.startswith(owner + ".") else name
    return re.split(r"[.\[]", rest, maxsplit=1)[0]


def optimizer_state_elsewhere(result: ScanResult) -> Iterator[Finding]:
    """Optimizer state on another device than its parameter (typical after loading a checkpoint)."""
    device_of = {r.name: r.device for r in result.records if r.kind == "parameter"}
    by_opt: dict[str, list[TensorRecord]] = defaultdict(list)
    for r in result.records:
        if r.kind != "optimizer_state" or r.param is None:
            continue
        pdevice = device_of.get(r.param)
        if pdevice is None or pdevice == r.device:
            continue
        # A 0-dim CPU "step" counter is how Adam/AdamW keep it by design.
        if r.device == "cpu" and r.shape == ():
            continue
        by_opt[r.name.split(".state[", 1)[0]].append(r)
    for opt, records in by_opt.items():
        devices = sorted({r.device for r in records})
        targets = sorted({device_of[r.param] for r in records if r.param in device_of})
        keys = sorted({r.name.rsplit("[", 1)[-1].rstrip("]") for r in records})
        target = targets[0] if len(targets) == 1 else None
        move = f'v.to("{target}")' if target else "v.to(p.device)"
        yield Finding(
            code="optimizer-state-device",
            severity="error",
            subject=opt,
            message=(
                f"{len(records)} state tensors of {opt} ({', '.join(keys)}) are on {', '.join(devices)} "
                f"but their parameters are on {', '.join(targets)} (typical after loading a checkpoint)"
            ),
            fix=(
                f"for p, state in {opt}.state.items():\n"
                f"    for k, v in state.items():\n"
                f"        if torch.is_tensor(v) and v.dim() > 0:\n"
                f"            state[k] = {move}"
            ),
            storage_bytes=sum(r.counted_bytes for r in records),
        )


def inputs_elsewhere(result: ScanResult) -> Iterator[Finding]:
    """A model on an accelerator while tensors named like its inputs are elsewhere."""
    model_devices = {m.devices[0] for m in result.modules if len(m.devices) == 1}
    accelerated = sorted(d for d in model_devices if device_is_accelerator(d))
    if not accelerated:
        return
    models = [m.name for m in result.modules if m.devices and m.devices[0] in accelerated]
    for r in result.records:
        if r.kind != "tensor" or r.alias_of is not None or r.hidden or r.device in model_devices:
            continue
        base = re.split(r"[.\[]", r.name, maxsplit=1)[0]
        if base not in INPUT_NAMES:
            continue
        target = accelerated[0]
        fix = f'{r.name} = {r.name}.to("{target}")' if r.name == base or "[" in r.name else f'{base} = ... .to("{target}")'
        yield Finding(
            code="input-on-other-device",
            severity="hint",
            subject=r.name,
            message=f"{r.name} is on {r.device} while {', '.join(models)} is on {target}: passing it in will raise a device mismatch",
            fix=fix,
        )


def history_holds(result: ScanResult) -> Iterator[Finding]:
    """Accelerator memory kept alive only by IPython's output history or the last traceback."""
    by_holder: dict[str, int] = defaultdict(int)
    names: dict[str, list[str]] = defaultdict(list)
    for h in result.history:
        holder = "traceback" if h.name.startswith("sys.last_traceback") else "history"
        by_holder[holder] += h.storage_bytes
        names[holder].append(h.name)
    if by_holder.get("history"):
        shown = ", ".join(names["history"][:4]) + (" …" if len(names["history"]) > 4 else "")
        yield Finding(
            code="held-by-output-history",
            severity="warning",
            subject="Out",
            message=f"{human_bytes(by_holder['history'])} of accelerator memory is held only by IPython's output history ({shown})",
            fix="%reset -f out",
            storage_bytes=by_holder["history"],
        )
    if by_holder.get("traceback"):
        shown = ", ".join(names["traceback"][:4]) + (" …" if len(names["traceback"]) > 4 else "")
        yield Finding(
            code="held-by-traceback",
            severity="warning",
            subject="sys.last_traceback",
            message=f"{human_bytes(by_holder['traceback'])} of accelerator memory is held only by the last error's traceback ({shown})",
            fix="import sys\nsys.last_traceback = sys.last_value = None\nsys.last_exc = None  # Python 3.12+",
            storage_bytes=by_holder["traceback"],
        )


def unpinned_loaders(result: ScanResult) -> Iterator[Finding]:
    """A DataLoader without ``pin_memory`` feeding a model on CUDA."""
    cuda_models = [m.name for m in result.modules if any(d.startswith("cuda") for d in m.devices)]
    if not cuda_models:
        return
    for loader in result.loaders:
        if loader.pin_memory:
            continue
        yield Finding(
            code="loader-not-pinned",
            severity="hint",
            subject=loader.name,
            message=(
                f"{loader.name} has pin_memory=False while {', '.join(cuda_models)} is on CUDA: "
                "host-to-device copies cannot overlap compute"
            ),
            fix=f"{loader.name} = DataLoader(..., pin_memory=True)\n# and in the loop: batch.to(device, non_blocking=True)",
        )


def truncated_walk(result: ScanResult) -> Iterator[Finding]:
    """Parts of the namespace the walk did not enter."""
    for t in result.truncated[:20]:
        skipped = f" ({t.skipped:,} skipped)" if t.skipped else ""
        yield Finding(code="not-walked", severity="hint", subject=t.name, message=f"{t.name} not fully walked: {t.reason}{skipped}")


def could_not_inspect(result: ScanResult) -> Iterator[Finding]:
    for r in result.records:
        if r.kind == "error":
            yield Finding(code="could-not-inspect", severity="hint", subject=r.name, message=f"{r.name}: {r.note}")


RULES: tuple[Rule, ...] = (
    mixed_device_modules,
    unregistered_tensor_attributes,
    optimizer_state_elsewhere,
    inputs_elsewhere,
    history_holds,
    unpinned_loaders,
    truncated_walk,
    could_not_inspect,
)
