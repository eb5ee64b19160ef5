"""The per-rank view from a notebook that drives ipyparallel engines.

ipyparallel is the transport here, as the notebook already uses it: one ``apply`` per
engine of a function of this package, which summarises the engine's own namespace
(``get_ipython().user_ns`` on the engine) and returns plain data. Nothing is written
into the engines' namespaces.
"""

from __future__ import annotations

import pickle
import time
from typing import Any

from ..diagnose import TOP, make_report
from ..model import SKEW_MARGIN, RankReport, failed_summary
from .gather import DistributedError, read_payload


def engine_summary(get_shell: Any, top: int, timeout: float | None, engine: int, engines: int) -> bytes:
    """Runs on an engine: its namespace's summary, pickled plain data. The engine's rank is
    its torch.distributed rank when a group is initialised there, else its engine id.
    ``get_shell`` is the engine's own ``get_ipython`` (sent as a reference to that name)."""
    import torch.distributed as dist

    from ..collect import shell_names
    from ..diagnose import summary

    shell = get_shell() if callable(get_shell) else None
    namespace = shell.user_ns if shell is not None else {}
    grouped = dist.is_available() and dist.is_initialized()
    mine = summary(namespace, top=top, timeout=timeout, rank=None if grouped else engine,
                   world_size=None if grouped else engines, transport="ipyparallel",
                   exclude=shell_names(shell) if shell is not None else ())
    return pickle.dumps(mine.to_wire(), protocol=pickle.HIGHEST_PROTOCOL)


def from_view(view: Any, *, top: int = TOP, timeout: float = 30.0, margin: float = SKEW_MARGIN,
              focus: str = "devices") -> RankReport:
    """Run :func:`~devinspect.diagnose.ranks.rank_summary.summary` on each engine of an ipyparallel
    view (``rc[:]``), in each engine's own namespace, and return the :class:`RankReport`. An
    engine that fails or does not answer within ``timeout`` seconds is a row that says so;
    the others show."""
    client = getattr(view, "client", None)
    if client is None:
        raise DistributedError(f"expected an ipyparallel view such as rc[:], got {type(view).__name__}")
    targets = view.targets
    if targets is None or targets == "all":
        targets = list(client.ids)
    elif isinstance(targets, int):
        targets = [targets]
    targets = list(targets)
    if not targets:
        raise DistributedError("the view has no engines: start some (ipcluster start -n 2) and connect again")
    started = time.perf_counter()
    from ipyparallel import Reference

    # Each engine's shell, by the name IPython puts in every namespace: nothing of ours is sent there.
    shell = Reference("get_ipython")
    pending = {t: client[t].apply_async(engine_summary, shell, top, timeout, t, len(targets)) for t in targets}
    deadline = time.monotonic() + timeout
    summaries, sent = [], []
    for engine, result in pending.items():
        try:
            payload = result.get(timeout=max(0.0, deadline - time.monotonic()))
        except Exception as exc:  # one engine's failure is its row, never the report's
            summaries.append(failed_summary(engine, len(targets), _engine_error(engine, exc, timeout), "ipyparallel"))
            sent.append(0)
            continue
        summaries.append(read_payload(payload, engine, len(targets)))
        sent.append(len(payload) if isinstance(payload, bytes) else 0)
    return make_report(summaries, margin=margin, sent_bytes=sent, elapsed_s=time.perf_counter() - started,
                       focus=focus)


def _engine_error(engine: int, exc: BaseException, timeout: float) -> str:
    if isinstance(exc, TimeoutError) or type(exc).__name__ == "TimeoutError":
        return f"engine {engine} did not answer within {timeout:g} s"
    name = getattr(exc, "ename", None) or type(exc).__name__
    value = getattr(exc, "evalue", None) or str(exc)
    return f"engine {engine} failed: {name}: {str(value).strip().splitlines()[0] if str(value).strip() else ''}"
