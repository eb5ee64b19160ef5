"""``%gpumem``: accelerator memory per device, reconciled; the dashboard, ``--watch``,
``--track`` and ``--history``."""

from __future__ import annotations

import weakref
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import line_cell_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments

from ..runtime import beneath_user_modes
from .cell_runner import AwaitedCells
from .magic_support import (
    DevInspectMagics,
    caller_result_use,
    calling_frame,
    device_argument,
    display_live,
    event_loop_running,
    variable_name,
)
from .ranks import show_ranks


@magics_class
class GpumemMagics(DevInspectMagics, AwaitedCells):
    """``%gpumem`` and its dashboard, watchers and per-cell tracking."""

    def __init__(self, shell: Any, settings: Any):
        super().__init__(shell, settings)
        self._tracker: Any = None  # MemoryTracker once %gpumem --track ran
        self._watchers: list[Any] = []  # running %gpumem --watch refreshers
        self._last_dashboard: Any = lambda: None  # weak reference to the newest %gpumem dashboard
        self._notes_said: set[str] = set()  # %%gpumem's notes said once in a session

    @magic_arguments()
    @argument("-d", "--device", help="Only this device (cuda:0, cuda, cpu).")
    @argument("--watch", type=float, metavar="SECONDS",
              help="Refresh the dashboard every SECONDS without blocking the kernel (Jupyter only).")
    @argument("--stop", action="store_true", help="Stop every --watch refresh.")
    @argument("--track", action="store_true", help="Record memory before/after and the peak of every following cell.")
    @argument("--untrack", action="store_true", help="Stop recording cells (the history is kept).")
    @argument("--history", action="store_true", help="Show the cells recorded by --track: a table and a plot.")
    @argument("--no-tensors", action="store_true", dest="no_tensors",
              help="Skip counting tensors (faster; the reconciliation starts at the allocator).")
    @argument("--all-devices", action="store_true", dest="all_devices",
              help="Also show accelerators nothing in this process uses.")
    @argument("-o", "--output", action="store_true",
              help="Return the snapshot (or the history), as %%timeit -o does: snap = %%gpumem -o")
    @argument("-v", "--variable", metavar="NAME", help="Also store the snapshot (or the history) in NAME.")
    @argument("--ranks", action="store_true",
              help="The memory of every rank of a distributed job side by side (see %%devices --ranks).")
    @argument("-f", "--function", action="append", default=[], metavar="NAME",
              help="As a cell magic: also profile the lines of this function, method or module's forward "
                   "(repeatable).")
    @no_var_expand  # a name, a path or code is taken as typed: {…} and $x never run
    @line_cell_magic
    def gpumem(self, line: str = "", cell: str | None = None) -> Any:
        """Accelerator memory per device: allocated, reserved and the driver's view, reconciled.
        As a cell magic (``%%gpumem``): the cell's memory line by line, and by name.

        For every GPU (and this process's own memory): what PyTorch's allocator has
        allocated and reserved, peaks, fragmentation, what ``empty_cache()`` would
        release, and what the driver (NVML) sees for this and other processes, with a
        table that adds up from the tensors you named to the device's total. In
        Jupyter it is a dashboard with buttons (empty_cache, reset peaks, gc.collect(),
        release history); elsewhere a static table. Reading changes nothing and never
        initialises CUDA.

        Examples::

            %gpumem                  # every device
            %gpumem -d cuda:1        # one device
            %gpumem --watch 2        # refresh every 2 s while you work; %gpumem --stop
            %gpumem --track          # record each following cell; --history shows them
            snap = %gpumem -o        # keep it: snap.frame, snap.reconciliation_frame

        ``%%gpumem`` runs the cell as a plain cell would (same results and errors; no
        empty_cache, sync or allocation added) and shows, for each line, allocated memory
        before and after, the peak inside it, reserved before and after, and the tensors
        it made that are still alive, by your names; then the cell's peak: the line, what
        was live, and the peak without the largest temporary. Lines in loops add up.

            %%gpumem                 # the cell's lines (and the functions it defines)
            %%gpumem -f train_step -f model   # also inside train_step and model.forward
            %%gpumem -v prof         # keep it: prof.frame, prof.peak
        """
        __tracebackhide__ = True  # the user's traceback starts in their cell, not here
        args = self._parse(self.gpumem, line)
        variable_name("%gpumem", args.variable, self.shell)
        if cell is not None:
            run = self._profile_cell(args, line, cell)
            if run.needs_await and event_loop_running():
                raise UsageError("%%gpumem: this cell awaits; run it as a cell (%%gpumem on its first line) "
                                 "so the kernel can run it on its event loop")
            return run.run()
        return self._line(args)

    @beneath_user_modes()  # no mode the user left entered sees devinspect's own reads
    def _line(self, args: Any) -> Any:
        """``%gpumem`` as a line magic (the cell's code, under ``%%gpumem``, runs as typed)."""
        if args.function:
            raise UsageError("%gpumem: -f names functions to profile with %%gpumem (a cell magic)")
        if args.ranks:
            if args.device or args.watch is not None or args.track or args.untrack or args.history or args.stop:
                raise UsageError("%gpumem: --ranks shows every rank once; it takes no -d, --watch, --track or --history")
            return show_ranks(self.shell, "%gpumem", args, "memory", self._ipython_names())
        if args.track and args.untrack:
            raise UsageError("%gpumem: --track and --untrack contradict each other")
        if args.watch is not None and not 0.2 <= args.watch <= 3600:
            raise UsageError(f"%gpumem: --watch takes seconds between 0.2 and 3600, not {args.watch:g}")
        if args.stop:
            stopped = self._stop_watchers()
            print(f"%gpumem: stopped {stopped} refreshing dashboard{'s' if stopped != 1 else ''}.")
            return None
        if args.track or args.untrack:
            self._set_tracking(args.track)
            return None
        # -o with the value kept (snap = %gpumem -o) or shown by IPython: the caller has it; nothing more shows.
        quiet = args.output and caller_result_use(calling_frame()) != "dropped"
        if args.history:
            shown = self._show_history(quiet)
        else:
            shown = self._show_memory(args, quiet)
        if args.variable:
            self.shell.user_ns[args.variable] = shown
        return shown if args.output else None

    def _profile_cell(self, args: Any, line: str, cell: str) -> Any:
        from .profiled_cell import ProfiledCell, function_codes, profiled_device

        line_only = [flag for flag, used in (("--watch", args.watch is not None), ("--stop", args.stop),
                                             ("--track", args.track), ("--untrack", args.untrack),
                                             ("--history", args.history), ("--ranks", args.ranks),
                                             ("--all-devices", args.all_devices), ("--no-tensors", args.no_tensors))
                     if used]
        if line_only:
            raise UsageError(f"%%gpumem: {line_only[0]} belongs to %gpumem on a line; a %%gpumem cell takes "
                             "-d, -f, -o and -v")
        device = profiled_device(args.device)
        def live_view(profile: Any, plot_html: str | None) -> Any:
            from ..jupyter import MemoryDashboard, line_memory_widget

            dashboard = MemoryDashboard(self._collector(str(device), True), self._memory_actions())
            return line_memory_widget(profile, dashboard, plot_html)

        return ProfiledCell(self.shell, args, line, cell, device, function_codes(self.shell.user_ns, args.function),
                            self._ipython_names(), live_view, self._notes_said)

    async def gpumem_async(self, line: str, cell: str) -> Any:
        """``%%gpumem`` for a cell with top-level ``await``, run on the kernel's event loop
        (an input transformer rewrites such a cell into ``await`` of this method)."""
        __tracebackhide__ = True
        args = self._parse(self.gpumem, line)
        variable_name("%gpumem", args.variable, self.shell)
        self._async_outcome = await self._profile_cell(args, line, cell).run_async()

    def _collector(self, device: str | None, count_tensors_by_default: bool, all_devices: bool = False) -> Any:
        """collect(count_tensors) -> MemorySnapshot, keeping the last tensor count between calls."""
        from ..collect import build, in_use, read, tally_tensors

        shell = self.shell
        last: dict[str, Any] = {}

        def collect(count_tensors: bool) -> Any:
            if count_tensors_by_default and (count_tensors or "tallies" not in last):
                last["tallies"] = tally_tensors(shell.user_ns, exclude=self._ipython_names())
            snapshot = build(read(), last.get("tallies"))
            if device:
                return only_device(snapshot, device)
            return snapshot if all_devices or "tallies" not in last else in_use(snapshot)

        return collect

    def _memory_actions(self) -> dict[str, Any]:
        from .. import actions

        shell = self.shell
        return {
            "empty_cache": actions.empty_cache,
            "reset_peak_stats": actions.reset_peak_stats,
            "collect_garbage": actions.collect_garbage,
            "release_history": lambda: actions.release_history(shell.user_ns, shell.displayhook, shell.user_ns_hidden),
        }

    def _show_memory(self, args: Any, quiet: bool = False) -> Any:
        from IPython.display import display

        collect = self._collector(args.device, not args.no_tensors, args.all_devices)
        widgets_frontend = getattr(self.shell, "kernel", None) is not None
        if args.watch is not None and not widgets_frontend:
            raise UsageError("%gpumem: --watch needs a Jupyter kernel (a live widget); here use %gpumem again, "
                             "or %gpumem --track to record every cell")
        if quiet and args.watch is None:
            return collect(True)
        if widgets_frontend:
            from ..jupyter import MemoryDashboard, Watcher

            # Its first read counts the tensors (and raises UsageError for an unknown -d) before anything shows.
            dashboard = MemoryDashboard(collect, self._memory_actions())
            self._last_dashboard = weakref.ref(dashboard)
            snapshot = dashboard.snapshot
            display_live(dashboard.widget, snapshot, self.shell)
            if args.watch is not None:
                self._stop_watchers()
                self._watchers.append(Watcher(dashboard, args.watch).start())
                self._set_event("post_run_cell", self._after_cell_watch, True)
        else:
            snapshot = collect(True)
            display(snapshot)
        return snapshot

    def _stop_watchers(self) -> int:
        stopped = 0
        for watcher in self._watchers:
            if watcher.running:
                stopped += 1
            watcher.stop()
        self._watchers.clear()
        self._set_event("post_run_cell", self._after_cell_watch, False)
        return stopped

    def _after_cell_watch(self, result: Any = None) -> None:
        self._watchers[:] = [w for w in self._watchers if w.running]
        for watcher in self._watchers:
            try:
                watcher.dashboard.after_cell()
            except Exception as exc:  # a hook must never break the user's cell
                from html import escape

                watcher.dashboard.status.value = (f"✖ refresh after the cell failed: "
                                                  f"{escape(type(exc).__name__)}: {escape(str(exc))}")
        if not self._watchers:
            self._set_event("post_run_cell", self._after_cell_watch, False)

    def _set_tracking(self, on: bool) -> None:
        from ..collect import MemoryTracker

        if on:
            if self._tracker is None:
                self._tracker = MemoryTracker()
            self._set_event("pre_run_cell", self._before_cell_track, True)
            self._set_event("post_run_cell", self._after_cell_track, True)
            print("%gpumem: recording memory for every following cell (the allocator's peak counters are reset "
                  "before each). %gpumem --history shows it; --untrack stops.")
        else:
            self._set_event("pre_run_cell", self._before_cell_track, False)
            self._set_event("post_run_cell", self._after_cell_track, False)
            cells = len(self._tracker.cells) if self._tracker else 0
            print(f"%gpumem: stopped recording ({cells} cells kept; %gpumem --history shows them).")

    def _before_cell_track(self, info: Any = None) -> None:
        raw = getattr(info, "raw_cell", "") or ""
        first = next((ln.strip() for ln in raw.splitlines() if ln.strip()), "")
        try:
            self._tracker.before(self.shell.execution_count, first)  # type: ignore[union-attr]
        except Exception:  # a hook must never break the user's cell
            pass

    def _after_cell_track(self, result: Any = None) -> None:
        try:
            number = getattr(result, "execution_count", None)
            self._tracker.after(failed=result is not None and not result.success,  # type: ignore[union-attr]
                                cell=number if isinstance(number, int) else None)
        except Exception:
            pass

    def _show_history(self, quiet: bool = False) -> Any:
        from IPython.display import display

        from ..model import MemoryHistory

        history = self._tracker.history() if self._tracker is not None else MemoryHistory(())
        if quiet:
            return history
        display(history)
        if history.cells and getattr(self.shell, "kernel", None) is not None:
            # A plot only where a frontend can show one; a terminal gets the table alone.
            from ..render import HistoryPlot

            try:
                display(HistoryPlot(history))
            except ImportError:  # matplotlib is optional
                print("%gpumem: install matplotlib for the plot (pip install matplotlib).")
        return history

    def close(self) -> None:
        """Stop refreshing and remove every event callback this instance registered."""
        self._stop_watchers()
        self._set_event("pre_run_cell", self._before_cell_track, False)
        self._set_event("post_run_cell", self._after_cell_track, False)
        self._set_event("post_run_cell", self._after_cell_watch, False)


def only_device(snapshot: Any, text: str) -> Any:
    import dataclasses

    from ..model import device_matches

    wanted = device_argument("%gpumem", text)
    keep = [d for d in snapshot.devices if device_matches(d.device, wanted)]
    if not keep:
        have = ", ".join(d.device for d in snapshot.devices)
        raise UsageError(f"%gpumem: no device {text!r} here (devices: {have})")
    return dataclasses.replace(snapshot, devices=tuple(keep))
