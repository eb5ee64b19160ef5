"""Fuzzing with counts: hostile namespaces through every reader, generated programs through %%devcheck.

* Namespaces: seeds ``0 … --namespaces - 1``, each six kinds drawn from the hostile-object
  library (``tests/hostile_kinds.py``), through the scan, ``--why``, the explanations of a
  device mismatch and of an out-of-memory error, the memory tally and the per-rank summary
  (``tests/fuzz_readers.py``). Counted: hostile code that ran, readers that raised, objects
  kept alive once the namespace is dropped. Targets: 0, 0, 0.
* Fixes: ``--fixes`` seeds, each a fix of two to four steps (moves, container and optimizer
  state moves, buffer registrations) on a small training namespace with one fault injected
  (a refused assignment, a failed swap, an out-of-memory copy, a KeyboardInterrupt at a drawn
  line; sometimes the undo fails too) (``tests/fuzz_actions.py``). Counted: fixes that raised into the session, failed fixes that
  left something changed without naming it (half done), and messages that say "nothing was
  changed" when something was (or the reverse). Targets: 0, 0, 0.
* Interrupts: every action kind (moves of a module, a part, a tensor, a leaf and a list; a buffer
  registration; optimizer state; releasing graphs and history; empty_cache; fixes of several
  steps) interrupted at every ``--interrupt-stride``-th line it runs, each on a fresh namespace
  (``tests/fuzz_interrupts.py``). Counted: actions left half done, values lost, untruthful
  messages, interrupts swallowed. Targets: 0, 0, 0, 0.
* Programs: ``--programs`` generated cells (``tests/test_invisible.py``'s statements: moves,
  odd tensors, fast-path modules, top-level await, every kind of failure), each run plain and
  under ``%%devcheck`` from the same start. Counted: programs whose outcome differs (error,
  output, value, tensors left, the next plain cell). Target: 0.

Run: ``python benchmarks/fuzz.py [--namespaces 10000] [--fixes 2000] [--interrupt-stride 1] [--programs 3000] [--device meta|sim:0]``
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def namespaces(count: int, device: str) -> int:
    from fuzz_readers import FuzzCounts, fuzz_namespace

    total = FuzzCounts()
    start = time.process_time()
    for seed in range(count):
        total.add(fuzz_namespace(seed, device))
        if (seed + 1) % 1000 == 0:
            print(f"  {seed + 1} namespaces, {time.process_time() - start:.0f} s CPU", flush=True)
    print(f"namespaces: {total.namespaces}")
    print(f"  user code run:  {len(total.user_code)}")
    print(f"  crashes:        {len(total.crashes)}")
    print(f"  kept alive:     {len(total.kept_alive)}")
    for label, items in (("user code", total.user_code), ("crash", total.crashes), ("kept", total.kept_alive)):
        for text, n in collections.Counter(items).most_common(10):
            print(f"    {label}: {n} × {text}")
    return len(total.user_code) + len(total.crashes) + len(total.kept_alive)


def fixes(count: int) -> int:
    from fuzz_actions import fuzz_fixes

    import devinspect.testing

    counts = fuzz_fixes(count, devinspect.testing.enable())
    print(f"fixes: {counts.fixes} ({counts.failed} failed on their fault, {counts.interrupted} interrupted)")
    print(f"  devinspect tracebacks: {len(counts.tracebacks)}")
    print(f"  half done:             {len(counts.half_done)}")
    print(f"  untruthful messages:   {len(counts.untruthful)}")
    for label, items in (("traceback", counts.tracebacks), ("half done", counts.half_done),
                         ("untruthful", counts.untruthful)):
        for text, n in collections.Counter(items).most_common(10):
            print(f"    {label}: {n} × {text}")
    return len(counts.tracebacks) + len(counts.half_done) + len(counts.untruthful)


def interrupts(stride: int) -> int:
    """Every action kind interrupted at every ``stride``-th line it runs (``tests/fuzz_interrupts.py``)."""
    from fuzz_interrupts import InterruptCounts, interrupt_every_action

    import devinspect.testing

    total = InterruptCounts()
    for kind, counts in interrupt_every_action(devinspect.testing.enable(), stride).items():
        print(f"  {kind:28s} {counts.runs:5d} runs: half done {len(counts.half_done)}, lost {len(counts.lost)}, "
              f"untruthful {len(counts.untruthful)}, swallowed {len(counts.swallowed)}")
        total.add(counts)
    print(f"interrupts: {total.runs} runs ({total.interrupted} interrupted inside the action)")
    print(f"  half done:            {len(total.half_done)}")
    print(f"  values lost:          {len(total.lost)}")
    print(f"  untruthful messages:  {len(total.untruthful)}")
    print(f"  interrupts swallowed: {len(total.swallowed)}")
    for label, items in (("half done", total.half_done), ("lost", total.lost), ("untruthful", total.untruthful),
                         ("swallowed", total.swallowed)):
        for text in items[:10]:
            print(f"    {label}: {text}")
    return total.bad()


def programs(count: int) -> int:
    from IPython.testing.globalipapp import get_ipython
    from test_invisible import STATEMENTS, run_once

    import devinspect.testing

    devinspect.testing.enable()
    ip = get_ipython()
    ip.run_line_magic("load_ext", "devinspect")
    ip.InteractiveTB.set_mode("Plain")
    rng = random.Random(0)
    differ = []
    start = time.process_time()
    for i in range(count):
        body = "\n".join(rng.choice(STATEMENTS) for _ in range(rng.randint(1, 6)))
        plain = run_once(ip, body, checked=False)
        checked = run_once(ip, body, checked=True)
        if plain != checked:
            keys = sorted(k for k in plain if plain[k] != checked.get(k))
            differ.append(f"{keys}: {body!r}"[:300])
        if (i + 1) % 500 == 0:
            print(f"  {i + 1} programs, {time.process_time() - start:.0f} s CPU", flush=True)
    print(f"programs: {count}")
    print(f"  behave differently under %%devcheck: {len(differ)}")
    for text in differ[:20]:
        print(f"    {text}")
    return len(differ)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespaces", type=int, default=10_000)
    parser.add_argument("--fixes", type=int, default=2_000)
    parser.add_argument("--programs", type=int, default=3_000)
    parser.add_argument("--interrupt-stride", type=int, default=1,
                        help="interrupt every action kind at every N-th line it runs (0: not at all)")
    parser.add_argument("--device", default="meta", help="device of the failing call's tensor (meta or sim:0)")
    args = parser.parse_args()
    if args.device.startswith("sim"):
        import devinspect.testing

        devinspect.testing.enable()
    bad = namespaces(args.namespaces, args.device) if args.namespaces else 0
    bad += fixes(args.fixes) if args.fixes else 0
    bad += interrupts(args.interrupt_stride) if args.interrupt_stride else 0
    bad += programs(args.programs) if args.programs else 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
