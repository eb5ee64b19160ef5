"""A model split between the host and an accelerator fails at its next part whatever moves now:
its parts off the target move too (a split across accelerators may be deliberate)."""

from __future__ import annotations

from typing import Any

from ....model import Cause, device_is_accelerator
from ..context import CauseContext, FailedCall
from ..fix_writing import model_of
from ..rules import model_parts


def cause(context: CauseContext) -> Cause | None:
    call, covered = context.call, context.covered
    whole_moves, found = set(covered.whole_moves), []
    for n in call.operands:
        model = model_of(call, n)
        if model is None or model.name in whole_moves or model.deliberate_split:
            continue
        if not off_target_tensors(call, model, covered.replaced):
            continue
        real = [d for d in model.devices if d != "meta"]
        if len(real) > 1 and any(not device_is_accelerator(d) for d in real):
            moved = model_parts(call, n)
            if moved is not None:
                whole_moves.update(moved.whole_moves)
                found.extend(moved.fixes)
    if not found and whole_moves == set(covered.whole_moves):
        return None
    return Cause(fix=found[0] if found else None, more=tuple(found[1:]), leading=True,
                 whole_moves=tuple(sorted(whole_moves - covered.whole_moves)))


def off_target_tensors(call: FailedCall, model: Any, replaced: frozenset[str]) -> list[str]:
    """The parameters and buffers of ``model`` off the target, less those a method replaces."""
    prefixes = (model.name + ".", model.name + "[")
    return [r.name for r in call.index.result_under(model.name).records
            if r.kind in ("parameter", "buffer") and r.name.startswith(prefixes)
            and r.device not in (call.target, "meta") and r.name not in replaced]
