"""Local multi-process jobs for the per-rank tests: gloo over 127.0.0.1, one scenario each.

Each rank builds its namespace, calls devinspect.distributed.gather, and rank 0 writes
the report (pickled) where the test reads it.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(scenario: str, world_size: int, out: Path, timeout_s: float = 120) -> object:
    """Run ``scenario`` on ``world_size`` local ranks; the report rank 0 collected."""
    port = free_port()
    context = mp.start_processes(_rank_main, args=(scenario, world_size, port, str(out)), nprocs=world_size,
                                 join=False, start_method="spawn")
    while not context.join(timeout=timeout_s):
        pass
    with open(out, "rb") as f:
        return pickle.load(f)


def _rank_main(rank: int, scenario: str, world_size: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        namespace, options = SCENARIOS[scenario](rank, world_size)
        import devinspect.distributed as dd

        report = dd.gather(namespace, **options)
        if rank == 0:
            with open(out, "wb") as f:
                pickle.dump((report, repr(report), report._repr_mimebundle_()["text/html"]), f)
        else:
            assert report is None
    finally:
        dist.destroy_process_group()
    # The rank's work is done: leave without the interpreter's teardown, where the threads
    # of gloo and DTensor's mesh sometimes abort the process ("terminate called without an
    # active exception"), with or without devinspect. A failure above still raises.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _on_sim(rank: int, world_size: int) -> tuple[dict, dict]:
    """Every rank on the simulated device; rank 2 holds sixteen times the others' memory."""
    from devinspect import testing

    dev = testing.enable()
    model = torch.nn.Linear(64, 64).to(dev)
    ns = {"model": model, "acts": torch.zeros(256, 1024, device=dev)}  # 1 MiB
    if rank == 2:
        ns["cache"] = [torch.zeros(1024, 1024, device=dev) for _ in range(4)]  # 16 MiB more
    return ns, {}


def _on_cpu(rank: int, world_size: int) -> tuple[dict, dict]:
    """Two CPU ranks, the same model; rank 1 made it float64 (a desync DDP would fail on)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    if rank == 1:
        model = model.double()
    return {"model": model, "batch": torch.zeros(4, 8)}, {}


def _dtensor(rank: int, world_size: int) -> tuple[dict, dict]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor

    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("tp",))
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    distribute_module(model, mesh)  # every parameter replicated
    w = torch.nn.Parameter(distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)]))
    r = distribute_tensor(torch.randn(3), mesh, [Replicate()])
    return {"model": model, "w": w, "r": r}, {}


def _one_fails(rank: int, world_size: int) -> tuple[dict, dict]:
    ns = {"x": torch.zeros(10)}
    if rank == 1:
        import devinspect.diagnose.ranks.rank_summary as rank_summary

        def broken(*args):
            raise OSError("the driver did not answer")

        rank_summary._memory_part = broken
    return ns, {}


def _one_times_out(rank: int, world_size: int) -> tuple[dict, dict]:
    return {"x": torch.zeros(10)}, ({"timeout": 0.0} if rank == 1 else {})


def _versions(rank: int, world_size: int) -> tuple[dict, dict]:
    if rank == 1:
        import devinspect.version

        devinspect.version.__version__ = "0.0.9"
    return {"x": torch.zeros(10)}, {}


def _many_tensors(rank: int, world_size: int) -> tuple[dict, dict]:
    return {f"t{i}": torch.zeros(4) for i in range(5000)}, {}


SCENARIOS = {"sim": _on_sim, "cpu": _on_cpu, "dtensor": _dtensor, "fails": _one_fails, "times_out": _one_times_out,
             "versions": _versions, "many": _many_tensors}
