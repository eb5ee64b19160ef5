"""Deciding what is wrong and how to fix it, from what the collectors read; the one place
that turns a problem into a typed :class:`~devinspect.model.fixes.Fix` (:mod:`.fix_builders`).

- :mod:`.findings`, :mod:`.overlaps`: rules over a whole scan, before anything fails;
- :mod:`.transfer_findings`: what the device check saw (waits in loops, copies every pass);
- :mod:`.errors`: an error explained after the fact (a device mismatch and its operands,
  other device errors, a DataLoader over device tensors, out of memory);
- :mod:`.causes`: where the user's code gives a tensor its device, and the edit of that line;
- :mod:`.ranks`: one rank's summary and what only the view of every rank shows;
- :mod:`.memory_profile_builder`: ``%%gpumem``'s profile from a recording.
"""

from ..lazy_exports import lazy_surface

_SURFACE = {
    "Failure": "errors.mismatch",
    "TOP": "ranks.rank_summary",
    "build_profile": "memory_profile_builder",
    "chained_errors": "errors.explainer",
    "diagnose": "errors.mismatch",
    "edits_by_hand": "edit_checks",
    "explain_device_error": "errors.device_errors",
    "explain_mismatch": "errors.explainer",
    "explanation_of": "errors.explainer",
    "make_report": "ranks.cross_rank",
    "repeated_transfer": "transfer_findings",
    "round_trip": "transfer_findings",
    "scan": "findings",
    "summary": "ranks.rank_summary",
    "sync_in_loop": "transfer_findings",
    "unpinned_non_blocking": "transfer_findings",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
