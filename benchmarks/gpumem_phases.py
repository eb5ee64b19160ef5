"""Where a ``%%gpumem`` cell's own time goes, phase by phase, on the workloads of gpumem_lines.py.

For each workload (a GPT-2 training step; 2,000 tiny allocations) the cell runs plainly, with
CUDA's memory history alone switched on around it (what the allocator's own recording and
one ``_snapshot()`` cost, nothing of devinspect's), and under ``%%gpumem``; the phases of
the last are timed by wrapping the functions that do them:

* ``start``: the allocator's counters read and the history switched on;
* ``snapshot``: the history read back (``torch.cuda.memory._snapshot()``: CUDA's C++ turns
  every entry into a Python dict);
* ``replay``: the entries and the line events replayed into the line totals;
* ``build``: the profile added up from the events;
* ``names``: the live allocations named from the namespace;
* ``display``: the profile shown.

CPU time of this process (``time.process_time``), mean of ``--repeat`` runs, with the number
of history entries and line events per run. On the simulated device (``--device sim``) the
history phases do not exist (its allocator tells each event as it happens).

Run: ``python benchmarks/gpumem_phases.py [--device cuda] [--repeat 10]``
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import statistics
import time
from typing import Any

import torch
from gpumem_lines import WORKLOADS, cpu_time, workload_shell

PHASES = ("start", "snapshot", "replay", "build", "names", "display")


def timed(spent: dict[str, float], phase: str, function: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.process_time()
        try:
            return function(*args, **kwargs)
        finally:
            spent[phase] += time.process_time() - began
    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--device", default="sim")
    args = parser.parse_args()

    import devinspect.diagnose.memory_profile_builder as builder
    import devinspect.ipython.profiled_cell as profiled_cell
    import devinspect.observe.memory_sources as sources

    shell = workload_shell(args.device)
    spent: dict[str, float] = collections.defaultdict(float)
    counts: dict[str, int] = collections.Counter()
    patches = [(sources.TaggedCudaHistory, "start"), (sources, "device_trace"),
               (sources.TaggedCudaHistory, "_replay"), (profiled_cell, "build_profile"),
               (profiled_cell, "named_allocations"), (profiled_cell.ProfiledCell, "_display")]
    # build_profile is imported inside ProfiledCell._finish: timed where it is defined.
    patches[3] = (builder, "build_profile")
    originals = [getattr(owner, name) for owner, name in patches]
    for (owner, name), phase, original in zip(patches, PHASES, originals):
        setattr(owner, name, timed(spent, phase, original))
    replay = sources.TaggedCudaHistory._replay

    def counting_replay(self: Any, entries: list) -> Any:
        counts["entries"] += len(entries)
        counts["line events"] += len(self.log)
        return replay(self, entries)

    sources.TaggedCudaHistory._replay = counting_replay
    on_cuda = torch.device(args.device).type == "cuda"
    print(f"torch {torch.__version__}, device {args.device}"
          f"{' (' + torch.cuda.get_device_name() + ')' if on_cuda else ''}; mean of {args.repeat} runs, "
          "CPU time (time.process_time)")
    for label, (cell, flag, _) in WORKLOADS.items():
        history_cell = ("torch.cuda.memory._record_memory_history(enabled='all', context=None, stacks='python')\n"
                        f"{cell}\n_ = torch.cuda.memory._snapshot()\n"
                        "torch.cuda.memory._record_memory_history(enabled=None)") if on_cuda else cell
        profiled = f"%%gpumem {flag}\n{cell}"
        for warm in (cell, history_cell, profiled):
            cpu_time(shell, warm)
        times: dict[str, list[float]] = {"plain": [], "history alone": [], "%%gpumem": []}
        spent.clear()
        counts.clear()
        for _ in range(args.repeat):
            times["plain"].append(cpu_time(shell, cell))
            times["history alone"].append(cpu_time(shell, history_cell))
            with contextlib.redirect_stdout(io.StringIO()):
                times["%%gpumem"].append(cpu_time(shell, profiled))
        plain = statistics.mean(times["plain"])
        print(f"{label}: " + ", ".join(f"{k} {statistics.mean(v) * 1e3:.1f} ms ({statistics.mean(v) / plain:.2f}x)"
                                       for k, v in times.items()))
        print("    phases of %%gpumem, per run: " + ", ".join(f"{p} {spent[p] / args.repeat * 1e3:.2f} ms"
                                                          for p in PHASES)
              + f"; {counts['entries'] // args.repeat} history entries, {counts['line events'] // args.repeat} "
                "line events")
    for (owner, name), original in zip(patches, originals):
        setattr(owner, name, original)


if __name__ == "__main__":
    main()
