"""The IPython layer: magics, argument parsing and configuration. Nothing else imports IPython."""

from __future__ import annotations

import difflib
import dis
import re
import sys
import time
import weakref
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, CaselessStrEnum, Int

from . import locations
from .model import KINDS
from .render.table import DEFAULT_MAX_ROWS, SORTS

#: The magics each loaded instance registers, so unloading removes exactly these.
_MAGIC_NAMES = {"line": ("devices", "gpumem", "devcheck"), "cell": ("devcheck",)}
#: How each magic is typed (a cell magic takes two %).
_MAGIC_PREFIX = {"devcheck": "%%"}
#: One instance per shell; loading again is a no-op.
_instances: dict[int, DevInspect] = {}


@magics_class
class DevInspect(Magics):
    """Device inspection magics for PyTorch (``%devices``, ``%%devcheck``, ``%gpumem``).

    Configure with ``%config DevInspect``.
    """

    max_rows = Int(DEFAULT_MAX_ROWS, help="Rows a %devices table shows before '… N more' (0: all).").tag(config=True)
    sort = CaselessStrEnum(SORTS, default_value="walk", help="Default row order of %devices.").tag(config=True)
    include_hidden = Bool(False, help="List IPython's history names (_, _12, Out) and other _ names by default.").tag(
        config=True
    )
    max_depth = Int(8, help="How deep %devices follows containers and plain objects below a name.").tag(config=True)
    max_items = Int(200_000, help="Items %devices looks at in one container.").tag(config=True)
    explain_errors = Bool(True, help="After a cell fails with a device mismatch or runs out of device memory, "
                                     "explain it under the traceback (names, memory, the fix).").tag(config=True)

    def __init__(self, shell: Any = None, **kwargs: Any):
        super().__init__(shell=shell, **kwargs)
        self._tracker: Any = None  # MemoryTracker once %gpumem --track ran
        self._watchers: list[Any] = []  # running %gpumem --watch refreshers
        self._last_dashboard: Any = lambda: None  # weak reference to the newest %gpumem dashboard
        self._reported_error = 0  # id of the error a %%devcheck report already explained

    @magic_arguments()
    @argument("names", nargs="*", help="Only these variables (a dotted name such as model.encoder keeps what lies below it).")
    @argument("-d", "--device", help="Only tensors on this device (cpu, cuda, cuda:0, …).")
    @argument("-k", "--kind", choices=KINDS, help="Only this kind of tensor.")
    @argument("-s", "--sort", choices=SORTS, help="Row order (default: walk order, largest kept when cut).")
    @argument("-f", "--findings", action="store_true", help="Show only the findings.")
    @argument("-a", "--all", action="store_true", dest="all_objects",
              help="Also list live tensors no name reaches (garbage-collector walk).")
    @argument("--hidden", action="store_true", help="Also list IPython's history names (_, _12, Out) and _ names.")
    @argument("-n", "--max-rows", type=int, help="Rows to show (0: all).")
    @argument("-o", "--output", action="store_true",
              help="Return the result object (as %%timeit -o does; %%devices always returns it).")
    @argument("-v", "--variable", metavar="NAME", help="Also store the result in the variable NAME.")
    @argument("--why", metavar="NAME",
              help="Show what keeps this tensor alive (a name as %%devices lists it, or <unnamed N> from --all).")
    @argument("--ranks", action="store_true",
              help="Every rank of a distributed job side by side: through the ipyparallel client in the "
                   "namespace, or torch.distributed when this process is in an initialised group.")
    @line_magic
    def devices(self, line: str = "") -> Any:
        """List every tensor in the session with its device, dtype, shape and bytes, and what looks wrong.

        Parameters, buffers, gradients, optimizer state, tensors in containers and
        objects, each named as you would type it (``model.fc.weight``,
        ``batch["ids"]``, ``opt.state[model.fc.weight]["exp_avg"]``). Memory shared
        by several names (views, tied weights) is counted once. Nothing is moved,
        copied or synchronised, and CUDA is not initialised.

        Examples::

            %devices                       # everything
            %devices model x               # only these names
            %devices --device cuda:0 --sort bytes
            %devices --findings            # only what looks wrong
            r = %devices                   # keep the result: r.frame, r.findings
            %devices -v r                  # the same, stored in r
            %devices --why h               # what keeps h (and its memory) alive
            %devices --ranks               # every rank of a distributed job
        """
        args = self._parse(self.devices, line)
        if args.ranks:
            if args.names or args.device or args.kind or args.why or args.findings or args.all_objects:
                raise UsageError("%devices: --ranks shows whole ranks; it takes no names or other selection")
            return self._ranks("%devices", args, "devices")
        if args.why is not None:
            return self._why(args)
        if args.max_rows is not None and args.max_rows < 0:
            raise UsageError(f"%devices: -n takes a number of rows, 0 or more (0 shows all), not {args.max_rows}")
        from .model import Display, Selection
        from .scan import scan

        namespace = self.shell.user_ns
        include_hidden = bool(args.hidden or self.include_hidden)
        device = _device_argument("%devices", args.device)
        _variable_name("%devices", args.variable)
        max_rows = self.max_rows if args.max_rows is None else args.max_rows
        selection = Selection(names=tuple(args.names), device=device, kind=args.kind)
        display_settings = Display(max_rows=max_rows, sort=args.sort or self.sort, findings_only=args.findings)

        def scan_view() -> Any:
            try:
                result = scan(
                    namespace,
                    roots=args.names or None,
                    include_hidden=include_hidden,
                    all_objects=args.all_objects,
                    exclude=self._ipython_names(),
                    max_depth=self.max_depth,
                    max_items=self.max_items,
                )
            except LookupError as exc:
                raise UsageError(f"%devices: {_with_suggestion(str(exc), args.names, namespace)}") from None
            return result.select(selection, display_settings)

        view = scan_view()
        if args.variable:
            namespace[args.variable] = view
        return self._show(view, args.output, scan_view)

    def _ranks(self, magic: str, args: Any, focus: str) -> Any:
        """``--ranks``: the per-rank report, over ipyparallel or torch.distributed."""
        from IPython.display import display

        from .distributed import DistributedError, from_view, gather

        _variable_name(magic, args.variable)
        namespace = self.shell.user_ns
        try:
            view = _engines_view(namespace)
            if view is not None:
                report = from_view(view, focus=focus)
            else:
                dist = getattr(sys.modules.get("torch"), "distributed", None)
                if dist is None or not (dist.is_available() and dist.is_initialized()):
                    raise UsageError(f"{magic}: --ranks needs an ipyparallel client in the namespace "
                                     "(rc = ipyparallel.Client()) or an initialised torch.distributed group here")
                report = gather(namespace, exclude=self._ipython_names(), focus=focus)
        except DistributedError as exc:
            raise UsageError(f"{magic} --ranks: {exc}") from None
        if report is None:  # a rank other than the one that collects: it shows nothing
            return None
        if args.variable:
            namespace[args.variable] = report
        if _caller_displays_result(_calling_frame()) and args.output:
            return report
        widget = None
        if getattr(self.shell, "kernel", None) is not None:
            try:
                from .jupyter.ranks_widget import ranks_widget

                widget = ranks_widget(report)
            except ImportError:  # no ipywidgets: the static report is complete
                widget = None
        display(_with_fallback(widget, report) if widget is not None else report, raw=widget is not None)
        return report if args.output else None

    def _why(self, args: Any) -> Any:
        """``%devices --why NAME``: the reference paths that keep that tensor alive."""
        from IPython.display import display

        from .referrers import holders

        _variable_name("%devices", args.variable)
        if args.names or args.device or args.kind:
            raise UsageError("%devices: --why takes one name and no other selection")
        namespace = self.shell.user_ns
        name = args.why.strip()
        if len(name) > 1 and name[0] == name[-1] and name[0] in "'\"":
            name = name[1:-1]  # %devices --why 'Out[3]'
        shell = self.shell
        try:
            found = holders(namespace, name, exclude=self._ipython_names(),
                            plumbing=(shell.user_ns_hidden, shell.displayhook, getattr(shell.displayhook, "__dict__", None)))
        except LookupError as exc:
            raise UsageError(f"%devices --why: {_with_suggestion(str(exc), [name], namespace)}") from None
        if args.variable:
            namespace[args.variable] = found
        if args.output and _caller_displays_result(_calling_frame()):
            return found
        display(found)
        return found if args.output else None

    def _show(self, view: Any, output: bool, rescan: Any = None) -> Any:
        """Display ``view`` once, wherever the magic stands in the cell, and return it where the
        code uses it (``r = %devices``). As a cell's last line it is not returned, so IPython's
        ``Out`` keeps no copy, unless ``-o`` asks for it (IPython then shows it, once).
        In Jupyter it is the live explorer, with the static tables beside it for other viewers."""
        from IPython.display import display

        shown_by_caller = _caller_displays_result(_calling_frame())
        if shown_by_caller and output:
            return view
        explorer = self._explorer(view, rescan) if getattr(self.shell, "kernel", None) is not None else None
        if explorer is not None:
            self._last_explorer = explorer
            display(_with_fallback(explorer.widget, view), raw=True)
        else:
            display(view)
        return None if shown_by_caller else view

    def _explorer(self, view: Any, rescan: Any) -> Any:
        try:
            from .devices import present
            from .jupyter.devices_explorer import DevicesExplorer
        except ImportError:  # no ipywidgets: the static output is complete
            return None
        return DevicesExplorer(view, rescan or (lambda: view), self.shell.user_ns, present(), shell=self.shell)

    def _parse(self, magic: Any, line: str) -> Any:
        """parse_argstring, with every mistake (an unbalanced quote too) as a one-line UsageError."""
        name = _MAGIC_PREFIX.get(magic.__name__, "%") + magic.__name__
        try:
            return parse_argstring(magic, line)
        except UsageError as exc:
            raise UsageError(f"{name}: {str(exc).split(': error: ')[-1]}") from None
        except ValueError as exc:  # shlex: "No closing quotation"
            raise UsageError(f"{name}: {exc} in {line!r}") from None

    def _ipython_names(self) -> list[str]:
        return shell_names(self.shell)

    @magic_arguments()
    @argument("-o", "--output", nargs="?", const=True, default=None, metavar="NAME",
              help="Return the report (a CheckReport, with .frame), as %%timeit -o does. "
                   "(-o NAME still stores it in NAME; use -v NAME.)")
    @argument("-v", "--variable", metavar="NAME", help="Store the report in the variable NAME.")
    @argument("-q", "--quiet", action="store_true", help="Show the report only when something was found.")
    @argument("--strict", action="store_true", help="Raise DeviceCheckError when something was found (for tests).")
    @argument("--last", action="store_true",
              help="As a line magic (%%devcheck --last): explain the last error, a device mismatch or out of memory.")
    @line_cell_magic
    def devcheck(self, line: str, cell: str | None = None) -> Any:
        """Run the cell once under a device check: name the variables behind a device
        mismatch, and count host↔device copies and host syncs per source line.

        The cell runs as it would without the check: the same namespace, history,
        output, value and errors (an error, an interrupt or a SyntaxError fails the
        cell, so "Run All" stops there). When it raises a device-mismatch error, the
        report above the traceback names each input as you wrote it (``x``,
        ``model.fc1.weight``, ``mask`` in ``forward``) and gives the fix once, with an
        Apply fix button in Jupyter. Copies and syncs are counted for ``.to()``,
        ``.cpu()``, ``.item()``, ``float()``/``bool()`` of tensors, ``.tolist()``,
        printing, ``nonzero`` and boolean-mask indexing, on the line of your code that
        made them (also inside library calls); round trips, syncs in loops, repeated
        copies of the same tensor and non-blocking copies from unpinned memory are flagged.

        Examples::

            %%devcheck
            for x, y in loader:
                loss = loss_fn(model(x.to(device)), y.to(device))
                print(loss.item())

            %%devcheck -v report --quiet
            train_one_epoch()

            %devcheck --last           # explain the error the last cell raised
        """
        __tracebackhide__ = True  # noqa: F841 - the user's traceback starts in their cell, not here
        args = self._devcheck_args(line)
        if cell is None:
            return self._explain_last(args)
        if args.last:
            raise UsageError("%%devcheck: --last explains the last error and takes no cell; "
                             "use %devcheck --last on a line of its own")
        run = _CheckedCell(self.shell, args, line, cell)
        if run.needs_await and _event_loop_running():
            # Only reached when the cell was not rewritten by await_devcheck_cells (a direct call).
            raise UsageError("%%devcheck: this cell awaits; run it as a cell (%%devcheck on its first line) "
                             "so the kernel can run it on its event loop")
        return run.run()

    async def devcheck_async(self, line: str, cell: str) -> Any:
        """``%%devcheck`` for a cell with top-level ``await``, run on the kernel's event loop.

        A %%devcheck cell whose body awaits is rewritten (by an input transformer that
        loading the extension registers) into ``await`` of this method, so the kernel
        runs it as an async cell instead of blocking its own loop.
        """
        __tracebackhide__ = True  # noqa: F841
        run = _CheckedCell(self.shell, self._devcheck_args(line), line, cell)
        return await run.run_async()

    def _explain_last(self, args: Any) -> Any:
        """``%devcheck --last``: the explanation of the last error, as shown after a failed cell."""
        if not args.last:
            raise UsageError("%devcheck checks a cell: put %%devcheck on the cell's first line "
                             "(or %devcheck --last to explain the last error)")
        from .explain import explanation_of

        error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        if error is None:
            raise UsageError("%devcheck --last: no error to explain (no cell has failed, or its traceback "
                             "was released)")
        explanation = explanation_of(error, self.shell.user_ns, exclude=self._ipython_names())
        if args.variable:
            self.shell.user_ns[args.variable] = explanation
        if args.output and _caller_displays_result(_calling_frame()):
            return explanation  # IPython shows it, once
        self._show_explanation(explanation, rerun=None)
        return explanation if args.output else None

    def _explain_after_cell(self, result: Any = None) -> None:
        """After a failed cell: explain a device mismatch or an out-of-memory error under its
        traceback. Any other outcome returns at once (no mode, no hook in the cell itself)."""
        error = getattr(result, "error_in_exec", None)
        if error is None or not self.explain_errors:
            return
        if id(error) == self._reported_error:  # a %%devcheck report already said it
            self._reported_error = 0
            return
        torch = sys.modules.get("torch")
        if torch is None:  # no tensor anywhere: nothing to explain, and no import of torch to pay for
            return
        try:
            from .explain import explanation_of

            # Only the out-of-memory scan needs IPython's own names (a walk of the namespace).
            exclude = self._ipython_names() if isinstance(error, torch.OutOfMemoryError) else ()
            explanation = explanation_of(error, self.shell.user_ns, exclude=exclude)
            if explanation:
                raw = getattr(getattr(result, "info", None), "raw_cell", None)
                self._show_explanation(explanation, rerun=raw)
        except Exception as exc:  # noqa: BLE001 - explaining must never add an error of its own
            print(f"devinspect: could not explain the error ({type(exc).__name__}: {exc})", file=sys.stderr)

    def _show_explanation(self, explanation: Any, rerun: str | None) -> None:
        from IPython.display import display

        shell = self.shell
        display(explanation)
        if getattr(shell, "kernel", None) is not None and any(f.action is not None for f in explanation.fixes):
            # A widget frontend: the fixes as buttons (then a re-run of the failed cell).
            try:
                from .jupyter.fix_panel import explanation_panel
            except ImportError:  # no ipywidgets: the static output is complete
                return
            display(explanation_panel(explanation, shell.user_ns,
                                      (lambda: shell.run_cell(rerun)) if rerun else None, shell=shell))

    def _devcheck_args(self, line: str) -> Any:
        args = self._parse(self.devcheck, line)
        if isinstance(args.output, str):
            if args.variable:
                raise UsageError("%%devcheck: -o NAME and -v NAME both store the report; use -v NAME")
            print(f"%%devcheck: -o NAME is deprecated; use -v {args.output} (stores the report), "
                  "or -o alone (returns it)")
            args.variable, args.output = args.output, None
        _variable_name("%%devcheck", args.variable)
        return args

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
    @line_magic
    def gpumem(self, line: str = "") -> Any:
        """Accelerator memory per device: allocated, reserved and the driver's view, reconciled.

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
        """
        args = self._parse(self.gpumem, line)
        _variable_name("%gpumem", args.variable)
        if args.ranks:
            if args.device or args.watch is not None or args.track or args.untrack or args.history or args.stop:
                raise UsageError("%gpumem: --ranks shows every rank once; it takes no -d, --watch, --track or --history")
            return self._ranks("%gpumem", args, "memory")
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
        if args.history:
            shown = self._show_history()
        else:
            shown = self._show_memory(args)
        if args.variable:
            self.shell.user_ns[args.variable] = shown
        return shown if args.output else None

    # -- %gpumem helpers ------------------------------------------------------

    def _collector(self, device: str | None, count_tensors_by_default: bool, all_devices: bool = False) -> Any:
        """collect(count_tensors) -> MemorySnapshot, keeping the last tensor count between calls."""
        from .memory import build, in_use, read, tally_tensors

        shell = self.shell
        last: dict[str, Any] = {}

        def collect(count_tensors: bool) -> Any:
            if count_tensors_by_default and (count_tensors or "tallies" not in last):
                last["tallies"] = tally_tensors(shell.user_ns, exclude=self._ipython_names())
            snapshot = build(read(), last.get("tallies"))
            if device:
                return _only_device(snapshot, device)
            return snapshot if all_devices or "tallies" not in last else in_use(snapshot)

        return collect

    def _memory_actions(self) -> dict[str, Any]:
        from . import actions

        shell = self.shell
        return {
            "empty_cache": actions.empty_cache,
            "reset_peak_stats": actions.reset_peak_stats,
            "collect_garbage": actions.collect_garbage,
            "release_history": lambda: actions.release_history(shell.user_ns, shell.displayhook, shell.user_ns_hidden),
        }

    def _show_memory(self, args: Any) -> Any:
        from IPython.display import display

        collect = self._collector(args.device, not args.no_tensors, args.all_devices)
        widgets_frontend = getattr(self.shell, "kernel", None) is not None
        if args.watch is not None and not widgets_frontend:
            raise UsageError("%gpumem: --watch needs a Jupyter kernel (a live widget); here use %gpumem again, "
                             "or %gpumem --track to record every cell")
        if widgets_frontend:
            from .jupyter.memory_dashboard import MemoryDashboard, Watcher

            # Its first read counts the tensors (and raises UsageError for an unknown -d) before anything shows.
            dashboard = MemoryDashboard(collect, self._memory_actions())
            self._last_dashboard = weakref.ref(dashboard)
            snapshot = dashboard.snapshot
            display(_with_fallback(dashboard.widget, snapshot), raw=True)
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
            except Exception as exc:  # noqa: BLE001 - a hook must never break the user's cell
                from html import escape

                watcher.dashboard.status.value = (f"✖ refresh after the cell failed: "
                                                  f"{escape(type(exc).__name__)}: {escape(str(exc))}")
        if not self._watchers:
            self._set_event("post_run_cell", self._after_cell_watch, False)

    def _set_tracking(self, on: bool) -> None:
        from .memory import MemoryTracker

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
        except Exception:  # noqa: BLE001 - a hook must never break the user's cell
            pass

    def _after_cell_track(self, result: Any = None) -> None:
        try:
            number = getattr(result, "execution_count", None)
            self._tracker.after(failed=result is not None and not result.success,  # type: ignore[union-attr]
                                cell=number if isinstance(number, int) else None)
        except Exception:  # noqa: BLE001
            pass

    def _show_history(self) -> Any:
        from IPython.display import display

        from .memory_model import MemoryHistory

        history = self._tracker.history() if self._tracker is not None else MemoryHistory(())
        display(history)
        if history.cells and getattr(self.shell, "kernel", None) is not None:
            # A plot only where a frontend can show one; a terminal gets the table alone.
            from .render.memory_plot import HistoryPlot

            try:
                display(HistoryPlot(history))
            except ImportError:  # matplotlib is optional
                print("%gpumem: install matplotlib for the plot (pip install matplotlib).")
        return history

    def _set_event(self, event: str, callback: Any, on: bool) -> None:
        callbacks = self.shell.events.callbacks[event]
        if on and callback not in callbacks:
            self.shell.events.register(event, callback)
        elif not on and callback in callbacks:
            self.shell.events.unregister(event, callback)

    def close(self) -> None:
        """Stop refreshing and remove every event callback this instance registered."""
        self._stop_watchers()
        self._set_event("pre_run_cell", self._before_cell_track, False)
        self._set_event("post_run_cell", self._after_cell_track, False)
        self._set_event("post_run_cell", self._after_cell_watch, False)
        self._set_event("post_run_cell", self._explain_after_cell, False)


