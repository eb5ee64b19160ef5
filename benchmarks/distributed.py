"""What the per-rank view costs a job: devinspect.distributed.gather over gloo.

For 2, 4 and 8 local processes and 1,000 vs 100,000 loose tensors per rank, each rank
calls ``gather`` (after a warm-up call and a barrier, median of --repeat calls) and
rank 0 prints, side by side:

* the whole call on rank 0 (each rank's own summary, then the collective);
* the collective alone (``gather_object``), and the slowest rank's summary;
* the bytes each rank sent, and their ratio between 100,000 and 1,000 tensors
  (the target: 1.00, a summary does not grow with the tensors).

Target: the whole call under 100 ms for 4 ranks. Local processes share this machine's
cores, so 8 ranks on 2 cores measure contention as much as devinspect.

Run: ``python benchmarks/distributed.py [--ranks 2 4 8] [--tensors 1000 100000] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import os
import pickle
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, port: int, tensors: int, repeat: int, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    import devinspect.distributed as dd

    namespace = {f"t{i}": torch.zeros(4) for i in range(tensors)}
    namespace["model"] = torch.nn.Linear(256, 256)
    dd.gather(namespace)  # warm-up: first imports
    calls, collectives, summaries, sent = [], [], [], ()
    for _ in range(repeat):
        dist.barrier()
        start = time.perf_counter()
        report = dd.gather(namespace)
        calls.append(time.perf_counter() - start)
        if report is not None:
            collectives.append(report.elapsed_s)
            summaries.append(max(s.elapsed_s for s in report.summaries))
            sent = report.sent_bytes
    if rank == 0:
        with open(out, "wb") as f:
            pickle.dump({"call": statistics.median(calls), "collective": statistics.median(collectives),
                         "summary": statistics.median(summaries), "sent": sent}, f)
    dist.destroy_process_group()


def measure(world: int, tensors: int, repeat: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pkl")
        mp.start_processes(_rank, args=(world, _free_port(), tensors, repeat, out), nprocs=world,
                           start_method="spawn")
        with open(out, "rb") as f:
            return pickle.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--tensors", type=int, nargs="+", default=[1_000, 100_000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    import devinspect

    print(f"torch {torch.__version__}, devinspect {devinspect.__version__}, gloo on 127.0.0.1, "
          f"{os.cpu_count()} cores; median of {args.repeat} calls")
    print(f"{'ranks':>5} {'tensors/rank':>13} {'gather (rank 0)':>16} {'collective':>11} {'slowest summary':>16} "
          f"{'bytes/rank':>16}")
    sent: dict[int, dict[int, tuple[int, ...]]] = {}
    for world in args.ranks:
        for tensors in args.tensors:
            r = measure(world, tensors, args.repeat)
            sent.setdefault(world, {})[tensors] = r["sent"]
            target = "  (target < 100 ms)" if (world, tensors) == (4, 1_000) else ""
            print(f"{world:>5} {tensors:>13,} {r['call'] * 1e3:>13.1f} ms {r['collective'] * 1e3:>8.1f} ms "
                  f"{r['summary'] * 1e3:>13.1f} ms {min(r['sent']):>7,}–{max(r['sent']):<7,}{target}")
            sys.stdout.flush()
    if len(args.tensors) >= 2:
        low, high = min(args.tensors), max(args.tensors)
        print(f"\nbytes per rank, {high:,} vs {low:,} tensors (target 1.00):")
        for world, by_tensors in sent.items():
            ratios = [h / lo for h, lo in zip(by_tensors[high], by_tensors[low])]
            print(f"  {world} ranks: {min(ratios):.3f}–{max(ratios):.3f}")


if __name__ == "__main__":
    main()
