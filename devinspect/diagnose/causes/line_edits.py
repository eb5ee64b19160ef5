"""Edits of the user's own lines, made on the text as written (columns from ``ast``).

Each edit keeps everything of the line but the part it changes: an argument copied to the host
(``np.asarray(z)`` → ``np.asarray(z.cpu())``; a list of tensors item by item), a keyword dropped from a call
(``DataLoader(ds, pin_memory=True)`` → ``DataLoader(ds)``) or added to it, a dropped result
assigned (``x.to(dev)`` → ``x = x.to(dev)``). A statement that spans several lines is edited
line by line, each edit on the physical line it changes; what cannot be edited that way gives
no edit (the fix is then advice), never a guess.
"""

from __future__ import annotations

import ast
import linecache
from dataclasses import dataclass

from ...collect import locations
from ...model import SourceEdit, SourceLine


@dataclass(frozen=True)
class Statement:
    """A statement as written: its physical lines (stripped of the first line's indentation) and
    its parsed form, whose columns count UTF-8 bytes in those lines."""

    filename: str
    first: int
    lines: tuple[bytes, ...]
    node: ast.stmt
    function: str = ""

    def line(self, lineno: int) -> SourceLine:
        return locations.source_line(self.filename, lineno, self.function or "<module>")


def statement_at(filename: str, lineno: int, function: str = "", end: int | None = None) -> Statement | None:
    """The statement starting on ``lineno`` of ``filename`` (ending on ``end``, or on its first
    line), parsed on its own; a compound statement's header (``for b in loader:``) parses too."""
    raw = linecache.getlines(filename)
    end = end or lineno
    if not 0 < lineno <= end <= len(raw):
        return None
    first = raw[lineno - 1]
    indent = len(first) - len(first.lstrip())
    lines = [line[indent:] if line[:indent].strip() == "" else line.lstrip() for line in raw[lineno - 1:end]]
    text = "".join(lines).rstrip()
    for source in (text, text + " pass", text + "\n    pass"):
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        if tree.body:
            encoded = tuple(line.rstrip("\n").encode() for line in lines)
            return Statement(filename, lineno, encoded, tree.body[0], function)
    return None


def find(node: ast.AST, text: str, kinds: tuple[type, ...] = (ast.expr,)) -> ast.AST | None:
    """The sub-expression of ``node`` written as ``text`` (compared as ``ast`` writes it back)."""
    for inner in ast.walk(node):
        if isinstance(inner, kinds) and ast.unparse(inner) == text:
            return inner
    return None