def _engines_view(namespace: Any) -> Any:
    """The ipyparallel view to ask: a DirectView the user made, else every engine of a
    Client. Recognised by type alone (nothing of the user's runs)."""
    client = None
    for value in list(namespace.values()):
        kind = type(value)
        if not kind.__module__.startswith("ipyparallel"):
            continue
        if kind.__name__ == "DirectView":
            return value
        if kind.__name__ == "Client" and client is None:
            client = value
    if client is None:
        return None
    from .distributed import DistributedError

    try:
        return client[:]
    except Exception as exc:  # noqa: BLE001 - no engines registered yet, a closed client
        raise DistributedError(f"the ipyparallel client has no engines to ask ({type(exc).__name__}: {exc})") from None


def shell_names(shell: Any) -> list[str]:
    """IPython's own variables, unless the user rebound them. History names are kept:
    the scan measures what they hold."""
    from .scan import is_history_name

    namespace, hidden = shell.user_ns, shell.user_ns_hidden
    return [n for n, v in hidden.items() if namespace.get(n, v) is v and not is_history_name(n)]


def _only_device(snapshot: Any, text: str) -> Any:
    import dataclasses

    from .model import device_matches

    wanted = _device_argument("%gpumem", text)
    keep = [d for d in snapshot.devices if device_matches(d.device, wanted)]
    if not keep:
        have = ", ".join(d.device for d in snapshot.devices)
        raise UsageError(f"%gpumem: no device {text!r} here (devices: {have})")
    return dataclasses.replace(snapshot, devices=tuple(keep))


