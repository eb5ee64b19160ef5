"""A per-rank view of a distributed job, moved by the job's own engine.

* :func:`summary`: this process's view as small plain data (a :class:`RankSummary`);
* :func:`gather`: called on every rank, collects the summaries on one rank over
  ``torch.distributed`` and returns a :class:`RankReport` there;
* :func:`from_view`: the same report from a notebook that drives ipyparallel engines.
"""

from __future__ import annotations

from ..diagnose import TOP, make_report, summary
from ..lazy_exports import lazy_surface
from ..model import SKEW_MARGIN, Finding, RankReport, RankSummary
from .engines import from_view
from .gather import DistributedError, gather

__all__ = ["summary", "gather", "from_view", "RankReport", "RankSummary", "Finding", "DistributedError",
           "make_report", "SKEW_MARGIN", "TOP"]


__getattr__ = lazy_surface(__name__, {})
