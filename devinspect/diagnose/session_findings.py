"""Rules about what the session holds beside the model's own tensors: accelerator memory that only
IPython's output history or the last traceback keeps, DataLoaders that copy from pageable
memory, and the parts of the namespace the walk stopped at or could not read."""

from __future__ import annotations

from collections import defaultdict
from typing import Iterator

from ..model import Finding, ScanResult, human_bytes, record_column
from . import fix_builders


def history_holds(result: ScanResult) -> Iterator[Finding]:
    """Accelerator memory kept alive only by IPython's output history or the last traceback."""
    by_holder: dict[str, int] = defaultdict(int)
    names: dict[str, list[str]] = defaultdict(list)
    for h in result.history:
        holder = "traceback" if h.name.startswith("sys.last_traceback") else "history"
        by_holder[holder] += h.storage_bytes
        if h.name not in names[holder]:  # two frames of one function give one label: said once
            names[holder].append(h.name)
    holders = (("history", "held-by-output-history", "Out", "IPython's output history", fix_builders.release_history),
               ("traceback", "held-by-traceback", "sys.last_traceback", "the last error's traceback",
                fix_builders.release_traceback))
    for holder, code, subject, words, release in holders:
        if not by_holder.get(holder):
            continue
        shown = ", ".join(names[holder][:4]) + (" …" if len(names[holder]) > 4 else "")
        yield Finding(
            code=code,
            severity="warning",
            subject=subject,
            message=f"{human_bytes(by_holder[holder])} of accelerator memory is held only by {words} ({shown})",
            fix=release(),
            storage_bytes=by_holder[holder],
            names=tuple(names[holder]),
        )


def unpinned_loaders(result: ScanResult) -> Iterator[Finding]:
    """A DataLoader without ``pin_memory`` feeding a model on CUDA."""
    cuda_models = [m.name for m in result.modules if any(d.startswith("cuda") for d in m.devices)]
    if not cuda_models:
        return
    for loader in result.loaders:
        if loader.pin_memory:
            continue
        code = fix_builders.assignment(f"{loader.name}.pin_memory", "True")
        yield Finding(
            code="loader-not-pinned",
            severity="hint",
            subject=loader.name,
            message=(
                f"{loader.name} has pin_memory=False while {', '.join(cuda_models)} is on CUDA: "
                "host-to-device copies cannot overlap compute"
            ),
            fix=fix_builders.Fix(summary=f"pin {loader.name}'s batches (from its next iteration on)", code=code,
                          note="then copy with batch.to(device, non_blocking=True) in the loop"),
            names=tuple(n for n in record_column(result.records, "name") if n.startswith(loader.name + ".")),
        )


def truncated_walk(result: ScanResult) -> Iterator[Finding]:
    """Parts of the namespace the walk did not enter."""
    for t in result.truncated[:20]:
        skipped = f" ({t.skipped:,} skipped)" if t.skipped else ""
        yield Finding(code="not-walked", severity="hint", subject=t.name, message=f"{t.name} not fully walked: {t.reason}{skipped}")


def could_not_inspect(result: ScanResult) -> Iterator[Finding]:
    """One hint per object that could not be read, with every other name it was reached by."""
    others: dict[str, list[str]] = {}
    notes: dict[str, str | None] = {}
    for r in result.of_kind("error"):
        if r.alias_of in others:
            others[r.alias_of].append(r.name)
        else:
            others[r.name], notes[r.name] = [], r.note
    for name, also in others.items():
        note = notes[name]
        more = f" (also reached as {', '.join(also[:3])}{', …' if len(also) > 3 else ''})" if also else ""
        yield Finding(code="could-not-inspect", severity="hint", subject=name, message=f"{name}: {note}{more}",
                      names=(name, *also))