def _cell_magic_usage(cls: type) -> None:
    """magic_arguments writes ``%name`` in a magic's usage; a cell magic is typed ``%%name``."""
    for name, prefix in _MAGIC_PREFIX.items():
        method = getattr(cls, name)
        method.parser.prog = prefix + name
        method.__doc__ = method.__doc__.replace(f"%{name} [", f"{prefix}{name} [", 1)


def _with_fallback(widget: Any, fallback: Any) -> dict[str, Any]:
    """The widget's bundle, with the static rendering for frontends without widgets (nbconvert, GitHub)."""
    bundle = dict(widget._repr_mimebundle_())
    bundle.update(fallback._repr_mimebundle_())
    return bundle


def _device_argument(magic: str, text: str | None) -> str | None:
    """The one ``-d`` parser of every magic: ``cpu:0`` is cpu, ``cuda`` every CUDA device,
    and a device this process does not have is a UsageError."""
    if text is None:
        return None
    from .devices import DeviceNameError, parse

    try:
        return parse(text)
    except DeviceNameError as exc:
        raise UsageError(f"{magic}: {exc}") from None


def _variable_name(magic: str, name: str | None) -> None:
    import keyword

    if name is not None and (not name.isidentifier() or keyword.iskeyword(name)):
        raise UsageError(f"{magic}: -v needs a variable name, not {name!r}")


