"""%%devcheck through a real shell and a real kernel."""

from __future__ import annotations

import pytest
from conftest import notebook, run, run_notebook
from nbclient.exceptions import CellExecutionError

from devinspect.model.fixes import EditCell, Move, Steps

SETUP = """
import torch
from torch import nn
from devinspect import testing
dev = testing.enable()
model = nn.Linear(8, 3).to(dev)
x = torch.randn(4, 8)
"""


def test_mismatch_report_above_the_reraised_error(ip):
    ip.run_cell(SETUP)
    result, text, html, captured = run(ip, "%%devcheck -v rep\ny = model(x)\n")
    number = result.execution_count
    assert type(result.error_in_exec).__name__ == "RuntimeError"
    # Named the way IPython names the line in its traceback: the magic's line is line 1.
    assert f"device mismatch in F.linear (cpu, sim:0) at Cell In[{number}], line 2: y = model(x)" in text
    assert text.count('x = x.to("sim:0")') == 1  # the fix, once
    assert "<b>devcheck</b>" in html
    # One traceback, after the report, starting in the user's cell, without devinspect's frames.
    out = captured.stdout
    assert out.count("Traceback (most recent call last)") == 1
    assert f"Cell In[{number}], line 2" in out and "devinspect/observe/" not in out and "devinspect/testing/" not in out
    rep = ip.user_ns["rep"]
    # The live tensor moves, and each cell line the fix shows is edited where it is (its cell runs edited next).
    fix = rep.mismatch.fix
    edits = tuple(EditCell(e) for e in fix.edits)
    assert fix.action == (Steps((Move("x", "sim:0"), *edits)) if edits else Move("x", "sim:0"))


def test_counts_per_cell_line_and_the_cell_value_still_shows(ip):
    ip.run_cell(SETUP)
    cell = "%%devcheck -v rep\nxs = x.to(dev)\ntotal = 0.0\nfor i in range(3):\n    total += model(xs).sum().item()\nround(total, 3)\n"
    result, text, _, _ = run(ip, cell)
    assert result.error_in_exec is None
    # The cell's value is shown as a plain cell shows it: through the display hook, as Out[N].
    assert result.result == round(float(ip.user_ns["total"]), 3) and ip.user_ns["_"] == result.result
    rep = ip.user_ns["rep"]
    by_line = {s.where.line: s for s in rep.lines}
    assert by_line[2].h2d_count == 1 and by_line[2].h2d_bytes == 4 * 8 * 4
    assert dict(by_line[5].syncs) == {".item()": 3}
    assert [s.where.line for s in rep.lines] == [2, 5]  # in the order the cell reads
    assert "devcheck: 1 host→device (128 B)" in text
    assert rep.frame.set_index("line").loc[5, "syncs"] == 3


def test_what_a_cell_hands_to_torchscript_is_said_to_be_uncounted(ip):
    ip.run_cell(SETUP + """
import warnings
warnings.simplefilter("ignore")
class Act(nn.Module):
    def forward(self, t):
        return t.cpu().relu()
traced = torch.jit.trace(Act().to(dev), torch.ones(2, device=dev))
holder = nn.Sequential(nn.Identity(), traced)
def plain(t):
    return t * 2
xs = x.to(dev)
""")
    result, text, html, _ = run(ip, "%%devcheck -v rep\na = traced(xs)\nb = holder.forward(xs)\nc = plain(xs).cpu()\n")
    assert result.error_in_exec is None
    rep = ip.user_ns["rep"]
    assert rep.unseen == ("traced is a TorchScript module (TopLevelTracedModule)",
                          "holder holds a TorchScript module, holder[1]")
    assert "not counted: traced is a TorchScript module" in text and "not counted: holder holds" in html
    # What Python runs is counted as before: the one copy the cell makes itself.
    assert rep.totals["d2h_count"] == 1 and [s.where.line for s in rep.lines] == [4]
    # A cell without TorchScript says nothing of it.
    _, text, _, _ = run(ip, "%%devcheck -v rep\nc = plain(xs).cpu()\n")
    assert ip.user_ns["rep"].unseen == () and "not counted" not in text


def test_nested_magics_and_history(ip):
    ip.run_cell(SETUP)
    result, text, _, _ = run(ip, "%%devcheck\nr = %devices\nz = x * 2\n")
    assert result.error_in_exec is None
    assert ip.user_ns["r"].records and "z" in ip.user_ns


