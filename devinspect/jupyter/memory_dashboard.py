"""The live ``%gpumem`` dashboard: stock ipywidgets composed, actions through devinspect.actions.

The dashboard never reads memory itself: it is given ``collect(count_tensors)``,
which returns a fresh :class:`~devinspect.model.device_memory.MemorySnapshot` (counting
tensors only when asked, since that walks every object), and the actions to offer.
A :class:`Watcher` refreshes the counters from a timer thread; tensors are counted
only on the kernel's own thread (Refresh, a button, or after a cell).
"""

from __future__ import annotations

import threading
from html import escape
from typing import Any, Callable, Mapping

from ..model import DeviceMemory, MemorySnapshot, human_bytes
from ..render import bars, details, device_headline, device_title, reconciliation_table

#: (action key, button label, icon, tooltip)
_BUTTONS = (
    ("empty_cache", "empty_cache", "recycle",
     "torch.cuda.empty_cache(): return cached, unused segments to the driver"),
    ("reset_peak_stats", "Reset peaks", "undo", "Reset the allocator's peak counters (and the process's peak RSS)"),
    ("collect_garbage", "gc.collect()", "trash", "Collect unreachable Python objects, reporting the tensor memory freed"),
    ("release_history", "Release history", "eraser",
     "Clear Out/_/__/___/_N entries and sys.last_traceback holding accelerator tensors"),
)


_BUTTON_TIPS = {key: tooltip for key, _label, _icon, tooltip in _BUTTONS}
_NOTHING_HELD = "Nothing in Out/_/__/___/_N or sys.last_traceback holds accelerator memory now"


class _DeviceView:
    """The widgets of one device, updated in place so a watched dashboard does not flicker."""

    def __init__(self, widgets: Any):
        self.title = widgets.HTML()
        # Three slots, filled in order with memory_html.bars(): allocated, reserved, used (or two for the CPU).
        self.bars = [widgets.FloatProgress(min=0.0, max=1.0, value=0.0, style={"description_width": "7em"},
                                           layout=widgets.Layout(width="22em")) for _ in range(3)]
        self.bar_labels = [widgets.Label() for _ in self.bars]
        self.bar_rows = [widgets.HBox([bar, label]) for bar, label in zip(self.bars, self.bar_labels)]
        self.table = widgets.HTML()
        self.box = widgets.VBox([self.title, *self.bar_rows, self.table])

    def bar(self, label: str) -> Any:
        """The bar now showing ``label`` (``allocated``, ``reserved``, …)."""
        return next(b for b in self.bars if b.description == label)

    def update(self, d: DeviceMemory) -> None:
        lines = [f"<b>{escape(device_title(d))}</b>", escape(device_headline(d))]
        extra = details(d)
        if extra:
            lines.append(escape(extra))
        if d.driver_status and d.kind != "cpu":
            lines.append(f"driver: {escape(d.driver_status)}")
        self.title.value = "<br>".join(lines)
        shown = bars(d)
        for i, (bar, label, row) in enumerate(zip(self.bars, self.bar_labels, self.bar_rows)):
            row.layout.display = None if i < len(shown) else "none"
            if i < len(shown):
                name, value = shown[i]
                total = d.driver_total_bytes or 1
                bar.max = float(total)
                bar.value = float(min(value, total))
                bar.description = name
                label.value = f"{human_bytes(value)} of {human_bytes(total)}"
        self.table.value = reconciliation_table(d)


