"""The rules that say why one operand of a failed call is off the target device, one module
each, named after the shape it recognises. Each is ``cause(context) -> Cause | None``; their
order is :data:`~devinspect.diagnose.causes.cause_rules.OPERAND_RULES`."""
