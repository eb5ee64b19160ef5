"""Every rank's summary to one rank, over the job's own process group.

The only transport is ``torch.distributed.gather_object`` on the group the job already
has (gloo or NCCL): each rank sends one pickled dict of plain values to ``dst``;
nothing else opens a connection, and nothing is sent to any other rank.
"""

from __future__ import annotations

import pickle
import sys
import time
from typing import Any, Mapping

from ..diagnose import TOP, make_report, summary
from ..model import SKEW_MARGIN, RankReport, RankSummary, failed_summary


class DistributedError(RuntimeError):
    """A per-rank view could not be made; the message says why in one line."""


def gather(namespace: Mapping[str, Any] | None = None, group: Any = None, dst: int = 0, *, top: int = TOP,
           timeout: float | None = None, margin: float = SKEW_MARGIN, exclude: Any = (),
           focus: str = "devices") -> RankReport | None:
    """Call on every rank: each rank's :func:`summary` of ``namespace`` (default: the
    caller's globals) is collected on rank ``dst`` (a global rank, as in
    ``torch.distributed.gather_object``), which gets the :class:`RankReport`; every
    other rank gets None.

    ``timeout`` bounds each rank's own summary (a rank that overruns sends what it has
    and says so). A rank whose summary fails still sends its error; the others show.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise DistributedError("torch.distributed is not initialised: call torch.distributed.init_process_group() "
                               "on every rank first (devinspect.distributed.summary() describes this process alone)")
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    rank = dist.get_rank()
    size = dist.get_world_size(group)
    mine = summary(namespace, top=top, timeout=timeout, rank=rank, world_size=dist.get_world_size(),
                   transport=str(dist.get_backend(group)), exclude=exclude)
    payload = pickle.dumps(mine.to_wire(), protocol=pickle.HIGHEST_PROTOCOL)
    received: list[Any] | None = [None] * size if rank == dst else None
    started = time.perf_counter()
    try:
        dist.gather_object(payload, received, dst=dst, group=group)
    except Exception as exc:  # a collective that failed: say so in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise DistributedError(f"gather on rank {rank} failed: {first} (every rank of the group must call "
                               "devinspect.distributed.gather(); one that never does makes the others wait "
                               "for the group's timeout)") from None
    elapsed = time.perf_counter() - started
    if received is None:
        return None
    ranks = dist.get_process_group_ranks(group) if group is not None else list(range(size))
    return make_report([read_payload(data, ranks[i], size) for i, data in enumerate(received)], margin=margin,
                       sent_bytes=[len(d) if isinstance(d, bytes) else 0 for d in received], elapsed_s=elapsed,
                       focus=focus)


def read_payload(data: Any, rank: int, world_size: int) -> RankSummary:
    """One rank's pickled summary, or a summary that says why it cannot be read."""
    try:
        wire = pickle.loads(data)
        if not isinstance(wire, dict):
            raise TypeError(f"expected a dict, got {type(wire).__name__}")
        return RankSummary.from_wire(wire)
    except Exception as exc:  # one unreadable rank never hides the others
        return failed_summary(rank, world_size, f"unreadable summary: {type(exc).__name__}: {exc}")
