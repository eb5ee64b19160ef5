"""What explaining errors after the fact costs cells that need no explanation.

Once loaded, devinspect adds an input transformer and one ``post_run_cell`` callback
that looks at the cell's error. A real IPython shell runs the same cells in blocks,
with the extension unloaded and loaded alternately, and the fastest block's time per
cell is printed side by side, in CPU time (``time.process_time``; the minimum: an error cell's time is mostly IPython's own
traceback formatting, several milliseconds that vary more between blocks than the
callback costs):

* a clean cell (``x = sum(range(100))``): the target is under 50 us added;
* an unrelated Python error (``raise ValueError``): returns on the error's type;
* an unrelated torch error (a shape mismatch, a RuntimeError like a device
  mismatch): the failing call is read from the traceback, then nothing is shown.

The callback alone is then timed on each kind of result, without the shell around it.

Last, what explaining a device mismatch costs as the namespace grows: the same failed
cells explained with an empty namespace and with ``--tensors`` tensors in a list and a
dict beside them, interleaved, the median CPU time (``time.process_time``) of
``--repeat`` rounds, next to the target (at most 20 ms added).

And what the user waits for: each of those failed cells run by the shell with ``--tensors``
tensors beside it, the extension unloaded (a plain failed cell) and loaded (the same cell,
explained), interleaved, the median CPU time of ``--repeat`` runs side by side and the time
added (target: at most 20 ms).

Run: ``python benchmarks/explain_overhead.py [--cells 300] [--repeat 7] [--tensors 100000]``
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import timeit

import torch  # imported by the cells; loaded here so no block pays for it

CELLS = {
    "clean cell": "x = sum(range(100))",
    "unrelated Python error": "raise ValueError('not ours')",
    "unrelated torch error": "torch.ones(2, 3) @ torch.ones(2, 3)",
}


def per_cell(shell, cell: str, cells: int) -> float:
    from IPython.utils.io import capture_output

    with capture_output():  # tracebacks are printed: keep the terminal out of the timing
        start = time.process_time()
        for _ in range(cells):
            shell.run_cell(cell, store_history=True)
        return (time.process_time() - start) / cells


#: Failed cells whose explanation is timed against the namespace's size: each names its
#: operands a different way (a namespace name, the failing line, a local, the model).
MISMATCHES = {
    "a namespace input": "model(x)",
    "made on the failing line": "model(torch.ones(2, 4))",
    "a local of the user's function": "def step():\n    h = torch.ones(2, 4)\n    return model(h)\nstep()",
    "the model on the host": "cpu_model(x_on_device)",
}


def namespace_cost(shell, tensors: int, repeat: int) -> None:
    from IPython.utils.io import capture_output

    from devinspect import testing
    from devinspect.diagnose.errors.explainer import explanation_of

    testing.enable()
    shell.run_cell("import torch\nmodel = torch.nn.Linear(4, 2).to('sim:0')\nx = torch.ones(2, 4)\n"
                   "cpu_model = torch.nn.Linear(4, 2)\nx_on_device = torch.ones(2, 4, device='sim:0')\n"
                   "opt = torch.optim.Adam(cpu_model.parameters())")
    print(f"\n== explaining a device mismatch: empty namespace vs {tensors:,} tensors beside it ==")
    print(f"{'operand':<34}{'empty':>10}{'large':>12}{'added':>12}   target")
    for label, cell in MISMATCHES.items():
        with capture_output():
            error = shell.run_cell(cell).error_in_exec
        times: dict[int, list[float]] = {0: [], tensors: []}
        for _ in range(repeat):
            for n in times:
                shell.user_ns["junk"] = [torch.zeros(1) for _ in range(n)]
                shell.user_ns["table"] = {i: torch.zeros(1) for i in range(n // 10)}
                gc.collect()  # the tensors just made are not the explanation's to collect
                start = time.process_time()
                explanation_of(error, shell.user_ns)
                times[n].append(time.process_time() - start)
        empty, large = statistics.median(times[0]), statistics.median(times[tensors])
        print(f"{label:<34}{empty * 1e3:>7.1f} ms{large * 1e3:>9.1f} ms{(large - empty) * 1e3:>+9.1f} ms   <= 20 ms")
    for name in ("junk", "table"):
        shell.user_ns.pop(name, None)


def failed_cell_cost(shell, tensors: int, repeat: int) -> None:
    """A failed cell with ``tensors`` tensors in the session: plain, and explained by the extension."""
    from IPython.utils.io import capture_output

    shell.user_ns["junk"] = [torch.zeros(1) for _ in range(tensors)]
    shell.user_ns["table"] = {i: torch.zeros(1) for i in range(tensors // 10)}
    print(f"\n== a failed cell with {tensors:,} tensors in the session: plain vs explained ==")
    print(f"{'failed cell':<34}{'plain':>10}{'explained':>12}{'added':>12}   target")
    for label, cell in MISMATCHES.items():
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeat):
            for loaded in (False, True):
                if loaded:
                    shell.run_line_magic("load_ext", "devinspect")
                gc.collect()
                with capture_output():
                    start = time.process_time()
                    shell.run_cell(cell)
                    times[loaded].append(time.process_time() - start)
                if loaded:
                    shell.run_line_magic("unload_ext", "devinspect")
        plain, explained = statistics.median(times[False]), statistics.median(times[True])
        print(f"{label:<34}{plain * 1e3:>7.1f} ms{explained * 1e3:>9.1f} ms{(explained - plain) * 1e3:>+9.1f} ms"
              "   <= 20 ms")
    for name in ("junk", "table"):
        shell.user_ns.pop(name, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--tensors", type=int, default=100_000)
    parser.add_argument("--only-failed-cells", action="store_true",
                        help="only the explanations of failed cells against the namespace's size")
    args = parser.parse_args()

    from IPython.testing.globalipapp import get_ipython

    import devinspect

    shell = get_ipython()
    shell.run_cell("import torch")
    if args.only_failed_cells:
        namespace_cost(shell, args.tensors, max(3, args.repeat // 2))
        failed_cell_cost(shell, args.tensors, max(3, args.repeat // 2))
        return
    print(f"torch {torch.__version__}, devinspect {devinspect.__version__}; "
          f"{args.cells} cells x {args.repeat} alternating blocks, fastest block per cell")
    print(f"{'cell':<24}{'without':>12}{'with':>12}{'added':>12}{'ratio':>8}")
    for label, cell in CELLS.items():
        per_cell(shell, cell, 20)  # warm up both paths
        shell.run_line_magic("load_ext", "devinspect")
        per_cell(shell, cell, 20)
        shell.run_line_magic("unload_ext", "devinspect")
        without, with_ = [], []
        for _ in range(args.repeat):
            without.append(per_cell(shell, cell, args.cells))
            shell.run_line_magic("load_ext", "devinspect")
            with_.append(per_cell(shell, cell, args.cells))
            shell.run_line_magic("unload_ext", "devinspect")
        w, d = min(without), min(with_)
        target = "   (target < 50 us)" if label == "clean cell" else ""
        print(f"{label:<24}{w * 1e6:>9.1f} us{d * 1e6:>9.1f} us{(d - w) * 1e6:>+9.1f} us{d / w:>7.2f}x{target}")

    print("\n== the post_run_cell callback alone ==")
    shell.run_line_magic("load_ext", "devinspect")
    from devinspect.ipython.extension import _loaded

    callback = _loaded[id(shell)].failed_cell.explain_after_cell
    for label, cell in CELLS.items():
        from IPython.utils.io import capture_output

        with capture_output():
            result = shell.run_cell(cell, store_history=True)
        number = 2000 if result.error_in_exec is None or isinstance(result.error_in_exec, ValueError) else 200
        seconds = min(timeit.repeat(lambda: callback(result), number=number, repeat=args.repeat)) / number
        print(f"{label:<24}{seconds * 1e6:>9.2f} us")
    shell.run_line_magic("unload_ext", "devinspect")
    namespace_cost(shell, args.tensors, max(3, args.repeat // 2))
    failed_cell_cost(shell, args.tensors, max(3, args.repeat // 2))


if __name__ == "__main__":
    main()
