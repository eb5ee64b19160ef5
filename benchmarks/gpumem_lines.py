"""Cell time with %%gpumem against the same cell run plainly, side by side in one run.

Workloads, on the simulated device (``--device sim``, the default) or a GPU (``--device cuda``):
  (i)  a GPT-2 training step (transformers' GPT2LMHeadModel from a small config: 4 layers,
       d_model 256, 4 heads; batch 4 x 128 tokens; forward, backward, AdamW step),
       profiled with ``-f train_step`` so the step's own lines are traced too;
  (ii) a loop of tiny allocations (2,000 ``torch.empty(16)`` on the device, each kept
       until the next): the worst case per allocation event.

Each cell runs through a real IPython shell (``run_cell``) three ways, interleaved: plain;
under a no-op line tracer on the same code (``sys.settrace`` on the cell and ``train_step``,
doing nothing: the floor any line profiler pays); and under ``%%gpumem``. Times are CPU
time of this process (``time.process_time``), so a busy machine does not move the ratios;
the median of ``--repeat`` rounds is printed with the ratios to plain and to the floor.
Targets: %%gpumem <= 1.2x plain on (i) and <= 1.5x plain on (ii).

pytorch_memlab's LineProfiler runs the same two workloads where it can (it needs CUDA and
``pip install pytorch_memlab``); elsewhere the no-op tracer is the comparison.

Run: ``python benchmarks/gpumem_lines.py [--repeat 7] [--device sim|cuda]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time
from typing import Any

import torch

SETUP = """
import sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
torch.manual_seed(0)
dev = torch.device({device!r})
config = GPT2Config(n_layer=4, n_embd=256, n_head=4, n_positions=128, vocab_size=2048, bos_token_id=0,
                    eos_token_id=0, loss_type="ForCausalLM")
gpt = GPT2LMHeadModel(config).to(dev)
gpt_opt = torch.optim.AdamW(gpt.parameters(), lr=1e-4)
ids = torch.randint(0, 2048, (4, 128), device=dev)

def train_step():
    out = gpt(ids, labels=ids)
    out.loss.backward()
    gpt_opt.step()
    gpt_opt.zero_grad(set_to_none=True)
    return out.loss.detach()

def tiny_allocations(n=2000):
    for _ in range(n):
        t = torch.empty(16, device=dev)
    return t

def _noop_local(frame, event, arg):
    return _noop_local

class NoOpTracer:
    def __init__(self, codes):
        self.codes = codes
    def _call(self, frame, event, arg):
        return _noop_local if frame.f_code in self.codes or frame.f_code.co_filename.startswith("<ipython") else None
    def __enter__(self):
        self.previous = sys.gettrace()
        sys.settrace(self._call)
    def __exit__(self, *exc):
        sys.settrace(self.previous)
"""

WORKLOADS = {
    "(i) GPT-2 training step": ("loss = train_step()", "-f train_step", "{train_step.__code__}"),
    "(ii) 2,000 tiny allocations": ("t = tiny_allocations()", "-f tiny_allocations", "{tiny_allocations.__code__}"),
}
TARGETS = {"(i) GPT-2 training step": 1.2, "(ii) 2,000 tiny allocations": 1.5}


def cpu_time(shell, cell: str) -> float:
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.process_time()
        result = shell.run_cell(cell)
        elapsed = time.process_time() - start
    if not result.success:
        raise SystemExit(f"the benchmark cell failed: {result.error_in_exec!r}")
    return elapsed


def memlab_times(shell, device: str, repeat: int) -> dict[str, float] | None:
    """pytorch_memlab's LineProfiler on the same functions, where it runs (CUDA only)."""
    if device != "cuda":
        return None
    try:
        import pytorch_memlab  # noqa: F401
    except ImportError:
        return None
    shell.run_cell("from pytorch_memlab import LineProfiler")
    out = {}
    for label, (cell, flag, _) in WORKLOADS.items():
        function = flag.split()[1]
        wrapped = f"with LineProfiler({function}) as _prof:\n    {cell}"
        out[label] = statistics.median(cpu_time(shell, wrapped) for _ in range(repeat))
    return out


def workload_shell(device: str) -> Any:
    """An IPython shell with devinspect loaded and the workloads' model and functions made on ``device``."""
    from IPython.testing.globalipapp import get_ipython

    if device.startswith("sim"):
        from devinspect import testing

        testing.enable()
    shell = get_ipython()
    shell.run_line_magic("load_ext", "devinspect")
    shell.run_cell(SETUP.format(device=device))
    return shell


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--device", default="sim")
    args = parser.parse_args()

    import devinspect

    shell = workload_shell(args.device)
    print(f"torch {torch.__version__}, devinspect {devinspect.__version__}, device {args.device}; "
          f"{args.repeat} interleaved rounds, median CPU time (time.process_time)")
    print(f"{'workload':<30}{'plain':>10}{'no-op tracer':>14}{'%%gpumem':>11}{'vs plain':>10}{'vs floor':>10}   target")
    memlab = memlab_times(shell, args.device, args.repeat)
    for label, (cell, flag, codes) in WORKLOADS.items():
        floor_cell = f"with NoOpTracer({codes}):\n    {cell}"
        profiled_cell = f"%%gpumem {flag}\n{cell}"
        for warm in (cell, floor_cell, profiled_cell):
            cpu_time(shell, warm)
        times: dict[str, list[float]] = {"plain": [], "floor": [], "gpumem": []}
        for _ in range(args.repeat):
            times["plain"].append(cpu_time(shell, cell))
            times["floor"].append(cpu_time(shell, floor_cell))
            times["gpumem"].append(cpu_time(shell, profiled_cell))
        plain, floor, profiled = (statistics.median(times[k]) for k in ("plain", "floor", "gpumem"))
        print(f"{label:<30}{plain * 1e3:>7.1f} ms{floor * 1e3:>11.1f} ms{profiled * 1e3:>8.1f} ms"
              f"{profiled / plain:>9.2f}x{profiled / floor:>9.2f}x   <= {TARGETS[label]}x plain")
        if memlab is not None:
            print(f"{'':<30}pytorch_memlab LineProfiler: {memlab[label] * 1e3:.1f} ms ({memlab[label] / plain:.2f}x plain)")
    if memlab is None:
        print("pytorch_memlab's LineProfiler needs CUDA (and pip install pytorch_memlab): compared with the no-op "
              "line tracer instead.")


if __name__ == "__main__":
    main()
