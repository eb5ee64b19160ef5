"""What a module's class says about it, read from source text and class dicts only:
where an attribute is assigned, the class default, the ``super().__init__()`` line,
which library a class comes from, which attributes a forward pre-hook recomputes."""

from __future__ import annotations

import ast
import inspect
import linecache
import sys
import textwrap
import types
from typing import Any

import torch

from ..code import locations
from .static_getters import (
    FUNCTION_CODE,
    MODULE_DICT,
    any_items,
    instance_dict,
    mro,
    plain_class_dict,
    type_module,
    type_name,
)

_Module = torch.nn.Module


#: Forward pre-hooks that recompute a plain tensor attribute before each forward
#: (weight_norm, spectral_norm, pruning) keep its name in one of these attributes.
_RECOMPUTED_NAME_ATTRS = ("name", "_tensor_name")


def attribute_assignment(cls: type, attr: str) -> tuple[type, Any] | None:
    """(class, SourceLine) of the line in the user's class that assigns ``self.<attr>``.

    Reads only source text (linecache) and code objects; prefers ``__init__``.
    """
    found = None
    for klass in mro(cls):
        if klass is _Module or klass is object:
            break
        for name, value in dict.items(plain_class_dict(klass)):
            if type(value) is not types.FunctionType:
                continue
            code = FUNCTION_CODE(value)
            if not locations.is_user_code(code):
                continue
            line = _assignment_line(code, attr)
            if line is not None and (found is None or name == "__init__"):
                found = (klass, line)
                if name == "__init__":
                    return found
    return found


def class_source_lines(cls: type, attr: str) -> tuple[Any, Any]:
    """(the class-body line defining ``attr``, the ``super().__init__()`` line of ``__init__``)
    in the user's own source of ``cls``, each a SourceLine or None. Reads source text only."""
    for klass in mro(cls):
        if klass is _Module or klass is object:
            break
        functions = [v for v in dict.values(plain_class_dict(klass)) if type(v) is types.FunctionType]
        codes = [FUNCTION_CODE(f) for f in functions]
        codes = [c for c in codes if locations.is_user_code(c)]
        if not codes:
            continue
        filename = codes[0].co_filename
        lines = linecache.getlines(filename)
        try:
            tree = ast.parse("".join(lines))
        except (SyntaxError, ValueError):
            continue
        first = min(c.co_firstlineno for c in codes if c.co_filename == filename)
        node = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == type_name(klass)
                     and n.lineno <= first <= (n.end_lineno or first)), None)
        if node is None:
            continue
        default = None
        for statement in node.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target] if isinstance(
                statement, ast.AnnAssign) and statement.value is not None else []
            if any(isinstance(t, ast.Name) and t.id == attr for t in targets) and statement.lineno == statement.end_lineno:
                default = locations.source_line(filename, statement.lineno, type_name(klass))
        init = None
        init_def = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        for statement in init_def.body if init_def is not None else ():
            call = statement.value if isinstance(statement, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "__init__"
                    and statement.lineno == statement.end_lineno):
                init = locations.source_line(filename, statement.lineno, "__init__")
                break
        return default, init
    return None, None


def assigned_while_running(cls: type, attr: str) -> bool:
    """Whether a method of ``cls`` other than ``__init__`` assigns ``self.<attr>``: state the
    module's own code makes as it runs (a mask or a recurrent state its forward pass fills in),
    on the device of what it is given. Reads only source text and code objects."""
    for klass in mro(cls):
        if klass is _Module or klass is object:
            break
        for name, value in dict.items(plain_class_dict(klass)):
            if name != "__init__" and type(value) is types.FunctionType and \
                    _assignment_line(FUNCTION_CODE(value), attr) is not None:
                return True
    return False


