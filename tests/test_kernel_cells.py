"""A real kernel driven as JupyterLab drives it (tests/frontend.py): execute requests with the
editor's text and ``metadata.cellId``, buttons clicked through their comm messages."""

from __future__ import annotations

import pytest
from frontend import Cell, Frontend

pytestmark = pytest.mark.slow

SETUP = ("import torch\nfrom torch import nn\nfrom devinspect import testing\ndevice = testing.enable()\n"
         "model = nn.Linear(32, 2).to(device)")
FAILING = "features = torch.randn(4, 32)\nscores = model(features)"
EDITED = "features = torch.randn(4, 32, device=device)\nscores = model(features)"


@pytest.fixture(scope="module")
def lab():
    frontend = Frontend()
    try:
        assert not frontend.run("%load_ext devinspect").failed
        assert not frontend.run(SETUP).failed
        yield frontend
    finally:
        frontend.close()


def apply_fix_button(lab: Frontend, cell: Cell) -> str:
    (button,) = lab.find(cell, "ButtonModel", description="Apply fix")
    return button


def test_apply_fix_then_rerun_runs_the_edited_cell_and_the_editor_shows_it(lab):
    cell = lab.run(Cell(FAILING))
    assert cell.failed and cell.reply["ename"] == "RuntimeError"
    lab.click(apply_fix_button(lab, cell))
    assert "becomes: features = torch.randn(4, 32, device=device)" in lab.html(cell)
    assert cell.text == FAILING  # the editor holds the old text until the cell runs again
    lab.run(cell)  # Re-run cell: the notebook sends the editor's (unchanged) text
    assert not cell.failed, cell.text_of_outputs()
    assert cell.reply["payload"] == [{"source": "set_next_input", "text": EDITED, "replace": True}]
    assert cell.text == EDITED  # the editor shows what ran
    # The history holds what ran, raw and transformed; the edit is spent.
    probe = lab.run(f"_ih[{cell.execution_count}] == {EDITED!r} and "
                    f"get_ipython().history_manager.input_hist_raw[{cell.execution_count}] == {EDITED!r}")
    assert "True" in probe.text_of_outputs()
    again = lab.run(cell)
    assert not again.failed and again.reply["payload"] == []


def test_the_async_path_runs_the_edited_cell_too(lab):
    # Top-level await: ipykernel transforms the cell itself and calls run_cell_async with it.
    cell = lab.run(Cell("import asyncio\nawait asyncio.sleep(0)\n" + FAILING))
    assert cell.failed
    lab.click(apply_fix_button(lab, cell))
    lab.run(cell)
    assert not cell.failed, cell.text_of_outputs()
    assert cell.text == "import asyncio\nawait asyncio.sleep(0)\n" + EDITED


def test_an_edited_run_that_fails_otherwise_keeps_running_as_edited_until_it_succeeds(lab):
    lab.run("broken = True")
    text = FAILING + "\nassert not broken, 'something else'"
    cell = lab.run(Cell(text))
    lab.click(apply_fix_button(lab, cell))
    lab.run(cell)
    # JupyterLab keeps the editor's text when a run fails: the edited text ran, and says so.
    assert cell.failed and cell.reply["ename"] == "AssertionError" and cell.text == text
    assert "ran the cell as Apply fix edited it" in cell.text_of_outputs()
    lab.run("broken = False")
    lab.run(cell)
    assert not cell.failed and cell.text.startswith("features = torch.randn(4, 32, device=device)")


def test_an_edit_belongs_to_its_cell_and_to_its_text(lab):
    cell, twin = lab.run(Cell(FAILING)), Cell(FAILING)
    lab.click(apply_fix_button(lab, cell))
    lab.run(twin)  # another cell with the same text: not the one fixed
    assert twin.failed and twin.text == FAILING
    cell.text = FAILING + "\nprint('typed')"  # the user changed the cell before running it again
    lab.run(cell)
    assert cell.failed and cell.text.endswith("print('typed')")
    assert "was dropped: you changed the cell since" in cell.text_of_outputs()  # said, not silent
    cell.text = FAILING
    lab.run(cell)  # the edit was of text that is gone: the text runs as written
    assert cell.failed and cell.text == FAILING