class MemoryDashboard:
    """Per-device bars and reconciliation, with buttons that act and then re-read."""

    def __init__(self, collect: Callable[[bool], MemorySnapshot], actions: Mapping[str, Callable[[], Any]]):
        import ipywidgets as widgets

        self._widgets = widgets
        self._collect = collect
        self._actions = dict(actions)
        self._lock = threading.RLock()
        self._views: dict[str, _DeviceView] = {}
        #: Buttons with nothing to do now (by action key): left disabled after every action.
        self._idle: dict[str, bool] = {}
        self.notes = widgets.HTML()
        self.devices = widgets.VBox()
        self.buttons: dict[str, Any] = {}
        for key, label, icon, tooltip in _BUTTONS:
            if key in self._actions:
                # Never squeezed: a button keeps its label's width and the row wraps instead.
                button = widgets.Button(description=label, icon=icon, tooltip=tooltip,
                                        layout=widgets.Layout(width="auto", min_width="fit-content", flex="0 0 auto"))
                button.on_click(lambda b, key=key: self.run_action(key))
                self.buttons[key] = button
        self.refresh_button = widgets.Button(description="Refresh", icon="refresh", tooltip="Read again, counting tensors",
                                             layout=widgets.Layout(width="auto", min_width="fit-content", flex="0 0 auto"))
        self.refresh_button.on_click(lambda b: self.refresh_clicked())
        self.status = widgets.HTML()
        self.watching = widgets.HTML()
        row = widgets.HBox([*self.buttons.values(), self.refresh_button],
                           layout=widgets.Layout(flex_flow="row wrap", width="100%"))
        self.widget = widgets.VBox([self.notes, self.devices, row, self.status, self.watching])
        self.snapshot: MemorySnapshot | None = None
        self._counted: tuple[tuple[str, int | None], ...] | None = None
        self.refresh(count_tensors=True)

    @property
    def closed(self) -> bool:
        return getattr(self.widget, "comm", None) is None

    def refresh(self, count_tensors: bool = False) -> MemorySnapshot:
        """Read again (tensors too when ``count_tensors``) and update every view."""
        with self._lock:
            snapshot = self._collect(count_tensors)
            if count_tensors:
                self._counted = _allocated(snapshot)
            self.show(snapshot)
            return snapshot

    def refresh_clicked(self) -> None:
        """Refresh: read again, counting tensors; the last action's status no longer applies."""
        self.status.value = ""
        self.refresh(count_tensors=True)

    def after_cell(self) -> None:
        """After a cell: recount tensors if an accelerator's allocated bytes changed since the last count."""
        snapshot = self._collect(False)
        if _allocated(snapshot) != self._counted:
            self.refresh(count_tensors=True)
        else:
            self.show(snapshot)

    def show(self, snapshot: MemorySnapshot) -> None:
        with self._lock:
            self.snapshot = snapshot
            self.notes.value = "".join(f"<p>{escape(n)}</p>" for n in snapshot.notes)
            names = [d.device for d in snapshot.devices]
            if list(self._views) != names:
                self._views = {name: _DeviceView(self._widgets) for name in names}
                self.devices.children = [v.box for v in self._views.values()]
            for d in snapshot.devices:
                self._views[d.device].update(d)
            self._update_buttons(snapshot)

    def _update_buttons(self, snapshot: MemorySnapshot) -> None:
        releasable = snapshot.releasable_bytes
        cache = self.buttons.get("empty_cache")
        if cache is not None:
            cache.description = "empty_cache" if releasable is None else f"empty_cache: frees {human_bytes(releasable)}"
        history = self.buttons.get("release_history")
        if history is not None:
            held = [d.tensors.history_bytes for d in snapshot.accelerators if d.tensors is not None]
            history.description = "Release history" + (f": {human_bytes(sum(held))}" if held else "")
            # Nothing left to release (counted): the button rests until a later reading finds some.
            self._idle["release_history"] = bool(held) and sum(held) == 0
            history.disabled = self._idle["release_history"]
            history.tooltip = (_NOTHING_HELD if self._idle["release_history"] else _BUTTON_TIPS["release_history"])

    def run_action(self, key: str) -> None:
        """Run one action with every button disabled; its result (or error) goes into the status line."""
        buttons = [*self.buttons.values(), self.refresh_button]
        for b in buttons:
            b.disabled = True
        try:
            try:
                result = self._actions[key]()
                mark = "✔" if result.ok else "–"
                self.status.value = f"{mark} {escape(result.message)}"
            except Exception as exc:  # shown in the dashboard, not as a traceback
                self.status.value = f"✖ {escape(key)} failed: {escape(type(exc).__name__)}: {escape(str(exc))}"
            try:
                self.refresh(count_tensors=True)
            except Exception as exc:
                self.status.value += f"<br>✖ could not read memory again: {escape(type(exc).__name__)}: {escape(str(exc))}"
        finally:
            for key, b in [*self.buttons.items(), ("refresh", self.refresh_button)]:
                b.disabled = self._idle.get(key, False)


def _allocated(snapshot: MemorySnapshot) -> tuple[tuple[str, int | None], ...]:
    return tuple((d.device, d.allocated_bytes) for d in snapshot.accelerators)


class Watcher:
    """Refreshes a dashboard's counters every ``interval`` seconds from a timer thread.

    The thread sleeps on an Event (no busy loop) and reads only counters (allocator,
    NVML, process memory), which are safe to read while a cell runs; it stops on
    :meth:`stop` or as soon as the dashboard's widget is closed.
    """

    def __init__(self, dashboard: MemoryDashboard, interval: float):
        self.dashboard = dashboard
        self.interval = interval
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="devinspect-gpumem-watch", daemon=True)
        self.ticks = 0
        dashboard.watching.value = f"refreshing every {interval:g} s (<code>%gpumem --stop</code> stops)"

    def start(self) -> Watcher:
        self.thread.start()
        return self

    @property
    def running(self) -> bool:
        return self.thread.is_alive() and not self._stop.is_set()

    def stop(self, join: bool = True) -> None:
        self._stop.set()
        if join and self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout=5)
        if not self.dashboard.closed:
            self.dashboard.watching.value = "not refreshing"

    def _loop(self) -> None:
        failures = 0
        while not self._stop.wait(self.interval):
            if self.dashboard.closed:
                break
            try:
                self.dashboard.refresh(count_tensors=False)
                self.ticks += 1
                failures = 0
            except Exception as exc:  # reported in the widget, never raised in a thread
                failures += 1
                self.dashboard.status.value = f"✖ refresh failed: {escape(type(exc).__name__)}: {escape(str(exc))}"
                if failures >= 3:
                    break
        self._stop.set()
