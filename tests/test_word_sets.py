"""Closed word sets are types (``Literal``), and the package's code uses no word outside them:
read from every call and comparison in the source, so a new word is added to its type first."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import devinspect
from devinspect.model.check_report import OperandSource
from devinspect.model.explanation import Holder
from devinspect.model.fixes import FindingCode, Severity
from devinspect.model.records import KINDS, RecordKind

PACKAGE = Path(devinspect.__file__).parent


def _words(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [w for e in node.elts for w in _words(e)]
    return []


def _used() -> dict[str, set[tuple[str, str]]]:
    """``set name -> {(word, where)}`` for the words the code passes or compares."""
    used: dict[str, set[tuple[str, str]]] = {"severity": set(), "source": set(), "holder": set(), "kind": set(),
                                             "code": set()}
    positional = {"Operand": [("source", 1)], "HeldTensor": [("holder", 1)],
                  "Finding": [("code", 0), ("severity", 1)]}
    for path in PACKAGE.rglob("*.py"):
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                for field, index in positional.get(callee, ()):
                    if len(node.args) > index:
                        used[field].update((w, where) for w in _words(node.args[index]))
                    for kw in node.keywords:
                        if kw.arg == field:
                            used[field].update((w, where) for w in _words(kw.value))
            elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute):
                owner = node.left.value
                owner_name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
                field = node.left.attr
                if (field, owner_name) in {("source", "operand"), ("severity", "f"), ("severity", "finding"),
                                           ("holder", "t"), ("kind", "r"), ("kind", "record"),
                                           ("code", "f"), ("code", "finding")}:
                    for comparator in node.comparators:
                        used[field].update((w, where) for w in _words(comparator))
    return used


USED = _used()


def test_the_word_sets_are_literal_types():
    assert get_args(RecordKind) == KINDS
    assert {"error", "warning", "hint"} == set(get_args(Severity))
    assert len(get_args(OperandSource)) == len(set(get_args(OperandSource)))
    assert len(get_args(FindingCode)) == len(set(get_args(FindingCode)))


def test_the_code_uses_only_words_of_the_sets():
    sets = {"severity": get_args(Severity), "source": get_args(OperandSource), "holder": get_args(Holder),
            "kind": get_args(RecordKind), "code": get_args(FindingCode)}
    outside = {field: sorted(w for w in words if w[0] not in sets[field]) for field, words in USED.items()}
    assert outside == {field: [] for field in USED}
    assert all(USED.values()), "the reader finds words of every set"