def moved_as_used(cls: type, attr: str) -> bool:
    """Whether the methods of ``cls`` read ``self.<attr>`` and move what they make to a device they
    are given (``.to(device)``): host copies kept on purpose (torchvision's ``DefaultBoxGenerator``
    makes its boxes from them on the host and moves the result to its inputs' device)."""
    reads = moves = False
    for klass in mro(cls):
        if klass is _Module or klass is object:
            break
        for value in dict.values(plain_class_dict(klass)):
            tree = _method_tree(FUNCTION_CODE(value)) if type(value) is types.FunctionType else None
            for node in ast.walk(tree) if tree is not None else ():
                reads = reads or (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.ctx, ast.Load)
                                  and isinstance(node.value, ast.Name) and node.value.id == "self")
                moves = moves or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                                  and node.func.attr == "to" and any("device" in ast.unparse(a).lower() for a in
                                                                    [*node.args, *(k.value for k in node.keywords)]))
    return reads and moves


#: Methods that give their receiver on another tensor's device: ``t.type_as(x)``, ``t.to(x)``.
_FOLLOWING = frozenset({"type_as", "to"})


def moved_where_read(cls: type, attr: str) -> bool:
    """Whether every read of ``self.<attr>`` in the methods of ``cls`` (``__init__`` aside) moves it
    to a device first: ``self.pos.to(x.device, dtype=x.dtype)``, ``self.pos.to(x)``,
    ``self.pos.type_as(x)``. A host copy its own forward moves on every pass is never met on the
    host by an op: that it stays behind on ``.to()`` is by design, not an error."""
    reads, moved = _moved_reads(cls, attr)
    return reads > 0 and moved == reads


def moves_itself(cls: type, attr: str) -> bool:
    """Whether a method of ``cls`` (``__init__`` aside) moves ``self.<attr>`` itself to a device."""
    return _moved_reads(cls, attr)[1] > 0


def _moved_reads(cls: type, attr: str) -> tuple[int, int]:
    """(reads of ``self.<attr>`` in the methods of ``cls`` but ``__init__``, those that move it to a device)."""
    reads = moved = 0
    for klass in mro(cls):
        if klass is _Module or klass is object:
            break
        for name, value in dict.items(plain_class_dict(klass)):
            if name == "__init__" or type(value) is not types.FunctionType:
                continue
            tree = _method_tree(FUNCTION_CODE(value))
            for node in ast.walk(tree) if tree is not None else ():
                if (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.ctx, ast.Load)
                        and isinstance(node.value, ast.Name) and node.value.id == "self"):
                    reads += 1
                elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                      and node.func.attr in _FOLLOWING and _is_self_attribute(node.func.value, attr)
                      and _gives_a_device(node)):
                    moved += 1
    return reads, moved


def _is_self_attribute(node: ast.AST, attr: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)
            and node.value.id == "self")


def _gives_a_device(call: ast.Call) -> bool:
    """Whether a ``.to()``/``.type_as()`` call is handed a device or a tensor (not a dtype alone)."""
    if call.func.attr == "type_as":
        return bool(call.args)
    if any(k.arg == "device" for k in call.keywords):
        return True
    first = call.args[0] if call.args else None
    # .to(torch.float16) converts the dtype only; .to(x.device), .to(device), .to(x) move it
    return first is not None and not (isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name)
                                      and first.value.id == "torch") and not isinstance(first, ast.Constant)


def made_with_device(cls: type, attr: str) -> tuple[Any, str] | None:
    """(the line of the user's class that makes ``self.<attr>``, that line with ``.to(<device>)``
    added) where the same method gives other tensors a device (``betas.to(device)``,
    ``device=device``) and this line gives none: the edit that makes it where its siblings are.
    None when the line is not a one-line assignment or the method names no device. Source only."""
    found = attribute_assignment(cls, attr)
    if found is None:
        return None
    klass, line = found
    for value in dict.values(plain_class_dict(klass)):
        if type(value) is not types.FunctionType:
            continue
        code = FUNCTION_CODE(value)
        tree = _method_tree(code)
        if tree is None or code.co_filename != line.file:
            continue
        start = code.co_firstlineno - 1
        assignment = next((n for n in ast.walk(tree) if isinstance(n, ast.Assign) and start + n.lineno == line.line
                           and n.lineno == n.end_lineno and len(n.targets) == 1
                           and _is_self_attribute(n.targets[0], attr)), None)
        if assignment is None:
            continue
        device = next((d for n in ast.walk(tree) if isinstance(n, ast.Call) and (d := _device_given(n)) is not None), None)
        text = line.text.strip()
        old_value = ast.unparse(assignment.value)
        if device is None or _device_given_anywhere(assignment.value) or not text.endswith(old_value):
            return None
        plain = isinstance(assignment.value, (ast.Call, ast.Name, ast.Attribute, ast.Subscript))
        moved = f"{old_value}.to({device})" if plain else f"({old_value}).to({device})"
        return line, text[: len(text) - len(old_value)] + moved
    return None