def _calling_frame() -> Any:
    """The frame of the code that called the magic: the first outside devinspect and IPython."""
    frame = sys._getframe(1)
    while frame is not None and locations.is_tool_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def _running_cell_number(shell: Any) -> int:
    """The execution count of the cell now running (the cell that called the magic).

    IPython numbers the cell before running it (9.x) or after (8.x), and not at all
    without history; the calling cell's compiled file name says it in every case.
    """
    frame = _calling_frame()
    while frame is not None:
        number = locations.cell_number(frame.f_code.co_filename)
        if number is not None:
            return number
        frame = frame.f_back
    return shell.execution_count


def _caller_displays_result(frame: Any) -> bool:
    """Whether the code calling the magic displays its value (the cell's last expression:
    IPython compiles it so that the value goes to the display hook)."""
    try:
        instructions = [i for i in dis.get_instructions(frame.f_code) if i.opname not in ("CACHE", "EXTENDED_ARG")]
        # f_lasti is the call now running (or an inline cache entry after it).
        current = max(i for i, ins in enumerate(instructions) if ins.offset <= frame.f_lasti)
        after = instructions[current + 1]
    except Exception:  # noqa: BLE001 - when unsure, show it
        return False
    return after.opname == "PRINT_EXPR" or (after.opname == "CALL_INTRINSIC_1" and after.argrepr == "INTRINSIC_PRINT")


