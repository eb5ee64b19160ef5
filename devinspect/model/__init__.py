"""Plain data: what every stage of devinspect produces and the next one reads.

Frozen dataclasses of primitives (records, findings, fixes, check reports,
explanations, memory snapshots, rank reports). Nothing here holds a user object or
imports another part of devinspect: results can sit in IPython's ``Out`` without
keeping a tensor alive, and every stage above can be tested from hand-made data.
"""
