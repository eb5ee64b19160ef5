"""%devices in Jupyter: the explorer's table, tree, Move to and Apply fix, driven through its widgets."""

from __future__ import annotations

import time

import pytest
import torch
from conftest import run, widget_frontend

from devinspect.jupyter.explorer_table import GridState, page, select, table_frame

SETUP = """
import torch
from torch import nn
from devinspect import testing
dev = testing.enable()
model = nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU()), nn.Linear(4, 2)).to(dev)
model[2].to("cpu")
x = torch.randn(3, 4)
many = [torch.zeros(i + 1) for i in range(60)]
"""


@pytest.fixture
def explorer(ip, sim):
    with widget_frontend(ip):  # a widget frontend, as a Jupyter kernel is
        ip.run_cell(SETUP)
        _, _, _, captured = run(ip, "%devices")
        static, live = captured.outputs[-2].data, captured.outputs[-1].data
        assert "application/vnd.jupyter.widget-view+json" in live and "text/html" not in live
        # Its own output, so that nbconvert, GitHub and a notebook opened without a kernel show it.
        assert "devinspect:" in static["text/plain"] and "<table" in static["text/html"]
        assert "application/vnd.jupyter.widget-view+json" not in static
        yield ip.magics_manager.registry["DevicesMagics"]._last_explorer


def shown(explorer):
    return [r.name for r in explorer._page_records]


def test_the_table_sorts_filters_and_pages_in_the_kernel(explorer):
    assert explorer.position.value == "rows 1–25 of 67" and len(shown(explorer)) == 25
    assert shown(explorer)[0] == "many[59]"  # largest first
    explorer.headers["name"].click()
    assert explorer.headers["name"].description == "name ▲" and shown(explorer)[0] == "many[0]"
    explorer.headers["name"].click()
    assert explorer.headers["name"].description == "name ▼" and shown(explorer)[0] == "x"
    explorer.filter.value = "weight"
    assert shown(explorer) == ["model[2].weight", "model[1][0].weight", "model[0].weight"]  # still by name, descending
    explorer.filter.value = "device:sim kind:parameter"
    assert {r.device for r in explorer._page_records} == {"sim:0"} and len(shown(explorer)) == 4
    explorer.filter.value = ""
    explorer.kind.value = "tensor"
    assert explorer.position.value == "rows 1–25 of 61"
    explorer.next.click()
    explorer.next.click()
    assert explorer.position.value == "rows 51–61 of 61" and explorer.next.disabled
    assert sum(r.layout.display != "none" for r in explorer.rows) == 11
    explorer.device.value = "sim:0"
    assert explorer.position.value == "no tensor matches" and explorer.prev.disabled


def test_move_to_on_a_row_moves_that_tensor_and_says_how_many_bytes(explorer, ip):
    explorer.filter.value = "x"
    row = next(r for r, rec in zip(explorer.rows, explorer._page_records) if rec.name == "x")
    move = row.children[1]
    assert "sim:0" in move.options and not move.disabled
    move.value = "sim:0"
    assert ip.user_ns["x"].device.type == "sim"
    assert {r.device for r in explorer.view.records if r.name == "x"} == {"sim:0"}  # scanned again
    # The result beside its row (the row of x, now on sim:0), not under the table.
    row = next(r for r, rec in zip(explorer.rows, explorer._page_records) if rec.name == "x")
    result = row.children[2]
    assert result.value.startswith("<div") and "✔ x = x.to(" in result.value and "48 B" in result.value
    assert result.layout.display is None and explorer.status.value == ""
    assert all(r.children[2].layout.display == "none" for r in explorer.rows if r is not row)


