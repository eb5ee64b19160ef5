"""The rules over a whole failed call, after each operand has its cause: what the fixes found
so far leave failing next (the rest of a model split over the host, the other inputs of a call
that passed a moved tensor), and the cause when no operand has one. One module each; their order
is :data:`~devinspect.diagnose.causes.cause_rules.CALL_RULES`."""
