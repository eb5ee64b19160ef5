"""``%devices`` in Jupyter: findings with Apply fix, a tensor table and a module tree, live.

Composed from stock ipywidgets (no JavaScript of ours). The table is filtered, sorted
and paged in the kernel (:mod:`devinspect.jupyter.explorer_table`): the browser holds one page of rows,
a fixed set of widgets whose values change, so 100,000 tensors cost what 25 do. The
module tree (:mod:`devinspect.render.module_tree`) opens a node's children when asked, a
page of them at a time, and marks a node whose parameters span devices. Every row and node can be moved to
the devices PyTorch lets it go to (Move to ▾; a gradient goes with its parameter), and every finding with an
action has Apply fix; all go through :mod:`devinspect.actions` (all or nothing, reported in bytes; a move's
result beside its row), then the session is scanned again.
"""

from __future__ import annotations

from html import escape
from typing import Any, Callable, MutableMapping

from ..collect import is_path, mro, type_name
from ..model import KINDS, Column, ScanView, human_bytes, tensor_columns
from ..render import NARROW, SEVERITY_MARK, ModuleNode, fix_html, module_tree, name_html, parent_of, summary_line
from .explorer_table import GridState, grid_columns, page, select, table_frame
from .fix_buttons import FixButton
from .lifetime import close_all

_MOVE_WIDTH = "7.2em"
_NAME_FLEX = "1 1 0"
#: Width of a character in a cell, for a column's width from its declared ``chars``.
_CHAR_EM = 0.6
_CELL = "padding:0 4px;box-sizing:border-box;line-height:1.9"
#: How a cell wraps, by its column's width class: a name between its parts (never inside one), a
#: word never (cut with an ellipsis if ever wider than its column, the whole text its tooltip),
#: prose between words.
_WRAP = {"name": "overflow-wrap:break-word", "word": "white-space:nowrap;overflow:hidden;text-overflow:ellipsis",
         "number": "white-space:nowrap", "words": "overflow-wrap:break-word", "code": "overflow-wrap:break-word"}
#: Below :data:`~devinspect.render.html.NARROW` the columns declared to fold leave the table (a laptop
#: with the file browser open): their values stay in the name's tooltip and in the filter, so the
#: names, which are the point, get their width. The rule is the browser's (a container query), so a
#: resized window or sidebar re-lays the table without a round trip to the kernel.


def column_width(column: Column) -> str:
    """A grid column's width: its longest text whole, and its header with the sort mark."""
    return f"{max(column.chars, len(column.name) + 2) * _CHAR_EM + 0.8:.1f}em"


def grid_style() -> str:
    """The grid's stylesheet, read from the declared columns: a row is a grid, not a flex box (a
    widget's HTML sits in a flex item that cannot shrink below its content's min-content width,
    and a ``minmax(6em, 1fr)`` track keeps a long name out of that width, so the name wraps onto
    more lines instead of pushing the other columns out of line)."""
    columns = grid_columns()

    def tracks(shown: tuple[Column, ...]) -> str:
        return " ".join("minmax(6em, 1fr)" if c.width == "name" else column_width(c) for c in shown)

    folded = [c.name for c in columns if c.folds]
    return ("<style>"
            ".devinspect-explorer{container-type:inline-size}"
            f".devinspect-row{{display:grid;grid-template-columns:{tracks(columns)}}}"
            f"@container (max-width: {NARROW}){{"
            f".devinspect-row{{grid-template-columns:{tracks(tuple(c for c in columns if not c.folds))}}}"
            + "".join(f".devinspect-row>.devinspect-{k},.devinspect-head-{k}{{display:none !important}}"
                      for k in folded)
            + "}</style>")


_NO_CHOICE = "Move to…"
#: Children of one module tree node shown at once; the rest come a page at a time.
TREE_PAGE = 50