def test_move_to_offers_only_moves_that_can_succeed(ip, sim):
    from devinspect import scan
    from devinspect.jupyter.devices_explorer import DevicesExplorer

    head = torch.nn.Linear(4, 2).to(sim)
    head(torch.randn(3, 4, device=sim)).sum().backward()
    ns = {"head": head, "x": torch.randn(2), "meta": torch.empty(3, device="meta")}
    ns["pair"] = (torch.zeros(2), torch.zeros(3))
    explorer = DevicesExplorer(scan(ns).select(), lambda: scan(ns).select(), ns, ["cpu", "sim:0"])
    explorer.filter.value = "grad"
    rows = {rec.name: row for row, rec in zip(explorer.rows, explorer._page_records)}
    grad = rows["head.bias.grad"].children[1]
    # A gradient lives where its parameter does: no device to offer, and the tooltip says what moves it.
    assert grad.disabled and grad.options == ("Move to…",)
    assert "a gradient lives where its parameter does: move head.bias" in grad.tooltip
    explorer.filter.value = "meta"
    (meta,) = [row.children[1] for row in explorer.rows[:1]]
    assert meta.disabled and "meta device" in meta.tooltip
    # An item of a tuple cannot be assigned: the tuple moves whole.
    explorer.filter.value = "pair"
    rows = {rec.name: row for row, rec in zip(explorer.rows, explorer._page_records)}
    item = rows["pair[0]"].children[1]
    assert item.disabled and item.tooltip.startswith("held in a tuple, which cannot change: move pair whole")
    # A choice that fails does not stay selected, and says why beside its row.
    ns["x"] = torch.randn(2)
    explorer.refresh()
    explorer.filter.value = "x"
    row = next(r for r, rec in zip(explorer.rows, explorer._page_records) if rec.name == "x")
    del ns["x"]  # gone before the choice is made: the move fails
    row.children[1].value = "sim:0"
    assert row.children[1].value == "Move to…"
    assert "✖ could not find x" in row.children[2].value and row.children[2].layout.display is None


def test_the_module_tree_shows_where_each_part_is_and_moves_a_part(explorer, ip):
    rows = explorer.tree.children
    root = rows[0].node
    assert root.path == "model" and root.mixed and root.devices[0] == "sim:0"
    assert "⚠" in rows[0].children[1].value and "border-left" in rows[0].children[1].value
    assert [r.node.path for r in rows] == ["model", "model[0]", "model[1]", "model[2]"]
    rows[2].children[0].click()  # open model[1]
    assert [r.node.path for r in explorer.tree.children][3:5] == ["model[1][0]", "model[1][1]"]
    assert explorer.tree.children[3].node.parameters == 20
    rows = explorer.tree.children
    move = next(r for r in rows if r.node.path == "model[2]").children[2]
    assert move.tooltip.startswith("move model[2] to another device: its parameters and buffers")
    move.value = "sim:0"
    assert ip.user_ns["model"][2].weight.device.type == "sim"
    assert not explorer.tree.children[0].node.mixed
    assert [f.code for f in explorer.view.findings] == ["input-on-other-device"]  # only x is left on the host


def open_widgets() -> int:
    """Widgets made and not closed: ipywidgets keeps each in its registry until it is closed."""
    from ipywidgets.widgets import widget

    return len(widget._instances)  # the registry behind the deprecated Widget.widgets


def test_a_module_with_many_children_shows_them_a_page_at_a_time():
    from devinspect import scan
    from devinspect.jupyter.devices_explorer import TREE_PAGE, DevicesExplorer

    ns = {"deep": torch.nn.Sequential(*(torch.nn.Linear(2, 2) for _ in range(TREE_PAGE * 2 + 7))),
          **{f"head{i}": torch.nn.Linear(2, 2) for i in range(TREE_PAGE + 1)}}
    view = scan(ns).select()
    explorer = DevicesExplorer(view, lambda: scan(ns).select(), ns, ["cpu"])

    def paths() -> list:
        return [r.node.path if r.node else f"more of {r.more_of!r}" for r in explorer.tree.children]

    shown = paths()
    # The roots are a page too: 'deep', its first page of children, the next 49 roots, then a 'more' row.
    assert shown[:2] == ["deep", "deep[0]"] and shown[TREE_PAGE] == f"deep[{TREE_PAGE - 1}]"
    assert shown[TREE_PAGE + 1] == "more of 'deep'" and shown[-1] == "more of ''"
    more = explorer.tree.children[TREE_PAGE + 1]
    assert f"{TREE_PAGE + 7:,} not shown" in more.children[1].value
    more.children[0].click()
    assert paths()[2 * TREE_PAGE + 1] == "more of 'deep'"
    next(r for r in explorer.tree.children if r.node is None and r.more_of == "deep").children[0].click()
    assert [p for p in paths() if p.startswith("deep[")][-1] == f"deep[{TREE_PAGE * 2 + 6}]"
    assert "more of 'deep'" not in paths()
    explorer.tree.children[-1].children[0].click()  # the last roots
    assert paths()[-1] == f"head{TREE_PAGE}" and "more of ''" not in paths()
    # Drawn again after each action, the tree closes the widgets it no longer shows.
    before = open_widgets()
    for _ in range(3):
        explorer.refresh()
    assert open_widgets() <= before + 20