class _CheckedCell:
    """One %%devcheck run: compiled and run the way IPython runs a cell, under the check.

    The body is compiled here (with the shell's compiler flags, input and AST
    transformers) under the cell's own execution count, so tracebacks and the report
    say "Cell In[N], line L" with the lines as the user sees them (the magic's line is
    line 1). It runs in the user's namespace; its last expression is shown through the
    display hook, as in a plain cell (``;`` suppresses it). Every exception — errors,
    KeyboardInterrupt, SystemExit, a SyntaxError at compile time — propagates out of
    the magic unchanged, so the shell fails the cell exactly as it would without
    the check; the report is shown first.
    """

    def __init__(self, shell: Any, args: Any, line: str, cell: str):
        from .check import DeviceCheckMode

        self.shell, self.args, self.line, self.cell = shell, args, line, cell
        self.number = _running_cell_number(shell)
        self.source = f"%%devcheck{(' ' + line.strip()) if line.strip() else ''}\n{cell}"
        self.transformed = shell.transform_cell(cell)
        self.needs_await = bool(shell.should_run_async(cell, transformed_cell=self.transformed,
                                                       preprocessing_exc_tuple=None))
        self.filename = shell.compile.cache(self.source, self.number, raw_code=self.source)
        self.codes = self._compile()  # a SyntaxError fails the cell before anything runs
        filename = self.filename
        self.mode = DeviceCheckMode(shell.user_ns, lambda frame: frame.f_code.co_filename == filename
                                    and frame.f_code.co_name == "<module>", tidy_tracebacks=True)
        self.start = 0.0

    def _compile(self) -> list[Any]:
        import ast as ast_module

        flags = getattr(ast_module, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0) if self.needs_await else 0
        # A blank first line stands for the magic's line: line numbers are the cell's own.
        tree = self.shell.compile.ast_parse("\n" + self.transformed, filename=self.filename)
        tree = self.shell.transform_ast(tree)
        body = list(tree.body)
        last = None
        if body and isinstance(body[-1], ast_module.Expr) and \
                not self.shell.displayhook.semicolon_at_end_of_expression(self.transformed):
            last = body.pop()
        codes = []
        with self.shell.compile.extra_flags(flags):
            if body:
                codes.append(self.shell.compile(ast_module.Module(body, []), self.filename, "exec"))
            if last is not None:
                codes.append(self.shell.compile(ast_module.Interactive([last]), self.filename, "single"))
        return codes

    def run(self) -> Any:
        __tracebackhide__ = True  # noqa: F841
        error = None
        self.start = time.perf_counter()
        self.mode.__enter__()
        try:
            for code in self.codes:
                exec(code, self.shell.user_global_ns, self.shell.user_ns)
        except BaseException as exc:
            error = exc
            locations.tidy_traceback(exc, self.filename)  # drawn as a plain cell's traceback
            raise
        finally:
            self._finish(error)
        return self._result()

    async def run_async(self) -> Any:
        __tracebackhide__ = True  # noqa: F841
        import inspect

        error = None
        self.start = time.perf_counter()
        self.mode.__enter__()
        try:
            for code in self.codes:
                value = eval(code, self.shell.user_global_ns, self.shell.user_ns)
                if inspect.CO_COROUTINE & code.co_flags:
                    await value
        except BaseException as exc:
            error = exc
            locations.tidy_traceback(exc, self.filename)
            raise
        finally:
            self._finish(error)
        return self._result()

    def _finish(self, error: BaseException | None) -> None:
        """Leave the check, then show the report (and, in Jupyter, the fix buttons)."""
        elapsed = time.perf_counter() - self.start
        self.mode.__exit__(None, None, None)
        try:
            self.report = self.mode.report(error, elapsed)
            if error is not None and self.report.mismatch is not None:
                instance = _instances.get(id(self.shell))
                if instance is not None:
                    instance._reported_error = id(error)  # explained here: not again after the cell
            if self.args.variable:
                self.shell.user_ns[self.args.variable] = self.report
            if not self.args.output and (not self.args.quiet or self.report.has_findings):
                self._display()
        except Exception as exc:  # noqa: BLE001 - the report must never replace the cell's outcome
            print(f"devinspect: the report could not be shown ({type(exc).__name__}: {exc})", file=sys.stderr)
            self.report = None

    def _display(self) -> None:
        from IPython.display import display

        report, shell = self.report, self.shell
        display(report)
        fix = report.mismatch.fix if report.mismatch is not None else None
        if fix is not None and fix.action is not None and getattr(shell, "kernel", None) is not None:
            # A widget frontend: the fix as a button, then a re-run of this cell.
            from .jupyter.fix_panel import fix_panel

            source = self.source
            display(fix_panel(fix, shell.user_ns, lambda: shell.run_cell(source), shell=shell))

    def _result(self) -> Any:
        from .check import DeviceCheckError

        if self.args.strict and self.report is not None and self.report.has_findings:
            raise DeviceCheckError(self.report)
        return self.report if self.args.output else None


