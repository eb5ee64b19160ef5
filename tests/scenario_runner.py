"""Runs a generated scenario (:mod:`scenarios`) in an IPython shell and judges what devinspect said.

For a device mismatch: the setup cells run, the failing cell fails, and the fix comes from
the scenario's entry point (the explanation of the plain cell, ``%%devcheck``, a
``%devices`` finding, or the Apply fix button). The printed fix is then taken exactly as
printed: its code runs as a cell, its source edits are made to the cells they name (which
run again from there). The failing cell must then work, twice (a fix that only lasts one
run is a fix of the symptom); no tensor the user had may be lost or changed; the
optimizers must hold the same Parameters; and ``%devices`` must show no error.

Clean sessions must run with no error or warning finding; errors that are not device
mismatches must get no device explanation.
"""

from __future__ import annotations

import ast
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from scenarios import Scenario, devices_of


@dataclass
class Outcome:
    scenario: Scenario
    #: "pass", "fail", or "skip" (the scenario could not be set up here: a missing package or device).
    verdict: str = "pass"
    stage: str = ""
    reason: str = ""
    #: For mismatches: the explanation named the right devices and the failing line.
    stated: bool | None = None
    #: A tensor the user had is gone or changed.
    lost: bool = False
    #: An explanation or fix named a tensor that took no part in the failure.
    invented: bool = False
    #: A device explanation for an error that is not a device mismatch.
    false_explanation: bool = False
    #: Error or warning findings on a clean session.
    clean_findings: list[str] = field(default_factory=list)
    fix_text: str = ""

    def failed(self, stage: str, reason: str) -> Outcome:
        if self.verdict == "pass":
            self.verdict, self.stage, self.reason = "fail", stage, reason[:400]
        return self


class Skip(Exception):
    pass


class Failed(Exception):
    def __init__(self, stage: str, reason: str):
        super().__init__(f"{stage}: {reason}")
        self.stage, self.reason = stage, reason


