"""The kernel's end of the JupyterLab extension's comm (target ``devinspect``), driven as the
extension drives it (tests/frontend.py): nothing is sent until a front end says hello; then
memory after every cell, findings and tensors when asked, and Apply fix's edits of cells, which
the kernel forgets once the front end says its editor holds them."""

from __future__ import annotations

import json
from html import unescape

import pytest
from frontend import Cell, Frontend

pytestmark = pytest.mark.slow

SETUP = "import torch\nfrom torch import nn\nfrom devinspect import testing\ndevice = testing.enable()"
CLASS_CELL = ("class Net(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
              "        self.fc = nn.Linear(4, 4)\n        self.scale = torch.ones(4)\n\n"
              "    def forward(self, x):\n        return self.fc(x) * self.scale")
FAILING = "features = torch.randn(2, 4)\nout = model(features)"
EDITED = "features = torch.randn(2, 4, device=device)\nout = model(features)"


def loaded_comm(lab: Frontend) -> str:
    (comm,) = [c for c, messages in lab.comms.items() if messages and messages[0].get("type") == "loaded"]
    return comm


def messages(lab: Frontend, comm: str, kind: str) -> list[dict]:
    return [m for m in lab.comms[comm] if m.get("type") == kind]


@pytest.fixture
def lab():
    frontend = Frontend()
    try:
        assert not frontend.run("%load_ext devinspect").failed
        yield frontend
    finally:
        frontend.close()


def test_nothing_is_read_or_sent_until_a_front_end_says_hello(lab):
    comm = loaded_comm(lab)
    lab.run(SETUP)
    lab.run("x = torch.ones(256, device=device)")
    assert lab.comms[comm] == [{"type": "loaded", "version": lab.comms[comm][0]["version"]}]
    lab.send_comm(comm, {"type": "hello"})
    lab.run("y = torch.ones(512, device=device)")
    memory = messages(lab, comm, "memory")[-1]
    truth = lab.run("import json\nprint(json.dumps([torch.sim.memory_allocated(0), torch.sim.memory_reserved(0), "
                    "torch.sim.max_memory_allocated(0)]))")
    allocated, reserved, peak = json.loads(truth.text_of_outputs())
    (sim0,) = [d for d in memory["devices"] if d["device"] == "sim:0"]
    assert (sim0["allocated"], sim0["reserved"], sim0["peak"]) == (allocated, reserved, peak) and allocated >= 3 * 1024
    assert memory["stale"] and memory["history"][-1]["allocated"]["sim:0"] == allocated


def test_a_kernel_without_devinspect_closes_the_comm_the_front_end_opens():
    frontend = Frontend()
    try:
        comm = frontend.open_comm("devinspect", {"type": "hello"})
        frontend.run("1")
        assert comm in frontend.closed_comms
    finally:
        frontend.close()


def test_the_front_end_opens_the_comm_of_a_kernel_loaded_before_it_came(lab):
    comm = lab.open_comm("devinspect", {"type": "hello"})
    assert messages(lab, comm, "memory")
    lab.run(SETUP + "\nmodel = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)).to(device)\nmodel[1].to('cpu')\n"
            "big = torch.ones(1000, device=device)")
    lab.send_comm(comm, {"type": "scan", "filter": ""})
    scan = messages(lab, comm, "scan")[-1]
    assert scan["tensors"][0]["name"] == "big" and scan["tensors"][0]["device"] == "sim:0"
    assert any("model" in f["subject"] for f in scan["findings"])
    lab.send_comm(comm, {"type": "scan", "filter": "MODEL[0]"})
    filtered = messages(lab, comm, "scan")[-1]
    assert {t["name"] for t in filtered["tensors"]} == {"model[0].weight", "model[0].bias"} and filtered["total"] > 2
    # Apply fix from the panel: the split model moves, and the findings say so when asked again.
    (split,) = [f for f in scan["findings"] if f["can_apply"] and f["subject"] == "model"]
    lab.send_comm(comm, {"type": "apply", "index": split["index"]})
    applied = messages(lab, comm, "applied")[-1]
    assert applied["ok"], applied
    probe = lab.run("print(sorted({str(p.device) for p in model.parameters()}))")
    assert probe.text_of_outputs().strip() == "['sim:0']"


def test_apply_fix_sends_the_edits_of_the_failed_cell_and_the_class_cell(lab):
    comm = loaded_comm(lab)
    lab.send_comm(comm, {"type": "hello"})
    lab.run(SETUP)
    class_cell = lab.run(Cell(CLASS_CELL))
    lab.run("model = Net().to(device)")
    failed = lab.run(Cell(FAILING))
    assert failed.failed
    (button,) = lab.find(failed, "ButtonModel", description="Apply fix")
    lab.click(button)
    lab.run("pass")  # the edit goes out once the click has been handled
    (edit,) = messages(lab, comm, "edit")
    (cell,) = edit["cells"]
    assert (cell["cell_id"], cell["old"], cell["new"], cell["lines"]) == (failed.id, FAILING, EDITED, [1])
    assert "the notebook's editor shows it now" in unescape(lab.html(failed))
    lab.send_comm(comm, {"type": "edited", "edit_id": edit["edit_id"], "cells": [failed.id]})
    # The editor holds the edit: an undo there (the old text sent again) runs the old text.
    assert lab.run(Cell(FAILING, id=failed.id)).failed
    failed.text = cell["new"]
    again = lab.run(failed)
    assert again.failed and "scale" in again.text_of_outputs()  # the next cause: the class cell's attribute
    (button,) = lab.find(again, "ButtonModel", description="Apply fix")
    lab.click(button)
    lab.run("pass")
    edit = messages(lab, comm, "edit")[-1]
    (cell,) = edit["cells"]
    assert cell["cell_id"] == class_cell.id and cell["old"] == CLASS_CELL and cell["lines"] == [5]
    assert 'self.register_buffer("scale", torch.ones(4)' in cell["new"]
    # Apply fix records the class cell's edit itself, and the editor shows it at once
    assert "Cell In[" in unescape(lab.html(again)) and "the notebook's editor shows it now" in unescape(lab.html(again))
    # Running the edited class cell, the model cell and the failed cell works.
    class_cell.text = cell["new"]
    assert not lab.run(class_cell).failed
    assert not lab.run("model = Net().to(device)").failed
    assert not lab.run(Cell(EDITED, id=failed.id)).failed


def test_unloading_closes_the_comm_and_the_kernel_keeps_working(lab):
    comm = loaded_comm(lab)
    lab.send_comm(comm, {"type": "hello"})
    lab.run("%unload_ext devinspect")
    assert comm in lab.closed_comms
    assert not lab.run("1 + 1").failed
    lab.run("%load_ext devinspect")
    assert len([c for c, m in lab.comms.items() if m and m[0].get("type") == "loaded"]) == 2


def test_the_devinspect_kernel_answers_the_front_end_that_comes_later():
    frontend = Frontend(kernel_name="python3-devinspect")
    try:
        comm = frontend.open_comm("devinspect", {"type": "hello"})
        frontend.run(SETUP + "\nx = torch.ones(64, device=device)")
        assert comm not in frontend.closed_comms
        (sim0,) = [d for d in messages(frontend, comm, "memory")[-1]["devices"] if d["device"] == "sim:0"]
        assert sim0["allocated"] >= 256
    finally:
        frontend.close()
