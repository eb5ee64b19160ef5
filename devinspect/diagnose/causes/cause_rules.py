"""The causes of a failed call on mixed devices, as a table of rules with one interface.

A rule is a function ``cause(context) -> Cause | None``, one module each, named after the shape it
recognises: None when the shape is not its own, else the :class:`~devinspect.model.fixes.Cause`
(with its fix, or without one where the cause is known but no fix can be written). For each
operand off the target, :data:`OPERAND_RULES` are asked in order and the first that recognises it
answers; then :data:`CALL_RULES` are each asked once about the whole call, given what the causes
found so far cover (each may add fixes); :data:`WHEN_NO_FIX` answers when none found a fix. A new shape is one module and one line here, with a test
on a context built by hand.
"""

from __future__ import annotations

from typing import Protocol

from ...model import Cause, Fix
from .call_rules import (
    library_default_device,
    passed_alongside,
    passed_into_library,
    passed_to_moved_models,
    split_model,
)
from .context import CauseContext, Covered, FailedCall
from .rules import (
    buffer_replaced_in_method,
    comprehension_item,
    dropped_move,
    local_of_user_function,
    made_by_factory,
    meta_device,
    model_parameter,
    namespace_variable,
    optimizer_state,
    traced_local,
    unregistered_attribute,
)


class CauseRule(Protocol):
    def __call__(self, context: CauseContext) -> Cause | None: ...


#: Why one operand is off the target: the first rule that recognises it answers.
OPERAND_RULES: tuple[CauseRule, ...] = (
    dropped_move.cause,
    meta_device.cause,
    buffer_replaced_in_method.cause,
    model_parameter.cause,
    unregistered_attribute.cause,
    optimizer_state.cause,
    namespace_variable.cause,
    local_of_user_function.cause,
    traced_local.cause,
    made_by_factory.cause,
    comprehension_item.cause,
)

#: What the whole call needs beyond its operands' causes: each is asked once, in order.
CALL_RULES: tuple[CauseRule, ...] = (
    split_model.cause,
    passed_alongside.cause,
    passed_into_library.cause,
    passed_to_moved_models.cause,
)

#: Asked only when no rule above found a fix: the cause is in library code the user's line called.
WHEN_NO_FIX: CauseRule = library_default_device.cause


def first_cause(context: CauseContext, rules: tuple[CauseRule, ...] = OPERAND_RULES) -> Cause | None:
    """The answer of the first of ``rules`` that recognises ``context.operand``."""
    for rule in rules:
        found = rule(context)
        if found is not None:
            return found
    return None


def causes(call: FailedCall) -> list[Fix]:
    """The fixes of the causes of ``call``, each once, in the order they are applied."""
    covered = Covered(names=frozenset(n.operand.name for n in call.misplaced if n.operand.name))
    parts: list[Fix] = []
    asked = [(first_cause, n) for n in call.misplaced] + [(rule, None) for rule in CALL_RULES]
    for ask, operand in asked:
        cause = ask(CauseContext(call, operand, covered))
        if cause is None:
            continue
        for fix in cause.fixes:
            if fix.summary in covered.summaries or any(fix.summary == p.summary for p in parts):
                continue
            if cause.leading:
                parts.insert(0, fix)  # the model first: the larger change
            else:
                parts.append(fix)
        covered = covered.adding(cause)
    return parts
