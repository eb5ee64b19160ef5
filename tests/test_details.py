"""The small things a new user met, each held by a test."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import run

import devinspect


def error_line(ip, cell):
    result, text, _, captured = run(ip, cell)
    assert not result.success
    lines = (captured.stderr + captured.stdout + text).strip().splitlines()
    assert "Traceback" not in captured.stdout + captured.stderr, cell  # one line, no traceback
    return lines[-1]


def test_devcheck_help_and_mistakes_name_it_as_typed(ip):
    assert "usage: %%devcheck [" in ip.find_cell_magic("devcheck").__doc__.replace("::\n\n  ", "usage: ")
    assert error_line(ip, "%%devcheck --bogus\nx = 1") == "UsageError: %%devcheck: unrecognized arguments: --bogus"


@pytest.mark.parametrize("cell", ["%devices 'model", "%gpumem -d 'cuda", "%%devcheck -v 'r\nx = 1"])
def test_an_unbalanced_quote_is_one_line(ip, cell):
    line = error_line(ip, cell)
    assert line.startswith("UsageError: %") and "No closing quotation" in line


def test_counts_are_worded_for_one(sim):
    assert devinspect.scan({"x": torch.zeros(1)}).select()._repr_mimebundle_()["text/plain"].startswith(
        "devinspect: 1 tensor, 4 B on 1 device")


def test_rows_cannot_be_negative(ip):
    assert "-n takes a number of rows, 0 or more" in error_line(ip, "%devices -n -3")


def test_a_key_that_is_not_a_string_in_the_namespace(ip):
    ip.user_ns[7] = "a number as a key"
    try:
        ip.run_cell("import torch\nx = torch.zeros(2)")
        result, text, _, _ = run(ip, "%devices x")
        assert result.success and "x " in text
        assert "no variable named 'nope'" in error_line(ip, "%devices nope")
    finally:
        del ip.user_ns[7]


def test_devices_and_gpumem_share_one_device_parser(ip, sim):
    ip.run_cell("import torch\nx = torch.zeros(2)\ny = torch.ones(2, device=torch.device('sim:0'))")
    _, text, _, _ = run(ip, "%devices -d cpu:0")
    assert "x " in text and "y " not in text  # cpu:0 is the cpu
    _, text, _, _ = run(ip, "%devices -d sim")
    assert "y " in text and "x " not in text
    assert error_line(ip, "%devices -d cuda:0").startswith("UsageError: %devices: no device 'cuda:0' in this process")
    assert error_line(ip, "%gpumem -d cuda:0").startswith("UsageError: %gpumem: no device 'cuda:0' in this process")


def test_devices_displays_wherever_it_stands_and_returns_once(ip):
    ip.run_cell("import torch\nx = torch.zeros(2)")
    _, text, _, captured = run(ip, "%devices\ny = 1")  # not the last line: still shown
    assert text.count("devinspect: 1 tensor") == 1
    result, text, _, _ = run(ip, "r = %devices")  # assigned: kept, and nothing shown (as any assignment)
    assert text == "" and ip.user_ns["r"].records[0].name == "x"
    result, text, _, _ = run(ip, "%devices")  # the last line: shown once, no copy kept in Out
    assert text.count("devinspect: 1 tensor") == 1 and result.result is None
    result, text, _, _ = run(ip, "%devices -o")  # -o: returned, shown once by IPython
    assert text.count("devinspect: 1 tensor") == 1 and result.result is not None
    run(ip, "%devices -v kept")
    assert ip.user_ns["kept"].records[0].name == "x"


def test_o_returns_and_v_stores_on_every_magic(ip):
    run(ip, "import torch\nx = torch.zeros(2)")
    assert ip.run_line_magic("gpumem", "-o").devices
    run(ip, "%gpumem -v snap")
    assert ip.user_ns["snap"].devices
    result, *_ = run(ip, "%%devcheck -o\nz = x + 1")
    assert type(result.result).__name__ == "CheckReport"
    _, text, _, _ = run(ip, "%%devcheck -o old\nz = x + 1")  # the old form still works, with a note
    assert type(ip.user_ns["old"]).__name__ == "CheckReport" and "-o NAME is deprecated; use -v old" in text


def test_a_snapshot_for_one_device_says_what_it_shows(ip, sim):
    ip.run_cell("import torch\ny = torch.ones(2, device=torch.device('sim:0'))")
    snap = ip.run_line_magic("gpumem", "-d sim:0 -o")
    assert [d.device for d in snap.devices] == ["sim:0"]
    assert repr(snap).splitlines()[0] == "devinspect: memory of 1 accelerator"


def test_unused_devices_are_hidden_unless_asked(ip, sim):
    ip.run_cell("import torch\ny = torch.ones(2, device=torch.device('sim:0'))")
    shown = [d.device for d in ip.run_line_magic("gpumem", "-o").devices]
    assert "sim:1" not in shown and "sim:0" in shown and "cpu" in shown
    assert "sim:1" in [d.device for d in ip.run_line_magic("gpumem", "--all-devices -o").devices]
    assert "1 unused not shown: --all-devices" in repr(ip.run_line_magic("gpumem", "-o"))


def test_frames_have_one_missing_value(ip):
    frame = ip.run_line_magic("gpumem", "-o").frame
    for column in frame.columns:
        values = list(frame[column])
        assert not any(v is None for v in values), column
        assert not any(isinstance(v, float) and math.isnan(v) for v in values), column


def test_widget_text_is_escaped(sim):
    from devinspect.collect.machine.memory_readings import read
    from devinspect.collect.machine.memory_snapshot import build
    from devinspect.jupyter.fix_buttons import FixButton
    from devinspect.jupyter.memory_dashboard import MemoryDashboard
    from devinspect.model.fixes import Fix, Move

    button = FixButton(Fix("move it", action=Move("<script>alert(1)</script>", "sim:0")), {})
    button.button.click()
    assert "<script>" not in button.status.value and "&lt;script&gt;" in button.status.value

    def broken():
        raise RuntimeError("<b>not markup</b>")

    dashboard = MemoryDashboard(lambda count: build(read(nvml=False)), {"empty_cache": broken})
    dashboard.run_action("empty_cache")
    assert "<b>not markup</b>" not in dashboard.status.value and "&lt;b&gt;" in dashboard.status.value


def test_status_is_cleared_on_refresh(sim):
    from devinspect.collect.machine.memory_readings import read
    from devinspect.collect.machine.memory_snapshot import build
    from devinspect.jupyter.memory_dashboard import MemoryDashboard

    dashboard = MemoryDashboard(lambda count: build(read(nvml=False)), {})
    dashboard.status.value = "✔ released 3.9 KiB"
    dashboard.refresh_button.click()
    assert dashboard.status.value == ""


def test_a_meta_model_shows_the_memory_it_would_need(sim):
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    view = devinspect.scan({"model": model, "small": torch.zeros(1)}).select()
    text = view._repr_mimebundle_()["text/plain"]
    assert "meta needs 18.3 KiB" in text and "needs 16.0 KiB" in text
    from devinspect.model.scan_result import Display

    ordered = devinspect.scan({"model": model, "small": torch.zeros(1)}).select(display=Display(sort="bytes"))
    assert ordered._repr_mimebundle_()["text/plain"].split("\n\n")[-1].splitlines()[1].startswith("model[0].weight")


def test_the_kernelspec_has_a_logo_and_loading_again_says_nothing():
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3-devinspect")
    import os

    assert {"logo-32x32.png", "logo-64x64.png"} <= set(os.listdir(spec.resource_dir))
    assert not any(a.startswith("--ext") for a in spec.argv)  # loaded without IPython's registry: %load_ext is quiet