_DEVCHECK_LINE = re.compile(r"^\s*%%devcheck(?:\s+(.*))?$")


def await_devcheck_cells(shell: Any) -> Any:
    """An input transformer for %%devcheck cells, so they run as plain cells would.

    * A body with top-level ``await`` becomes ``await <DevInspect>.devcheck_async(line, body)``,
      which the kernel runs on its own event loop.
    * A body that does not compile is handed to IPython as it is (a blank line standing
      for the magic's line, so line numbers stay the cell's): IPython then fails the cell
      before it runs and shows the SyntaxError exactly as for a plain cell.

    Any other cell, or anything unexpected, passes through unchanged.
    """
    import ast as ast_module

    def transform(lines: list[str]) -> list[str]:
        try:
            if not lines:
                return lines
            m = _DEVCHECK_LINE.match(lines[0].rstrip("\n"))
            if m is None:
                return lines
            body = "".join(lines[1:])
            transformed = shell.transform_cell(body)
            awaits = shell.should_run_async(body, transformed_cell=transformed, preprocessing_exc_tuple=None)
            flags = shell.compile.flags | (getattr(ast_module, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0) if awaits else 0)
            try:
                compile("\n" + transformed, "<devcheck>", "exec", flags, dont_inherit=True)
            except (SyntaxError, ValueError):
                return ["\n", *lines[1:]]
            if not awaits:
                return lines
            line = (m.group(1) or "").strip()
            return [f"await get_ipython().find_cell_magic('devcheck').__self__.devcheck_async({line!r}, {body!r})\n"]
        except Exception:  # noqa: BLE001 - never break a cell; the magic reports its own errors
            return lines

    transform.devinspect = True  # type: ignore[attr-defined]
    return transform


