"""Every fix devinspect prints runs as printed and leaves the problem gone (the fix corpus).

For each case of ``fix_cases.py`` and each place its fix comes from (``%%devcheck``, the
explanation of the plain cell's error after the fact, or a ``%devices`` finding): run the setup cell, see the failing cell fail, take the fix
exactly as printed (its code as a cell; its source edits applied to the setup cell,
which runs again), run the failing cell again (it must work), and check that
``%devices`` shows no error finding. Then the same with the Apply fix button. On a
GPU the corpus runs again with ``cuda`` in place of the simulated device.
"""

from __future__ import annotations

import pytest
import torch
from conftest import run
from fix_cases import CASES, PRELUDE, Case

#: Cells (with their failing code) whose problem shows only in an assertion, not a device error.
ASSERTING = {"stale-optimizer-after-model-cell-ran-again", "memory-held-by-output-history"}


def params(device: str) -> list:
    out = []
    for case in CASES:
        # A device error %%devcheck explains is explained after the fact as well, from its traceback.
        sources = case.sources + (("explained",) if "devcheck" in case.sources else ())
        for source in sources:
            # A fix that is only an edit to the user's code has no button to click.
            for how in ("printed", "button") if "action" in case.expect else ("printed",):
                marks = [pytest.mark.cuda] if device.startswith("cuda") else []
                if "transformers" in case.tags:
                    marks.append(pytest.mark.slow)
                out.append(pytest.param(case, source, how, device, id=f"{case.name}-{source}-{how}-{device}",
                                        marks=marks))
    return out


def devices_for(device: str) -> tuple[str, str]:
    kind = device.split(":")[0]
    return f"{kind}:0", f"{kind}:1"


def text_for(case: Case, code: str, device: str) -> str:
    first, second = devices_for(device)
    return code.replace("DEVICE_0", first).replace("DEVICE_1", second).replace("DEVICE", device)


class Session:
    """One case in the test shell: cells run as a notebook would run them."""

    def __init__(self, ip, case: Case, device: str):
        self.ip, self.case, self.device = ip, case, device
        self.setup_source = text_for(case, PRELUDE + case.setup, device)

    def cell(self, code: str, *, must: str = "work") -> object:
        result, _, _, captured = run(self.ip, code)
        failed = result.error_in_exec is not None or result.error_before_exec is not None
        if must == "work":
            assert not failed, f"cell failed:\n{code}\n{captured.stdout[-3000:]}"
        elif must == "fail":
            assert failed, f"cell did not fail:\n{code}"
        return result

    def setup(self) -> int:
        result = self.cell(self.setup_source)
        if "history" in self.case.tags:
            self.cell("big")  # shown, so IPython's Out keeps it
            self.cell("del big")
        return result.execution_count

    def failing(self, must: str) -> None:
        self.cell(text_for(self.case, self.case.failing, self.device), must=must)

    def fix_from(self, source: str):
        if source == "devcheck":
            self.cell("%%devcheck -v devcheck_report\n" + text_for(self.case, self.case.failing, self.device),
                      must="fail")
            mismatch = self.ip.user_ns["devcheck_report"].mismatch
            assert mismatch is not None and mismatch.fix is not None, "no mismatch explained"
            return mismatch.fix
        if source == "explained":
            import devinspect

            self.failing(must="fail")
            explanation = devinspect.explain(namespace=self.ip.user_ns)  # the error the plain cell raised
            assert explanation.mismatch is not None, f"not explained: {explanation}"
            assert explanation.mismatch.fix is not None, f"no fix: {explanation}"
            return explanation.mismatch.fix
        self.failing(must="fail")
        view = self.ip.run_line_magic("devices", "-f")
        found = [f for f in view.findings if f.code == source]
        assert found, f"no {source} finding: {[f.message for f in view.findings]}"
        if len(found) == 1:
            return found[0].fix
        # One finding per tensor (an input each): the user applies each.
        from devinspect.diagnose.fix_builders import combine

        return combine([f.fix for f in found])

    def apply_edits(self, fix, setup_number: int) -> None:
        """The source edits, made exactly as printed to the cell they name, which then runs again."""
        lines = self.setup_source.split("\n")
        for edit in sorted(fix.edits, key=lambda e: -e.where.line):
            assert edit.where.cell == setup_number, f"{edit.where.where} is not the setup cell In[{setup_number}]"
            original = lines[edit.where.line - 1]
            assert original.strip() == edit.old, f"line {edit.where.line} is {original.strip()!r}, not {edit.old!r}"
            indent = original[: len(original) - len(original.lstrip())]
            if edit.new:
                lines[edit.where.line - 1] = indent + edit.new
            else:
                del lines[edit.where.line - 1]
        self.setup_source = "\n".join(lines)
        self.setup()

    def no_error_findings(self) -> None:
        view = self.ip.run_line_magic("devices", "-f")
        errors = [f.message for f in view.findings if f.severity == "error"]
        assert errors == [], errors


@pytest.mark.parametrize("case, source, how, device", params("sim:0") + params("cuda:0"))
def test_fix_runs_as_printed_and_the_problem_is_gone(ip, request, case, source, how, device):
    if device.startswith("cuda") and "DEVICE_1" in case.setup + case.failing and torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    if device.startswith("sim"):
        request.getfixturevalue("sim")  # the CUDA cases run without the simulated device in their process
    if "transformers" in case.tags:
        pytest.importorskip("transformers")
    session = Session(ip, case, device)
    try:
        number = session.setup()
        fix = session.fix_from(source)
        for key in case.expect:
            assert getattr(fix, key), f"the fix has no {key}: {fix}"
        if fix.code is None:
            assert fix.note or fix.edits, "a fix without code says what to do"
        if how == "printed":
            if fix.code:
                compile(fix.code, "<fix>", "exec")  # it compiles as printed
                session.cell(fix.code)
        else:
            click(fix, ip)
        if fix.code or how == "button":
            session.failing(must="work")
            if case.after:
                session.cell(text_for(case, case.after, device))
            session.no_error_findings()
        if fix.edits:
            # The edits keep the problem from coming back: the edited cells run from scratch.
            session.apply_edits(fix, number)
            session.failing(must="work")
            session.no_error_findings()
    finally:
        if case.teardown:
            ip.run_cell(case.teardown)


def click(fix, ip) -> None:
    """Apply fix as a user clicks it; a follow-up button (release graphs) is clicked when offered."""
    from devinspect.jupyter.fix_buttons import FixButton

    button = FixButton(fix, ip.user_ns, shell=ip)
    assert not button.button.disabled
    button.button.click()
    if button.status.value.startswith("✖") and button.follow_up.layout.display != "none":
        button.follow_up.click()
    assert button.status.value.startswith("✔"), button.status.value
