"""The notebooks run end to end in a real kernel, and the shipped kernelspec autoloads."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from conftest import notebook, run_notebook
from frontend import Cell, Frontend

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def execute(nb, kernel_name="python3"):
    run_notebook(nb, timeout=180, kernel_name=kernel_name, resources={"metadata": {"path": str(NOTEBOOKS)}})
    return nb


def outputs_text(cell):
    parts = []
    for out in cell.outputs:
        parts.append(out.get("text", ""))
        parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


@pytest.mark.slow
def test_quickstart_teaches_the_three_magics_and_runs_top_to_bottom():
    nb = execute(nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4))
    code = [c for c in nb.cells if c.cell_type == "code"]
    failing = [c for c in code if any(o.get("output_type") == "error" for o in c.outputs)]
    # The lessons' cells fail, and only they, tagged so that Run All goes on past them.
    assert [c.source.splitlines()[0] for c in failing] == [
        "%%devcheck -v report", "features = torch.randn(4, 32)   # torch.randn makes it on the CPU",
        "out = step(cache[0])"]
    assert all(c.metadata["tags"] == ["raises-exception"] for c in failing)
    by_source = {c.source.splitlines()[0]: c for c in code}
    first = outputs_text(by_source["%devices"])
    assert "model.pos.pe is a plain tensor attribute" in first and "state tensors of opt" in first
    devices_bundle = next(o["data"] for o in by_source["%devices"].outputs if "text/html" in o.get("data", {}))
    assert "<table" in devices_bundle["text/html"]  # the static copy, an output of its own
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in by_source["%devices"].outputs)
    report = outputs_text(failing[0])
    assert "device mismatch in Tensor.add" in report and 'model.pos.register_buffer("pe"' in report
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in failing[0].outputs)
    applied = outputs_text(by_source["from devinspect import actions"])
    assert "✔" in applied and "8.0 KiB" in applied  # an action result shows itself
    counted = outputs_text(by_source["%%devcheck"])
    assert "host waits for the device 12 times" in counted and "comes back to it here" in counted
    fixed = next(c for c in code if c.source.startswith("batch = {k: v.to(device)"))
    assert "✖ error" not in outputs_text(fixed)
    gpumem = by_source["%gpumem"].outputs
    bundle = next(o["data"] for o in gpumem if "text/html" in o.get("data", {}))
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in gpumem)  # the dashboard
    assert "where the memory is" in bundle["text/plain"] and "<meter" in bundle["text/html"]
    history = outputs_text(by_source["%gpumem --untrack"])
    assert "memory per cell" in history and "activations = [torch.randn" in history
    assert any("image/png" in o.get("data", {}) for o in by_source["%gpumem --untrack"].outputs)
    profiled = outputs_text(by_source["%%gpumem -f train_step"])
    assert re.search(r"%%gpumem on (sim|cuda):0", profiled) and re.search(r"^line 2 .* x 2\.0 MiB", profiled, re.M)
    # The function's lines, its three runs added up (where Python has no sys.monitoring, a function's
    # lines are known from their allocations: no runs or before/after, the same change).
    # Under the line that called it (↳), as it ran.
    assert re.search(r"^↳ train_step, line 4 +(3|—) .* \+54\.0 MiB", profiled, re.M)
    assert "Peak " in profiled and "on train_step, line 6." in profiled and "Without the largest temporary" in profiled
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {})
               for o in by_source["%%gpumem -f train_step"].outputs)
    # After the fact: a plain failing cell explained, its printed fix run in the next cell.
    explained = outputs_text(failing[1])
    assert "device mismatch in F.linear" in explained
    assert "+ features = torch.randn(4, 32, device=device)" in explained  # the line that made it, edited
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in failing[1].outputs)
    edited = by_source["features = torch.randn(4, 32, device=device)   # torch.randn makes it on the CPU"]
    assert "torch.Size([4, 2])" in outputs_text(edited)
    out_of_memory = outputs_text(failing[2])
    assert "out of memory on sim:0: tried to allocate 256.0 MiB" in out_of_memory
    assert re.search(r"cache\[0…15\] +64\.0 MiB +16 × float32\[1024, 1024\]", out_of_memory)
    assert re.search(r"hidden in step +4\.0 MiB", out_of_memory) and "devinspect.release_history()" in out_of_memory
    why = outputs_text(by_source["%devices --why cache[0]"])
    # A path that runs as typed: the quickstart has not imported sys, so the path imports it.
    assert re.search(r"^  __import__\('sys'\)\.last_traceback(\.tb_next)*\.tb_frame\.f_locals\['x'\] +last error's traceback; "
                     r"a local of step", why, re.M)
    released = outputs_text(next(c for c in code if c.source.endswith("devinspect.release_history()")))
    assert "✔" in released and "4.0 MiB of tensors only they held" in released


@pytest.mark.slow
def test_devinspect_kernel_loads_the_extension_on_start():
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3-devinspect" not in KernelSpecManager().find_kernel_specs():
        pytest.fail("the package did not install the python3-devinspect kernelspec")
    nb = notebook(["import torch\nx = torch.zeros(3)\n%devices", "%load_ext devinspect"])
    execute(nb, kernel_name="python3-devinspect")
    assert re.search(r"^x +tensor +cpu +float32 +\[3\]", outputs_text(nb.cells[0]), re.M)
    assert nb.cells[1].outputs == []  # already loaded by the kernel: loading again says nothing


@pytest.mark.slow
def test_a_static_html_export_shows_the_tables_without_a_kernel_or_network():
    # nbclient saves the widgets' state, as JupyterLab can: nbconvert then draws a widget output
    # with a widget manager fetched from a CDN, blank offline. The static copies are outputs of
    # their own, so the exported page shows them whatever happens to the widgets.
    from nbconvert import HTMLExporter

    cells = ["%load_ext devinspect",
             "import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
             "model = torch.nn.Linear(4, 2).to(dev)\nsome_inputs = torch.randn(3, 4)",
             "%devices", "%gpumem", "%%gpumem\nbig = torch.ones(1 << 18, device=dev)"]
    nb = notebook(cells)
    execute(nb)
    assert "application/vnd.jupyter.widget-state+json" in nb.metadata.get("widgets", {})
    page, _ = HTMLExporter().from_notebook_node(nb)
    body = re.sub(r"<script.*?</script>", "", page, flags=re.S)  # what shows with scripts blocked or failing
    body = body.replace("<wbr/>", "").replace("<wbr>", "")  # a name's break opportunities between its parts
    devices = body[body.index("some_inputs"):]
    assert "<table" in body and "model.weight" in body and "some_inputs" in devices
    assert "<meter" in body and "where the memory is" in body  # %gpumem's static figures
    assert body.count('class="devinspect-static"') == 3
    profiled = body[body.index("%%gpumem on sim:0"):]
    assert 'alt="memory by line"' in profiled and "data:image/png;base64," in profiled  # %%gpumem's plot


#: The buttons a reader of the quickstart presses: the fixes, and what frees memory.
PRESSED = ("Apply fix", "Release history", "empty_cache")


@pytest.mark.slow
@pytest.mark.parametrize("pressing", ["the failed cells' buttons", "every button"])
def test_quickstart_runs_top_to_bottom_when_the_reader_presses_its_buttons(pressing):
    """Cell by cell in a kernel driven as JupyterLab drives it: after each cell, its Apply fix
    (and memory) buttons are pressed, and a cell with Re-run cell runs again. Every cell that is
    not meant to fail succeeds, and a failed cell fixed with its buttons runs once run again."""
    nb = nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4)
    lab = Frontend(cwd=str(NOTEBOOKS))
    fixed_by_rerun = []
    try:
        for source in (c for c in nb.cells if c.cell_type == "code"):
            cell = lab.run(Cell(source.source))
            meant_to_fail = "raises-exception" in source.metadata.get("tags", [])
            assert meant_to_fail or not cell.failed, f"{source.source}\n{cell.text_of_outputs()[-3000:]}"
            if not cell.failed and pressing != "every button":
                continue
            pressed = press_every_button(lab, cell)
            rerun = [w for top in cell.widget_ids() for w in lab.descendants(top)
                     if "Re-run cell" in str(lab.widgets[w].get("_esm", "")) and not lab.widgets[w].get("disabled")]
            if rerun and cell.failed:
                lab.run(cell)  # Re-run cell: the notebook runs the cell again, with the text its editor holds
                assert not cell.failed, f"{pressed}\n{cell.text_of_outputs()[-3000:]}"
                fixed_by_rerun.append(cell.text.splitlines()[0])
    finally:
        lab.close()
    assert fixed_by_rerun[-1] == "features = torch.randn(4, 32, device=device)   # torch.randn makes it on the CPU"
    if pressing != "every button":  # the fixes of %devices, pressed first, leave %%devcheck nothing to fix
        assert fixed_by_rerun[0] == "%%devcheck -v report"


def press_every_button(lab: Frontend, cell: Cell) -> list[str]:
    """Press each enabled button of ``cell`` that :data:`PRESSED` names, once, as the view redraws."""
    pressed, done = [], set()
    for _ in range(20):
        todo = [b for b in lab.find(cell, "ButtonModel") if b not in done and not lab.widgets[b].get("disabled")
                and lab.widgets[b].get("description", "").startswith(PRESSED)]
        if not todo:
            return pressed
        done.add(todo[0])
        pressed.append(lab.widgets[todo[0]]["description"])
        lab.click(todo[0])
    return pressed
