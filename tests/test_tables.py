"""Every HTML table devinspect shows has a header for each of its columns."""

from __future__ import annotations

from html import escape
from html.parser import HTMLParser

import pytest
from conftest import run


class _Tables(HTMLParser):
    """Per table: the header width and every row's width (colspans counted)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self._row: int | None = None  # the width of the row being read
        self._in_head = False
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "table":
            self.tables.append({"header": 0, "rows": [], "titles": []})
        elif tag == "thead":
            self._in_head = True
        elif tag == "tr":
            self._row = 0
        elif tag in ("td", "th") and self._row is not None:
            self._row += int(dict(attrs).get("colspan") or 1)
            if tag == "th":
                self.tables[-1]["titles"].append("")
                self._in_title = True

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.tables[-1]["titles"][-1] += data.strip()

    def handle_endtag(self, tag: str) -> None:
        if tag == "th":
            self._in_title = False
        elif tag == "thead":
            self._in_head = False
        elif tag == "tr" and self._row is not None and self.tables:
            if self._in_head:
                self.tables[-1]["header"] = self._row
            else:
                self.tables[-1]["rows"].append(self._row)
            self._row = None


SETUP = ("import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
         "model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()).to(dev)\nx = torch.randn(2, 4)\n")
CELLS = {
    "explanation": "y = model(x)",
    "devcheck": "%%devcheck\ny = model(x)",
    "devices": "%devices",
    "why": "h = model[0].weight\n%devices --why h",
    "gpumem": "%gpumem",
}


@pytest.mark.parametrize("what", CELLS)
def test_every_column_has_a_header(ip, sim, what):
    run(ip, SETUP)
    _, _, html, _ = run(ip, CELLS[what])
    parser = _Tables()
    parser.feed(html)
    tables = [t for t in parser.tables if t["header"]]
    assert tables, html[:400]
    for table in tables:
        assert all(width <= table["header"] for width in table["rows"]), table
        assert all(table["titles"]), table  # no blank header over a column of values


def test_the_out_of_memory_table_has_its_headers(ip, sim):
    from devinspect import testing

    run(ip, SETUP + "acts = torch.ones(1 << 20, device=dev)\n")
    testing.enable(memory="64MiB")
    try:
        _, _, html, _ = run(ip, "big = torch.empty(1 << 30, device=dev)")
    finally:
        testing.enable(memory=None)
    parser = _Tables()
    parser.feed(html)
    tables = [t for t in parser.tables if t["header"]]
    assert tables and all(t["titles"] == ["tensor", "size", "dtype/shape", "held by"] for t in tables), html[:600]
    assert all(width <= tables[0]["header"] for width in tables[0]["rows"])


def test_a_long_name_is_cut_in_the_middle_so_rows_stay_apart():
    import torch

    import devinspect
    from devinspect.render.text import render_scan

    state = {"exp_avg": torch.zeros(2), "exp_avg_sq": torch.zeros(2)}
    deep = {"base_model.model.layers[0].self_attn.q_proj.lora_A.default.weight": state}
    text = render_scan(devinspect.scan({"opt_state_of_a_long_named_adapter": deep}).select())
    rows = [line.split()[0] for line in text.splitlines() if line.strip() and "…" in line.split()[0]]
    assert len(rows) == 2 and len(set(rows)) == 2
    assert rows[0].endswith('["exp_avg"]') and rows[1].endswith('["exp_avg_sq"]')


def test_a_table_with_code_folds_each_row_to_read_at_any_width():
    from devinspect.render.html import text_table

    code = "loss = criterion(model(batch['input_ids'].to(device)), batch['labels'].to(device))  # long"
    html = text_table(("line", "runs", "allocated before → after", "code"),
                      [("line 2", "3", "54.0 MiB → 108.0 MiB", code), ("line 2", "3", "1 B → 2 B", code),
                       ("line 3", "1", "—", "del x")], numeric={1, 2}, code=3)
    assert "width:100%" in html and "table-layout:auto" in html  # the output's width, never wider
    # The code: a line of its own across the table, cut where it ends, the whole line its tooltip.
    assert html.count('<td colspan="3"') == 2  # once per line of code: the same line's rows share it
    assert f'title="{escape(code, quote=True)}"' in html and "text-overflow:ellipsis" in html
    assert "<th" in html and ">code<" not in html
    # Numbers right-aligned, breaking only after an arrow; a label keeps "line 2" together.
    assert "text-align:right" in html and "54.0\u00a0MiB\u00a0→ 108.0\u00a0MiB" in html and "line\u00a02" in html


def test_results_give_a_frontend_only_the_types_it_asks_for(sim):
    import torch

    import devinspect

    view = devinspect.scan({"x": torch.ones(2, device=sim)}).select()
    assert set(view._repr_mimebundle_()) == {"text/plain", "text/html"}
    assert set(view._repr_mimebundle_(include={"text/plain"})) == {"text/plain"}
    assert set(view._repr_mimebundle_(exclude={"text/html"})) == {"text/plain"}
    assert repr(view) == view._repr_mimebundle_()["text/plain"]