@contextmanager
def shallow_recursion(frames: int = 100) -> Iterator[None]:
    """Runs with room for ``frames`` more frames than the caller's depth. An endless recursion
    then fails after a few hundred frames rather than thousands: the same RecursionError
    and the same explanation, but IPython formats a far shorter traceback (each frame it formats
    scans every loaded module, which made such a scenario take over a minute)."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(min(limit, depth + frames))
    try:
        yield
    finally:
        sys.setrecursionlimit(limit)


def fill(code: str, device: str) -> str:
    kind = device.split(":")[0]
    return code.replace("DEVTYPE", kind).replace("DEVICE_1", f"{kind}:1").replace("DEVICE", f"{kind}:0")


class ScenarioRun:
    """One scenario in a shell whose namespace it leaves as it found it."""

    def __init__(self, ip: Any, scenario: Scenario, device: str = "sim:0"):
        self.ip, self.s, self.device = ip, scenario, device
        self.setup = [fill(c, device) for c in scenario.setup]
        self.failing_source = fill(scenario.failing, device)
        #: execution count -> (("setup", i) or ("failing", 0), the text that ran)
        self.numbers: dict[int, tuple[tuple[str, int], str]] = {}
        self.outcome = Outcome(scenario)

    # -- cells ---------------------------------------------------------------------------

    def cell(self, code: str, where: tuple[str, int] | None = None) -> Any:
        from IPython.utils.capture import capture_output

        with capture_output() as captured:
            result = self.ip.run_cell(code, store_history=True)
        if where is not None and result.execution_count is not None:
            self.numbers[result.execution_count] = (where, code)
        result.captured = captured
        return result

    @staticmethod
    def error_of(result: Any) -> BaseException | None:
        return result.error_in_exec or result.error_before_exec

    def must_work(self, code: str, stage: str, where: tuple[str, int] | None = None) -> Any:
        result = self.cell(code, where)
        error = self.error_of(result)
        if error is not None:
            raise Failed(stage, f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
                                f"\n--- cell ---\n{code}")
        return result

    def run_setup(self, start: int = 0) -> None:
        for i in range(start, len(self.setup)):
            result = self.cell(self.setup[i], ("setup", i))
            error = self.error_of(result)
            if error is not None:
                if isinstance(error, (ImportError, ModuleNotFoundError)):
                    raise Skip(f"setup needs {error}")
                raise Skip(f"setup cell {i} failed: {type(error).__name__}: {error}")

    def run_failing(self) -> Any:
        return self.cell(self.failing_source, ("failing", 0))

    # -- the run -------------------------------------------------------------------------

    def run(self) -> Outcome:
        kind = self.device.split(":")[0]
        if "two_devices" in self.s.needs and kind == "cuda" and torch.cuda.device_count() < 2:
            self.outcome.verdict, self.outcome.reason = "skip", "needs two GPUs"
            return self.outcome
        if "device_generator" in self.s.needs and kind != "cuda":
            # A device written in Python cannot make a generator of its own (PyTorch asks its C++ hooks).
            self.outcome.verdict, self.outcome.reason = "skip", "the simulated device has no generators"
            return self.outcome
        before = set(self.ip.user_ns)
        out_before = set(self.ip.user_ns.get("Out", {}))
        try:
            self.run_setup()
            {"mismatch": self.mismatch, "device_error": self.mismatch, "clean": self.clean, "other": self.other,
             "stale": self.stale}[self.s.kind]()
        except Skip as exc:
            self.outcome.verdict, self.outcome.reason = "skip", str(exc)[:300]
        except Failed as exc:
            self.outcome.failed(exc.stage, exc.reason)
        finally:
            self.cleanup(before, out_before)
        return self.outcome

    def cleanup(self, before: set[str], out_before: set[int]) -> None:
        ns = self.ip.user_ns
        if "torch._dynamo" in sys.modules:
            # Compiled code keeps guards on this namespace: gone with the scenario, as on a restart.
            torch._dynamo.reset()
        for name in set(ns) - before:
            del ns[name]
        for key in set(ns.get("Out", {})) - out_before:
            del ns["Out"][key]
            self.ip.user_ns_hidden.pop(f"_{key}", None)
        for name in ("last_traceback", "last_value", "last_type", "last_exc"):
            if hasattr(sys, name):
                setattr(sys, name, None)
        self.ip.displayhook.flush()  # no output of this scenario stays in _, __, ___
        # flush empties them in the namespace only: the hidden copies must agree, or IPython
        # takes them for the user's own and never sets _ again.
        self.ip.push({"_": "", "__": "", "___": ""}, interactive=False)
        self.ip.run_cell("pass")  # a clean last execution result
        torch.__future__.set_swap_module_params_on_conversion(False)
        torch.set_default_device(None)  # a scenario that set a default device leaves none behind
        gc.collect()

    # -- kinds -----------------------------------------------------------------------------

    def clean(self) -> None:
        self.must_work(self.failing_source, "clean cell")
        self.must_work(self.failing_source, "clean cell, again")
        findings = self.findings()
        bad = [f"{f.severity}: {f.message}" for f in findings if f.severity in ("error", "warning")]
        result = self.cell("%%devcheck -v _scenario_report\n" + self.failing_source)
        report = self.ip.user_ns.get("_scenario_report")
        if self.error_of(result) is not None:
            bad.append(f"%%devcheck made the clean cell fail: {self.error_of(result)!r}")
        elif report is not None:
            bad += [f"%%devcheck {f.severity}: {f.message}" for f in report.findings if f.severity in ("error", "warning")]
            if report.mismatch is not None:
                bad.append("%%devcheck explained a mismatch")
        if bad:
            self.outcome.clean_findings = bad
            raise Failed("clean findings", "; ".join(bad))

    def other(self) -> None:
        import devinspect

        with shallow_recursion():
            result = self.run_failing()
        error = self.error_of(result)
        if error is None:
            raise Skip("the error did not happen")
        explanation = devinspect.explain(error, namespace=self.ip.user_ns)
        said = []
        for explained in (explanation.mismatch, getattr(explanation, "device_error", None)):
            if explained is not None:
                said.append(f"plain cell explained as a device error: {explained.summary().splitlines()[0]}")
        with shallow_recursion():
            self.cell("%%devcheck -v _scenario_report\n" + self.failing_source)
        report = self.ip.user_ns.get("_scenario_report")
        for explained in (report.mismatch, getattr(report, "device_error", None)) if report is not None else ():
            if explained is not None:
                said.append(f"%%devcheck explained a device error: {explained.summary().splitlines()[0]}")
        if said:
            self.outcome.false_explanation = True
            raise Failed("false explanation", "; ".join(said))

    def stale(self) -> None:
        result = self.run_failing()
        if not isinstance(self.error_of(result), AssertionError):
            raise Skip(f"the stale optimizer did not show: {self.error_of(result)!r}")
        found = [f for f in self.findings() if f.code == "stale-optimizer"]
        if not found:
            raise Failed("finding", "no stale-optimizer finding")
        fix = found[0].fix
        self.apply_printed(fix, lost_check=False)

    def mismatch(self) -> None:
        fix = self.fix_from_entry()
        if fix is None:
            raise Failed("fix", "no fix")
        self.outcome.fix_text = "\n".join(filter(None, [fix.summary, fix.code, *(f"{e.old} -> {e.new}" for e in fix.edits),
                                                        fix.note]))
        self.judge_blame(fix)
        if self.s.entry == "button":
            self.apply_button(fix)
        else:
            self.apply_printed(fix)

    def fix_from_entry(self) -> Any:
        """The fix the scenario's entry point offers. The failed cell's error is not kept here:
        only the shell holds it, as in a notebook (and devinspect's release reaches it there)."""
        result = self.run_failing()
        error = self.error_of(result)
        del result
        if error is None:
            raise Skip("the failing cell worked")
        entry = self.s.entry
        wanted = "device_error" if self.s.kind == "device_error" else "mismatch"
        if entry in ("plain", "button"):
            import devinspect

            explanation = devinspect.explain(error, namespace=self.ip.user_ns)
            del error
            mismatch = getattr(explanation, wanted, None)  # a devinspect without the field explained nothing
            if mismatch is None:
                self.outcome.stated = False
                raise Failed("explanation", f"not explained: {explanation.note or explanation.kind}")
            self.judge_statement(mismatch)
            return mismatch.fix
        del error
        if entry == "devcheck":
            self.cell("%%devcheck -v _scenario_report\n" + self.failing_source, ("failing", 0))
            report = self.ip.user_ns.get("_scenario_report")
            mismatch = getattr(report, wanted, None) if report is not None else None
            if mismatch is None:
                self.outcome.stated = False
                raise Failed("explanation", f"%%devcheck explained no {wanted}")
            self.judge_statement(mismatch)
            return mismatch.fix
        findings = [f for f in self.findings() if f.fix is not None and (f.fix.code or f.fix.action or f.fix.edits)]
        errors = [f for f in findings if f.severity == "error"] or [f for f in findings if f.severity == "warning"] \
            or [f for f in findings if f.severity == "hint"]
        if not errors:
            raise Failed("finding", "%devices found nothing to fix")
        from devinspect.diagnose.fix_builders import combine

        return combine([f.fix for f in errors])

    # -- judging ------------------------------------------------------------------------------

    def judge_statement(self, mismatch: Any) -> None:
        expected = devices_of(self.s.devices, self.device)
        lines = {w.text.strip() for w in (mismatch.cell_line, mismatch.user_frame) if w is not None}
        if self.s.kind == "device_error":  # the kind of error it is, said at the right line
            right_devices = mismatch.kind == self.s.error_kind
            expected = frozenset({self.s.error_kind})
        else:
            right_devices = set(mismatch.devices) == set(expected)
        right_line = self.s.line.strip() in lines
        self.outcome.stated = right_devices and right_line
        blamed = {o.name for o in mismatch.operands if o.name}
        if any(d in blamed or any(n.startswith(d + ".") or n.startswith(d + "[") for n in blamed) for d in self.s.decoys):
            self.outcome.invented = True
            raise Failed("statement", f"blames an unrelated tensor: {sorted(blamed)}")
        if not self.outcome.stated:
            said = sorted(getattr(mismatch, "devices", None) or (getattr(mismatch, "kind", ""),))
            raise Failed("statement", f"said {said} at {sorted(lines)}; "
                                      f"expected {sorted(expected)} at {self.s.line!r}")

    def judge_blame(self, fix: Any) -> None:
        import re

        text = " ".join(filter(None, [fix.code, *(e.new for e in fix.edits)]))
        for decoy in self.s.decoys:
            if re.search(rf"(?<![\w.]){re.escape(decoy)}\b", text):
                self.outcome.invented = True
                raise Failed("fix", f"the fix touches {decoy}, which took no part: {text[:200]}")

    # -- applying ---------------------------------------------------------------------------

    def apply_printed(self, fix: Any, lost_check: bool = True) -> None:
        if not fix.code and not fix.edits:
            raise Failed("fix", f"nothing runnable: {fix.summary} / {fix.note}")
        if fix.code:
            kept = self.keep() if lost_check else None
            self.must_work(fix.code, "fix code as printed")
            if kept is not None:
                self.check_kept(kept, fix.code)
            self.rerun("after the printed code")
        if fix.edits:
            self.apply_edits(fix.edits)

    def apply_button(self, fix: Any) -> None:
        from devinspect.jupyter.fix_buttons import FixButton

        if fix.action is None:
            # No button: the printed edits are the fix (re-running the cell alone cannot work).
            self.apply_printed(fix)
            return
        kept = self.keep()
        button = FixButton(fix, self.ip.user_ns, shell=self.ip)
        button.button.click()
        released = button.status.value.startswith("✖") and button.follow_up.layout.display != "none"
        if released:
            button.follow_up.click()  # graphs released: their tensors are detached, under the same names
        if not button.status.value.startswith("✔"):
            raise Failed("button", button.status.value)
        self.check_kept(kept, fix.code or "", rebinds=released)
        self.rerun_edited_cells(fix)
        self.rerun("after Apply fix")

    def rerun_edited_cells(self, fix: Any) -> None:
        """The earlier cells Apply fix edited run again, as the fix says to, from the first of them:
        the notebook still sends their old text, and they run as edited."""
        from devinspect.diagnose.edit_checks import carried_edits

        edited = sorted(self.numbers[e.where.cell][0][1] for e in carried_edits(fix.action)
                        if e.where.cell in self.numbers and self.numbers[e.where.cell][0][0] == "setup")
        if edited:
            try:
                self.run_setup(edited[0])
            except Skip as exc:
                raise Failed("edited cells", str(exc)) from None
            self.ip.rl_next_input = None

    def rerun(self, stage: str) -> None:
        for attempt in ("", ", a second time"):
            result = self.run_failing()
            shown = getattr(self.ip, "rl_next_input", None)
            if shown:  # the cell ran edited (Apply fix on an edit of this cell): the notebook shows that text now
                self.failing_source = shown
                self.ip.rl_next_input = None
            error = self.error_of(result)
            if error is not None:
                text = str(error).strip().splitlines()[0] if str(error).strip() else ""
                raise Failed(stage + attempt, f"{type(error).__name__}: {text}")
        if self.s.after:
            self.must_work(fill(self.s.after, self.device), stage + ", the checks after")
        errors = [f.message for f in self.findings() if f.severity == "error"]
        if errors:
            raise Failed(stage + ", %devices", "; ".join(errors))

    def apply_edits(self, edits: Any) -> None:
        by_cell: dict[int, list[Any]] = {}
        for edit in edits:
            if edit.where.cell not in self.numbers:
                raise Failed("edit", f"{edit.where.where} is not a cell of this session")
            by_cell.setdefault(edit.where.cell, []).append(edit)
        first_setup = None
        for number, cell_edits in by_cell.items():
            (kind, index), text = self.numbers[number]
            edited = apply_lines(text, cell_edits)
            if edited is None:
                lines = text.split("\n")
                e = cell_edits[0]
                found = lines[e.where.line - 1].strip() if e.where.line - 1 < len(lines) else "(no such line)"
                raise Failed("edit", f"line {e.where.line} is {found!r}, not {e.old!r}")
            if kind == "setup":
                self.setup[index] = edited
                first_setup = index if first_setup is None else min(first_setup, index)
            else:
                # A %%devcheck cell's edit: the cell's body is the failing code.
                self.failing_source = edited.split("\n", 1)[1] if edited.startswith("%%") else edited
        if first_setup is not None:
            try:
                self.run_setup(first_setup)
            except Skip as exc:
                raise Failed("edited cells", str(exc)) from None
        self.rerun("after the edits")

    # -- what the user had -----------------------------------------------------------------------

    def keep(self) -> dict[str, Any]:
        """Every tensor the user can name now, with a host copy of its value, and the optimizers' Parameters."""
        import devinspect

        kept: dict[str, Any] = {}
        result = devinspect.scan(self.ip.user_ns, exclude=self.shell_names())
        for r in result.records:
            if r.hidden or r.kind in ("unnamed", "error") or r.name.startswith("<"):
                continue
            if "._hf_hook." in r.name:
                continue  # accelerate's cache of tied weights, keyed by address: dispatch makes it again
            try:
                value = eval(r.name, self.ip.user_ns)  # names devinspect prints are typeable
            except Exception:  # a name we cannot evaluate cannot be checked
                continue
            if not isinstance(value, torch.Tensor) or value.layout != torch.strided or value.is_meta:
                continue
            with torch.no_grad():
                kept[r.name] = value.detach().to("cpu").clone() if value.numel() < 200_000 else None
        optimizers = {n: [id(p) for g in v.param_groups for p in g["params"]] for n, v in self.ip.user_ns.items()
                      if isinstance(v, torch.optim.Optimizer)}
        kept["__optimizers__"] = optimizers
        shell = set(self.shell_names())
        kept["__bindings__"] = {n: v for n, v in self.ip.user_ns.items()
                                if not n.startswith("_") and n not in shell}
        return kept

    def check_kept(self, kept: dict[str, Any], code: str = "", rebinds: bool = False) -> None:
        optimizers = kept.pop("__optimizers__")
        bindings = kept.pop("__bindings__")
        # The fix binds only the names it assigns on purpose (x = x.to(dev)): a loop variable or a
        # helper name left behind would take the place of a variable of the user's.
        assigned = {t.id for node in ast.parse(code).body if isinstance(node, (ast.Assign, ast.AugAssign))
                    for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                    for t in ast.walk(t) if isinstance(t, ast.Name)}
        shell = set(self.shell_names())
        for name, value in self.ip.user_ns.items():
            if name.startswith("_") or name in assigned or name in ("torch", "devinspect"):
                continue
            if name not in bindings and name not in shell:
                raise Failed("lost", f"the fix left a new variable {name} behind")
            if name in bindings and bindings[name] is not value and not rebinds:
                self.outcome.lost = True
                raise Failed("lost", f"the fix rebound {name}, a variable of the user's")
        for name, value in kept.items():
            try:
                now = eval(name, self.ip.user_ns)
            except Exception as exc:
                self.outcome.lost = True
                raise Failed("lost", f"{name} is gone ({type(exc).__name__}: {exc})") from None
            if not isinstance(now, torch.Tensor):
                self.outcome.lost = True
                raise Failed("lost", f"{name} is now a {type(now).__name__}")
            if value is not None:
                with torch.no_grad():
                    same = now.detach().to("cpu")
                if name in assigned and same.dtype != value.dtype:
                    value = value.to(same.dtype)  # the fix assigns it in the dtype the user's own line converts to
                if same.shape != value.shape or same.dtype != value.dtype or not torch.equal(same, value):
                    self.outcome.lost = True
                    raise Failed("lost", f"{name} changed its value")
        for name, ids in optimizers.items():
            opt = self.ip.user_ns.get(name)
            if isinstance(opt, torch.optim.Optimizer) and [id(p) for g in opt.param_groups for p in g["params"]] != ids:
                self.outcome.lost = True
                raise Failed("lost", f"{name} holds other Parameters now")

    def findings(self) -> list[Any]:
        from IPython.utils.capture import capture_output

        with capture_output():
            view = self.ip.run_line_magic("devices", "-f")
        return list(view.findings) if view is not None else []

    def shell_names(self) -> list[str]:
        from devinspect.collect.namespace.names import shell_names

        return shell_names(self.ip)


def apply_lines(text: str, edits: Any) -> str | None:
    """``text`` with each printed edit made by hand, as a user would: the numbered line replaced
    by the edit's new text (several lines keep the old line's indent); None when a line differs."""
    lines = text.split("\n")
    for edit in sorted(edits, key=lambda e: -e.where.line):
        index = edit.where.line - 1
        if not 0 <= index < len(lines) or lines[index].strip() != edit.old.strip():
            return None
        original = lines[index]
        indent = original[: len(original) - len(original.lstrip())]
        lines[index: index + 1] = [indent + part if part else part for part in edit.new.split("\n")] if edit.new else []
    return "\n".join(lines)
