"""A generator of the device, given where the user's code gives a random op its generator.

Under ``torch.set_default_device(dev)`` a library call that draws with a generator (a shuffling
DataLoader's sampler, ``random_split``, ``RandomSampler``) makes its tensor on the device, so a
host generator is refused there. The fix keeps what the user wrote and makes their generator on
the device: ``torch.Generator().manual_seed(3)`` given on the line gets ``device=dev`` (its seed
kept), a generator passed by name gets it where that name was made, and a call given none gets
``generator=torch.Generator(device=dev)``. Nothing is run: names are read statically.
"""

from __future__ import annotations

import ast
import types
from typing import Any, Iterator

import torch

from ...collect import MISSING, object_at, user_code, value_in_frame
from ...model import SourceEdit
from . import line_edits


def given_generator(call: ast.Call) -> ast.expr | None:
    """The expression a call passes as its ``generator=``."""
    return next((k.value for k in call.keywords if k.arg == "generator"), None)


def _generator_calls(node: ast.AST, read: Any) -> Iterator[ast.Call]:
    """The ``torch.Generator(…)`` calls in ``node`` (the called name read by ``read``)."""
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        if isinstance(call.func, (ast.Name, ast.Attribute)) and read(call.func) is torch.Generator:
            yield call


def makes_generator(node: ast.AST, frame: types.FrameType) -> bool:
    """Whether ``node``, as written in ``frame``, makes a ``torch.Generator`` right there."""
    return next(_generator_calls(node, lambda n: value_in_frame(n, frame)), None) is not None


def on_device(statement: line_edits.Statement, call: ast.Call, frame: types.FrameType | None,
              namespace: Any, device_expr: str) -> tuple[SourceEdit, ...] | None:
    """The edits that give ``call`` (in ``statement``, run in ``frame``) a generator of the device:
    on its line, or where the generator it is given by name was made; None when that cannot be read."""
    value = f"torch.Generator(device={device_expr})"
    given = given_generator(call)
    if given is None:
        return line_edits.Changes(statement).keyword(call, "generator", value).edits()
    read = (lambda n: value_in_frame(n, frame)) if frame is not None else \
        (lambda n: _or_none(object_at(namespace, ast.unparse(n))))
    made = next(_generator_calls(given, read), None)
    if made is not None:  # torch.Generator().manual_seed(3) on the line: the same, on the device
        return line_edits.Changes(statement).keyword(made, "device", device_expr).edits()
    if isinstance(given, ast.Name) and type(read(given)) is torch.Generator:
        return _where_made(given.id, namespace, statement, device_expr)
    return None


def _or_none(value: Any) -> Any:
    return None if value is MISSING else value


def _where_made(name: str, namespace: Any, used: line_edits.Statement, device_expr: str) -> tuple[SourceEdit, ...] | None:
    """``name = torch.Generator().manual_seed(…)`` in the session's cells, made on the device."""
    current = user_code.current_cell(used.filename)
    made = user_code.assignment_in_session(name, current, used.first if current is not None else 1 << 30)
    if made is None:
        return None
    statement = line_edits.statement_at(made.filename, made.line, made.function, made.node.end_lineno)
    if statement is None:
        return None
    call = next(_generator_calls(statement.node, lambda n: _or_none(object_at(namespace, ast.unparse(n)))), None)
    return line_edits.Changes(statement).keyword(call, "device", device_expr).edits() if call is not None else None
