"""The notebooks run end to end in a real kernel, and the shipped kernelspec autoloads."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def execute(nb, kernel_name="python3"):
    NotebookClient(nb, timeout=180, kernel_name=kernel_name, resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    return nb


def outputs_text(cell):
    parts = []
    for out in cell.outputs:
        parts.append(out.get("text", ""))
        parts.append(out.get("data", {}).get("text/plain", ""))
    return "\n".join(parts)


@pytest.mark.slow
def test_quickstart_runs_and_shows_findings_then_none():
    nb = execute(nbformat.read(NOTEBOOKS / "quickstart.ipynb", as_version=4))
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(o.get("output_type") != "error" for c in code for o in c.outputs)
    by_source = {c.source.splitlines()[0]: c for c in code}
    first = outputs_text(by_source["%devices"])
    assert "model.pos.pe is a plain tensor attribute" in first
    assert "state tensors of opt" in first
    html = "".join(o.get("data", {}).get("text/html", "") for o in by_source["%devices"].outputs)
    assert "<table" in html
    fixed = next(c for c in code if c.source.startswith("model.pos.register_buffer"))
    assert "No findings." in outputs_text(fixed)
    state = outputs_text(by_source["%devices opt --kind optimizer_state --sort bytes"])
    assert 'opt.state[model.embed.weight]["exp_avg"]' in state
    gpumem = by_source["%gpumem"].outputs
    bundle = next(o["data"] for o in gpumem if "text/html" in o.get("data", {}))
    assert "application/vnd.jupyter.widget-view+json" in bundle  # a kernel: the dashboard
    assert "where the memory is" in bundle["text/plain"] and "<meter" in bundle["text/html"]
    history = outputs_text(by_source["%gpumem --untrack"])
    assert "memory per cell" in history and "activations = [torch.randn" in history
    assert any("image/png" in o.get("data", {}) for o in by_source["%gpumem --untrack"].outputs)


@pytest.mark.slow
def test_devinspect_kernel_loads_the_extension_on_start():
    from jupyter_client.kernelspec import KernelSpecManager

    if "python3-devinspect" not in KernelSpecManager().find_kernel_specs():
        pytest.fail("the package did not install the python3-devinspect kernelspec")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch\nx = torch.zeros(3)\n%devices"),
                                         nbformat.v4.new_code_cell("%load_ext devinspect")])
    execute(nb, kernel_name="python3-devinspect")
    assert re.search(r"^x +tensor +cpu +float32 +\[3\]", outputs_text(nb.cells[0]), re.M)
    assert nb.cells[1].outputs == []  # already loaded by the kernel: loading again says nothing
