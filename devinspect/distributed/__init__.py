"""A per-rank view of a distributed job, moved by the job's own engine.

* :func:`summary`: this process's view as small plain data (a :class:`RankSummary`);
* :func:`gather`: called on every rank, collects the summaries on one rank over
  ``torch.distributed`` and returns a :class:`RankReport` there;
* :func:`from_view`: the same report from a notebook that drives ipyparallel engines.
"""

from __future__ import annotations

from typing import Any

from .cross_rank import SKEW_MARGIN, CrossRankFinding
from .gather import DistributedError, gather
from .report import RankReport, make_report
from .rank_summary import TOP, RankSummary, summary

__all__ = ["summary", "gather", "from_view", "RankReport", "RankSummary", "CrossRankFinding", "DistributedError",
           "make_report", "SKEW_MARGIN", "TOP"]


def from_view(view: Any, *, top: int = TOP, timeout: float = 30.0, margin: float = SKEW_MARGIN,
              focus: str = "devices") -> RankReport:
    """Run :func:`summary` on each engine of an ipyparallel view (``rc[:]``), in each
    engine's own namespace, and return the :class:`RankReport`. An engine that fails or
    does not answer within ``timeout`` seconds is a row that says so; the others show."""
    from ..jupyter.engines import from_view as run

    return run(view, top=top, timeout=timeout, margin=margin, focus=focus)
