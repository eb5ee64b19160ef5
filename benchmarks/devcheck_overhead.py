"""Cell time with %%devcheck against the same cell run plainly, side by side in one run.

Workloads (CPU unless --device names another):
  (i)   10,000 tiny ops (an 8-element add in a Python loop): the worst case per op;
  (ii)  an MLP training loop (256-512-512-10, batch 64, AdamW, 30 steps);
  (iii) a transformer encoder block forward and backward (d_model 256, 4 heads,
        batch 16 x 64 tokens, 5 steps);
  (iv)  10,000 ``.item()`` calls on a host tensor: host-only work that syncs nothing.
TorchSnooper runs loop (ii) too (install it for the benchmark only:
``pip install --no-deps torchsnooper pysnooper "setuptools<81"``); its output goes
nowhere, so only its tracing is measured.

Each cell runs through a real IPython shell (``run_cell``) three ways, interleaved:
plain; under a no-op TorchFunctionMode (the floor: what any torch-function mode costs);
and under ``%%devcheck``. Times are CPU time of this process (``time.process_time``), so
a busy machine does not move the ratios. Medians are printed with the ratios
checked/floor and checked/plain and, for TorchSnooper, the ratio of the two tools'
overheads (extra seconds over plain). Targets, one torch thread: %%devcheck <= 1.3x the
floor on the host-only loops (i) and (iv), <= 1.1x the floor on (ii), <= 1.05x plain on
(iii), and TorchSnooper's overhead >= 20x ours.

Run: ``python benchmarks/devcheck_overhead.py [--repeat 15] [--device cpu] [--threads 1]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import time

import torch

SETUP = """
import torch
from torch import nn
torch.manual_seed(0)
dev = torch.device({device!r})
tiny = torch.ones(8, device=dev)
host = torch.ones(())
mlp = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)).to(dev)
mlp_opt = torch.optim.AdamW(mlp.parameters())
mlp_x = torch.randn(64, 256, device=dev)
mlp_y = torch.randint(0, 10, (64,), device=dev)
block = nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True).to(dev)
block_x = torch.randn(16, 64, 256, device=dev)
from torch.overrides import TorchFunctionMode
class NoOpMode(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {{}}))
def mlp_loop(steps=30):
    for _ in range(steps):
        loss = nn.functional.cross_entropy(mlp(mlp_x), mlp_y)
        mlp_opt.zero_grad()
        loss.backward()
        mlp_opt.step()
    return loss
"""

WORKLOADS = {
    "(i) 10,000 tiny ops": "a = tiny\nfor _ in range(10_000):\n    a = a + 1\n",
    "(ii) MLP training loop": "mlp_loop()\n",
    "(iii) transformer block fwd+bwd": "for _ in range(5):\n    block(block_x).sum().backward()\n",
    "(iv) 10,000 host .item() calls": "s = 0.0\nfor _ in range(10_000):\n    s += host.item()\n",
}

TARGETS = {"(i)": ("floor", 1.3), "(ii)": ("floor", 1.1), "(iii)": ("plain", 1.05), "(iv)": ("floor", 1.3)}


def timed(shell, cell: str) -> float:
    with contextlib.redirect_stdout(io.StringIO()):
        start = time.process_time()
        result = shell.run_cell(cell, store_history=False)
        elapsed = time.process_time() - start
    if result.error_in_exec is not None:
        raise result.error_in_exec
    return elapsed


def snooper_cell(depth: int) -> str | None:
    try:
        with contextlib.redirect_stderr(io.StringIO()), __import__("warnings").catch_warnings():
            __import__("warnings").simplefilter("ignore")
            import torchsnooper  # noqa: F401
    except ImportError:
        return None
    return f"import torchsnooper\nwith torchsnooper.snoop(output=lambda s: None, depth={depth}):\n    mlp_loop()\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: the least noisy)")
    parser.add_argument("--swap", action="store_true",
                        help="run with torch.__future__.set_swap_module_params_on_conversion(True)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.swap:
        torch.__future__.set_swap_module_params_on_conversion(True)
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.run_line_magic("load_ext", "devinspect")
    shell.run_cell(SETUP.format(device=args.device), store_history=False)
    print(f"torch {torch.__version__} on {args.device}, {torch.get_num_threads()} thread(s), median of {args.repeat}"
          + (", swap flag on" if args.swap else ""))
    plain_mlp = checked_mlp = None
    for label, cell in WORKLOADS.items():
        floor_cell = "with NoOpMode():\n" + "".join(f"    {line}\n" for line in cell.splitlines())
        checked_cell = "%%devcheck --quiet\n" + cell
        for variant in (cell, floor_cell, checked_cell):
            timed(shell, variant)  # warm up
        plain, floor, checked = [], [], []
        for _ in range(args.repeat):
            plain.append(timed(shell, cell))
            floor.append(timed(shell, floor_cell))
            checked.append(timed(shell, checked_cell))
        p, f, c = statistics.median(plain), statistics.median(floor), statistics.median(checked)
        against, target = TARGETS[label.split()[0]]
        ratio = c / f if against == "floor" else c / p
        print(f"{label:34s} plain {p * 1e3:8.1f} ms   no-op mode {f * 1e3:8.1f} ms   %%devcheck {c * 1e3:8.1f} ms"
              f"   /floor {c / f:5.2f}x   /plain {c / p:5.2f}x   target /{against} <= {target}x "
              f"{'met' if ratio <= target else 'NOT met'}")
        if label.startswith("(ii)"):
            plain_mlp, checked_mlp = p, c
    if snooper_cell(2) is None:
        print("TorchSnooper not installed: pip install --no-deps torchsnooper pysnooper 'setuptools<81'")
        return
    ours = max(checked_mlp - plain_mlp, 1e-9)
    # depth 2 traces only the loop's own lines (it cannot see copies inside modules or
    # the optimizer); depth 4 reaches Module.forward and the Adam update, which is what
    # %%devcheck observes, so the comparison of overheads is made there.
    for depth in (2, 4):
        cell = snooper_cell(depth)
        snooped = statistics.median(timed(shell, cell) for _ in range(3))
        theirs = snooped - plain_mlp
        print(f"{f'TorchSnooper depth={depth} on (ii)':34s} plain {plain_mlp * 1e3:8.1f} ms   TorchSnooper "
              f"{snooped * 1e3:8.1f} ms   ratio {snooped / plain_mlp:5.2f}x   overhead +{theirs * 1e3:.1f} ms "
              f"= {theirs / ours:.1f}x ours (+{ours * 1e3:.1f} ms)")
    print("target: TorchSnooper's overhead >= 20x ours, compared where it sees what %%devcheck sees (depth=4)")


if __name__ == "__main__":
    main()