def _event_loop_running() -> bool:
    import asyncio

    try:
        return asyncio.get_running_loop().is_running()
    except RuntimeError:
        return False


def _with_suggestion(message: str, names: list[str], namespace: dict) -> str:
    for name in names:
        top = name.split(".")[0].split("[")[0]
        if top not in namespace:
            candidates = [n for n, v in namespace.items() if type(n) is str and not n.startswith("_") and not callable(v)]
            close = difflib.get_close_matches(top, candidates, n=1)
            if close:
                return f"{message} (did you mean {close[0]!r}?)"
    return message


def _cell_numbers(shell: Any) -> Any:
    """filename -> execution count, as IPython's compiler names cells in tracebacks (Cell In[N])."""
    pattern = re.compile(r"In\[(\d+)\]")

    def lookup(filename: str) -> int | None:
        named = shell.compile.format_code_name(filename)
        if not named:
            return None
        m = pattern.fullmatch(named[1])
        return int(m.group(1)) if m else None

    return lookup


def render_traceback(exc: BaseException, tb: Any) -> list[str]:
    """IPython's structured traceback of ``exc`` drawn from ``tb`` (see locations.tidy_traceback)."""
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        import traceback

        return traceback.format_exception(type(exc), exc, tb)
    return shell.InteractiveTB.structured_traceback(type(exc), exc, tb)


