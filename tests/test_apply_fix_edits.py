"""Apply fix makes the edit its fix shows, in the cell that holds the line: after it, running the
cells again does not bring the problem back. Its outcome shows beside the button clicked."""

from __future__ import annotations

import pytest
from conftest import run

from devinspect.model.fixes import EditCell, Steps

SETUP = "import torch\nfrom devinspect import testing\ndev = testing.enable()\nmodel = torch.nn.Linear(3, 2).to(dev)"
MADE = "x = torch.ones(4, 3)"
EDITED = "x = torch.ones(4, 3, device=dev)"
USED = "y = model(x)"

MODULE = """class PE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.pe = torch.zeros(10, 4)

    def forward(self, x):
        return self.lin(x) + self.pe[: x.shape[0]]"""
BUILT = "model = PE().to(dev)"
CALLED = "y = model(torch.ones(3, 4, device=dev))"


def _cells(ip, *texts):
    return [run(ip, text)[0] for text in texts]


def _edits_of(action):
    if type(action) is EditCell:
        return [action.edit]
    if type(action) is Steps:
        return [e for step in action.actions for e in _edits_of(step)]
    return []


def test_a_devices_finding_that_shows_an_edit_makes_it_and_the_cells_run_clean_again(kernel_ip, sim):
    from devinspect.jupyter.fix_buttons import FixButton

    ip = kernel_ip
    _cells(ip, SETUP, MADE)
    made_in = ip.execution_count - 1
    (failed,) = _cells(ip, USED)
    assert failed.error_in_exec is not None
    ip.run_cell("view = %devices -o")
    (finding,) = [f for f in ip.user_ns["view"].findings if f.subject == "x"]
    assert [e.new for e in finding.fix.edits] == [EDITED]
    assert [e.where.cell for e in _edits_of(finding.fix.action)] == [made_in]  # the cell that holds the line
    button = FixButton(finding.fix, ip.user_ns, shell=ip)
    result = button.apply()
    assert result.ok, result.message
    assert f"Cell In[{made_in}], line 1 becomes: {EDITED}" in button.status.value
    # Run again as the notebook sends them (the editor's text): the bug does not come back.
    (again,) = _cells(ip, MADE)
    assert again.error_in_exec is None and ip.user_ns["x"].device.type == "sim"
    assert ip.rl_next_input == EDITED  # the notebook is asked to show what ran
    (used,) = _cells(ip, USED)
    assert used.error_in_exec is None


def test_a_register_buffer_fix_under_devcheck_makes_the_class_edit_too(kernel_ip, sim):
    ip = kernel_ip
    _cells(ip, SETUP, MODULE, BUILT)
    module_cell = ip.execution_count - 2
    (failed,) = _cells(ip, "%%devcheck -v rep\n" + CALLED)
    assert failed.error_in_exec is not None
    fix = ip.user_ns["rep"].mismatch.fix
    (edit,) = fix.edits
    assert edit.where.cell == module_cell and "register_buffer" in edit.new
    assert _edits_of(fix.action) == [edit]
    from devinspect.jupyter.fix_buttons import fix_panel

    panel = fix_panel(fix, ip.user_ns, shell=ip)
    panel.apply.button.click()
    assert panel.apply.status.value.startswith("✔"), panel.apply.status.value
    assert ip.user_ns["model"]._buffers["pe"].device.type == "sim"  # the live model, now
    # The class cell, the model's and the failing one, run again: the class makes a buffer.
    results = _cells(ip, MODULE, BUILT, CALLED)
    assert [r.error_in_exec for r in results] == [None, None, None]
    assert "pe" in ip.user_ns["model"]._buffers


def test_an_edit_of_a_file_is_said_to_be_made_by_hand(kernel_ip, sim, tmp_path):
    from devinspect.jupyter.fix_buttons import FixButton
    from devinspect.model.fixes import Fix, Move, SourceEdit
    from devinspect.model.records import SourceLine

    ip = kernel_ip
    _cells(ip, SETUP, MADE)
    path = tmp_path / "data.py"
    path.write_text("x = torch.ones(4, 3)\n")
    edit = SourceEdit(SourceLine(str(path), 1, "<module>", MADE), MADE, EDITED)
    button = FixButton(Fix("move x to sim:0", code='x = x.to("sim:0")', edits=(edit,), action=Move("x", "sim:0")),
                       ip.user_ns, shell=ip)
    assert button.apply().ok
    assert "Not made (not a notebook cell)" in button.status.value and "device=dev" in button.status.value


def test_the_outcome_of_apply_fix_in_devices_is_where_the_click_was(kernel_ip, sim):
    from devinspect.jupyter.devices_explorer import DevicesExplorer

    ip = kernel_ip
    _cells(ip, SETUP, MADE, USED)
    view = ip.run_line_magic("devices", "-o")
    explorer = DevicesExplorer(view, lambda: ip.run_line_magic("devices", "-o"), ip.user_ns, ["cpu", str(sim)],
                               shell=ip)
    rows = explorer.findings.children
    at = next(i for i, row in enumerate(rows) if "x" in row.children[0].value and len(row.children) > 1)
    rows[at].children[1].children[0].click()
    shown = explorer.findings.children[at].children
    # The finding is gone: its row's place says what the click did; nothing under the table.
    assert shown[0].value.startswith('<div style="margin:2px 0" class="devinspect-fix-result">✔ x = x.to(')
    assert "becomes: " + EDITED in shown[0].value
    assert explorer.status.value == ""


@pytest.mark.slow
def test_in_a_kernel_apply_fix_edits_the_cell_that_made_the_tensor():
    """JupyterLab's way: execute requests carry the editor's text and metadata.cellId."""
    from frontend import Cell, Frontend

    lab = Frontend()
    try:
        assert not lab.run("%load_ext devinspect").failed
        assert not lab.run(SETUP).failed
        made = lab.run(Cell(MADE))
        used = lab.run(Cell(USED))
        assert used.failed
        shown = lab.run(Cell("%devices --findings"))
        (button,) = lab.find(shown, "ButtonModel", description="Apply fix")
        lab.click(button)
        assert "becomes: " + EDITED in lab.html(shown)
        lab.run(made)  # the editor still holds the old text: the edited text runs, and is shown
        assert not made.failed and made.text == EDITED
        lab.run(used)
        assert not used.failed, used.text_of_outputs()
        lab.run(made)
        lab.run(used)
        assert not made.failed and not used.failed  # and again: the edit stays made
    finally:
        lab.close()