def _cell(column: Column, text: str, title: str | None = None) -> str:
    body = f"<code>{name_html(text)}</code>" if column.width == "name" else escape(text)
    align = "text-align:right;" if column.right else ""
    return (f'<span class="devinspect-{column.name}" style="{_CELL};{_WRAP[column.width]};{align}" '
            f'title="{escape(title or text, quote=True)}">{body}</span>')


def _result_html(ok: bool, message: str) -> str:
    return f'<div style="line-height:1.4;overflow-wrap:anywhere">{"✔" if ok else "✖"} {escape(message)}</div>'


def _one_line(html: str, title: str) -> str:
    """``html`` within the widget's width, wrapped where it ends, whatever the text's length."""
    return (f'<div style="display:grid;grid-template-columns:minmax(0, 1fr)">'
            f'<span style="{_CELL};overflow-wrap:anywhere;padding:0" title="{escape(title, quote=True)}">{html}</span></div>')


def _row_title(row: Any) -> str:
    """A row's name with what the narrow table leaves out: the columns that fold, then those
    never in the grid (``model.fc.weight: parameter, float32  (requires_grad)``)."""
    columns = tensor_columns.TENSOR_COLUMNS
    folded = ", ".join(row[c.name] for c in columns if c.in_grid and c.folds)
    aside = "; ".join(row[c.name] for c in columns if not c.in_grid and row[c.name])
    name = next(row[c.name] for c in columns if c.width == "name")
    return f"{name}: {folded}" + (f"  ({aside})" if aside else "")


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
        # %devices --findings: what looks wrong and its fixes, without the tables (as in the terminal).
        parts = [self.summary, self.findings] + ([] if view.display.findings_only else [self.tabs]) + [self.status]
        self.widget = widgets.VBox(parts, layout=widgets.Layout(width="100%"))
        self.widget.add_class("devinspect-explorer")  # the container whose width folds columns (grid_style)
        #: The last Move result of each row (a tensor's or a module's name): (ok, message), shown beside it.
        self._results: dict[str, tuple[bool, str]] = {}
        #: The last Apply fix of a finding: (the finding's code and subject, its row, its button's status
        #: HTML), shown beside that finding's button, or in its row's place when the finding went.
        self._fix_result: tuple[tuple[str, str], int, str] | None = None
        self._open: set[str] = set()
        #: Children shown of each open node in the module tree (``""``: the roots), when more than a page.
        self._shown: dict[str, int] = {}
        # Every tree row's label, menu and box are laid out alike: one Layout each, shared.
        self._tree_layouts = {"label": widgets.Layout(flex="1 1 0", min_width="0", overflow="hidden"),
                              "move": widgets.Layout(width=_MOVE_WIDTH, flex="0 0 auto"),
                              "row": widgets.Layout(align_items="center")}
        self.load(view)

    # -- data ---------------------------------------------------------------------

    def load(self, view: ScanView) -> None:
        """Show ``view``: summary, findings, table (its current filter/sort/page kept) and tree."""
        self.view = view
        self.frame = table_frame(view.records)
        self._device_of = {r.name: r.device for r in view.records if r.kind == "parameter"}
        self.nodes = module_tree(view.result)
        self.summary.value = grid_style() + (f'<span style="line-height:1.4"><b>devinspect</b>: '
                                      f'{escape(summary_line(view))}</span>')
        self._show_findings()
        kinds = sorted(self.frame["kind"].unique(), key=KINDS.index)
        self.kind.options = [("every kind", "")] + [(k, k) for k in kinds]
        present = sorted(self.frame["device"].unique())
        self.device.options = [("every device", "")] + [(d, d) for d in present]
        self.tabs.set_title(0, f"Tensors ({len(view.records):,})")
        self.tabs.set_title(1, f"Modules ({len(self.nodes):,})")
        if not self._open and self.nodes:
            self._open = {n.path for n in self.nodes.values() if n.depth == 0}
        self.show_page()
        self.show_tree()

    def refresh(self) -> None:
        from ..runtime import beneath_user_modes

        with beneath_user_modes():  # read again after a click: unseen by a mode the user left entered
            view = self.rescan()
        self.load(view)

    def act(self, result: Any) -> None:
        """After an action: its report in the status line, then everything read again."""
        self.status.value = ("✔ " if result.ok else "✖ ") + escape(result.message)
        if result.ok:
            self.refresh()

    def _fixed(self, finding: Any, row: int, button: FixButton) -> None:
        """After Apply fix on a finding: its outcome stays where the click was, beside the button (or,
        once the finding is gone, in its row's place), and everything is read again."""
        self._fix_result = ((finding.code, finding.subject), row, button.status.value)
        self.refresh()

    # -- findings ------------------------------------------------------------------

    def _show_findings(self) -> None:
        w = self._w
        rows = []
        shown = self._fix_result
        for f in self.view.findings:
            text = (f'<div style="margin:2px 0">{SEVERITY_MARK.get(f.severity, "-")} <b>{escape(f.severity)}</b> '
                    f"{escape(f.message)}</div>")
            body = f'<div style="line-height:1.4">{text}{fix_html(f.fix) if f.fix else ""}</div>'
            parts = [w.HTML(body, layout=w.Layout(width="auto"))]  # 100% and its margins would not fit
            if f.fix is not None and f.fix.action is not None:
                button = FixButton(f.fix, self.namespace, shell=self.shell)
                row = len(rows)
                button.after = lambda _result, f=f, row=row, button=button: self._fixed(f, row, button)
                if shown is not None and shown[0] == (f.code, f.subject):
                    button.status.value, shown = shown[2], None  # still here: its last outcome beside it
                parts.append(button.box)
            rows.append(w.VBox(parts, layout=w.Layout(border_bottom="1px solid var(--jp-border-color2, #ddd)",
                                                      padding="2px 0")))
        if shown is not None:
            # The finding it fixed is gone: what the click did stays in its row's place.
            outcome = w.HTML(f'<div style="margin:2px 0" class="devinspect-fix-result">{shown[2]}</div>')
            rows.insert(min(shown[1], len(rows)), w.VBox([outcome], layout=w.Layout(padding="2px 0")))
        if not rows and self.view.display.findings_only:
            rows = [w.HTML("<p>No findings.</p>")]
        old = self.findings.children
        self.findings.children = rows
        self._close_rows(old)

    # -- the table -----------------------------------------------------------------

    def _build_table(self, page_size: int) -> None:
        w = self._w
        self.filter = w.Text(placeholder="filter: name, or device:sim:0 kind:parameter dtype:float16",
                             layout=w.Layout(width="28em"), continuous_update=False)
        self.device = w.Dropdown(options=[("every device", "")], value="", layout=w.Layout(width="11em"))
        self.kind = w.Dropdown(options=[("every kind", "")], value="", layout=w.Layout(width="12em"))
        self.filter.observe(lambda c: self.set(text=c["new"]), "value")
        self.device.observe(lambda c: self.set(device=c["new"] or None), "value")
        self.kind.observe(lambda c: self.set(kind=c["new"] or None), "value")
        controls = w.HBox([self.filter, self.device, self.kind], layout=w.Layout(flex_flow="row wrap"))
        self.headers = {}
        for column in grid_columns():
            label = column.name
            # No margins: each header lines up with its column of cells below.
            layout = (w.Layout(flex=_NAME_FLEX, min_width="6em", padding="0 4px", margin="0")
                      if column.width == "name" else
                      w.Layout(width=column_width(column), flex="0 0 auto", padding="0 4px", margin="0"))
            button = w.Button(description=label, layout=layout, tooltip=f"sort by {label}")
            button.add_class(f"devinspect-head-{label}")
            button.on_click(lambda _b, label=label: self.sort_by(label))
            self.headers[label] = button
        self.headers_spacer = w.HTML(layout=w.Layout(width=_MOVE_WIDTH, flex="0 0 auto", margin="0"))
        header = w.HBox([*self.headers.values(), self.headers_spacer], layout=w.Layout(width="100%"))
        self.rows = []
        for _ in range(page_size):
            cells = w.HTML(layout=w.Layout(flex="1 1 0", min_width="0", overflow="hidden", margin="0"))
            move = w.Dropdown(options=[_NO_CHOICE], layout=w.Layout(width=_MOVE_WIDTH, flex="0 0 auto", margin="0"))
            move.observe(lambda c, move=move: self._move_row(move, c), "value")
            # What Move did to this row, on a line of its own under it (the row wraps).
            result = w.HTML(layout=w.Layout(width="100%", display="none", margin="0 0 2px 0"))
            self.rows.append(w.HBox([cells, move, result], layout=w.Layout(align_items="center", width="100%",
                                                                             flex_flow="row wrap")))
        self.prev = w.Button(description="", icon="chevron-left", tooltip="previous page",
                             layout=w.Layout(width="3em"))
        self.next = w.Button(description="", icon="chevron-right", tooltip="next page", layout=w.Layout(width="3em"))
        self.prev.on_click(lambda _b: self.set(page=self.state.page - 1))
        self.next.on_click(lambda _b: self.set(page=self.state.page + 1))
        self.position = w.Label()
        pager = w.HBox([self.prev, self.position, self.next], layout=w.Layout(align_items="center"))
        # Offered beside the row whose move was refused because an autograd graph holds its tensors.
        self.release_button = w.Button(description="Release graphs, then move", icon="unlink",
                                       tooltip="detach the variables whose graphs hold these tensors (their values "
                                               "are kept), then move", layout=w.Layout(width="auto"))
        self.release_button.on_click(lambda _b: self._release_then_move())
        self._release_offer: tuple[str, str, Any] | None = None
        self.body = w.VBox(self.rows)
        # The button is also kept in the table, hidden, so that closing the output closes it (it is
        # shown only inside the row it is offered for).
        spare = w.Box([self.release_button], layout=w.Layout(display="none"))
        self.table = w.VBox([controls, header, self.body, pager, spare])

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
        selected = select(self.frame, self.state)
        rows, number, pages = page(selected, self.state)
        if number != self.state.page:
            from dataclasses import replace

            self.state = replace(self.state, page=number)
        total = len(selected)
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
            cells, move, result = widget.children[:3]
            offered = self._release_offer is not None and self._release_offer[0] == record.name
            widget.children = (cells, move, result) + ((self.release_button,) if offered else ())
            cells.value = ('<div class="devinspect-row">'
                           + "".join(_cell(c, row[c.name], _row_title(row) if c.width == "name" else None)
                                     for c in grid_columns()) + "</div>")
            target, choices, tooltip = self._move_offer(record)
            move.target = target if choices else None
            move.disabled = not choices
            move.options = [_NO_CHOICE] + choices
            move.value = _NO_CHOICE
            move.tooltip = tooltip
            said = self._results.get(record.name)
            result.value = _result_html(*said) if said else ""
            result.layout.display = None if said else "none"

    def _move_offer(self, record: Any) -> tuple[str | None, list[str], str]:
        """(the name a Move action takes for this row, the devices it can go to, the menu's tooltip).

        Only moves PyTorch allows are offered: a gradient and an optimizer's state live where their
        parameter does (assigning a gradient on another device is refused), so they move with it;
        a view moves with the tensor it views; a meta tensor holds no data to copy.
        """
        name = record.name
        if record.kind in ("error", "unnamed") or record.hidden or not is_path(name):
            return None, [], "cannot be moved by name"
        if record.alias_of is not None:
            return None, [], f"shares its memory with {record.alias_of}: move {record.alias_of}"
        if record.kind in ("gradient", "optimizer_state"):
            what = "a gradient" if record.kind == "gradient" else "optimizer state"
            if record.param is None:
                return None, [], f"{what} lives where its parameter does"
            home = self._device_of.get(record.param)
            choices = [home] if home is not None and home != record.device and record.kind == "gradient" else []
            return name, choices, (f"{what} lives where its parameter does: move {record.param}, "
                                   f"and its {'gradient' if record.kind == 'gradient' else 'state'} goes with it")
        if record.device == "meta":
            return None, [], ("on the meta device, with no data to copy: load its weights (load_state_dict(..., "
                              "assign=True)) or use to_empty(device=...)")
        in_place = record.kind == "parameter" or (record.requires_grad and record.is_leaf)
        if not in_place:  # moved by assigning its name again: the object holding it must take that
            holder = self._holder(name)
            if holder is not None and tuple in mro(type(holder)):
                parent = parent_of(name) or name
                return None, [], (f"held in a {type_name(type(holder))}, which cannot change: move {parent} whole "
                                  "(Move to on its row, or its finding's fix)")
            from ..actions import unreached

            why = unreached(self.namespace, name)
            if why is not None:  # the move would not reach the reference the code uses
                return None, [], f"not moved by name: {why}"
        return name, [d for d in self.devices if d != record.device], f"move {name} to another device"

    def _holder(self, name: str) -> Any:
        from ..actions import UNKNOWN, NamePath

        try:
            holder = NamePath(name).holder_read_statically(self.namespace)
        except Exception:  # a name that cannot be read statically: the move says what happens
            return None
        return None if holder is UNKNOWN else holder

    def _move_row(self, move: Any, change: dict) -> None:
        if change["new"] in (None, _NO_CHOICE) or getattr(move, "target", None) is None:
            return
        move.value = _NO_CHOICE  # the menu offers again; a choice that fails does not stay selected
        self._move(move.target, change["new"])

    def _move(self, name: str, device: str) -> None:
        """Move ``name``; the result is shown beside its row (the view is read again when it moved)."""
        from .. import actions
        from ..runtime import beneath_user_modes

        try:
            with beneath_user_modes():
                result = actions.move(self.namespace, name, device)
        except Exception as exc:  # shown beside the row
            result = actions.ActionResult(False, f"{type(exc).__name__}: {exc}")
        self._show_move(name, device, result)

    def _release_then_move(self) -> None:
        """The choice a refused move names: release the graphs that hold its tensors, then move."""
        from .. import actions
        from ..model import Move

        if self._release_offer is None:
            return
        name, device, release = self._release_offer
        try:
            result = actions.apply_after_release(self.namespace, release, Move(name, device))
        except Exception as exc:  # shown beside the row
            result = actions.ActionResult(False, f"{type(exc).__name__}: {exc}")
        self._show_move(name, device, result)

    def _show_move(self, name: str, device: str, result: Any) -> None:
        self._release_offer = (name, device, result.follow_up) if not result.ok and result.follow_up else None
        self._results = {name: (result.ok, result.message)}  # the last move's result, beside its row
        self._fix_result = None  # one outcome shown at a time: where the last click was
        if result.ok:
            self.refresh()
        else:
            self.show_page()
            self.show_tree()

    # -- the module tree --------------------------------------------------------------

    def show_tree(self) -> None:
        w = self._w
        rows = []

        def add_all(nodes: list[ModuleNode], parent: str) -> None:
            # A node with hundreds of children (a deep Sequential, a ModuleList of layers) shows
            # them a page at a time: each row is a handful of widgets the browser must draw.
            shown = self._shown.get(parent, TREE_PAGE)
            for node in nodes[:shown]:
                rows.append(self._node_row(node))
                if node.path in self._open:
                    add_all([self.nodes[c] for c in node.children if c in self.nodes], node.path)
            if len(nodes) > shown:
                rows.append(self._more_row(parent, nodes[shown].depth, len(nodes) - shown))

        add_all([node for node in self.nodes.values() if node.depth == 0], "")
        old = self.tree.children
        self.tree.children = rows or [w.HTML("No modules in the namespace.")]
        self._close_rows(old)

    def _toggle_layout(self, depth: int) -> Any:
        """The open/close button's layout at ``depth``, indented by depth, shared by every row there."""
        key = f"toggle {depth}"
        if key not in self._tree_layouts:
            self._tree_layouts[key] = self._w.Layout(width="2.2em", margin=f"0 0 0 {depth * 1.4}em", flex="0 0 auto")
        return self._tree_layouts[key]

    def _close_rows(self, rows: tuple) -> None:
        """Close rows that new ones replaced, with everything in them but the shared layouts:
        ipywidgets keeps every widget it made until it is closed, so rows drawn again after each
        action would pile up in the kernel."""
        close_all(rows, keep=[*self._tree_layouts.values(), self.release_button])

    def _more_row(self, parent: str, depth: int, hidden: int) -> Any:
        w = self._w
        more = w.Button(description=f"show {min(hidden, TREE_PAGE):,} more", icon="ellipsis-h",
                        tooltip=f"{hidden:,} more {'submodules' if parent else 'modules'} not shown",
                        layout=w.Layout(width="auto", margin=f"0 0 0 {depth * 1.4 + 2.2}em"))
        more.on_click(lambda _b: self.show_more(parent))
        row = w.HBox([more, w.Label(f"{hidden:,} not shown")], layout=self._tree_layouts["row"])
        row.node, row.more_of = None, parent
        return row

    def show_more(self, parent: str) -> None:
        """The next page of ``parent``'s children (``""``: of the roots) in the module tree."""
        self._shown[parent] = self._shown.get(parent, TREE_PAGE) + TREE_PAGE
        self.show_tree()

    def _node_row(self, node: ModuleNode) -> Any:
        w = self._w
        toggle = w.Button(icon=("caret-down" if node.path in self._open else "caret-right") if node.children else "",
                          description="", disabled=not node.children,
                          tooltip="show or hide its submodules" if node.children else "",
                          layout=self._toggle_layout(node.depth))
        toggle.on_click(lambda _b, path=node.path: self.toggle(path))
        devices = " + ".join(node.devices) or "no tensors"
        mark = "⚠ " if node.mixed else ""
        border = "border-left:3px solid var(--jp-warn-color1, #e69500);padding-left:4px;" if node.mixed else ""
        size = f"needs {human_bytes(node.bytes)}" if node.devices == ("meta",) else human_bytes(node.bytes)
        text = f"{node.type_name} · {mark}{devices} · {size} · {node.parameters:,} parameters"
        layouts = self._tree_layouts
        said = self._results.get(node.path)
        label = w.HTML(
            f'<div style="{border}">' + _one_line(
                f"<code>{escape(node.path)}</code> {escape(node.type_name)} · {mark}<b>{escape(devices)}</b> · "
                f"{escape(size)} · {node.parameters:,} parameters", f"{node.path} {text}")
            + (_result_html(*said) if said else "") + "</div>",
            layout=layouts["label"])
        movable = is_path(node.path)
        move = w.Dropdown(options=[_NO_CHOICE] + [d for d in self.devices if (d,) != node.devices],
                          layout=layouts["move"], disabled=not movable,
                          tooltip=(f"move {node.path} to another device: its parameters and buffers, their "
                                   "gradients and optimizer state (a plain tensor attribute stays: its finding's "
                                   "Apply fix registers it as a buffer)") if movable else "cannot be moved by name")
        move.target = node.path
        move.observe(lambda c, move=move: self._move_row(move, c), "value")
        offered = self._release_offer is not None and self._release_offer[0] == node.path
        row = w.HBox([toggle, label, move] + ([self.release_button] if offered else []), layout=layouts["row"])
        row.node = node
        return row

    def toggle(self, path: str) -> None:
        self._open ^= {path}
        self.show_tree()