class Changes:
    """Changes to one statement's text, each given in the columns of the text as written; made
    into one edit per physical line it changes."""

    def __init__(self, statement: Statement):
        self.statement = statement
        self.spans: list[tuple[int, int, int, bytes]] = []  # (line index, start, end, new bytes)
        self.failed = False

    def _replace(self, row: int, start: int, end: int | None, new: str) -> None:
        if end is None or not 0 <= row < len(self.statement.lines):
            self.failed = True
            return
        self.spans.append((row, start, end, new.encode()))

    def _written(self, node: ast.AST) -> str:
        return self.statement.lines[node.lineno - 1][node.col_offset:node.end_col_offset].decode(errors="replace")

    def on_host(self, leaf: ast.expr, detach: bool) -> Changes:
        """``leaf`` copied to the host where the statement reads it (``z`` → ``z.cpu()``;
        ``z.detach().cpu()`` when it needs detaching first)."""
        if leaf.lineno != leaf.end_lineno:
            self.failed = True
            return self
        written = self._written(leaf)
        atom = isinstance(leaf, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
        self._replace(leaf.lineno - 1, leaf.col_offset, leaf.end_col_offset,
                      f"{written if atom else f'({written})'}{'.detach()' if detach else ''}.cpu()")
        return self

    def items_on_host(self, leaf: ast.expr, detach: bool, item: str) -> Changes:
        """A list (or tuple) of tensors ``leaf`` read as its tensors copied to the host, each
        (``losses`` → ``[t.cpu() for t in losses]``); ``item`` names one in the comprehension."""
        if leaf.lineno != leaf.end_lineno:
            self.failed = True
            return self
        self._replace(leaf.lineno - 1, leaf.col_offset, leaf.end_col_offset,
                      f"[{item}{'.detach()' if detach else ''}.cpu() for {item} in {self._written(leaf)}]")
        return self

    def without_keywords(self, call: ast.Call, names: set[str]) -> Changes:
        """The call with the keywords ``names`` left out, with the commas between: each run of
        them on a line goes from the end of the element kept before it (or up to the start of
        the one kept after it, or, alone on its line, with its trailing comma)."""
        elements = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
        removed = {id(k) for k in call.keywords if k.arg in names}
        runs: list[list[int]] = []
        for at, element in enumerate(elements):
            if id(element) not in removed:
                continue
            if element.lineno != element.end_lineno:
                self.failed = True
                return self
            if runs and runs[-1][-1] == at - 1 and elements[at - 1].lineno == element.lineno:
                runs[-1].append(at)
            else:
                runs.append([at])
        for run in runs:
            first, last = elements[run[0]], elements[run[-1]]
            row = first.lineno - 1
            before = elements[run[0] - 1] if run[0] > 0 else None
            after = elements[run[-1] + 1] if run[-1] + 1 < len(elements) else None
            if before is not None and id(before) not in removed and before.end_lineno == first.lineno:
                self._replace(row, before.end_col_offset, last.end_col_offset, "")
            elif after is not None and id(after) not in removed and after.lineno == first.lineno:
                self._replace(row, first.col_offset, after.col_offset, "")
            else:
                data = self.statement.lines[row]
                end = last.end_col_offset
                while end < len(data) and data[end:end + 1] in (b" ", b","):
                    end += 1
                self._replace(row, first.col_offset, end, "")
        return self

    def keyword(self, call: ast.Call, keyword: str, value: str) -> Changes:
        """The call with ``keyword=value``: the value it has replaced, or added after its last argument."""
        given = next((k for k in call.keywords if k.arg == keyword), None)
        if given is not None:
            node = given.value
            if node.lineno != node.end_lineno:
                self.failed = True
                return self
            self._replace(node.lineno - 1, node.col_offset, node.end_col_offset, value)
            return self
        elements = sorted([*call.args, *call.keywords], key=lambda n: (n.end_lineno, n.end_col_offset))
        if elements:
            last = elements[-1]
            self._replace(last.end_lineno - 1, last.end_col_offset, last.end_col_offset, f", {keyword}={value}")
        else:
            end = (call.end_col_offset or 1) - 1
            self._replace(call.end_lineno - 1, end, end, f"{keyword}={value}")
        return self

    def append(self, node: ast.expr, suffix: str) -> Changes:
        """``suffix`` (``.to(dev)``) right after ``node``."""
        self._replace(node.end_lineno - 1, node.end_col_offset, node.end_col_offset, suffix)
        return self

    def prepend(self, node: ast.AST, prefix: str) -> Changes:
        """``prefix`` (``x = ``) right before ``node``."""
        self._replace(node.lineno - 1, node.col_offset, node.col_offset, prefix)
        return self

    def edits(self) -> tuple[SourceEdit, ...] | None:
        """One edit per changed physical line (a line left blank is deleted); None when a change
        could not be made or two overlap."""
        if self.failed or not self.spans:
            return None
        by_row: dict[int, list[tuple[int, int, bytes]]] = {}
        for row, start, end, new in self.spans:
            by_row.setdefault(row, []).append((start, end, new))
        out = []
        for row, spans in sorted(by_row.items()):
            data = self.statement.lines[row]
            last = len(data)
            for start, end, new in sorted(spans, key=lambda span: (span[0], span[1]), reverse=True):
                if start < 0 or end > last or start > end:
                    return None
                data = data[:start] + new + data[end:]
                last = start
            old = self.statement.lines[row].decode(errors="replace").strip()
            new_text = data.decode(errors="replace").strip()
            if new_text != old:
                where = self.statement.line(self.statement.first + row)
                out.append(SourceEdit(where, where.text or old, new_text, self.statement.function))
        return tuple(out) or None
