"""%%gpumem's own cost on CUDA's path, measured on the CPU: a recorded CUDA trace replayed.

What %%gpumem does on CUDA is its own Python work: a tag per line event while the cell runs
(``torch._C._cuda_setMemoryMetadata``), then one read of the memory history and its replay
with the line events. This benchmark runs exactly that code with a stand-in for CUDA's
memory functions (``tests/cuda_standin.py``), on a loop of 2,000 tiny allocations (each a
CPU ``torch.empty(16)``, the loop in the cell itself so that every Python follows its
lines) that replays, allocation by allocation, a recorded CUDA trace of that loop: each call appends its entries (alloc, the previous one's free_requested and
free_completed) to the stand-in's history, stamped with the thread's metadata and the time,
as CUDA's allocator does when its history is on.

Three ways, interleaved, through a real IPython shell, CPU time of this process
(``time.process_time``), median of ``--repeat`` rounds:

* plain: the history off (the stand-in records nothing);
* history alone: the history on, as ``torch.cuda.memory._record_memory_history`` leaves it
  (the issue's "CUDA's memory history alone costs 1.00-1.01x");
* %%gpumem: ``%%gpumem`` on the stand-in's "cuda:0" (``--counters``: on the path that reads
  the allocator's counters at each line, a ``memory_stats()`` dictionary as large as
  CUDA's each time, which %%gpumem takes where the history is the user's own, and took
  on CUDA before its history was tagged).

The ratio %%gpumem / history alone is devinspect's own share. A CPU ``torch.empty`` costs
about 1 µs, a CUDA one several, so the ratio to plain here is an upper bound of what the
same code costs on a GPU (``benchmarks/gpumem_lines.py --device cuda`` measures that).
What the stand-in cannot show is the C++ side: CUDA's conversion of the trace into Python
dicts in ``_snapshot()`` (the stand-in's dicts are built as it records).

The trace is ``tests/fixtures/cuda_tiny_trace.json`` (``--trace FILE`` for another): a
recorded loop of tiny allocations, replayed in turn until the 2,000 are made.
``benchmarks/gpu_check.py`` captures it on a GPU (``cuda_tiny_trace.json`` in its report).

Run: ``python benchmarks/gpumem_cuda_replay.py [--repeat 7] [--trace FILE]``
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

N = 2000
TARGET = 1.5
TRACE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "cuda_tiny_trace.json"
TORCH_MEMORY_STATS = torch.cuda.memory.memory_stats


def nested_stats() -> dict:
    """The allocator's statistics as ``torch._C._cuda_memoryStats`` gives them, keys of the H100's."""
    flat = json.loads((TRACE.parent / "gpumem_cuda.json").read_text())["readings"]["cuda"]["devices"][0]["memory_stats"]
    out: dict = {}
    for key in flat:
        *path, last = key.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[last] = 0
    return out


def made_afresh(d: dict) -> dict:
    return {k: made_afresh(v) if type(v) is dict else v for k, v in d.items()}


def recorded_loop(path: Path) -> list[list[dict]]:
    """A trace CUDA recorded, cut into one group per ``alloc`` (with the events after it)."""
    entries = json.loads(path.read_text())["entries"]
    groups: list[list[dict]] = []
    for entry in entries:
        if entry.get("action") == "alloc" or not groups:
            groups.append([])
        groups[-1].append({k: v for k, v in entry.items() if k not in ("user_metadata", "time_us", "frames")})
    return groups


def make_standin(groups: list[list[dict]]):
    from cuda_standin import CudaMemoryStandIn

    class ReplayingStandIn(CudaMemoryStandIn):
        """The stand-in, its allocator the recorded loop: ``allocate()`` replays the next call's entries."""

        def __init__(self) -> None:
            super().__init__()
            self.groups, self.next = groups, 0

        def allocate(self, numel: int) -> torch.Tensor:
            t = torch.empty(numel)
            if self.recording:
                # The recorded loop in turn; its first allocation (with the segment) once per run.
                group = self.groups[(self.next - 1) % max(len(self.groups) - 1, 1) + 1 if self.next else 0]
                self.next += 1
                metadata = getattr(self.local, "metadata", "")
                now = time.time_ns() // 1000
                for entry in group:
                    if entry["action"] not in self.skip:
                        recorded = dict(entry, time_us=now)
                        if metadata:
                            recorded["user_metadata"] = metadata
                        self.trace.append(recorded)
            return t

        @functools.wraps(CudaMemoryStandIn.record_memory_history)  # its parameters, skip_actions too, as torch's
        def record_memory_history(self, enabled="all", *args, **kwargs):
            self.next = 0  # each recording replays the loop from its start
            super().record_memory_history(enabled, *args, **kwargs)

        def memory_stats(self, device=None):
            # torch's own: the allocator's nested dictionary (as large as the H100's, from the
            # %gpumem fixture) made afresh, flattened and sorted, as each call does on CUDA.
            self.calls["memory_stats"] += 1
            return TORCH_MEMORY_STATS(device)

        def memory_allocated(self, device=None):
            return self.memory_stats(device)["allocated_bytes.all.current"]

        def memory_reserved(self, device=None):
            return self.memory_stats(device)["reserved_bytes.all.current"]

    return ReplayingStandIn()


