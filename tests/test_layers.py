"""The package's layout, read from every import statement (function-level ones included).

Data flows one way: collect → diagnose → model, then render and jupyter; actions are the
only writer and ipython sits on top. A module imports only from its own package or from
a stage below it, never another module's ``_private`` name, and stays short enough to
read in one sitting. The checks run on the real package and, once, on a copy with a
circle planted, to show they can fail.
"""

from __future__ import annotations

import ast
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import devinspect

PACKAGE = Path(devinspect.__file__).parent
MAX_LINES = 700
#: A folder's modules can be told apart at a glance: more than this, and it gets sub-packages.
MAX_MODULES_PER_PACKAGE = 15

#: Stages, lowest first. A module may import its own stage or a lower one; two stages of
#: the same rank (actions and distributed; ipython and testing) never import each other.
RANKS = {
    # every package's front door (its ``__init__``) is made with lazy_exports, the model's too
    "lazy_exports": -1,
    "version": 0, "runtime": 0, "model": 0,
    "collect": 1,
    "diagnose": 2,
    "observe": 3,
    "actions": 4, "distributed": 4,
    "render": 5,
    "jupyter": 6,
    "ipython": 7, "testing": 7,
    "__init__": 8, "__main__": 8,
}
SHELL_PACKAGES = ("IPython", "ipykernel")
WIDGET_PACKAGES = ("ipywidgets", "anywidget", "comm")
THREADS = ("threading", "sched", "concurrent.futures")


