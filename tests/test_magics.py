"""%devices through a real InteractiveShell: text, HTML, -o, options, errors, load/unload."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import run

import devinspect
from devinspect.model.scan_result import ScanResult, ScanView

SETUP = """
import torch
from devinspect import testing
dev = testing.enable()
class PE(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.pe = torch.zeros(10, 4)
model = torch.nn.Sequential(PE(), torch.nn.Linear(4, 2)).to(dev)
model[1].to("cpu")
x = torch.randn(3, 4)
"""


def test_devices_text_output(ip):
    ip.run_cell(SETUP)
    _, text, html, _ = run(ip, "%devices")
    assert text.splitlines()[0].startswith("devinspect: 6 tensors")
    assert "Findings (2):" in text
    assert "model (Sequential) has parameters/buffers on" in text
    assert "model[0].lin.weight  parameter  sim:0" in text
    assert "model[0].pe" in text and "x " in text
    # Findings come before the table.
    assert text.index("Findings") < text.index("name  ")


def test_devices_html_output_is_a_static_table(ip):
    ip.run_cell(SETUP)
    _, _, html, _ = run(ip, "%devices")
    assert html.startswith('<div class="devinspect">')
    # A name wraps only between its parts: a break opportunity before each "[" and ".".
    assert "<table" in html and "<code>model<wbr>[0]<wbr>.lin<wbr>.weight</code>" in html
    assert "<script" not in html and "background" not in html
    assert "<div>fix: " in html and "<pre" in html


def test_result_object_with_and_without_o(ip):
    ip.run_cell(SETUP)
    ip.run_cell("r = %devices\nr2 = %devices -o")
    r, r2 = ip.user_ns["r"], ip.user_ns["r2"]
    assert isinstance(r, ScanView) and isinstance(r2, ScanView) and isinstance(r.result, ScanResult)
    assert set(r.frame["name"]) == {rec.name for rec in r.records}
    assert len(r.findings) == 2


def test_an_assignment_displays_nothing_and_a_statement_shows_its_result(ip, sim):
    ip.run_cell(SETUP)
    for cell in ("r = %devices", "r = %devices -o", "snap = %gpumem -o --no-tensors", "h = %gpumem --history -o",
                 "why = %devices --why x -o"):
        result, text, html, captured = run(ip, cell)
        assert result.success and captured.outputs == [] and text == "", cell
    assert type(ip.user_ns["snap"]).__name__ == "MemorySnapshot" and ip.user_ns["r"].records
    _, text, _, _ = run(ip, "%devices\nx = 1")  # a line of its own shows, wherever it stands
    assert "model[0].lin.weight" in text


def test_options_filter_and_sort(ip):
    ip.run_cell(SETUP)
    ip.run_cell("a = %devices --device sim:0\nb = %devices --kind attribute\nc = %devices model\n"
                "d = %devices -s bytes -n 2\ne = %devices --device sim")
    ns = ip.user_ns
    assert {r.device for r in ns["a"].records} == {"sim:0"}
    assert {r.kind for r in ns["b"].records} == {"attribute"}
    assert {r.root for r in ns["c"].records} == {"model"}
    assert {r.device for r in ns["e"].records} == {"sim:0"}
    _, text, _, _ = run(ip, "%devices -s bytes -n 2")
    assert "… 4 more not shown" in text
    table = text.split("name  ", 1)[1].splitlines()[1:3]
    assert table[0].startswith("model[0].pe")


def test_findings_only(ip):
    ip.run_cell(SETUP)
    _, text, _, _ = run(ip, "%devices --findings")
    assert "Findings (2)" in text and "name  " not in text


@pytest.mark.parametrize(
    "line, message",
    [
        ("%devices nope", "no variable named 'nope'"),
        ("%devices --sort sideways", "invalid choice"),
        ("%devices --device gpu:x", "is not a device"),
        ("%devices --kind banana", "invalid choice"),
        ("%devices --bogus", "unrecognized arguments"),
    ],
)
def test_bad_input_is_a_usage_error_without_traceback(ip, line, message):
    ip.run_cell(SETUP)
    result, text, _, captured = run(ip, line)
    assert result.error_in_exec is not None
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert message in str(result.error_in_exec)
    assert "Traceback" not in captured.stdout + captured.stderr


def test_history_is_hidden_but_measured(ip):
    ip.run_cell("import torch\nfrom devinspect import testing\ndev = testing.enable()")
    run(ip, "torch.zeros(256, device=dev)")  # displayed: now held by Out and _
    _, text, _, _ = run(ip, "%devices")
    assert not any(row.startswith("Out[") for row in table_rows(text))
    assert "held only by IPython's output history (Out[" in text
    _, hidden_text, _, _ = run(ip, "%devices --hidden")
    assert any(row.startswith("Out[") for row in table_rows(hidden_text)), hidden_text


def table_rows(text):
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("name ")), len(lines))
    return lines[start + 1 :]


def test_config_traits(ip):
    ip.run_cell(SETUP)
    ip.run_line_magic("config", "DevInspect.max_rows = 1")
    _, text, _, _ = run(ip, "%devices")
    assert "… 5 more not shown" in text
    ip.run_line_magic("config", "DevInspect.max_rows = 40")


def test_help_is_the_docstring(ip):
    doc = ip.find_line_magic("devices").__doc__
    assert "Examples" in doc and "--device" in doc


def test_load_unload_reload_leave_exactly_one_of_each(ip):
    manager = ip.magics_manager
    ours = ("DevInspect", "DevicesMagics", "DevcheckMagics", "GpumemMagics")

    def instances(kind: str) -> list:
        return [c for c in ip.configurables if type(c).__name__ == kind]

    assert all(len(instances(kind)) == 1 for kind in ours)
    devinspect.load_ipython_extension(ip)  # a second load is a no-op
    assert all(len(instances(kind)) == 1 for kind in ours)
    ip.run_line_magic("reload_ext", "devinspect")
    ip.run_line_magic("reload_ext", "devinspect")
    assert all(len(instances(kind)) == 1 for kind in ours)
    assert manager.magics["line"]["devices"].__self__ is instances("DevicesMagics")[0]
    assert manager.magics["cell"]["devcheck"].__self__ is instances("DevcheckMagics")[0]
    assert manager.magics["line"]["gpumem"].__self__ is instances("GpumemMagics")[0]
    ip.run_line_magic("unload_ext", "devinspect")
    assert not {"devices", "gpumem", "devcheck"} & (set(manager.magics["line"]) | set(manager.magics["cell"]))
    assert all(instances(kind) == [] and kind not in manager.registry for kind in ours)
    # The cell entry points and the traceback drawer are the shell's own again.
    assert not {"run_cell", "run_cell_async"} & set(vars(ip))
    assert "devinspect" not in type(getattr(ip._showtraceback, "__self__", None)).__module__
    devinspect.unload_ipython_extension(ip)  # unloading twice is harmless
    ip.run_line_magic("load_ext", "devinspect")
    assert all(len(instances(kind)) == 1 for kind in ours)


def test_loading_prints_nothing_and_patches_nothing():
    from IPython.testing.globalipapp import get_ipython
    from IPython.utils.capture import capture_output

    ip = get_ipython()
    ip.run_line_magic("unload_ext", "devinspect")
    repr_before, to_before = torch.Tensor.__repr__, torch.Tensor.to
    formatters_before = {k: dict(f.type_printers) for k, f in ip.display_formatter.formatters.items()}
    with capture_output() as captured:
        ip.run_line_magic("load_ext", "devinspect")
    assert captured.stdout == "" and captured.stderr == "" and captured.outputs == []
    assert torch.Tensor.__repr__ is repr_before and torch.Tensor.to is to_before
    assert {k: dict(f.type_printers) for k, f in ip.display_formatter.formatters.items()} == formatters_before
    ip.run_line_magic("unload_ext", "devinspect")


@pytest.mark.parametrize("explorer", [False, True])
def test_devices_sums_the_totals_once(ip, sim, monkeypatch, explorer):
    import devinspect.model.scan_result as scan_result

    calls = []
    real = scan_result.device_totals
    monkeypatch.setattr(scan_result, "device_totals", lambda records: calls.append(1) or real(records))
    ip.run_cell(SETUP)
    if explorer:
        ip.kernel = object()  # a widget frontend, as a Jupyter kernel is
    try:
        run(ip, "%devices")
    finally:
        if explorer:
            del ip.kernel
    assert len(calls) == 1


def test_a_path_that_picks_nothing_because_nothing_is_there_is_a_usage_error(ip):
    from IPython.core.error import UsageError

    ip.run_cell("import torch\nmodel = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())")
    with pytest.raises(UsageError, match="nothing is at 'model.0'"):
        ip.run_line_magic("devices", "model.0")
    assert "No tensors found" in str(ip.run_line_magic("devices", "model[1] -o"))  # there, but holds none


def test_a_negative_limit_is_refused_by_config_and_the_setting_stays(ip):
    from IPython.utils.capture import capture_output

    settings = [c for c in ip.configurables if type(c).__name__ == "DevInspect"][-1]
    before = {name: getattr(settings, name) for name in ("max_depth", "max_items", "max_rows")}
    try:
        for name in before:
            run(ip, f"%config DevInspect.{name} = -1")
        assert {name: getattr(settings, name) for name in before} == before
        # The refused value stays in the shell's configuration: loading again says so and keeps the defaults.
        with capture_output() as captured:
            ip.run_line_magic("reload_ext", "devinspect")
        assert "using the default settings" in captured.stderr and "Traceback" not in captured.stderr
    finally:
        for name in before:
            ip.config.DevInspect.pop(name, None)
        ip.run_line_magic("reload_ext", "devinspect")


def test_loading_the_extension_imports_only_what_registering_the_magics_needs():
    from conftest import run_python

    done = run_python(
        "import sys\nfrom IPython.core.interactiveshell import InteractiveShell\n"
        "ip = InteractiveShell.instance()\nip.display_formatter.active_types = ip.display_formatter.format_types\n"
        "ip.run_line_magic('load_ext', 'devinspect')\n"
        "print('loaded:', sorted(m for m in ('torch', 'pandas', 'numpy', 'ipywidgets', 'devinspect.render', "
        "'devinspect.diagnose.errors.explainer') if m in sys.modules))\n"
        "ip.run_cell('import torch\\nx = torch.zeros(2)\\n%devices')\n"
        "ip.run_cell('torch.ones(2) @ torch.ones(3)')\n")
    assert done.returncode == 0, done.stderr
    assert "loaded: []" in done.stdout  # no torch, pandas or renderer until a magic needs them
    assert re.search(r"^x +tensor +cpu +float32 +\[2\]", done.stdout, re.M)  # the first magic loads what it needs
    assert "RuntimeError" in done.stdout + done.stderr  # the cells ran as usual
