"""The findings of the device check behind ``%%devcheck``, with their fixes: a loop that makes
the host wait for the device, a host tensor copied to the device on every pass, data that
leaves the device and comes back, a non-blocking copy from pageable memory.

A wait in a loop gets its fix written from the loop's own line. ``total += loss.item()`` makes
the host wait for the device each time round. The fix keeps the sum on the device and reads it
once: ``total += loss.detach()`` in the loop, then ``total.item()`` after it;
``losses.append(loss.item())`` keeps ``loss.detach()`` and reads ``torch.stack(losses).tolist()``
after the loop. The names come from the user's line (``acc += v.item()`` gives
``acc += v.detach()``), never from a template, so the printed fix is the user's own code.
"""

from __future__ import annotations

import ast

from ..collect import user_code
from ..model import Finding, Fix, LineStats, SourceLine, human_bytes

#: Calls that copy one device value to the host: ``x.item()``, ``float(x)``, ``int(x)``.
_READS = ("item",)
_CONVERSIONS = ("float", "int")


def accumulation_fix(code: str) -> str | None:
    """What to do about ``code`` (a line that syncs in a loop), in the line's own names; None where
    the line shows no running value (``total += v.item()``, ``values.append(v.item())``)."""
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:  # a line that is part of a longer statement
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
            read = _device_value_read(node.value)
            if read is not None:
                total = node.target.id
                return (f"accumulate on the device ({total} += {read}.detach()) and read it once after the loop "
                        f"({total} = {total}.item())")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append" \
                and len(node.args) == 1 and isinstance(node.func.value, ast.Name):
            read = _device_value_read(node.args[0])
            if read is not None:
                values = node.func.value.id
                return (f"keep the values on the device ({values}.append({read}.detach())) and read them once after "
                        f"the loop ({values} = torch.stack({values}).tolist())")
    return None


def _device_value_read(node: ast.AST) -> str | None:
    """``x`` when ``node`` reads ``x`` to the host (``x.item()``, ``float(x)``), as written."""
    if isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute) \
            and node.func.attr in _READS:
        return ast.unparse(node.func.value)
    if isinstance(node, ast.Call) and len(node.args) == 1 and isinstance(node.func, ast.Name) \
            and node.func.id in _CONVERSIONS:
        return ast.unparse(node.args[0])
    return None


def in_a_loop(where: SourceLine) -> bool | None:
    """Whether the line ``where`` of the user's code is inside a ``for``, a ``while`` or a
    comprehension of its own function (or cell); None when its source cannot be read."""
    tree = user_code.parse(where.file)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)) \
                and node.lineno <= where.line <= (node.end_lineno or node.lineno):
            return True
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While)) and node.body \
                and node.body[0].lineno <= where.line <= (node.end_lineno or node.lineno):
            # the loop encloses the line; a function defined inside the loop does not count
            inner = [f for f in ast.walk(node) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                     and f.lineno <= where.line <= (f.end_lineno or f.lineno)]
            if not inner:
                return True
    return False


def element_read_fix(where: SourceLine) -> str | None:
    """For ``allowed.remove(y_samp.item())`` in ``for idx, y_samp in enumerate(y):`` (a loop over a
    device tensor reading each element): read the tensor once, before the loop, in the loop's own
    names; None for any other line."""
    tree = user_code.parse(where.file)
    if tree is None:
        return None
    for loop in ast.walk(tree):
        if not (isinstance(loop, ast.For) and loop.body and loop.body[0].lineno <= where.line <= (loop.end_lineno or 0)):
            continue
        iterable = loop.iter
        inner = iterable.args[0] if isinstance(iterable, ast.Call) and ast.unparse(iterable.func) == "enumerate" \
            and len(iterable.args) == 1 else iterable
        element = loop.target.elts[-1] if isinstance(loop.target, ast.Tuple) and inner is not iterable else loop.target
        if not (isinstance(inner, ast.Name) and isinstance(element, ast.Name)):
            continue
        read = f"{element.id}.item()"
        if read in where.text:
            source = ast.unparse(iterable).replace(inner.id, f"{inner.id}.tolist()", 1)
            target = ", ".join(map(ast.unparse, loop.target.elts)) if isinstance(loop.target, ast.Tuple) \
                else ast.unparse(loop.target)
            return (f"read {inner.id} to the host once, before the loop (for {target} in {source}), "
                    f"and use {element.id} in place of {read}")
    return None


def sync_in_loop(s: LineStats) -> Finding:
    """The finding for a line that made the host wait for the device many times. Waits that all
    happen inside a library, called from a line no loop of the user's runs again (one ``generate``
    call, which reads a stop condition per token), are the library's own loop: a hint."""
    kinds = ", ".join(f"{k} ×{n}" for k, n in s.syncs)
    inside = f" (inside {', '.join(s.inside)}, called from this line)" if s.inside else ""
    library_loop = bool(s.inside) and in_a_loop(s.where) is False
    if s.inside:
        fix = (f"the waits happen inside {', '.join(s.inside)}: call it less often, or with fewer steps, "
               "if the loop allows")
    elif any(kind in (".item()", "float()", "int()", "print", ".tolist()") for kind, _ in s.syncs):
        fix = (accumulation_fix(s.where.text) or element_read_fix(s.where)
               or "keep the running value on the device and read it once after the loop")
    elif any(kind == ".cpu()" for kind, _ in s.syncs):
        fix = "keep the tensor on the device; copy to the host once, after the loop"
    else:
        fix = "avoid data-dependent shapes and Python control flow on device values inside the loop"
    return Finding(
        code="sync-in-loop", severity="hint" if library_loop else "warning", subject=s.where.label,
        message=f"{s.where.label}: the host waits for the device {s.sync_count} times ({kinds}){inside}",
        fix=Fix(summary=fix),
    )


def repeated_transfer(where: SourceLine, nbytes: int) -> Finding:
    """The same host tensor copied to the device a second time (a loop that could move it once)."""
    return Finding(code="repeated-transfer", severity="warning", subject=where.label,
                   message=f"{where.label}: the same host tensor ({human_bytes(nbytes)}) is copied to the device "
                           "again on every pass",
                   fix=Fix(summary="move it to the device once, before the loop"))


def unpinned_non_blocking(where: SourceLine) -> Finding:
    """``non_blocking=True`` from pageable memory: the copy is synchronous all the same."""
    return Finding(code="non-blocking-unpinned", severity="hint", subject=where.label,
                   message=f"{where.label}: non_blocking=True from pageable (unpinned) memory copies synchronously",
                   fix=Fix(summary="pin the source: DataLoader(..., pin_memory=True) or tensor.pin_memory()"))


def round_trip(where: SourceLine, origin: str) -> Finding:
    """Data copied off the device at ``origin`` and back onto it at ``where``."""
    return Finding(code="round-trip", severity="warning", subject=where.label,
                   message=f"{where.label}: data that left the device at {origin} comes back to it here",
                   fix=Fix(summary="keep the computation on the device between these lines "
                                   "(avoid .cpu()/.item()/.tolist()/.numpy() there)"))