def _device_given(call: ast.Call) -> str | None:
    """The device expression a call hands over (``.to(device)``, ``device=self.device``), as written."""
    given = next((k.value for k in call.keywords if k.arg == "device"), None)
    if given is None and isinstance(call.func, ast.Attribute) and call.func.attr == "to" and call.args:
        given = call.args[0]
    if given is None or isinstance(given, ast.Constant):
        return None
    text = ast.unparse(given)
    return text if "device" in text.lower() else None


def _device_given_anywhere(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Call) and _device_given(n) is not None for n in ast.walk(node))


def _method_tree(code: types.CodeType) -> ast.Module | None:
    """The source of the function of ``code``, parsed on its own (None when not at hand)."""
    lines = linecache.getlines(code.co_filename)
    if not lines:
        return None
    start = code.co_firstlineno - 1
    try:
        return ast.parse(textwrap.dedent("".join(inspect.getblock(lines[start:]))))
    except (SyntaxError, ValueError, IndentationError):
        return None


def _assignment_line(code: types.CodeType, attr: str) -> Any:
    tree = _method_tree(code)
    if tree is None:
        return None
    start = code.co_firstlineno - 1
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if (isinstance(target, ast.Attribute) and target.attr == attr and isinstance(target.value, ast.Name)
                    and target.value.id == "self"):
                return locations.source_line(code.co_filename, start + node.lineno, code.co_name)
    return None


def library_of(cls: type) -> str:
    """The top-level package of a class that comes from a library, or ``""`` for user code."""
    module = type_module(cls)
    top = module.split(".", 1)[0]
    if not top or top == "__main__":
        return ""
    imported = sys.modules.get(top)
    if not issubclass(type(imported), types.ModuleType):
        return ""
    # The module's own dict, read through ModuleType's descriptor (a lazy module's __getattr__ is not asked).
    path = MODULE_DICT(imported).get("__file__")
    return top if type(path) is str and locations.is_library_file(path) else ""


def recomputed_attributes(d: dict[str, Any]) -> dict[str, str]:
    """Tensor attributes a forward pre-hook recomputes (weight_norm, spectral_norm, pruning):
    ``{attribute: what recomputes it}``. They are not unregistered buffers."""
    out: dict[str, str] = {}
    for _hid, hook in any_items(d.get("_forward_pre_hooks")):
        hook_dict = instance_dict(hook)
        for key in _RECOMPUTED_NAME_ATTRS:
            attr = hook_dict.get(key)
            if type(attr) is str:
                out[attr] = type_name(type(hook))
    return out


def user_class_attributes(cls: type) -> list[tuple[str, Any]]:
    """``(name, value)`` of the class attributes of a class the user wrote (``Cfg.table = t``),
    dunders left out; none for a library's class. Read from the class's own mapping, never
    through its metaclass."""
    mapping = type.__dict__["__dict__"].__get__(cls)
    module = mapping.get("__module__")
    if type(module) is not str or not _is_users_module(module):
        return []
    return [(key, value) for key, value in list(mapping.items())
            if type(key) is str and not (key.startswith("__") and key.endswith("__"))]


def _is_users_module(name: str) -> bool:
    if name == "__main__":
        return True
    module = sys.modules.get(name)
    filename = module.__dict__.get("__file__") if type(module) is types.ModuleType else None
    return type(filename) is str and not locations.is_library_file(filename)
