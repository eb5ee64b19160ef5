"""Code observed while it runs: the device check behind ``%%devcheck`` and
:func:`devinspect.check` (copies, host syncs and device mismatches, per line of the
user's code), and tracebacks drawn without devinspect's own frames.

The user's code runs exactly once, as it would without devinspect; what is observed
is kept beside it, never attached to the user's tensors.
"""
