"""Runs the mutants of a real program (:mod:`programs`, :mod:`mutations`) and judges devinspect.

For each mutant (one device placement deleted):

1. **probe**: the program runs from scratch, cell by cell, until a cell fails. No cell fails: the
   placement was not needed there (an *equivalent* mutant, left out of the rates). A failure that
   is not a device error is counted apart. Before the failing cell runs, ``%devices`` is asked
   for findings, and the tensors the mutation left on the host (the unmutated program has them on
   the accelerator at that point: the *at-rest culprits*) are compared with what it found.
2. **entry points**: for each of the four (the plain cell explained after the fact, ``%%devcheck``,
   ``%devices``, the Apply fix button) the program runs again from scratch and
   :class:`scenario_runner.ScenarioRun` judges the printed fix exactly as printed: its code runs as
   a cell, its edits are made to the exact text of the cells and files they name, the button is
   clicked, the failing cell must then work twice, nothing the user had may be lost, the cells
   after it must run, and ``%devices`` must show no error.
3. **cause removed**: the whole program runs once more from scratch with the edited cells and
   files (the fix's printed edits made, its runtime code not run): no cell may fail.

The unmutated program must run, and give no error or warning finding (``%devices`` at the end,
``%%devcheck`` on every cell).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import linecache
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from mutations import Placement, mutate, placements
from programs import Program
from scenario_runner import Failed, Outcome, ScenarioRun, Skip, apply_lines, fill
from scenarios import ENTRIES, Scenario

#: What a device error says (the ground truth of a probe, read from the error as the user reads it).
_DEVICE_ERROR = re.compile(r"device|Input type \(.*\) and weight type", re.IGNORECASE)
#: A call that lost its ``device`` argument altogether (``missing 1 required positional argument:
#: 'device'``) fails for another reason than where a tensor is.
_ARGUMENT_ERROR = re.compile(r"required positional argument|unexpected keyword argument")


@dataclass(frozen=True)
class Mutant:
    program: Program
    #: ("cell", index) or ("file", file name); None with ``placement`` for the unmutated program.
    site: tuple[str, Any] | None = None
    placement: Placement | None = None

    @property
    def name(self) -> str:
        if self.placement is None:
            return f"{self.program.name}:original"
        where = f"cell{self.site[1]}" if self.site[0] == "cell" else self.site[1]
        return f"{self.program.name}:{where}:{self.placement.line}:{self.placement.kind}"

    @property
    def kind(self) -> str:
        return self.placement.kind if self.placement is not None else "none"

    def cells(self) -> list[str]:
        cells = list(self.program.cells)
        if self.site is not None and self.site[0] == "cell":
            cells[self.site[1]] = mutate(cells[self.site[1]], self.placement)
        return cells

    def files(self) -> dict[str, str]:
        files = dict(self.program.files)
        if self.site is not None and self.site[0] == "file":
            files[self.site[1]] = mutate(files[self.site[1]], self.placement)
        return files


def mutants(program: Program) -> list[Mutant]:
    """Every one-placement deletion of ``program``: in its cells (but the harness's own), then its files."""
    out = []
    for i, cell in enumerate(program.cells):
        if i not in program.fixed_cells:
            out += [Mutant(program, ("cell", i), p) for p in placements(cell)]
    for name, source in program.files:
        out += [Mutant(program, ("file", name), p) for p in placements(source)]
    return out


@dataclass
class MutantOutcome:
    mutant: Mutant
    #: "effect" (a cell failed with a device error), "equivalent" (no cell failed), "other error"
    #: (a cell failed for another reason), "broken" (the unmutated program fails here).
    probe: str = ""
    failing_cell: int | None = None
    error: str = ""
    #: Tensors at rest before the failing cell that the deletion left off the accelerator, and
    #: whether a ``%devices`` finding with a fix named one of them before the cell ran.
    at_rest: tuple[str, ...] = ()
    at_rest_found: bool = False
    entries: dict[str, Outcome] = field(default_factory=dict)
    #: entry -> whether the program ran from scratch with the fix's edits.
    cause_removed: dict[str, bool] = field(default_factory=dict)
    #: For the unmutated program: error or warning findings.
    clean_findings: list[str] = field(default_factory=list)


# -- the notebook's folder --------------------------------------------------------------------


class Workspace:
    """A temporary folder holding the program's module files and data, first on ``sys.path`` and
    the working directory while the program runs; its modules are forgotten between runs (a fresh
    kernel imports them anew)."""

    def __init__(self, files: dict[str, str], data: tuple[tuple[str, str], ...] = ()):
        self.dir = Path(tempfile.mkdtemp(prefix="devinspect-mutant-"))
        self.files = dict(files)
        for relative, text in data:
            path = self.dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self.write()

    def path(self, name: str) -> str:
        return str(self.dir / name)

    def write(self) -> None:
        for name, source in self.files.items():
            Path(self.path(name)).write_text(source)
            linecache.checkcache(self.path(name))
        self.forget()

    def forget(self) -> None:
        """Drop the program's modules from ``sys.modules`` (and their bytecode), as a new kernel would."""
        importlib.invalidate_caches()
        for module_name, module in list(sys.modules.items()):
            path = getattr(module, "__file__", None) or ""
            if path.startswith(str(self.dir)):
                del sys.modules[module_name]
        for cache in self.dir.rglob("__pycache__"):
            for f in cache.iterdir():
                f.unlink()

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        cwd, path, argv = os.getcwd(), list(sys.path), list(sys.argv)
        os.chdir(self.dir)
        sys.path.insert(0, str(self.dir))
        try:
            yield
        finally:
            self.forget()
            os.chdir(cwd)
            sys.path[:] = path
            sys.argv[:] = argv

    def edit(self, file: str, edits: list[Any]) -> bool:
        name = next((n for n in self.files if os.path.realpath(self.path(n)) == os.path.realpath(file)), None)
        if name is None:
            return False
        edited = apply_lines(self.files[name], edits)
        if edited is None:
            return False
        self.files[name] = edited
        self.write()
        return True

    def line(self, file: str, number: int) -> str | None:
        name = next((n for n in self.files if os.path.realpath(self.path(n)) == os.path.realpath(file)), None)
        lines = self.files[name].split("\n") if name else []
        return lines[number - 1].strip() if 0 < number <= len(lines) else None

    def remove(self) -> None:
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


# -- one entry point on one mutant ----------------------------------------------------------------


class MutantRun(ScenarioRun):
    """A :class:`ScenarioRun` whose program also has module files: an edit of a file is made to
    the file, and the session runs again from its first cell (the module is imported anew)."""

    def __init__(self, ip: Any, scenario: Scenario, device: str, workspace: Workspace,
                 host_names: frozenset[str] = frozenset()):
        super().__init__(ip, scenario, device)
        self.workspace = workspace
        #: Namespace names the unmutated program keeps on the host at this point: a fix that moves
        #: one of them blames a tensor that took no part.
        self.host_names = host_names
        self.fix: Any = None

    def judge_blame(self, fix: Any) -> None:
        self.fix = fix
        super().judge_blame(fix)
        moved = moved_names(fix)
        wrong = sorted(n for n in moved if n in self.host_names)
        if wrong:
            self.outcome.invented = True
            raise Failed("fix", f"the fix moves {', '.join(wrong)}, which the program keeps on the host")

    def apply_edits(self, edits: Any) -> None:
        in_files = [e for e in edits if e.where.cell is None]
        if not in_files:
            super().apply_edits(edits)
            return
        by_file: dict[str, list[Any]] = {}
        for e in in_files:
            by_file.setdefault(e.where.file, []).append(e)
        for file, file_edits in by_file.items():
            if not self.workspace.edit(file, file_edits):
                e = file_edits[0]
                raise Failed("edit", f"{file}: line {e.where.line} is {self.workspace.line(file, e.where.line)!r}, "
                                     f"not {e.old!r}")
        in_cells = [e for e in edits if e.where.cell is not None]
        for e in in_cells:
            if e.where.cell not in self.numbers:
                raise Failed("edit", f"{e.where.where} is not a cell of this session")
        # The edited cells' text first (without running them), then the whole session again.
        by_cell: dict[int, list[Any]] = {}
        for e in in_cells:
            by_cell.setdefault(e.where.cell, []).append(e)
        for number, cell_edits in by_cell.items():
            (kind, index), text = self.numbers[number]
            edited = apply_lines(text, cell_edits)
            if edited is None:
                raise Failed("edit", f"Cell In[{number}]: line {cell_edits[0].where.line} differs")
            if kind == "setup":
                self.setup[index] = edited
            else:
                self.failing_source = edited.split("\n", 1)[1] if edited.startswith("%%") else edited
        self.restart()
        try:
            self.run_setup(0)
        except Skip as exc:
            raise Failed("edited cells", str(exc)) from None
        self.rerun("after the edits")

    def restart(self) -> None:
        """A new kernel: the session's names go, the edited modules are imported anew."""
        ns = self.ip.user_ns
        for name in set(ns) - self.names_before:
            del ns[name]
        self.workspace.forget()

    def run(self) -> Outcome:
        self.names_before = set(self.ip.user_ns)
        return super().run()


def moved_names(fix: Any) -> set[str]:
    """The namespace names (and attribute paths) a fix moves, from its action and its code."""
    from devinspect.model import fixes as model

    names: set[str] = set()

    def walk(action: Any) -> None:
        if type(action) is model.Steps:
            for a in action.actions:
                walk(a)
        elif type(action) in (model.Move, model.MoveContainer):
            names.add(action.name)
        elif type(action) is model.RegisterBuffer:
            names.add(f"{action.module}.{action.attr}")

    walk(fix.action)
    for node in ast.walk(ast.parse(fix.code or "")):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "to":
            names.add(ast.unparse(node.func.value))
    return names


# -- the whole mutant ---------------------------------------------------------------------------------


class Corpus:
    """Runs mutants of programs in one shell, remembering each unmutated program's state."""

    def __init__(self, ip: Any, device: str = "sim:0", entries: tuple[str, ...] = ENTRIES):
        self.ip, self.device, self.entries = ip, device, entries
        #: program name -> per cell index: {name: device} of the namespace before that cell ran.
        self.original_states: dict[str, list[dict[str, str]]] = {}
        #: program name -> how the unmutated program ran.
        self.originals: dict[str, MutantOutcome] = {}

    # -- running cells ----------------------------------------------------------------------

    def _cells(self, mutant: Mutant) -> list[str]:
        prepare = [mutant.program.prepare] if mutant.program.prepare else []
        return prepare + [fill(c, self.device) for c in mutant.cells()]

    def _session(self, cells: list[str], workspace: Workspace, observe: Any = None) -> tuple[int | None, Any]:
        """Run ``cells`` in a fresh namespace; ``observe(i)`` before each. The first failing cell's index
        and error, or (None, None)."""
        runner = ScenarioRun(self.ip, Scenario(0, "", "", "plain", (), ""), self.device)
        before, out_before = set(self.ip.user_ns), set(self.ip.user_ns.get("Out", {}))
        try:
            for i, code in enumerate(cells):
                if observe is not None:
                    observe(i)
                result = runner.cell(code)
                error = runner.error_of(result)
                if error is not None:
                    return i, error
            if observe is not None:
                observe(len(cells))
            return None, None
        finally:
            runner.cleanup(before, out_before)

    def _state(self) -> dict[str, str]:
        import devinspect
        from devinspect.collect.namespace.names import shell_names

        result = devinspect.scan(self.ip.user_ns, exclude=shell_names(self.ip))
        return {r.name: r.device for r in result.records if not r.hidden and r.kind not in ("unnamed", "error")
                and not r.name.startswith("<")}

    def _findings(self) -> list[Any]:
        from IPython.utils.capture import capture_output

        with capture_output():
            view = self.ip.run_line_magic("devices", "-f")
        return list(view.findings) if view is not None else []

    # -- the unmutated program ----------------------------------------------------------------------

    def original(self, program: Program) -> MutantOutcome:
        mutant = Mutant(program)
        outcome = MutantOutcome(mutant)
        self.originals[program.name] = outcome
        states: list[dict[str, str]] = []
        findings: list[str] = []

        def observe(i: int) -> None:
            states.append(self._state())
            if i == len(cells):
                findings.extend(f"%devices {f.severity}: {f.message}" for f in self._findings()
                                if f.severity in ("error", "warning"))

        cells = self._cells(mutant)
        workspace = Workspace(dict(program.files), program.data)
        try:
            with workspace.active():
                failed, error = self._session(cells, workspace, observe)
                if failed is not None:
                    outcome.probe, outcome.failing_cell = "broken", failed
                    outcome.error = f"{type(error).__name__}: {str(error).strip()[:300]}"
                    return outcome
                checked = ["%%devcheck -v _mutation_report\n" + c for c in cells]

                def report(i: int) -> None:
                    rep = self.ip.user_ns.pop("_mutation_report", None)
                    if rep is not None:
                        findings.extend(f"%%devcheck cell {i - 1} {f.severity}: {f.message}" for f in rep.findings
                                        if f.severity in ("error", "warning"))
                        if rep.mismatch is not None:
                            findings.append(f"%%devcheck cell {i - 1}: a mismatch")

                failed, error = self._session(checked, workspace, report)
                if failed is not None:
                    findings.append(f"%%devcheck made cell {failed} fail: {type(error).__name__}: {error}")
        finally:
            workspace.remove()
        self.original_states[program.name] = states
        outcome.probe = "clean"
        outcome.clean_findings = findings
        return outcome

    # -- a mutant ------------------------------------------------------------------------------------

    def run(self, mutant: Mutant, reference: bool = True) -> MutantOutcome:
        """Probe ``mutant`` and run it through the entry points. ``reference=False`` for a program
        that is itself the bug (no unmutated program to compare the tensors at rest with)."""
        outcome = MutantOutcome(mutant)
        original = None
        if reference:
            if mutant.program.name not in self.original_states:
                self.original(mutant.program)
            original = self.original_states.get(mutant.program.name)
            if original is None:
                outcome.probe = "broken"
                return outcome
        cells = self._cells(mutant)
        offset = 1 if mutant.program.prepare else 0
        seen: dict[str, Any] = {}

        def observe(i: int) -> None:
            if i < len(cells) and i >= offset:
                seen[i] = (self._state(), self._findings())

        workspace = Workspace(mutant.files(), mutant.program.data)
        try:
            with workspace.active():
                failed, error = self._session(cells, workspace, observe)
                if failed is None:
                    outcome.probe = "equivalent"
                    return outcome
                outcome.failing_cell = failed
                text = str(error).strip()
                outcome.error = f"{type(error).__name__}: {text.splitlines()[0][:200] if text else ''}"
                line = _user_line(error, workspace)
                device_error = bool(_DEVICE_ERROR.search(text)) and not _ARGUMENT_ERROR.search(text)
                del error
        finally:
            workspace.remove()
        if failed < offset or not device_error:
            outcome.probe = "other error"
            return outcome
        outcome.probe = "effect"
        state, findings = seen[failed]
        host_names: frozenset[str] = frozenset()
        if original is not None:
            outcome.at_rest, outcome.at_rest_found = _at_rest(original[failed], state, findings)
            host_names = frozenset(n for n, d in original[failed].items() if not _accelerator(d)
                                   and state.get(n) == d)
        else:
            outcome.at_rest_found = any(f.severity in ("error", "warning") and f.fix is not None
                                        and (f.fix.code or f.fix.action or f.fix.edits) for f in findings)
        for entry in self.entries:
            if entry == "devices" and original is not None and not outcome.at_rest:
                continue  # nothing at rest to find: the culprit is made while the cell runs
            outcome.entries[entry], outcome.cause_removed[entry] = self._entry(mutant, cells, failed, line, entry,
                                                                               host_names)
        return outcome

    def _entry(self, mutant: Mutant, cells: list[str], failed: int, line: str, entry: str,
               host_names: frozenset[str]) -> tuple[Outcome, bool]:
        scenario = Scenario(0, mutant.program.name, mutant.kind, entry, tuple(cells[:failed]), cells[failed],
                            devices=mutant.program.devices, line=line,
                            after="\n".join(cells[failed + 1:]))
        workspace = Workspace(mutant.files(), mutant.program.data)
        try:
            with workspace.active():
                run = MutantRun(self.ip, scenario, self.device, workspace, host_names)
                outcome = run.run()
                # The printed edits the button leaves to the user (other cells, files) are made too.
                if run.fix is not None and entry == "button" and run.fix.action is not None:
                    for e in run.fix.edits:
                        if e.where.cell is None:
                            workspace.edit(e.where.file, [e])
                        elif e.where.cell in run.numbers:
                            (kind, index), text = run.numbers[e.where.cell]
                            if kind == "setup":
                                run.setup[index] = apply_lines(run.setup[index], [e]) or run.setup[index]
                edited = list(run.setup) + [run.failing_source] + cells[failed + 1:]
                workspace.write()
                removed = self._session(edited, workspace)[0] is None if outcome.verdict != "skip" else False
        finally:
            workspace.remove()
        return outcome, removed


def _accelerator(device: str) -> bool:
    return device not in ("cpu", "meta", "?")


def _at_rest(original: dict[str, str], state: dict[str, str], findings: list[Any]) -> tuple[tuple[str, ...], bool]:
    """The names the unmutated program has on the accelerator and the mutant on the host, before
    the failing cell; whether a finding with a fix names one of them (or a name below one)."""
    culprits = tuple(sorted(n for n, d in state.items() if not _accelerator(d) and _accelerator(original.get(n, "?"))))
    if not culprits:
        return (), False

    def about(name: str) -> bool:
        return any(name == c or c.startswith((name + ".", name + "[")) or name.startswith((c + ".", c + "["))
                   for c in culprits)

    found = any(f.fix is not None and (f.fix.code or f.fix.action or f.fix.edits)
                and (any(about(n) for n in f.names) or about(f.subject)) for f in findings)
    return culprits, found


def _user_line(error: BaseException, workspace: Workspace) -> str:
    """The innermost line of the user's code (a cell, a file of the program) in the traceback."""
    tb, found = error.__traceback__, ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name.startswith(str(workspace.dir)) or "ipython-input" in name or name.startswith("/tmp/ipykernel"):
            found = linecache.getline(name, tb.tb_lineno).strip() or found
        tb = tb.tb_next
    return found


def summary(outcome: MutantOutcome) -> dict[str, Any]:
    """The outcome as plain data (for JSON)."""
    return {
        "mutant": outcome.mutant.name, "program": outcome.mutant.program.name, "origin": outcome.mutant.program.origin,
        "kind": outcome.mutant.kind, "placement": outcome.mutant.placement.label if outcome.mutant.placement else "",
        "probe": outcome.probe, "failing_cell": outcome.failing_cell, "error": outcome.error,
        "at_rest": list(outcome.at_rest), "at_rest_found": outcome.at_rest_found,
        "entries": {e: {"verdict": o.verdict, "stage": o.stage, "reason": o.reason, "lost": o.lost,
                        "invented": o.invented, "fix": o.fix_text, "cause_removed": outcome.cause_removed.get(e)}
                    for e, o in outcome.entries.items()},
        "clean_findings": outcome.clean_findings,
    }


__all__ = ["Corpus", "Mutant", "MutantOutcome", "Workspace", "mutants", "summary", "replace"]
