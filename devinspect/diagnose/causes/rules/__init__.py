"""The rules that say why one operand of a failed call is off the target device, one module
each, named after the shape it recognises. Each is ``cause(context) -> Cause | None``; their
order is :data:`~devinspect.diagnose.causes.cause_rules.OPERAND_RULES`."""

from ....lazy_exports import lazy_surface

_SURFACE = {
    "model_parts": "model_parameter",
    "named_record": "namespace_variable",
    "of_record": "namespace_variable",
    "variable_fix": "meta_device",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
