"""Device placements in real code, found with ``ast``, and mutants that lack one of them.

A *placement* is where a program decides that a tensor or module lives on the accelerator:

* ``device=`` passed to a call (``torch.zeros(n, device=x.device)``, ``load(device=dev)``);
* ``.to(device)`` (or ``.to(x.device)``, ``.to(device=…, dtype=…)``): the device argument;
* ``.cuda()`` (and the simulated device's ``.sim()``);
* ``self.register_buffer("name", value)`` or ``self.name = nn.Buffer(value)``: a tensor that
  ``Module.to`` moves.

Deleting one gives a real bug at a real site whose right fix is known (put it back, or its
equivalent): the ``device=`` argument goes, the ``.to(...)``/``.cuda()`` call goes (only its
device argument when it converts something else too), and a buffer becomes a plain attribute
(``self.name = value``), which ``Module.to`` leaves where it is. Each mutant is the source with
exactly one such deletion; everything else is kept byte for byte.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

#: The kinds of placement, in the order reports list them.
KINDS = ("device=", ".to()", ".cuda()", "register_buffer")

#: A name that holds a device: ``device``, ``dev``, ``args.device``, ``compute_device``, ``x.device``.
_DEVICE_WORD = re.compile(r"(^|[._])(device|dev|devices)($|[._\[])|device$", re.IGNORECASE)
_DEVICE_STRING = re.compile(r"^(cuda|sim|mps|xpu|hpu)(:\d+)?$")
_HOST = {"cpu", "meta"}


@dataclass(frozen=True)
class Placement:
    """One device placement in a source text, and how its deletion rewrites the text."""

    kind: str
    #: 1-based line of the placement, and that line as written (stripped).
    line: int
    text: str
    #: The span the deletion replaces: (line, column) pairs, 1-based lines, 0-based columns.
    start: tuple[int, int]
    end: tuple[int, int]
    replacement: str
    #: The function or class method it is in (``GraphConv.forward``), ``""`` at top level.
    context: str = ""

    @property
    def label(self) -> str:
        return f"{self.kind} at line {self.line}: {self.text}"


def is_device_expression(node: ast.expr) -> bool:
    """Whether ``node`` reads as a device: ``x.device``, a name saying device, a device string,
    ``torch.device(...)``. (A tensor argument to ``.to()`` also converts the dtype: not counted.)"""
    if isinstance(node, ast.Constant):
        return type(node.value) is str and bool(_DEVICE_STRING.match(node.value))
    if isinstance(node, ast.Call):
        return ast.unparse(node.func) in ("torch.device", "device") or any(
            isinstance(a, ast.Constant) and type(a.value) is str and _DEVICE_STRING.match(a.value) for a in node.args)
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return bool(_DEVICE_WORD.search(ast.unparse(node)))
    return False


def _is_host(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and (node.value is None or (type(node.value) is str and
                                                                       node.value.split(":")[0] in _HOST))


class _Finder(ast.NodeVisitor):
    def __init__(self, source: str):
        self.source = source
        self.lines = source.split("\n")
        self.found: list[Placement] = []
        self.context: list[str] = []
        self.assigned_to_attribute: ast.AST | None = None

    def _add(self, kind: str, node: ast.AST, start: tuple[int, int], end: tuple[int, int], replacement: str) -> None:
        self.found.append(Placement(kind, node.lineno, self.lines[node.lineno - 1].strip(), start, end, replacement,
                                    ".".join(self.context)))

    def _scoped(self, node: ast.AST) -> None:
        self.context.append(node.name)
        self.generic_visit(node)
        self.context.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Assign(self, node: ast.Assign) -> None:
        single = len(node.targets) == 1 and isinstance(node.targets[0], ast.Attribute)
        self.assigned_to_attribute = node.value if single else None
        self.visit(node.value)
        self.assigned_to_attribute = None
        for target in node.targets:
            self.visit(target)

    def visit_Expr(self, node: ast.Expr) -> None:
        call = node.value
        if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "register_buffer"
                and call.args and isinstance(call.args[0], ast.Constant) and type(call.args[0].value) is str
                and call.args[0].value.isidentifier()):
            value = call.args[1] if len(call.args) > 1 else next(
                (k.value for k in call.keywords if k.arg == "tensor"), None)
            if value is not None and not (isinstance(value, ast.Constant) and value.value is None):
                owner = ast.get_source_segment(self.source, call.func.value)
                tensor = ast.get_source_segment(self.source, value)
                self._add("register_buffer", node, (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset),
                          f"{owner}.{call.args[0].value} = {tensor}")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        items = sorted([*node.args, *node.keywords], key=lambda n: (n.lineno, n.col_offset))
        if isinstance(func, ast.Attribute) and func.attr == "to":
            device_arg = next((k for k in node.keywords if k.arg == "device"), None)
            if device_arg is None and node.args and is_device_expression(node.args[0]):
                device_arg = node.args[0]
            value = device_arg.value if isinstance(device_arg, ast.keyword) else device_arg
            if device_arg is not None and not _is_host(value):
                others = [i for i in items if i is not device_arg
                          and not (isinstance(i, ast.keyword) and i.arg in ("non_blocking", "copy"))]
                if not others:  # x.to(dev) -> x
                    self._add(".to()", node, (func.value.end_lineno, func.value.end_col_offset),
                              (node.end_lineno, node.end_col_offset), "")
                else:
                    self._drop_argument(".to()", node, items, device_arg)
        elif (ast.unparse(func) in ("nn.Buffer", "torch.nn.Buffer", "Buffer") and node.args
              and node is self.assigned_to_attribute):
            # self.name = nn.Buffer(value): a plain attribute once the wrapper goes
            self._add("register_buffer", node, (node.lineno, node.col_offset), (node.end_lineno, node.end_col_offset),
                      ast.get_source_segment(self.source, node.args[0]))
        elif isinstance(func, ast.Attribute) and func.attr in ("cuda", "sim") and not node.keywords and len(node.args) <= 1:
            self._add(".cuda()", node, (func.value.end_lineno, func.value.end_col_offset),
                      (node.end_lineno, node.end_col_offset), "")
        else:
            for k in node.keywords:
                if k.arg == "device" and not _is_host(k.value):
                    self._drop_argument("device=", node, items, k)
        self.generic_visit(node)

    def _drop_argument(self, kind: str, call: ast.Call, items: list, item: ast.AST) -> None:
        """Delete ``item`` from the call's arguments with the comma that separates it."""
        i = items.index(item)
        if i > 0:  # from the end of the argument before it
            before = items[i - 1]
            start = (before.end_lineno, before.end_col_offset)
            end = (item.end_lineno, item.end_col_offset)
        elif i + 1 < len(items):  # the first: up to the next argument
            start, end = (item.lineno, item.col_offset), (items[i + 1].lineno, items[i + 1].col_offset)
        else:
            start, end = (item.lineno, item.col_offset), (item.end_lineno, item.end_col_offset)
        self._add(kind, item, start, end, "")


def placements(source: str) -> list[Placement]:
    """Every device placement in ``source``, in the order of the text."""
    finder = _Finder(source)
    finder.visit(ast.parse(source))
    return sorted(finder.found, key=lambda p: (p.start, p.kind))


def mutate(source: str, placement: Placement) -> str:
    """``source`` without ``placement``: only its span changes."""
    lines = source.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line.encode()) + 1)

    def at(pos: tuple[int, int]) -> int:  # ast columns count UTF-8 bytes
        line, col = pos
        return len(source.encode()[: offsets[line - 1] + col].decode())

    start, end = at(placement.start), at(placement.end)
    mutant = source[:start] + placement.replacement + source[end:]
    ast.parse(mutant)  # a deletion keeps the program valid Python
    return mutant
