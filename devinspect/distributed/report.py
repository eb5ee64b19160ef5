"""Every rank's summary side by side, with what only the comparison shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from .cross_rank import SKEW_MARGIN, CrossRankFinding, cross_rank_findings, skew
from .rank_summary import RankSummary

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class RankReport:
    """What ``gather`` and ``from_view`` return: one :class:`RankSummary` per rank, in rank
    order, and the findings across ranks. ``.frame`` has one row per rank.

    ``focus`` is what the text shows first: "devices" (tensors and placement, as
    ``%devices --ranks``) or "memory" (allocator and driver figures, as ``%gpumem --ranks``).
    """

    summaries: tuple[RankSummary, ...]
    findings: tuple[CrossRankFinding, ...] = ()
    margin: float = SKEW_MARGIN
    #: Bytes each rank sent (its pickled summary), in rank order; what the transport carried.
    sent_bytes: tuple[int, ...] = ()
    elapsed_s: float = 0.0
    focus: str = "devices"

    @property
    def world_size(self) -> int:
        return max((s.world_size for s in self.summaries), default=0)

    @property
    def skew(self) -> tuple[int, int, int] | None:
        """(median bytes, worst rank, its bytes): the figure ranks are compared by."""
        return skew(list(self.summaries))

    @property
    def frame(self) -> pd.DataFrame:
        import pandas as pd

        from ..memory_model import nullable

        rows = []
        for s in self.summaries:
            rows.append({
                "rank": s.rank, "hostname": s.hostname, "local_rank": s.local_rank, "pid": s.pid or None,
                "devices": ", ".join(d.device for d in s.devices), "tensors": s.tensors,
                "tensor_bytes": s.tensor_bytes, "held_bytes": s.held_bytes,
                "allocated_bytes": s.accelerator_total("allocated_bytes"),
                "reserved_bytes": s.accelerator_total("reserved_bytes"),
                "process_bytes": s.accelerator_total("process_bytes"),
                "findings": len(s.findings), "parameters": s.parameter_count, "dtensors": len(s.dtensors),
                "transport": s.transport, "devinspect_version": s.devinspect_version, "elapsed_s": s.elapsed_s,
                "error": s.error,
            })
        return nullable(pd.DataFrame(rows))

    @property
    def tensors_frame(self) -> pd.DataFrame:
        """Each rank's largest tensors, one row each."""
        import pandas as pd

        return pd.DataFrame([{"rank": s.rank, "name": t.name, "kind": t.kind, "device": t.device, "dtype": t.dtype,
                              "shape": t.shape, "storage_bytes": t.storage_bytes}
                             for s in self.summaries for t in s.top],
                            columns=["rank", "name", "kind", "device", "dtype", "shape", "storage_bytes"])

    @property
    def dtensors_frame(self) -> pd.DataFrame:
        """Each DTensor parameter on each rank: mesh, placements, global and local shape."""
        import pandas as pd

        return pd.DataFrame([{"rank": s.rank, "name": d.name, "mesh_shape": d.mesh_shape,
                              "mesh_device_type": d.mesh_device_type, "placements": ", ".join(d.placements),
                              "global_shape": d.global_shape, "local_shape": d.local_shape}
                             for s in self.summaries for d in s.dtensors],
                            columns=["rank", "name", "mesh_shape", "mesh_device_type", "placements", "global_shape",
                                     "local_shape"])

    def __repr__(self) -> str:
        from ..render.ranks_text import report_text

        return report_text(self)

    def _repr_html_(self) -> str:
        from ..render.ranks_html import report_html

        return report_html(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": repr(self), "text/html": self._repr_html_()}


def make_report(summaries: Iterable[RankSummary], *, margin: float = SKEW_MARGIN, sent_bytes: Iterable[int] = (),
                elapsed_s: float = 0.0, focus: str = "devices") -> RankReport:
    ordered = sorted(summaries, key=lambda s: s.rank)
    return RankReport(tuple(ordered), cross_rank_findings(ordered, margin), margin, tuple(sent_bytes), elapsed_s,
                      focus)

