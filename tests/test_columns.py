"""A table's columns are declared once: a column added to a declaration shows in every view of
that table (the DataFrame, the plain text, the static HTML, the explorer widget), and each width
class lays its cells out as it says."""

from __future__ import annotations

import re

import pytest
import torch

import devinspect
from devinspect.model import tensor_columns
from devinspect.model.check_report import CheckReport, LineStats
from devinspect.model.columns import Column, each
from devinspect.model.memory_profile import LineMemory, LineMemoryProfile
from devinspect.model.records import SourceLine
from devinspect.render import check_report_text
from devinspect.render.memory import profile as gpumem_profile

#: A column nobody declared: how many elements a tensor holds, sorted as a number.
ELEMENTS = Column("elements", each(lambda r: f"{_elements(r.shape):,}"), width="number", chars=7, sort="number",
                  keys=lambda records: [_elements(r.shape) for r in records])


def _elements(shape) -> int:
    count = 1
    for size in shape or ():
        count *= size
    return count


@pytest.fixture
def with_elements(monkeypatch):
    monkeypatch.setattr(tensor_columns, "TENSOR_COLUMNS", (*tensor_columns.TENSOR_COLUMNS, ELEMENTS))


def _view():
    return devinspect.scan({"big": torch.zeros(3, 1000), "small": torch.zeros(7)}).select()


def test_a_column_added_to_the_declaration_shows_in_every_view(with_elements):
    from devinspect.jupyter.devices_explorer import DevicesExplorer, column_width
    from devinspect.jupyter.explorer_table import GridState, select, table_frame
    from devinspect.render.html import render_scan as html_scan
    from devinspect.render.text import render_scan as text_scan

    view = _view()
    # The DataFrame: the record's fields, then the new column's text.
    frame = view.frame
    assert list(frame["elements"]) == ["3,000", "7"] and list(frame.columns[-1:]) == ["elements"]
    # Plain text: a header, right-aligned numbers.
    text = text_scan(view).splitlines()
    header = next(line for line in text if line.startswith("name"))
    assert header.endswith("elements")
    assert any(line.startswith("big") and line.endswith("3,000") for line in text)
    assert any(line.startswith("small") and line.endswith("    7") for line in text)
    # Static HTML: a header cell and a right-aligned cell per row.
    html = html_scan(view)
    assert ">elements</th>" in html and re.search(r'text-align:right[^"]*">3,000</td>', html)
    # The explorer: a sort button, a cell in each row, a width of its own, and its sort.
    explorer = DevicesExplorer(view, lambda: view, {}, ["cpu"])
    assert "elements" in explorer.headers
    assert "3,000" in explorer.rows[0].children[0].value and "devinspect-elements" in explorer.rows[0].children[0].value
    tracks = re.search(r"grid-template-columns:([^}]*)}", explorer.summary.value).group(1)
    assert tracks.endswith(" " + column_width(ELEMENTS))  # its track in the grid's stylesheet
    explorer.sort_by("elements")
    assert explorer.headers["elements"].description == "elements ▲"
    frame = table_frame(view.records)
    assert list(select(frame, GridState(sort="elements", descending=False))["name"]) == ["small", "big"]


def test_without_the_added_column_the_views_are_as_declared():
    view = _view()
    assert "elements" not in view.frame.columns
    assert "elements" not in devinspect.render.text.render_scan(view)


def _profile() -> LineMemoryProfile:
    line = LineMemory("<module>", 2, "losses.append(weights @ weights)", 3, 0, 4096, 4096, 8192, 0, 2 << 20,
                      alive=(("losses[0]", 4096),))
    return LineMemoryProfile(device="sim:0", lines=(line,), peak=None, allocated_start=0, allocated_end=4096,
                             reserved_start=0, reserved_end=2 << 20, events_source="the simulated allocator",
                             has_events=True)