@dataclass
class Layout:
    """What the import statements of a package say."""

    #: module name -> the devinspect modules it imports (anywhere in the file)
    edges: dict[str, set[str]] = field(default_factory=dict)
    #: module name -> every absolute name it imports (for third-party checks)
    imported: dict[str, set[str]] = field(default_factory=dict)
    #: (module, imported module, name) for each ``_private`` name taken from another module
    private: list[tuple[str, str, str]] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    #: (module, imported module) for each import of another package's module around its ``__init__``
    around_doors: list[tuple[str, str]] = field(default_factory=list)

    def stage(self, module: str) -> str:
        parts = module.split(".")
        return parts[1] if len(parts) > 1 else "__init__"

    def circles(self) -> list[list[str]]:
        """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []
        counter = 0
        for root in self.edges:
            if root in index:
                continue
            work = [(root, iter(sorted(self.edges[root])))]
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack.add(root)
            while work:
                node, children = work[-1]
                child = next(children, None)
                if child is not None:
                    if child not in self.edges:
                        continue
                    if child not in index:
                        index[child] = low[child] = counter
                        counter += 1
                        stack.append(child)
                        on_stack.add(child)
                        work.append((child, iter(sorted(self.edges[child]))))
                    elif child in on_stack:
                        low[node] = min(low[node], index[child])
                    continue
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        found.append(sorted(group))
        return found

    def upward(self) -> list[tuple[str, str]]:
        """(module, imported module) pairs that point up the pipeline or across to a peer stage."""
        out = []
        for module, targets in self.edges.items():
            mine = self.stage(module)
            for target in targets:
                theirs = self.stage(target)
                if theirs != mine and RANKS[theirs] >= RANKS[mine]:
                    out.append((module, target))
        return sorted(out)

    def knowing(self, *packages: str) -> set[str]:
        """Modules that import any of ``packages``."""
        return {m for m, names in self.imported.items()
                if any(n == p or n.startswith(p + ".") for n in names for p in packages)}


def read_layout(package: Path) -> Layout:
    def module_name(path: Path) -> str:
        parts = path.relative_to(package.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    files = {module_name(p): p for p in sorted(package.rglob("*.py"))}
    layout = Layout()
    surfaces = {name: package_surface(path) for name, path in files.items() if path.name == "__init__.py"}

    def front_door(own_package: str, imported: str) -> str | None:
        """The package whose ``__init__`` an import of ``imported`` from ``own_package`` must go
        through: the first package on the way down that does not hold the importer."""
        theirs, mine = imported.split("."), own_package.split(".")
        shared = 0
        while shared < min(len(theirs), len(mine)) and theirs[shared] == mine[shared]:
            shared += 1
        door = ".".join(theirs[: shared + 1])
        return door if shared < len(theirs) and door in surfaces else None

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    for module, path in files.items():
        text = path.read_text()
        layout.lines[module] = len(text.splitlines())
        own_package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        edges: set[str] = set()
        imported: set[str] = set()
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    imported.add(alias.name)
                    if alias.name.split(".")[0] == package.name and resolve(alias.name):
                        edges.add(resolve(alias.name))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = own_package.split(".")[: len(own_package.split(".")) - node.level + 1]
                    base = ".".join([*parent, base] if base else parent)
                imported.add(base)
                if base.split(".")[0] != package.name:
                    continue
                door = front_door(own_package, base)
                if door is not None and door != base:
                    layout.around_doors.append((module, base))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in files:
                        edges.add(full)
                        continue
                    target = resolve(base)
                    # a name read through a package's front door: the edge goes to the module behind it
                    behind = surfaces.get(target, {}).get(alias.name)
                    if behind:
                        target = f"{target}.{behind}"
                    if target:
                        edges.add(target)
                        if alias.name.startswith("_") and not alias.name.startswith("__") and target != module:
                            layout.private.append((module, target, alias.name))
        edges.discard(module)
        layout.edges[module] = edges
        layout.imported[module] = imported
    return layout


def package_surface(init: Path) -> dict[str, str]:
    """A package's front door, read from its ``__init__``: each name other packages may import
    (``_SURFACE``: the module defining it; ``_SUBMODULES``: the module that is the value)."""
    surface: dict[str, str] = {}
    for node in ast.parse(init.read_text()).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("_SURFACE", "_SUBMODULES")):
            surface.update(ast.literal_eval(node.value))
    return surface


LAYOUT = read_layout(PACKAGE)


def test_the_reader_sees_relative_and_function_level_imports():
    edges = LAYOUT.edges
    assert "devinspect.model.device_memory" in edges["devinspect.render.memory.snapshot_html"]
    # model.device_memory imports its display registry; collect.machine.memory_snapshot imports the scan inside a function
    assert "devinspect.model.display" in edges["devinspect.model.device_memory"]
    assert "devinspect.collect.namespace.scan" in edges["devinspect.collect.machine.memory_snapshot"]
    assert set(RANKS) >= {LAYOUT.stage(m) for m in edges}, "a new stage needs a rank in RANKS"


def test_no_import_circle():
    assert LAYOUT.circles() == []


def test_every_import_points_down_the_pipeline():
    assert LAYOUT.upward() == []


def test_other_packages_import_a_packages_names_only_through_its_front_door():
    assert LAYOUT.around_doors == []


def test_no_module_imports_another_modules_private_name():
    assert LAYOUT.private == []


def test_every_folder_is_a_package_of_at_most_fifteen_modules():
    folders = [d for d in [PACKAGE, *PACKAGE.rglob("*")] if d.is_dir() and d.name != "__pycache__"]
    assert [d for d in folders if not (d / "__init__.py").exists()] == []
    crowded = {str(d.relative_to(PACKAGE.parent)): n for d in folders
               if (n := len([f for f in d.glob("*.py") if f.name != "__init__.py"])) > MAX_MODULES_PER_PACKAGE}
    assert crowded == {}


def test_every_module_can_be_read_in_one_sitting():
    assert {m: n for m, n in LAYOUT.lines.items() if n > MAX_LINES} == {}


def test_the_model_is_plain_data():
    # Only the standard library, and pandas (inside .frame properties), beside the model itself.
    for module, names in LAYOUT.imported.items():
        if LAYOUT.stage(module) == "model":
            ours = {n for n in names if n.startswith("devinspect")} - {"devinspect.lazy_exports"}
            assert all(n.startswith("devinspect.model") for n in ours), (module, ours)
            foreign = {n.split(".")[0] for n in names if not n.startswith("devinspect")}
            assert foreign <= {*sys.stdlib_module_names, "pandas"}, (module, foreign)


def test_only_the_ipython_layer_knows_ipython_and_only_the_live_layer_knows_widgets():
    assert {LAYOUT.stage(m) for m in LAYOUT.knowing(*SHELL_PACKAGES)} == {"ipython"}
    assert {LAYOUT.stage(m) for m in LAYOUT.knowing(*WIDGET_PACKAGES)} == {"jupyter"}
    # traitlets: the settings' traits (ipython) and the widgets' (jupyter)
    assert {LAYOUT.stage(m) for m in LAYOUT.knowing("traitlets")} <= {"ipython", "jupyter"}


def test_renderers_neither_act_nor_run_threads():
    for module in LAYOUT.edges:
        if LAYOUT.stage(module) == "render":
            assert not LAYOUT.knowing(*THREADS) & {module}, module
            assert all(LAYOUT.stage(t) in ("lazy_exports", "model", "render") for t in LAYOUT.edges[module]), module


def test_threads_and_timers_live_in_the_live_layer():
    # The simulated device (testing) serialises its allocator with a lock; nothing else holds threads.
    assert {LAYOUT.stage(m) for m in LAYOUT.knowing(*THREADS)} <= {"jupyter", "testing"}


def test_the_checks_fail_on_a_planted_circle_upward_private_and_around_door_import(tmp_path):
    copy = tmp_path / "devinspect"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    records = copy / "model" / "records.py"
    records.write_text(records.read_text() + "\n\ndef _planted():\n    from ..ipython import extension  # noqa\n")
    scan = copy / "collect" / "namespace" / "scan.py"
    scan.write_text(scan.read_text() + "\n\nfrom .walk import _MODULE_INTERNALS  # noqa\n")
    lifetime = copy / "jupyter" / "lifetime.py"
    lifetime.write_text(lifetime.read_text() + "\n\ndef _planted():\n    from ..collect.namespace.scan import scan  # noqa\n")
    planted = read_layout(copy)
    assert ("devinspect.jupyter.lifetime", "devinspect.collect.namespace.scan") in planted.around_doors
    assert any("devinspect.model.records" in group and "devinspect.ipython.extension" in group
               for group in planted.circles())
    assert ("devinspect.model.records", "devinspect.ipython.extension") in planted.upward()
    assert ("devinspect.collect.namespace.scan", "devinspect.collect.namespace.walk", "_MODULE_INTERNALS") in planted.private


def test_fixes_and_findings_are_built_in_diagnose_only():
    """The one place that turns a problem into a typed Fix or Finding is diagnose (model defines them)."""
    builders = ("Fix", "Finding", "SourceEdit")
    outside = []
    for path in sorted(PACKAGE.rglob("*.py")):
        stage = path.relative_to(PACKAGE).parts[0]
        if stage in ("diagnose", "model"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in builders:
                outside.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.func.id}(…)")
    assert outside == []
