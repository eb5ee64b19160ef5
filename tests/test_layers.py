"""The package's layers, read from its import statements (function-local imports included):
renderers are pure functions of the data, and only the shell layer knows IPython and widgets."""

from __future__ import annotations

import ast
from pathlib import Path

import devinspect

PACKAGE = Path(devinspect.__file__).parent
SHELL_PACKAGES = ("IPython", "ipywidgets", "anywidget", "ipykernel", "traitlets", "comm")


def imports_of(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports, anywhere in the file."""
    module = ".".join(("devinspect", *path.relative_to(PACKAGE).with_suffix("").parts))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def modules() -> dict[str, set[str]]:
    return {str(p.relative_to(PACKAGE)): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def names(imported: set[str], *prefixes: str) -> set[str]:
    return {m for m in imported if any(m == p or m.startswith(p + ".") for p in prefixes)}


def test_the_reader_sees_relative_imports_as_absolute_names():
    found = imports_of(PACKAGE / "render" / "memory_html.py")
    assert "devinspect.memory_model" in found and "devinspect.render.units.human_bytes" in found


def test_renderers_neither_act_nor_run_threads():
    for name, imported in modules().items():
        if name.startswith("render/"):
            assert not names(imported, "devinspect.actions", "threading", "devinspect.jupyter",
                             "devinspect.magics"), name


def test_only_the_magics_and_the_live_layer_know_ipython_or_widgets():
    knowing = {name for name, imported in modules().items() if names(imported, *SHELL_PACKAGES)}
    assert knowing, "the reader found no IPython import at all"
    assert all(name == "magics.py" or name.startswith("jupyter/") for name in knowing), sorted(knowing)


def test_threads_and_timers_live_in_the_live_layer():
    # The simulated device (testing.py) serialises its allocator with a lock; nothing else holds threads.
    running = {name for name, imported in modules().items()
               if names(imported, "threading", "sched", "concurrent.futures")}
    assert running <= {"testing.py"} | {n for n in running if n.startswith("jupyter/")}, sorted(running)