def test_quiet_prints_only_when_something_was_found(ip):
    ip.run_cell(SETUP)
    _, text, _, _ = run(ip, "%%devcheck --quiet\nz = x + 1\n")
    assert "devcheck" not in text
    _, text, _, _ = run(ip, "%%devcheck --quiet\nfor _ in range(12):\n    model(x.to(dev)).sum().item()\n")
    assert "host waits for the device 12 times" in text


def test_strict_raises_a_short_error(ip):
    ip.run_cell(SETUP)
    result, _, _, captured = run(ip, "%%devcheck --strict\nfor _ in range(12):\n    float(model(x.to(dev)).sum().detach())\n")
    assert type(result.error_in_exec).__name__ == "DeviceCheckError"
    assert "Traceback" not in captured.stdout


def test_bad_arguments(ip):
    result, _, _, _ = run(ip, "%%devcheck -v 3bad\nx = 1\n")
    assert type(result.error_in_exec).__name__ == "UsageError"


@pytest.mark.slow
def test_run_all_stops_at_the_failing_cell():
    cells = [
        "%load_ext devinspect",
        SETUP,
        "%%devcheck\ny = model(x)",
        "after = 'ran'",
    ]
    nb = notebook(cells)
    with pytest.raises(CellExecutionError):
        run_notebook(nb)
    failing, after = nb.cells[2], nb.cells[3]
    texts = "".join(o.get("data", {}).get("text/plain", "") for o in failing.outputs)
    assert "device mismatch in F.linear" in texts and 'x = x.to("sim:0")' in texts
    # In a kernel the fix is offered as a widget (Apply fix, then Re-run cell).
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in failing.outputs)
    error = next(o for o in failing.outputs if o.output_type == "error")
    assert error.ename == "RuntimeError"
    assert after.outputs == [] and after.get("execution_count") is None


@pytest.mark.slow
def test_top_level_await_runs_on_the_kernel_loop():
    cells = [
        "%load_ext devinspect",
        "import asyncio, torch\nfrom devinspect import testing\ndev = testing.enable()",
        "%%devcheck -v rep\nawait asyncio.sleep(0.01)\nfor _ in range(3):\n    v = torch.ones(2, device=dev).sum().item()\nv",
        "print(rep.totals['syncs'], asyncio.get_running_loop().is_running())",
        "%%devcheck\nawait asyncio.sleep(0)\nraise ValueError('after await')",
        "print('not reached')",
    ]
    nb = notebook(cells)
    with pytest.raises(CellExecutionError):
        run_notebook(nb)
    texts = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in nb.cells[2].outputs)
    assert "3 host syncs" in texts and "2.0" in texts  # counted, and the cell's value shown
    assert "".join(o.get("text", "") for o in nb.cells[3].outputs).split() == ["3", "True"]
    error = next(o for o in nb.cells[4].outputs if o.output_type == "error")
    assert error.ename == "ValueError" and error.evalue == "after await"
    assert nb.cells[5].outputs == []  # Run All stopped on the re-raised error


def test_await_cells_are_rewritten_only_when_they_await(ip):
    rewritten = ip.transform_cell("%%devcheck -q\nawait f()\n")
    assert rewritten.startswith("await get_ipython().find_cell_magic('devcheck').__self__.devcheck_async('-q',")
    assert "devcheck_async" not in ip.transform_cell("%%devcheck\nx = 1\n")
    assert "devcheck_async" not in ip.transform_cell("%%time\nawait f()\n")
    ip.run_line_magic("unload_ext", "devinspect")
    assert not any(getattr(t, "devinspect", False) for t in ip.input_transformers_cleanup)
    assert "devcheck_async" not in ip.transform_cell("%%devcheck\nawait f()\n")
    ip.run_line_magic("load_ext", "devinspect")
    ip.run_line_magic("reload_ext", "devinspect")
    # the one for %%devcheck cells that await, once; the entry points that run a fixed cell's edit, once
    assert sum(getattr(t, "devinspect", False) for t in ip.input_transformers_cleanup) == 1
    assert ip.run_cell.__wrapped__.__self__ is ip and ip.run_cell_async.__wrapped__.__self__ is ip