def test_apply_fix_next_to_a_finding_and_the_view_refreshes(explorer, ip):
    boxes = explorer.findings.children
    mixed = next(b for b in boxes if "has parameters/buffers on" in b.children[0].value)
    row = boxes.index(mixed)
    apply = mixed.children[1].children[0]
    apply.click()
    assert {p.device.type for p in ip.user_ns["model"].parameters()} == {"sim"}
    # Said where the click was (the finding's row, now gone), not under the table; in bytes.
    assert "✔ moved model to sim:0" in explorer.findings.children[row].children[0].value
    assert explorer.status.value == ""
    assert all("has parameters/buffers on" not in b.children[0].value for b in explorer.findings.children)
    before = open_widgets()
    for _ in range(3):
        explorer.refresh()  # findings and tree drawn again: the replaced widgets are closed
    assert open_widgets() <= before + 5


def test_a_hundred_thousand_rows_stay_in_the_kernel():
    from devinspect import scan
    from devinspect.jupyter.devices_explorer import DevicesExplorer

    ns = {"t": [torch.zeros(1) for _ in range(100_000)]}
    view = scan(ns).select()
    start = time.perf_counter()
    explorer = DevicesExplorer(view, lambda: view, ns, ["cpu"])
    built = time.perf_counter() - start
    start = time.perf_counter()
    explorer.filter.value = "t[9"
    explorer.headers["name"].click()
    explorer.next.click()
    interact = time.perf_counter() - start
    assert explorer.position.value.startswith("rows 26–50 of 11,111")
    assert len(explorer.rows) == 25  # one page of widgets, whatever the number of tensors
    print(f"built in {built:.2f} s, three interactions in {interact:.2f} s")


def test_grid_selection_is_plain_data():
    frame = table_frame(())
    rows, number, pages = page(select(frame, GridState()), GridState())
    assert len(rows) == 0 and number == 0 and pages == 1
    state = GridState().sorted_by("size")
    assert state.descending is False and state.sorted_by("name").sort == "name"


def test_names_devices_and_shapes_sort_as_people_count():
    from devinspect import scan

    ns = {"pool": [torch.zeros(i + 1) for i in range(12)]}
    frame = table_frame(scan(ns).select().records)
    names = list(select(frame, GridState(sort="name", descending=False))["name"])
    assert names[:3] == ["pool[0]", "pool[1]", "pool[2]"] and names[-1] == "pool[11]"
    shapes = list(select(frame, GridState(sort="shape", descending=False))["shape"])
    assert shapes[:2] == ["[1]", "[2]"] and shapes[-1] == "[12]"


@pytest.mark.parametrize("column", ["name", "kind", "device", "dtype", "shape", "size"])
@pytest.mark.parametrize("descending", [False, True])
def test_ties_keep_record_order_in_both_directions(column, descending):
    from devinspect import scan

    ns = {"a": [torch.zeros(i % 3 + 1) for i in range(9)], "b": {"k": torch.zeros(2), "j": torch.zeros(2)},
          "m": torch.nn.Linear(2, 2), "h": [torch.zeros(2, dtype=torch.float16), torch.zeros(1, dtype=torch.int64)]}
    frame = table_frame(scan(ns).select().records)
    state = GridState(sort=column, descending=descending, text="")
    key = dict((label, key) for label, key in (("name", "name_key"), ("kind", "kind"), ("device", "device_key"),
                                               ("dtype", "dtype"), ("shape", "shape_key"), ("size", "size_key")))[column]
    chosen = list(select(frame, state)["index"])
    expected = frame.sort_values([key, "index"], ascending=[not descending, True], kind="stable")
    assert chosen == list(expected["index"])
    assert list(select(frame, GridState(sort=column, descending=descending, text="a["))["index"]) == \
        [i for i in expected["index"] if frame["name"][i].startswith("a[")]