def test_a_column_added_to_gpumems_lines_shows_in_text_and_html(monkeypatch):
    depth = Column("depth", each(lambda m: str(m.depth)), width="number", chars=3)
    monkeypatch.setattr(gpumem_profile, "LINE_COLUMNS", (*gpumem_profile.LINE_COLUMNS[:-1], depth,
                                                         gpumem_profile.LINE_COLUMNS[-1]))
    text = gpumem_profile.render_text(_profile()).splitlines()
    assert "depth" in text[1] and text[1].index("depth") < text[1].index("code")
    html = gpumem_profile.render_html(_profile())
    assert ">depth</th>" in html and ">0</td>" in html


def test_gpumems_names_wrap_between_names_only():
    html = gpumem_profile.render_html(_profile())
    # A size stays with its unit; a short name stays whole.
    assert "losses[0] 4.0\u00a0KiB" in html
    assert "overflow-wrap:anywhere" not in html and "min-width" in html


def _report() -> CheckReport:
    where = SourceLine("<cell>", 3, "<module>", "value = model(x).sum().item()", cell=5)
    return CheckReport(lines=(LineStats(where, 3, h2d_count=2, h2d_bytes=2048, syncs=(("item", 3),)),))


def test_a_column_added_to_devchecks_lines_shows_in_text_and_html(monkeypatch):
    bytes_moved = Column("bytes moved", each(lambda s: str(s.transfer_bytes)), width="number", chars=6)
    monkeypatch.setattr(check_report_text, "LINE_COLUMNS", (*check_report_text.LINE_COLUMNS, bytes_moved))
    from devinspect.render.check_report_html import render_check as html_check

    text = check_report_text.render_check(_report())
    assert "bytes moved" in text and text.rstrip().endswith("2048")
    html = html_check(_report())
    assert ">bytes moved</th>" in html and ">2048</td>" in html


def test_columns_that_fold_leave_a_narrow_static_table():
    html = devinspect.render.html.render_scan(_view())
    assert "@container (max-width: 46em){.devinspect-folds{display:none}}" in html
    folded = re.findall(r'<t[hd] class="devinspect-folds"[^>]*>([^<]*)<', html)
    assert folded[:2] == ["kind", "dtype"] and "tensor" in folded and "float32" in folded


def test_each_width_class_lays_its_cells_out_as_it_says():
    from devinspect.render.html import column_table

    columns = (Column("name", each(lambda r: r[0]), width="name", chars=8),
               Column("kind", each(lambda r: r[1]), width="word", chars=15),
               Column("size", each(lambda r: r[2]), width="number", chars=9),
               Column("note", each(lambda r: r[3]), width="words", chars=6))
    html = column_table(columns, [("opt.state[w][\"exp_avg\"]", "optimizer_state", "1.0 MiB → 2.0 MiB", "a b")])
    cells = re.findall(r'<td style="([^"]*)">(.*?)</td>', html)
    (name_style, name), (kind_style, kind), (size_style, size), (note_style, _note) = cells
    assert name == '<code>opt<wbr>.state<wbr>[w]<wbr>[&quot;exp_avg&quot;]</code>'  # breaks between parts only
    assert "white-space:nowrap" in kind_style and kind == "optimizer_state"  # a word stays whole
    assert "text-align:right" in size_style and size == "1.0\u00a0MiB\u00a0→ 2.0\u00a0MiB"
    assert "min-width:3.6em" in note_style and "overflow-wrap:break-word" in note_style


def test_a_fix_wraps_its_code_between_tokens_only():
    from devinspect.render.html import code_html

    assert code_html("model.pos = model.pos.to(dev)") == "model<wbr>.pos = model<wbr>.pos<wbr>.to<wbr>(<wbr>dev)"
    assert code_html('x = f(1.5e-3, "a.b")') == 'x = f<wbr>(<wbr>1.5e-3, &quot;a.b&quot;)'  # no break in a token
    assert code_html("f(x, (") == "f<wbr>(<wbr>x, ("  # an unclosed bracket keeps the breaks before it