def test_await_in_terminal_ipython(ip):
    result, text, _, _ = run(ip, "%%devcheck -v rep\nimport asyncio\nawait asyncio.sleep(0)\nz = 5")
    assert result.success and ip.user_ns["z"] == 5 and "devcheck:" in text
    assert ip.user_ns["rep"].totals["syncs"] == 0


@pytest.mark.slow
def test_interrupting_a_checked_cell_stops_run_all_as_for_a_plain_cell():
    """A real kernel interrupt (SIGINT from nbclient on a timeout): the cell fails with
    KeyboardInterrupt and the queued cells do not run, with and without the check."""
    from nbclient.exceptions import CellTimeoutError

    for checked in (False, True):
        body = "import time, torch\nwhile True:\n    torch.ones(4).sum().item()\n    time.sleep(0.01)"
        cells = ["%load_ext devinspect", ("%%devcheck\n" if checked else "") + body, "after = 'ran'"]
        nb = notebook(cells)
        # Only the endless cell has a short timeout (the one that interrupts it); loading the
        # extension may take long on a busy machine without failing anything.
        with pytest.raises((CellExecutionError, CellTimeoutError)):
            run_notebook(nb, timeout=600, interrupt_on_timeout=True,
                         timeout_func=lambda cell: 8 if "while True" in cell.source else 600)
        error = next(o for o in nb.cells[1].outputs if o.output_type == "error")
        assert error.ename == "KeyboardInterrupt", checked
        assert nb.cells[2].outputs == [] and nb.cells[2].get("execution_count") is None, checked


def test_the_sync_fix_uses_the_loops_own_names_and_keeps_the_result(ip, sim):
    run(ip, "import torch\nvals = torch.arange(10.0, device=sim_dev)\n".replace("sim_dev", "'sim:0'"))
    _, text, _, _ = run(ip, "%%devcheck\ntotal = 0.0\nfor v in vals:\n    total += v.item()\n")
    assert "fix: accumulate on the device (total += v.detach()) and read it once after the loop " \
           "(total = total.item())" in text and "loss" not in text
    before = ip.user_ns["total"]
    run(ip, "total = 0.0\nfor v in vals:\n    total += v.detach()\ntotal = total.item()\n")  # the fix, as printed
    assert ip.user_ns["total"] == before == 45.0


def test_operands_no_name_reaches_are_traced_to_the_names_they_were_made_from(ip):
    ip.run_cell("import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
                "a = torch.randn(3, 8, device=dev); w = torch.randn(8, 4, device=dev); b = torch.zeros(4)")
    result, text, _, captured = run(ip, "%%devcheck -v rep\nz = (a @ w).sum(0) + b * 2")
    assert type(result.error_in_exec).__name__ == "RuntimeError"
    mismatch = ip.user_ns["rep"].mismatch
    # Each operand is shown as the expression that made it, with the name it was computed from.
    shown = {o.name: o.detail for o in mismatch.operands}
    assert "computed from b" in shown["b * 2"] and "computed from" in shown["a @ w"]
    assert mismatch.fix.code == 'b = b.to("sim:0")'
    assert "made inside" not in text


def test_a_tensor_a_library_makes_without_device_is_fixed_on_the_users_line(ip, tmp_path, monkeypatch):
    """Library code is never the place of a fix: the user's line runs with the device as the
    default, and every line of that edit is shown as an addition."""
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "poslib.py").write_text("import torch\n\ndef add_positions(h):\n"
                                       "    pos = torch.arange(h.shape[-1], dtype=h.dtype)\n    return h + pos\n")
    monkeypatch.syspath_prepend(str(library))
    ip.run_cell("import torch, poslib\nfrom devinspect import testing\ndev = testing.enable()\n"
                "h = torch.randn(2, 5, device=dev)")
    result, text, _, _ = run(ip, "%%devcheck -v rep\ny = poslib.add_positions(h * 2)")
    assert type(result.error_in_exec).__name__ == "RuntimeError"
    fix = ip.user_ns["rep"].mismatch.fix
    assert fix.code is None and len(fix.edits) == 1 and "poslib" not in fix.edits[0].where.file
    assert "+ with torch.device(dev):\n" in text and "+     y = poslib.add_positions(h * 2)" in text
    assert "created by torch.arange without device= inside poslib" in text
    edited = "y = poslib.add_positions(h * 2)".replace(fix.edits[0].old, fix.edits[0].new)
    assert run(ip, edited)[0].success and ip.user_ns["y"].device.type == "sim"
