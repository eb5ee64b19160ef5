"""A tensor on the meta device read for its values, explained by the model that made it.

A model built under ``torch.device("meta")`` (or ``init_empty_weights``) whose weights were never
loaded runs on device inputs without an error wherever its ops have meta kernels: the meta
dispatch key outranks the device's, so each op computes shapes only and hands on outputs on meta
(an H200 ran such a GPT-2 on CUDA input ids). The error comes later, where a value is read:
``loss.item()`` ("Tensor.item() cannot be called on meta tensors"), ``.cpu()`` or ``.tolist()``
("Cannot copy out of meta tensor; no data!"). PyTorch says so only in its message, whose stable
part, "meta tensor", is matched; the tensor on the user's line is read from its frame, and the
model from the namespace's scan, whose finding gives the fix ``%devices`` gives (load the
weights with ``assign=True``, or make storage and initialise it).
"""

from __future__ import annotations

import ast
import re
import types
from typing import Any

from ...collect import expression_root, first_line, message, running_expression, value_in_frame
from ...model import DeviceError
from ...runtime import tensor_getters
from .failed_frames import Failed, describe, source_of

#: The stable part of PyTorch's messages for a meta tensor's values read ("Tensor.item() cannot be
#: called on meta tensors", "Cannot copy out of meta tensor; no data!").
_SAYS_META = re.compile(r"\bmeta tensors?\b", re.IGNORECASE)
#: The findings that name a model with parameters on meta.
_META_CODES = ("partly-materialised-module",)


def meta_data(failed: Failed) -> DeviceError | None:
    """The explanation when a tensor on meta on the user's line was read for its values and a model
    in the namespace holds parameters on meta; None otherwise (never a guess from the message)."""
    if not _SAYS_META.search(message(failed.exc)) or failed.inner is None:
        return None
    inner = failed.inner
    node = running_expression(inner)
    if node is None:
        return None
    leaves = _meta_leaves(node, inner.frame)
    from ..findings import scan

    found = [f for f in scan(failed.namespace).findings if f.code in _META_CODES and f.fix is not None]
    called = {expression_root(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    if not leaves:
        # A temporary (table(ids).sum().item()): the line itself calls the model on meta.
        found = [f for f in found if _root_name(f.subject) in called]
    if not found:
        return None
    model = found[0].subject
    operands = tuple(describe(value, ast.unparse(leaf), source_of(inner.frame, failed)) for leaf, value in leaves)
    names = ", ".join(ast.unparse(leaf) for leaf, _ in leaves) or f"what {model} returned"
    what = f"{names} {'is' if len(leaves) <= 1 else 'are'} on meta, with no data to read: {model} made it"
    cause = (f"{model}'s parameters are on the meta device (shapes without data), so its forward pass computed "
             "shapes only and its outputs are on meta too; reading a value (.item(), .cpu(), .tolist(), printing) "
             "fails")
    return DeviceError("meta data", first_line(failed.exc), what, failed.line(failed.cell), failed.deeper_line(),
                       operands, cause, found[0].fix)


def _meta_leaves(node: ast.AST, frame: types.FrameType) -> list[tuple[ast.expr, Any]]:
    """The outermost expressions on the line whose value is a tensor on meta (``out.loss`` in
    ``out.loss.item()``), read as the failing call's operands are read (no code runs)."""
    found: list[tuple[ast.expr, Any]] = []
    inside: set[int] = set()
    for part in ast.walk(node):
        if id(part) in inside or not isinstance(part, (ast.Name, ast.Attribute, ast.Subscript)):
            continue
        value = value_in_frame(part, frame)
        if tensor_getters.is_tensor(value) and tensor_getters.device(value).type == "meta":
            found.append((part, value))
            inside.update(id(n) for n in ast.walk(part))
    return found[:4]


def _root_name(path: str) -> str:
    return re.split(r"[.\[]", path, maxsplit=1)[0]
