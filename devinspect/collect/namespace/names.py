"""Names as the user types them: namespace roots, attribute and item paths, literals.

Every name devinspect prints can be typed back: ``model.layers[0]``,
``batch["input_ids"]``, ``getattr(m, "odd name")``. IPython's own names (history,
plumbing) are told apart here too.
"""

from __future__ import annotations

import ast
import json
import keyword
import re
import sys
from typing import Any, Iterator, Mapping

import torch

from ..objects import dict_items, instance_dict, mapping_items, plain_str, str_items, type_name

#: IPython's output-history names: ``_``, ``__``, ``___``, ``_12``, ``Out``, ``_oh``.
HISTORY_RE = re.compile(r"^(_{1,3}|_\d+|Out|_oh)$")


#: Names IPython puts in every namespace that never hold user tensors.
PLUMBING = frozenset({"In", "_ih", "_dh", "exit", "quit", "get_ipython", "__builtins__", "__builtin__"})


def namespace_items(namespace: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(name, value)`` pairs of a namespace, names as exact ``str``.

    A dict (or dict subclass, IPython's namespace) is read with the C-level
    ``dict.items``; any other Mapping (MappingProxyType, ChainMap, UserDict) through
    its own ``items()``, since the caller handed it over as the namespace. Keys that
    are not strings are left out: no variable can be typed by them.
    """
    pairs = dict_items(namespace) if issubclass(type(namespace), dict) else mapping_items(namespace)
    out = []
    for key, value in pairs:
        name = plain_str(key)
        if name is not None:
            out.append((name, value))
    return out


def binds_module(namespace: Mapping[str, Any], module: str) -> bool:
    """Whether the name ``module`` in the namespace is that imported module itself (code printed
    for the user may then use the name; after ``import torch as th`` it has to import it)."""
    imported = sys.modules.get(module)
    if issubclass(type(namespace), dict):
        return imported is not None and dict.get(namespace, module) is imported
    return imported is not None and any(name == module and value is imported
                                        for name, value in namespace_items(namespace))


def root_items(items: list[tuple[str, Any]], excluded: set[str] | frozenset[str],
                include_hidden: bool) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(user names, IPython history names) of a namespace, without the excluded ones."""
    user, history = [], []
    for name, value in items:
        if name in excluded:
            continue
        if HISTORY_RE.match(name):
            history.append((name, value))
        elif not name.startswith("_") or include_hidden:
            user.append((name, value))
    return user, history


def is_history_name(name: str) -> bool:
    """Whether ``name`` is one of IPython's output-history names (``_``, ``_12``, ``Out``)."""
    return bool(HISTORY_RE.match(name))


#: Short ``str`` keys -> their literal, kept as they are first typed (bounded).
_KEY_TEXTS: dict[str, str] = {}


def key_text(key: Any) -> str | None:
    """How a dict key is typed in Python, for keys of exact built-in types with a literal form."""

    kt = type(key)
    if kt is str:
        # The same few keys come back again and again (an optimizer's "exp_avg" for each parameter).
        text = _KEY_TEXTS.get(key)
        if text is None:
            text = literal(key)
            if len(key) <= 64 and len(_KEY_TEXTS) < 10_000:
                _KEY_TEXTS[key] = text
        return text
    if kt is int or kt is bool or key is None:
        return int.__repr__(key) if kt is int else repr(key)
    if kt is float:
        text = float.__repr__(key)
        return text if text not in ("nan", "inf", "-inf") else None
    if kt is tuple and len(key) < 6:
        inner = [key_text(k) for k in tuple.__iter__(key)]
        if None not in inner:
            return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"  # type: ignore[arg-type]
    return None


def root_of(name: str) -> str:
    """The namespace variable a name starts from (``model`` for ``model.fc[0].weight``)."""
    return re.split(r"[.\[(]", name, maxsplit=1)[0] if not name.startswith("getattr(") else root_of(name[8:])


def container_of(name: str) -> str | None:
    """``batch`` for ``batch["ids"]``, ``shards`` for ``shards[0]``; None for a plain name or attribute."""
    try:
        node = ast.parse(name, mode="eval").body
    except SyntaxError:
        return None
    return ast.unparse(node.value) if isinstance(node, ast.Subscript) else None


def attr_name(parent: str, attr: str) -> str:

    if attr.isidentifier() and not keyword.iskeyword(attr):
        return f"{parent}.{attr}"
    return f"getattr({parent}, {literal(attr)})"


def dict_item_name(name: str, index: int, key: Any) -> str:
    """How item ``index`` of dict ``name`` is typed (``d["a"]``; ``list(d.values())[3]`` for a
    key with no literal form)."""
    typed_key = key_text(key)
    return f"{name}[{typed_key}]" if typed_key is not None else f"list({name}.values())[{index}]"


def child_name(parent: str, child: str, parent_type: type) -> str:
    """``model.layers[0]``, ``model.blocks["a-b"]``, ``model.fc`` for a module child."""

    if child.isdigit() and (issubclass(parent_type, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ParameterList))):
        return f"{parent}[{child}]"
    if issubclass(parent_type, (torch.nn.ModuleDict, torch.nn.ParameterDict)) and not (
            child.isidentifier() and not keyword.iskeyword(child)):
        return f"{parent}[{literal(child)}]"
    if child.isdigit():
        return f"{parent}[{child}]" if issubclass(parent_type, torch.nn.Sequential) else f"getattr({parent}, {literal(child)})"
    return attr_name(parent, child)


def module_tree_paths(root: Any, path: str, seen: set[int]) -> Iterator[tuple[Any, str]]:
    """``(module, path)`` for ``root`` and every module below it, read through the ``_modules``
    dicts (nothing of theirs is run), depth first in the order the children were added, as
    the user types each path (``model.layers[0].attn``). A module met before, here or in an
    earlier call with the same ``seen``, is passed over with what lies below it: a shared
    module keeps its first path."""
    stack = [(root, path)]
    while stack:
        module, at = stack.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        yield module, at
        children = [(child, child_name(at, name, type(module)))
                    for name, child in str_items(instance_dict(module).get("_modules"))
                    if issubclass(type(child), torch.nn.Module)]
        stack.extend(reversed(children))


def describe_error(exc: BaseException) -> str:
    try:
        text = BaseException.__str__(exc)  # never a user exception class's own __str__
    except Exception:
        text = ""
    text = text.strip().splitlines()[0] if text.strip() else ""
    return f"{type_name(type(exc))}: {text}"[:200] if text else type_name(type(exc))


def literal_value(value: Any) -> str | None:
    vt = type(value)
    if value is None or vt is bool:
        return repr(value)
    if vt is int:
        return int.__repr__(value)
    if vt is float:
        text = float.__repr__(value)
        return text if text not in ("nan", "inf", "-inf") else None
    if vt is str:

        return literal(value)
    if vt is tuple:
        inner = [literal_value(v) for v in tuple.__iter__(value)]
        if None in inner:
            return None
        return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"  # type: ignore[arg-type]
    return None


def literal(text: str) -> str:
    """A Python string literal for ``text`` (double-quoted), valid for any string."""
    try:
        out = json.dumps(text, ensure_ascii=False)
        out.encode("utf-8")  # lone surrogates cannot be printed: escape them instead
    except UnicodeEncodeError:
        out = json.dumps(text, ensure_ascii=True)
    return out


def is_identifier(name: str) -> bool:
    return name.isidentifier() and not keyword.iskeyword(name)


def shell_names(shell: Any) -> list[str]:
    """IPython's own variables, unless the user rebound them. History names are kept:
    the scan measures what they hold."""
    namespace, hidden = shell.user_ns, shell.user_ns_hidden
    return [n for n, v in hidden.items() if namespace.get(n, v) is v and not is_history_name(n)]


def parse_path(name: str) -> ast.expr | None:
    """The expression ``name`` parses to, when it is a path devinspect reads as typed."""
    try:
        node = ast.parse(name, mode="eval").body
    except (SyntaxError, ValueError):
        return None
    return node if _is_path(node) else None


def _is_path(node: ast.expr) -> bool:
    """A plain name, attribute or constant item path, or ``getattr(path, "odd name")``."""
    while True:
        if isinstance(node, ast.Name):
            return True
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            node = node.value
        elif is_getattr_call(node):
            node = node.args[0]  # type: ignore[attr-defined]
        else:
            return False


def is_getattr_call(node: ast.expr) -> bool:
    """``getattr(path, "a name")``: how a path names an attribute that is no identifier."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 2 and not node.keywords and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str))


def is_path(name: str) -> bool:
    """Whether ``name`` is an expression devinspect can read (and maybe assign) as printed."""
    return parse_path(name) is not None
