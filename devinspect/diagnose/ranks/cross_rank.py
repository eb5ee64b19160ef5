"""What only a view of every rank shows: an outlier rank, model copies that disagree,
CUDA contexts on another rank's GPU, devinspect versions that differ.

Pure functions of the summaries, so recorded summaries can be checked anywhere.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Iterable

from ...model import SKEW_MARGIN, Finding, RankReport, RankSummary, human_bytes, skew

#: Parameters named per desync finding.
EXAMPLES = 5


def cross_rank_findings(summaries: list[RankSummary], margin: float = SKEW_MARGIN) -> tuple[Finding, ...]:
    found = [*_failed(summaries), *_versions(summaries), *_skew(summaries, margin), *_desync(summaries),
             *_foreign_contexts(summaries)]
    return tuple(found)


def _failed(summaries: list[RankSummary]) -> list[Finding]:
    return [Finding("failed rank", "error", message=f"rank {s.rank}: {s.error}", ranks=(s.rank,))
            for s in summaries if s.error]


def _versions(summaries: list[RankSummary]) -> list[Finding]:
    by_version: dict[str, list[int]] = defaultdict(list)
    for s in summaries:
        if s.devinspect_version:
            by_version[s.devinspect_version].append(s.rank)
    if len(by_version) < 2:
        return []
    said = "; ".join(f"{v} on {ranks_text(r)}" for v, r in sorted(by_version.items(), key=lambda kv: kv[1]))
    return [Finding(
        "versions", "warning",
        message=f"ranks run different devinspect versions ({said}): install one version everywhere; "
        "what an older rank does not send is left out", ranks=tuple(sorted(r for rs in by_version.values() for r in rs)))]


def _skew(summaries: list[RankSummary], margin: float) -> list[Finding]:
    figures = skew(summaries)
    if figures is None:
        return []
    median, _, _ = figures
    above = [s for s in summaries if s.held_bytes > median * (1 + margin) and s.held_bytes - median > 0]
    if not above:
        return []
    out = []
    for s in sorted(above, key=lambda s: -s.held_bytes):
        pct = f"+{(s.held_bytes / median - 1) * 100:.0f}%" if median else "median is 0 B"
        largest = f"; its largest: {s.top[0].name} ({human_bytes(s.top[0].storage_bytes)})" if s.top else ""
        out.append(Finding(
            "skew", "warning",
            message=f"rank {s.rank} holds {human_bytes(s.held_bytes)}, the median rank {human_bytes(median)} ({pct}, "
            f"more than {margin:.0%} above){largest}", ranks=(s.rank,)))
    return out


def _desync(summaries: list[RankSummary]) -> list[Finding]:
    """Parameters with one name whose device type, dtype or shape differ between ranks."""
    by_name: dict[str, dict[int, tuple]] = defaultdict(dict)
    for s in summaries:
        for p in s.parameters:
            by_name[p.name][s.rank] = (p.device_type, p.dtype, p.shape)
    reporting = [s.rank for s in summaries if s.parameters]
    if len(reporting) < 2:
        return []
    differing: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for name, per_rank in by_name.items():
        values = set(per_rank.values())
        missing = [r for r in reporting if r not in per_rank]
        if len(values) > 1 or missing:
            differing[_what_differs(per_rank, missing)].append(name)
    out = []
    for what, names in differing.items():
        ranks = _ranks_of(by_name[names[0]], reporting)
        shown = ", ".join(names[:EXAMPLES]) + (f" and {len(names) - EXAMPLES} more" if len(names) > EXAMPLES else "")
        out.append(Finding(
            "desync", "error",
            message=f"{len(names)} parameter{'s differ' if len(names) != 1 else ' differs'} across ranks ({'; '.join(what)}): "
            f"{shown}. DDP needs the same model on every rank: build it the same way on each",
            ranks=ranks))
    return out


def _what_differs(per_rank: dict[int, tuple], missing: list[int]) -> tuple[str, ...]:
    parts = []
    for i, label in ((0, "device"), (1, "dtype"), (2, "shape")):
        values: dict[str, list[int]] = defaultdict(list)
        for rank, value in sorted(per_rank.items()):
            values[_value_text(value[i])].append(rank)
        if len(values) > 1:
            parts.append(f"{label} " + " vs ".join(f"{v} on {ranks_text(r)}" for v, r in values.items()))
    if missing:
        parts.append(f"missing on {ranks_text(missing)}")
    return tuple(parts)


def _ranks_of(per_rank: dict[int, tuple], reporting: list[int]) -> tuple[int, ...]:
    """The ranks in the minority: the ones to look at."""
    counts: dict[tuple, list[int]] = defaultdict(list)
    for rank, value in per_rank.items():
        counts[value].append(rank)
    majority = max(counts.values(), key=len)
    return tuple(sorted(r for r in reporting if r not in majority))


def _value_text(value: object) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(str(v) for v in value) + "]"
    return str(value)


def _foreign_contexts(summaries: list[RankSummary]) -> list[Finding]:
    """A process with a CUDA context on a GPU that is not its own: about 0.5-1 GiB each,
    typically made by ``torch.cuda`` calls before ``set_device`` (everything lands on GPU 0)."""
    out = []
    for s in summaries:
        if s.cuda_contexts is None or s.own_gpu is None:
            continue
        foreign = [g for g in s.cuda_contexts if g != s.own_gpu]
        if foreign:
            out.append(Finding(
                "foreign context", "warning",
                message=f"rank {s.rank} (local rank {s.local_rank}, pid {s.pid}) has a CUDA context on GPU "
                f"{', '.join(foreign)} besides its own GPU {s.own_gpu}: call torch.cuda.set_device(local_rank) "
                "before any other CUDA call", ranks=(s.rank,)))
    return out


def ranks_text(ranks: list[int] | tuple[int, ...]) -> str:
    """``rank 3``, ``ranks 0–2, 5``."""
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs = []
    start = prev = ranks[0]
    for r in ranks[1:]:
        if r != prev + 1:
            runs.append((start, prev))
            start = r
        prev = r
    runs.append((start, prev))
    return "ranks " + ", ".join(f"{a}–{b}" if b - a > 1 else (f"{a}, {b}" if b != a else str(a)) for a, b in runs)


def make_report(summaries: Iterable[RankSummary], *, margin: float = SKEW_MARGIN, sent_bytes: Iterable[int] = (),
                elapsed_s: float = 0.0, focus: str = "devices") -> RankReport:
    ordered = sorted(summaries, key=lambda s: s.rank)
    return RankReport(tuple(ordered), cross_rank_findings(ordered, margin), margin, tuple(sent_bytes), elapsed_s,
                      focus)
