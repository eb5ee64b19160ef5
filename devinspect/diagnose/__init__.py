"""Deciding what is wrong and how to fix it, from what the collectors read; the one place
that turns a problem into a typed :class:`~devinspect.model.fixes.Fix` (:mod:`.fixes`).

- :mod:`.findings`, :mod:`.overlaps`: rules over a whole scan, before anything fails;
- :mod:`.transfer_findings`: what the device check saw (waits in loops, copies every pass);
- :mod:`.errors`: an error explained after the fact (a device mismatch and its operands,
  other device errors, a DataLoader over device tensors, out of memory);
- :mod:`.causes`: where the user's code gives a tensor its device, and the edit of that line;
- :mod:`.ranks`: one rank's summary and what only the view of every rank shows;
- :mod:`.memory_profile_builder`: ``%%gpumem``'s profile from a recording.
"""