def _error_forgetter(shell: Any) -> Any:
    """Drops the shell's own references to the last error: its traceback formatter keeps the
    traceback, and the last execution result the exception (so its frames stay alive)."""

    def forget() -> None:
        for formatter in (getattr(shell, "InteractiveTB", None), getattr(shell, "SyntaxTB", None)):
            if formatter is not None and getattr(formatter, "tb", None) is not None:
                formatter.tb = None
        result = getattr(shell, "last_execution_result", None)
        if result is not None and getattr(result, "error_in_exec", None) is not None:
            result.error_in_exec = None

    return forget


def release_history_here() -> Any:
    """Release history in the running IPython session (or the last traceback in plain Python)."""
    from . import actions

    try:
        from IPython import get_ipython
    except ImportError:
        shell = None
    else:
        shell = get_ipython()
    if shell is None:
        return actions.release_traceback()
    return actions.release_history(shell.user_ns, shell.displayhook, shell.user_ns_hidden)


_cell_magic_usage(DevInspect)


def load(shell: Any) -> None:
    """Register the magics once per shell; a second call does nothing."""
    if id(shell) in _instances:
        return
    instance = DevInspect(shell=shell)  # Magics.__init__ adds it to shell.configurables (%config)
    shell.register_magics(instance)
    shell.input_transformers_cleanup.append(await_devcheck_cells(shell))
    instance._cell_numbers = _cell_numbers(shell)
    locations.register_cell_numbers(instance._cell_numbers)
    from . import actions

    instance._forget_error = _error_forgetter(shell)
    actions.error_holders.append(instance._forget_error)
    shell.events.register("post_run_cell", instance._explain_after_cell)
    _instances[id(shell)] = instance


def unload(shell: Any) -> None:
    """Remove what :func:`load` registered; harmless when nothing is loaded."""
    instance = _instances.pop(id(shell), None)
    if instance is None:
        return
    instance.close()
    locations.unregister_cell_numbers(getattr(instance, "_cell_numbers", None))
    from . import actions

    if getattr(instance, "_forget_error", None) in actions.error_holders:
        actions.error_holders.remove(instance._forget_error)
    shell.input_transformers_cleanup[:] = [t for t in shell.input_transformers_cleanup
                                           if not getattr(t, "devinspect", False)]
    manager = shell.magics_manager
    for kind, names in _MAGIC_NAMES.items():
        for name in names:
            bound = manager.magics[kind].get(name)
            if getattr(bound, "__self__", None) is instance:
                del manager.magics[kind][name]
    if manager.registry.get(type(instance).__name__) is instance:
        del manager.registry[type(instance).__name__]
    shell.configurables[:] = [c for c in shell.configurables if c is not instance]
