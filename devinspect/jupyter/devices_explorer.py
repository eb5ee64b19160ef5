"""``%devices`` in Jupyter: findings with Apply fix, a tensor table and a module tree, live.

Composed from stock ipywidgets (no JavaScript of ours). The table is filtered, sorted
and paged in the kernel (:mod:`devinspect.grid`): the browser holds one page of rows,
a fixed set of widgets whose values change, so 100,000 tensors cost what 25 do. The
module tree (:mod:`devinspect.module_tree`) opens a node's children when asked, and
marks a node whose parameters span devices. Every row and node can be moved to any
device this process has (Move to ▾), and every finding with an action has Apply fix;
all go through :mod:`devinspect.actions` (all or nothing, reported in bytes), then
the session is scanned again.
"""

from __future__ import annotations

from html import escape
from typing import Any, Callable, MutableMapping

from .. import fixes
from ..grid import COLUMNS, GridState, page, select, table_frame
from ..model import KINDS, ScanView
from ..module_tree import ModuleNode, module_tree
from ..render.html import fix_html
from ..render.table import SEVERITY_MARK
from ..render.text import summary_line
from ..render.units import human_bytes
from .fix_panel import FixButton

#: Widths of the table's columns (the header's sort buttons have the same).
WIDTHS = {"name": "24em", "kind": "7.5em", "device": "6em", "dtype": "6.5em", "shape": "8em", "size": "7.5em"}
_CELL = "display:inline-block;white-space:nowrap;overflow:hidden;text-overflow:ellipsis;vertical-align:middle;" \
        "padding:0 6px;box-sizing:border-box"
_NO_CHOICE = "Move to…"


def _cell(text: str, width: str, *, code: bool = False, right: bool = False) -> str:
    body = f"<code>{escape(text)}</code>" if code else escape(text)
    align = "text-align:right;" if right else ""
    return f'<span style="{_CELL};{align}width:{width}" title="{escape(text, quote=True)}">{body}</span>'


