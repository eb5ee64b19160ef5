"""What an action says it did, and how it finds the object a name refers to."""

from __future__ import annotations

import ast
from typing import Any, MutableMapping

import torch

from ..model import ActionResult


class NamePath:
    """A name as the user typed it: ``x``, ``batch["ids"]``, ``model.encoder``, ``getattr(m, "a b")``."""

    def __init__(self, text: str):
        if not isinstance(text, str):
            raise ValueError(f"{text!r} is not a name")
        try:
            node = ast.parse(text, mode="eval").body
        except (SyntaxError, ValueError):
            raise ValueError(f"{text!r} is not a variable name") from None
        self.steps: list[tuple[str, Any]] = []
        while not isinstance(node, ast.Name):
            if isinstance(node, ast.Attribute):
                self.steps.append(("attr", node.attr))
                node = node.value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
                self.steps.append(("item", node.slice.value))
                node = node.value
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
                  and len(node.args) == 2 and isinstance(node.args[1], ast.Constant)
                  and isinstance(node.args[1].value, str) and not node.keywords):
                self.steps.append(("attr", node.args[1].value))
                node = node.args[0]
            else:
                raise ValueError(f"{text!r} is not a plain variable, attribute or item name")
        self.root = node.id
        self.steps.reverse()
        self.text = text

    def get(self, namespace: MutableMapping[str, Any]) -> Any:
        if self.root not in namespace:
            raise LookupError(f"no variable named {self.root!r}")
        value = namespace[self.root]
        for kind, key in self.steps:
            value = getattr(value, key) if kind == "attr" else value[key]
        return value

    def holders(self, namespace: MutableMapping[str, Any]) -> list[Any]:
        """The objects the path passes through before its last step (the variable first)."""
        value = namespace[self.root]
        out = [value]
        for kind, key in self.steps[:-1]:
            value = getattr(value, key) if kind == "attr" else value[key]
            out.append(value)
        return out if self.steps else []

    def holder_read_statically(self, namespace: MutableMapping[str, Any]) -> Any:
        """The object the last step reads from (``pair`` for ``pair[0]``), found without running any
        of the user's code (each step through a builtin container's own item read, an instance's
        ``__dict__`` or a module's parameters, buffers and submodules); :data:`UNKNOWN` where a
        step would need more, and for a plain variable."""
        if not self.steps:
            return UNKNOWN
        return self._read_statically(namespace, self.steps[:-1])

    def read_statically(self, namespace: MutableMapping[str, Any]) -> Any:
        """The object the name refers to, read as :meth:`holder_read_statically` reads its holder."""
        return self._read_statically(namespace, self.steps)

    def _read_statically(self, namespace: MutableMapping[str, Any], steps: list[tuple[str, Any]]) -> Any:
        from ..collect import instance_dict, mro

        if not issubclass(type(namespace), dict) or not dict.__contains__(namespace, self.root):
            return UNKNOWN
        value = dict.__getitem__(namespace, self.root)
        for kind, key in steps:
            classes = mro(type(value))
            if kind == "item":
                base = next((c for c in (tuple, list, dict) if c in classes), None)
                if base is None:
                    return UNKNOWN
                try:
                    value = base.__getitem__(value, key)
                except (LookupError, TypeError):
                    return UNKNOWN
                continue
            own = instance_dict(value)
            if torch.nn.Module in classes:
                parts = [own.get(group) for group in ("_parameters", "_buffers", "_modules")]
                found = next((d[key] for d in parts if type(d) is dict and key in d), own.get(key, UNKNOWN))
            else:
                found = own.get(key, UNKNOWN)
            if found is UNKNOWN:
                return UNKNOWN
            value = found
        return value

    def set(self, namespace: MutableMapping[str, Any], new: Any) -> None:
        if not self.steps:
            namespace[self.root] = new
            return
        parent = self.holders(namespace)[-1]
        kind, key = self.steps[-1]
        if kind == "attr":
            setattr(parent, key, new)
        else:
            parent[key] = new


#: What :meth:`NamePath.holder_read_statically` returns where it cannot tell.
UNKNOWN = object()

LOOKUP_ERRORS = (ValueError, LookupError, AttributeError, KeyError, IndexError, TypeError)


def find_named(namespace: MutableMapping[str, Any], name: str) -> tuple[Any, ActionResult | None]:
    """The object called ``name``, or a failed ActionResult saying why it cannot be found."""
    try:
        return NamePath(name).get(namespace), None
    except LOOKUP_ERRORS as exc:
        return None, ActionResult(False, f"could not find {name}: {exc}")


def held_bytes(t: torch.Tensor) -> int:
    try:
        if t.layout == torch.strided and not t.is_nested and t.device.type != "meta":
            return int(t.untyped_storage().nbytes())
        return int(t.nbytes)
    except Exception:  # wrapper subclasses have no storage of their own
        try:
            return int(t.numel() * t.element_size())
        except Exception:
            return 0


def human(n: int) -> str:
    from ..model import human_bytes

    return human_bytes(n)


def reason(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def parse_device(device: Any) -> tuple[torch.device | None, ActionResult | None]:
    try:
        return torch.device(device), None
    except (RuntimeError, TypeError, ValueError) as exc:
        return None, ActionResult(False, f"{device!r} is not a device: {reason(exc)}")


class CannotMove(Exception):
    """A tensor that cannot be copied to the target (an OOM, an unsupported dtype): nothing changed yet."""