def test_findings_only_shows_the_findings_without_the_tables(sim):
    from devinspect import scan
    from devinspect.jupyter.devices_explorer import DevicesExplorer
    from devinspect.model.scan_result import Display, Selection

    ns = {"model": torch.nn.Linear(2, 2).to(sim), "x": torch.ones(3, 2)}
    ns["model"].bias.data = torch.zeros(2)  # split across devices: a finding with a fix
    view = scan(ns).select(Selection(), Display(findings_only=True))
    explorer = DevicesExplorer(view, lambda: view, ns, ["cpu", "sim:0"])
    assert explorer.tabs not in explorer.widget.children and explorer.findings.children
    clean = scan({"y": torch.ones(2)}).select(Selection(), Display(findings_only=True))
    quiet = DevicesExplorer(clean, lambda: clean, {}, ["cpu"])
    assert "No findings." in quiet.findings.children[0].value


class _Marked(torch.Tensor):
    """A tensor subclass with nothing else unusual about it: only its class goes in the note."""


def test_each_row_of_the_table_says_what_its_record_says(sim):
    """The frame is built a column at a time; each row must read as its record alone would."""
    import warnings

    from devinspect import scan
    from devinspect.jupyter.explorer_table import natural_key
    from devinspect.model.scan_result import size_keys
    from devinspect.model.units import shape_text
    from devinspect.render.table import note_cell, size_cell, size_key

    base = torch.zeros(6)
    lazy = torch.nn.LazyLinear(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantized and sparse tensors warn when made
        ns = {"plain": [torch.zeros(i % 4 + 1) for i in range(50)], "views": [base, base[2:], base.view(2, 3)],
              "meta": [torch.empty(3, device="meta"), torch.empty(2, device="meta")], "lazy": lazy,
              "graph": [torch.ones(2, requires_grad=True) * 2], "leaf": torch.ones(3, requires_grad=True),
              "q": torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8), "sparse": torch.eye(3).to_sparse(),
              "model": torch.nn.Linear(2, 2).to(sim), "scalar": torch.tensor(1.0), "ints": {"a": torch.arange(4)},
              "marked": torch.ones(2).as_subclass(_Marked)}
        records = scan(ns).select().records
    frame = table_frame(records)
    for column in ("device", "shape"):  # their natural sort keys are made by the first sort on them
        select(frame, GridState(sort=column))
    assert list(frame["index"]) == list(range(len(records)))
    for row, r in zip(frame.itertuples(index=False), records):
        assert (row.name, row.kind, row.device, row.dtype) == (r.name, r.kind, r.device, r.dtype or "?")
        assert (row.size, row.size_key, row.note) == (size_cell(r), size_key(r), note_cell(r)), r.name
        assert (row.shape, row.shape_key) == (shape_text(r.shape), natural_key(shape_text(r.shape)))
        assert row.device_key == natural_key(r.device)
    assert {"shared", "needs 12 B"} <= set(frame["size"]) and any("requires_grad" in n for n in frame["note"])
    assert "_Marked" in set(frame["note"])
    assert size_keys(list(records)) == [size_key(r) for r in records]  # the text table's column form


def test_a_plain_tensor_attribute_belongs_to_its_module_in_the_tree(sim):
    from devinspect import scan
    from devinspect.jupyter.devices_explorer import DevicesExplorer

    class PositionalEncoding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pe = torch.randn(64, 32)  # a plain attribute: .to() leaves it on the host

    model = torch.nn.Sequential(PositionalEncoding(), torch.nn.Linear(32, 2)).to(sim)
    ns = {"model": model}
    explorer = DevicesExplorer(scan(ns).select(), lambda: scan(ns).select(), ns, ["cpu", "sim:0"])
    pos = explorer.nodes["model[0]"]
    assert (pos.devices, pos.bytes) == (("cpu",), 8192)  # as the Tensors tab lists model[0].pe
    assert explorer.nodes["model"].mixed
    row = next(r for r in explorer.tree.children if r.node.path == "model[0]")
    assert "<b>cpu</b> · 8.0 KiB" in row.children[1].value