def test_a_devcheck_cell_fixed_with_its_buttons_runs_and_shows_the_edit(lab):
    cell = lab.run(Cell("%%devcheck -v report\n" + FAILING))
    assert cell.failed and "device mismatch" in cell.text_of_outputs()
    lab.click(apply_fix_button(lab, cell))
    lab.run(cell)
    assert not cell.failed and cell.text == "%%devcheck -v report\n" + EDITED


def test_a_failed_cells_explanation_and_buttons_come_before_its_traceback(lab):
    import re

    def traceback_of(cell: Cell) -> list[str]:
        (error,) = [o for o in cell.outputs if o["output_type"] == "error"]
        return [re.sub(r"In\[\d+\]", "In[N]", line) for line in error["traceback"]]

    cell = lab.run(Cell(FAILING))
    kinds = [o["output_type"] for o in cell.outputs]
    assert kinds[-1] == "error" and kinds.count("error") == 1
    first = cell.outputs[0]["data"]["text/plain"]
    assert first.startswith("devinspect: device mismatch in F.linear")
    assert "features = torch.randn(4, 32, device=device)" in first
    assert cell.outputs[1]["data"].get("application/vnd.jupyter.widget-view+json")  # Apply fix, Re-run cell
    assert lab.find(cell, "ButtonModel", description="Apply fix")
    # The error is the error a plain kernel sends: the same name, value and traceback text.
    lab.run("%config DevInspect.explain_errors = False")
    plain = lab.run(Cell(FAILING))
    lab.run("%config DevInspect.explain_errors = True")
    assert [o["output_type"] for o in plain.outputs] == ["error"]
    assert (plain.reply["ename"], plain.reply["evalue"]) == (cell.reply["ename"], cell.reply["evalue"])
    assert traceback_of(plain) == traceback_of(cell)


@pytest.mark.parametrize("text", ["%devices", "%gpumem", FAILING, "%%devcheck\n" + FAILING,
                                  "%%gpumem\nx = torch.randn(64, 64, device=device)\ndel x"])
def test_a_rerun_closes_the_widgets_of_the_cells_previous_output(lab, text):
    cell = lab.run(Cell(text))
    first = [w for top in cell.widget_ids() for w in lab.descendants(top)]
    assert first
    alive = len(lab.alive())
    for _ in range(3):
        lab.run(cell)
    assert len(lab.alive()) == alive  # the same cell's outputs replace each other: flat
    assert all(lab.widgets[w] is None for w in first)  # the first output's widgets are closed
    other = lab.run(Cell(text))  # another cell's output stays
    assert all(lab.widgets[w] is not None for top in cell.widget_ids() for w in lab.descendants(top))
    assert other.widget_ids()


def test_a_cell_run_inside_its_panel_closes_what_its_previous_run_there_showed(lab):
    # Where the Re-run button finds no notebook, the cell runs inside the panel (its Output).
    cell = lab.run(Cell(FAILING))
    (rerun,) = [w for top in cell.widget_ids() for w in lab.descendants(top)
                if "Re-run cell" in str(lab.widgets[w].get("_esm", ""))]
    before = set(lab.alive())
    lab.send_custom(rerun, {"event": "no-notebook"})
    shown = set(lab.alive()) - before  # what that run showed in the panel (its explanation's panel)
    assert lab.find(cell, "ButtonModel", description="Apply fix") and len(shown) > 5
    lab.send_custom(rerun, {"event": "no-notebook"})
    assert all(lab.widgets[w] is None for w in shown) and len(lab.alive()) == len(before) + len(shown)


def test_an_assignment_shows_nothing_and_makes_no_widget(lab):
    made = len(lab.widgets)
    cell = lab.run("r = %devices\nsnap = %gpumem -o --no-tensors\nhistory = %gpumem --history -o")
    assert not cell.failed and cell.outputs == [] and len(lab.widgets) == made
    assert "True" in lab.run("r.records[0].name == 'model.weight' and snap.devices != ()").text_of_outputs()
