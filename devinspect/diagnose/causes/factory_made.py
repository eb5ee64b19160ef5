"""How a tensor on the wrong device was made, when that is all there is to say: the factory and
line the check saw make it, or the factory call without ``device=`` in library code that made it
(read from the library's source, which is never edited)."""

from __future__ import annotations

import ast
import types
from typing import Any, Iterable

from ...collect import locations, user_code
from ...model import Cause
from .creation_sites import factory_calls


def creation_detail(created: Cause | None) -> str:
    """How a tensor was made (a factory :class:`Cause`): the line is the user's that called into
    the package, or the package's own."""
    if created is None or created.where is None:
        return ""
    where, inside = created.where, created.package
    made = f"torch.{created.factory}" + ("" if created.device_given else " without device=")
    if inside:
        return f"created by {made} inside {inside}, " + (
            f"at {where.label}" if locations.is_library_file(where.file) else f"called from {where.label}")
    return f"created at {where.label} by {made}"


def library_factory(frames: Iterable[types.FrameType], value: Any) -> Cause | None:
    """How ``value`` was made (its line, factory and package) when ``value`` is a local of library code (the first of
    ``frames`` that holds it) whose assignment there is ``torch.<factory>(…)`` without
    ``device=`` (a method that keeps the device may follow): read from the library's source,
    which is never edited."""
    for frame in frames:
        code = frame.f_code
        if locations.is_user_code(code) or locations.is_own_file(code.co_filename):
            continue
        local_vars = locations.frame_locals(frame)
        if local_vars is frame.f_globals:
            continue
        name = next((k for k, v in dict.items(local_vars) if v is value and type(k) is str and k != "self"), None)
        if name is None:
            continue
        node = user_code.function_node(code)
        statement = (user_code.last_assignment(name, code.co_filename, node.body, frame.f_lineno + 1, None)
                     if node is not None else None)
        value_node = getattr(statement.node, "value", None) if statement is not None else None
        calls = factory_calls(value_node) if value_node is not None else []
        if not calls or not ast.unparse(value_node).startswith(ast.unparse(calls[0])):
            return None
        where = locations.source_line(code.co_filename, statement.line, code.co_name)
        return Cause(where, "factory", factory=calls[0].func.attr, package=locations.package_of(code.co_filename))
    return None