class DevicesExplorer:
    """The live view of a ``%devices`` result; ``rescan()`` gives a fresh one after an action."""

    def __init__(self, view: ScanView, rescan: Callable[[], ScanView], namespace: MutableMapping[str, Any],
                 devices: list[str], shell: Any = None, page_size: int = 25):
        import ipywidgets as widgets

        self._w = widgets
        self.rescan, self.namespace, self.devices, self.shell = rescan, namespace, devices, shell
        self.state = GridState(page_size=page_size)
        self.summary = widgets.HTML()
        self.findings = widgets.VBox()
        self.status = widgets.HTML()
        self._build_table(page_size)
        self.tree = widgets.VBox()
        self.tabs = widgets.Tab(children=[self.table, self.tree])
        self.widget = widgets.VBox([self.summary, self.findings, self.tabs, self.status],
                                   layout=widgets.Layout(width="100%"))
        self._open: set[str] = set()
        self.load(view)

    # -- data ---------------------------------------------------------------------

    def load(self, view: ScanView) -> None:
        """Show ``view``: summary, findings, table (its current filter/sort/page kept) and tree."""
        self.view = view
        self.frame = table_frame(view.records)
        self.nodes = module_tree(view.result)
        self.summary.value = f"<b>devinspect</b>: {escape(summary_line(view))}"
        self._show_findings()
        kinds = sorted({r.kind for r in view.records}, key=KINDS.index)
        self.kind.options = [("every kind", None)] + [(k, k) for k in kinds]
        present = sorted({r.device for r in view.records})
        self.device.options = [("every device", None)] + [(d, d) for d in present]
        self.tabs.set_title(0, f"Tensors ({len(view.records):,})")
        self.tabs.set_title(1, f"Modules ({len(self.nodes):,})")
        if not self._open and self.nodes:
            self._open = {n.path for n in self.nodes.values() if n.depth == 0}
        self.show_page()
        self.show_tree()

    def refresh(self) -> None:
        self.load(self.rescan())

    def act(self, result: Any) -> None:
        """After an action: its report in the status line, then everything read again."""
        self.status.value = ("✔ " if result.ok else "✖ ") + escape(result.message)
        if result.ok:
            self.refresh()

    # -- findings ------------------------------------------------------------------

    def _show_findings(self) -> None:
        w = self._w
        rows = []
        for f in self.view.findings:
            text = (f'<div style="margin:2px 0">{SEVERITY_MARK.get(f.severity, "-")} <b>{escape(f.severity)}</b> '
                    f"{escape(f.message)}</div>")
            parts = [w.HTML(text + (fix_html(f.fix) if f.fix else ""), layout=w.Layout(width="100%"))]
            if f.fix is not None and f.fix.action is not None:
                parts.append(FixButton(f.fix, self.namespace, shell=self.shell, after=lambda r: self.refresh()).box)
            rows.append(w.VBox(parts, layout=w.Layout(border_bottom="1px solid var(--jp-border-color2, #ddd)",
                                                      padding="2px 0")))
        self.findings.children = rows

    # -- the table -----------------------------------------------------------------

    def _build_table(self, page_size: int) -> None:
        w = self._w
        self.filter = w.Text(placeholder="filter: name, or device:sim:0 kind:parameter dtype:float16",
                             layout=w.Layout(width="28em"), continuous_update=False)
        self.device = w.Dropdown(options=[("every device", None)], layout=w.Layout(width="11em"))
        self.kind = w.Dropdown(options=[("every kind", None)], layout=w.Layout(width="12em"))
        self.filter.observe(lambda c: self.set(text=c["new"]), "value")
        self.device.observe(lambda c: self.set(device=c["new"]), "value")
        self.kind.observe(lambda c: self.set(kind=c["new"]), "value")
        controls = w.HBox([self.filter, self.device, self.kind], layout=w.Layout(flex_flow="row wrap"))
        self.headers = {}
        for label, _column in COLUMNS:
            button = w.Button(description=label, layout=w.Layout(width=WIDTHS[label], flex="0 0 auto"),
                              tooltip=f"sort by {label}")
            button.on_click(lambda _b, label=label: self.sort_by(label))
            self.headers[label] = button
        header = w.HBox(list(self.headers.values()), layout=w.Layout(overflow="hidden"))
        self.rows = []
        for _ in range(page_size):
            cells = w.HTML(layout=w.Layout(flex="1 1 auto", overflow="hidden"))
            move = w.Dropdown(options=[_NO_CHOICE], layout=w.Layout(width="9em", flex="0 0 auto"))
            move.observe(lambda c, move=move: self._move_row(move, c), "value")
            self.rows.append(w.HBox([cells, move], layout=w.Layout(align_items="center", overflow="hidden")))
        self.prev = w.Button(description="", icon="chevron-left", tooltip="previous page",
                             layout=w.Layout(width="3em"))
        self.next = w.Button(description="", icon="chevron-right", tooltip="next page", layout=w.Layout(width="3em"))
        self.prev.on_click(lambda _b: self.set(page=self.state.page - 1))
        self.next.on_click(lambda _b: self.set(page=self.state.page + 1))
        self.position = w.Label()
        pager = w.HBox([self.prev, self.position, self.next], layout=w.Layout(align_items="center"))
        self.body = w.VBox(self.rows)
        self.table = w.VBox([controls, header, self.body, pager])

    def set(self, **changes: Any) -> None:
        """Change the filter, device, kind or page, and show the page."""
        from dataclasses import replace

        if "page" not in changes:
            changes["page"] = 0
        self.state = replace(self.state, **changes)
        self.show_page()

    def sort_by(self, label: str) -> None:
        self.state = self.state.sorted_by(label)
        self.show_page()

    def show_page(self) -> None:
        rows, number, pages = page(select(self.frame, self.state), self.state)
        if number != self.state.page:
            from dataclasses import replace

            self.state = replace(self.state, page=number)
        total = len(select(self.frame, self.state)) if pages > 1 or number else len(rows)
        first = number * self.state.page_size
        self.position.value = (f"rows {first + 1:,}–{first + len(rows):,} of {total:,}" if len(rows)
                               else "no tensor matches")
        self.prev.disabled = number == 0
        self.next.disabled = number >= pages - 1
        for label, button in self.headers.items():
            mark = (" ▼" if self.state.descending else " ▲") if label == self.state.sort else ""
            button.description = label + mark
        records = self.view.records
        self._page_records = []
        page_rows = [row for _, row in rows.iterrows()]
        for widget, row in zip(self.rows, page_rows + [None] * (len(self.rows) - len(page_rows))):
            if row is None:
                widget.layout.display = "none"
                continue
            widget.layout.display = None
            record = records[int(row["index"])]
            self._page_records.append(record)
            cells, move = widget.children
            cells.value = (_cell(record.name, WIDTHS["name"], code=True) + _cell(record.kind, WIDTHS["kind"])
                           + _cell(record.device, WIDTHS["device"]) + _cell(row["dtype"], WIDTHS["dtype"])
                           + _cell(row["shape_text"], WIDTHS["shape"]) + _cell(row["size"], WIDTHS["size"], right=True)
                           + _cell(row["note"], "14em"))
            target = self._movable(record)
            move.target = target
            move.disabled = target is None
            choices = [d for d in self.devices if d != record.device] if target else []
            move.options = [_NO_CHOICE] + choices
            move.value = _NO_CHOICE
            move.tooltip = f"move {target} to another device" if target else "cannot be moved by name"

    @staticmethod
    def _movable(record: Any) -> str | None:
        """The name a Move action takes for this row: the tensor itself, when it has a usable name."""
        if record.alias_of is not None or record.kind in ("error", "unnamed", "optimizer_state") or record.hidden:
            return None
        return record.name if fixes.is_path(record.name) else None

    def _move_row(self, move: Any, change: dict) -> None:
        if change["new"] in (None, _NO_CHOICE) or getattr(move, "target", None) is None:
            return
        self._move(move.target, change["new"])

    def _move(self, name: str, device: str) -> None:
        from .. import actions

        try:
            result = actions.move(self.namespace, name, device)
        except Exception as exc:  # noqa: BLE001 - shown in the status line
            result = actions.ActionResult(False, f"{type(exc).__name__}: {exc}")
        self.act(result)

    # -- the module tree --------------------------------------------------------------

    def show_tree(self) -> None:
        w = self._w
        rows = []

        def add(node: ModuleNode) -> None:
            rows.append(self._node_row(node))
            if node.path in self._open:
                for child in node.children:
                    if child in self.nodes:
                        add(self.nodes[child])

        for node in self.nodes.values():
            if node.depth == 0:
                add(node)
        self.tree.children = rows or [w.HTML("No modules in the namespace.")]

    def _node_row(self, node: ModuleNode) -> Any:
        w = self._w
        toggle = w.Button(icon=("caret-down" if node.path in self._open else "caret-right") if node.children else "",
                          description="", disabled=not node.children,
                          tooltip="show or hide its submodules" if node.children else "",
                          layout=w.Layout(width="2.2em", margin=f"0 0 0 {node.depth * 1.4}em", flex="0 0 auto"))
        toggle.on_click(lambda _b, path=node.path: self.toggle(path))
        devices = " + ".join(node.devices) or "no tensors"
        mark = "⚠ " if node.mixed else ""
        border = "border-left:3px solid var(--jp-warn-color1, #e69500);padding-left:4px;" if node.mixed else ""
        size = f"needs {human_bytes(node.bytes)}" if node.devices == ("meta",) else human_bytes(node.bytes)
        label = w.HTML(
            f'<span style="{border}white-space:nowrap"><code>{escape(node.path)}</code> '
            f"{escape(node.type_name)} · {mark}<b>{escape(devices)}</b> · {escape(size)} · "
            f"{node.parameters:,} parameters</span>",
            layout=w.Layout(flex="1 1 auto", overflow="hidden"))
        move = w.Dropdown(options=[_NO_CHOICE] + [d for d in self.devices if (d,) != node.devices],
                          layout=w.Layout(width="9em", flex="0 0 auto"),
                          disabled=not fixes.is_path(node.path))
        move.target = node.path
        move.observe(lambda c, move=move: self._move_row(move, c), "value")
        row = w.HBox([toggle, label, move], layout=w.Layout(align_items="center"))
        row.node = node
        return row

    def toggle(self, path: str) -> None:
        self._open ^= {path}
        self.show_tree()