#: The loop is the cell's own: its lines are followed on every Python (markers before 3.12).
LOOP = f"for _ in range({N}):\n    t = allocate(16)"


def cpu_time(shell, cell: str) -> float:
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.process_time()
        result = shell.run_cell(cell)
        elapsed = time.process_time() - start
    if not result.success:
        raise SystemExit(f"the benchmark cell failed: {result.error_in_exec!r}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--counters", action="store_true",
                        help="%%gpumem on its counters path (the allocator read at each line), for comparison")
    parser.add_argument("--trace", type=Path, default=TRACE,
                        help="a trace CUDA recorded (JSON with 'entries'; default: the test fixture)")
    args = parser.parse_args()

    import pytest
    from IPython.testing.globalipapp import get_ipython

    import devinspect
    import devinspect.ipython.profiled_cell as profiled_cell

    groups = recorded_loop(args.trace)
    standin = make_standin(groups)
    patch = pytest.MonkeyPatch()
    standin.install_functions(patch)
    patch.setattr(profiled_cell, "profiled_device", lambda text: torch.device("cuda", 0))
    template = nested_stats()
    patch.setattr(torch.cuda.memory, "memory_stats_as_nested_dict", lambda device=None: made_afresh(template))
    shell = get_ipython()
    shell.run_line_magic("load_ext", "devinspect")
    shell.user_ns["allocate"] = standin.allocate
    shell.user_ns["history"] = standin.record_memory_history
    cells = {"plain": LOOP,
             "history alone": f"history('all', context=None, stacks='python')\n{LOOP}\nhistory(None)",
             "%%gpumem": f"%%gpumem\n{LOOP}"}
    if args.counters:
        # The thread carries metadata of the user's: %%gpumem leaves it alone and reads the
        # allocator's counters at each line instead (its only way on CUDA before the tags).
        cells["%%gpumem"] = f"tag('mine')\nget_ipython().run_cell_magic('gpumem', '', {LOOP!r})\ntag('')"
        shell.user_ns["tag"] = standin.set_metadata
    for cell in cells.values():
        cpu_time(shell, cell)
    times: dict[str, list[float]] = {k: [] for k in cells}
    for _ in range(args.repeat):
        for label, cell in cells.items():
            times[label].append(cpu_time(shell, cell))
    plain, history, profiled = (statistics.median(times[k]) for k in cells)
    source = json.loads(args.trace.read_text())["provenance"].split(":")[0]
    print(f"torch {torch.__version__}, devinspect {devinspect.__version__}, Python {sys.version.split()[0]}; "
          f"{N:,} tiny allocations replayed from {args.trace.name} ({source}); %%gpumem on its "
          f"{'counters' if args.counters else 'tagged-history'} path; {args.repeat} interleaved rounds, "
          "median CPU time "
          "(time.process_time)")
    print(f"{'plain':>10}{'history alone':>16}{'%%gpumem':>11}{'vs plain':>10}{'vs history':>12}"
          f"{'per allocation':>17}   target")
    print(f"{plain * 1e3:>7.1f} ms{history * 1e3:>13.1f} ms{profiled * 1e3:>8.1f} ms{profiled / plain:>9.2f}x"
          f"{profiled / history:>11.2f}x{(profiled - history) / N * 1e6:>13.2f} µs   <= {TARGET}x plain on a GPU")
    patch.undo()


if __name__ == "__main__":
    main()
