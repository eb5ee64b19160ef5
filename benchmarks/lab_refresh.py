"""What the JupyterLab extension's refresh after a cell costs the cell, side by side with a plain cell.

An IPython shell with devinspect loaded holds ``--small`` tensors (one name each) or, for the
large case, ``--large`` tensors in lists beside them. The same cell (``x = 1``) runs ``--runs``
times in alternation: once with a front end linked (the after-cell refresh reads the
accelerators' memory and compares the namespace's names and identities, then sends the message,
serialised as the comm serialises it), once without (devinspect loaded, no front end: the refresh
returns at once). It prints the median CPU time (``time.process_time``) of each and the
difference per cell. The walk the panel asks for after a cell (findings and the largest
tensors, its own request, not part of the cell) is timed once per case.

Run: ``python benchmarks/lab_refresh.py [--runs 300] [--small 1000] [--large 100000]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


class Listener:
    """A comm whose front end said hello: it serialises what it is sent, as ipykernel's comm does."""

    def __init__(self) -> None:
        self.sent = 0

    def send(self, data: dict) -> None:
        json.dumps(data)
        self.sent += 1


def measure(shell, link, runs: int) -> tuple[float, float]:
    listener = Listener()
    plain, linked = [], []
    for _ in range(runs):
        for comms, times in (([], plain), ([listener], linked)):
            link.comms = comms
            started = time.process_time()
            shell.run_cell("x = 1", store_history=True)
            times.append(time.process_time() - started)
    link.comms = []
    assert listener.sent == runs
    return statistics.median(plain) * 1e3, statistics.median(linked) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--large", type=int, default=100_000)
    args = parser.parse_args()

    from IPython.core.interactiveshell import InteractiveShell

    from devinspect.ipython.extension import loaded

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "devinspect")
    link = loaded(shell).lab.link
    shell.run_cell("import torch\nfrom devinspect import testing\ndevice = testing.enable()")
    shell.run_cell(f"for i in range({args.small}):\n    globals()[f't{{i}}'] = torch.zeros(4, device=device)")
    cases = [(f"{args.small:,} tensors, one name each", None)]
    cases.append((f"{args.large + args.small:,} tensors ({args.large:,} in lists)",
                  f"pools = [[torch.zeros(1) for _ in range(1000)] for _ in range({args.large // 1000})]"))
    for label, setup in cases:
        if setup:
            shell.run_cell(setup)
        plain, linked = measure(shell, link, args.runs)
        listener = Listener()
        started = time.process_time()
        link.send_scan(listener, "")
        walk = (time.process_time() - started) * 1e3
        print(f"{label}: plain cell {plain:.3f} ms, with the panel linked {linked:.3f} ms, "
              f"added {linked - plain:+.3f} ms per cell (ratio {linked / plain:.2f}); "
              f"the walk the panel asks for afterwards {walk:.0f} ms")


if __name__ == "__main__":
    main()
