"""The IPython layer: magics, argument parsing and configuration. Nothing else imports IPython."""

from __future__ import annotations

import difflib
import re
import time
import weakref
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, CaselessStrEnum, Int

from .model import KINDS
from .render.table import DEFAULT_MAX_ROWS, SORTS

#: The magics each loaded instance registers, so unloading removes exactly these.
_MAGIC_NAMES = {"line": ("devices", "gpumem"), "cell": ("devcheck",)}
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

    def __init__(self, shell: Any = None, **kwargs: Any):
        super().__init__(shell=shell, **kwargs)
        self._tracker: Any = None  # MemoryTracker once %gpumem --track ran
        self._watchers: list[Any] = []  # running %gpumem --watch refreshers
        self._last_dashboard: Any = lambda: None  # weak reference to the newest %gpumem dashboard

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
              help="Return the result object (it is always returned; kept for %%timeit -o habits).")
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
        """
        args = parse_argstring(self.devices, line)
        from .scan import scan

        namespace = self.shell.user_ns
        exclude = self._ipython_names()
        include_hidden = bool(args.hidden or self.include_hidden)
        try:
            result = scan(
                namespace,
                roots=args.names or None,
                include_hidden=include_hidden,
                all_objects=args.all_objects,
                exclude=exclude,
                max_depth=self.max_depth,
                max_items=self.max_items,
            )
        except LookupError as exc:
            raise UsageError(f"%devices: {_with_suggestion(str(exc), args.names, namespace)}") from None
        if args.device:
            result = result.filter(device=_device_filter(args.device, result))
        if args.kind:
            result = result.filter(kind=args.kind)
        max_rows = self.max_rows if args.max_rows is None else args.max_rows
        view = {"max_rows": max_rows, "sort": args.sort or self.sort, "findings_only": args.findings}
        return result.filter(**view)


    def _ipython_names(self) -> list[str]:
        """IPython's own variables, unless the user rebound them. History names are kept:
        the scan measures what they hold."""
        from .scan import is_history_name

        namespace, hidden = self.shell.user_ns, self.shell.user_ns_hidden
        return [n for n, v in hidden.items() if namespace.get(n, v) is v and not is_history_name(n)]

    @magic_arguments()
    @argument("-o", "--output", metavar="NAME", help="Store the report (a CheckReport, with .frame) in this variable.")
    @argument("-q", "--quiet", action="store_true", help="Show the report only when something was found.")
    @argument("--strict", action="store_true", help="Raise DeviceCheckError when something was found (for tests).")
    @cell_magic
    def devcheck(self, line: str, cell: str) -> None:
        """Run the cell once under a device check: name the variables behind a device
        mismatch, and count host↔device copies and host syncs per source line.

        The cell runs normally (history, magics and display work); its result is
        unchanged. When it raises a device-mismatch error, the report above the
        traceback names each input as you wrote it (``x``, ``model.fc1.weight``,
        ``mask`` in ``forward``) and gives the fix; the error is then raised again so
        "Run All" stops there. Copies and syncs are counted for ``.to()``, ``.cpu()``,
        ``.item()``, ``float()``/``bool()`` of tensors, ``.numpy()``, ``.tolist()``,
        printing, ``nonzero`` and boolean-mask indexing; round trips, syncs in loops,
        repeated copies of the same tensor and non-blocking copies from unpinned
        memory are flagged.

        Examples::

            %%devcheck
            for x, y in loader:
                loss = loss_fn(model(x.to(device)), y.to(device))
                print(loss.item())

            %%devcheck -o report --quiet
            train_one_epoch()
        """
        __tracebackhide__ = True  # the user's traceback starts in their cell, not here
        run = _CheckedCell(self.shell, parse_argstring(self.devcheck, line), line, cell)
        if run.needs_await and _event_loop_running():
            # Only reached when the cell was not rewritten by await_devcheck_cells (a direct call).
            raise UsageError("%%devcheck: this cell awaits; run it as a cell (%%devcheck on its first line) "
                             "so the kernel can run it on its event loop")
        with run:
            self.shell.run_cell(cell, store_history=False)
        run.finish()

    async def devcheck_async(self, line: str, cell: str) -> None:
        """``%%devcheck`` for a cell with top-level ``await``, run on the kernel's event loop.

        A %%devcheck cell whose body awaits is rewritten (by an input transformer that
        loading the extension registers) into ``await`` of this method, so the kernel
        runs it as an async cell instead of blocking its own loop.
        """
        __tracebackhide__ = True
        run = _CheckedCell(self.shell, parse_argstring(self.devcheck, line), line, cell)
        with run:
            await self.shell.run_cell_async(cell, store_history=False, transformed_cell=run.transformed,
                                            preprocessing_exc_tuple=None)
        run.finish()

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
    @argument("-o", "--output", action="store_true", help="Return the snapshot (or the history): r = %%gpumem -o")
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
        args = parse_argstring(self.gpumem, line)
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
            return self._show_history(args.output)
        return self._show_memory(args)

    # -- %gpumem helpers ------------------------------------------------------

    def _collector(self, device: str | None, count_tensors_by_default: bool) -> Any:
        """collect(count_tensors) -> MemorySnapshot, keeping the last tensor count between calls."""
        from .memory import build, read, tally_tensors

        shell = self.shell
        last: dict[str, Any] = {}

        def collect(count_tensors: bool) -> Any:
            if count_tensors_by_default and (count_tensors or "tallies" not in last):
                last["tallies"] = tally_tensors(shell.user_ns, exclude=self._ipython_names())
            snapshot = build(read(), last.get("tallies"))
            return _only_device(snapshot, device) if device else snapshot

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

        collect = self._collector(args.device, not args.no_tensors)
        widgets_frontend = getattr(self.shell, "kernel", None) is not None
        if args.watch is not None and not widgets_frontend:
            raise UsageError("%gpumem: --watch needs a Jupyter kernel (a live widget); here use %gpumem again, "
                             "or %gpumem --track to record every cell")
        if widgets_frontend:
            from .render.memory_widget import MemoryDashboard, Watcher

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
            if not args.output:
                display(snapshot)
        return snapshot if args.output else None

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
                watcher.dashboard.status.value = f"✖ refresh after the cell failed: {type(exc).__name__}: {exc}"
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
            self._tracker.after(failed=result is not None and not result.success)  # type: ignore[union-attr]
        except Exception:  # noqa: BLE001
            pass

    def _show_history(self, output: bool) -> Any:
        from IPython.display import Image, display

        from .memory_model import MemoryHistory

        history = self._tracker.history() if self._tracker is not None else MemoryHistory(())
        if output:
            return history  # h.frame, h.figure()
        display(history)
        if history.cells:
            from .render.memory_plot import history_png

            try:
                display(Image(history_png(history)))
            except ImportError:  # matplotlib is optional
                print("%gpumem: install matplotlib for the plot (pip install matplotlib).")
        return None

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


def _only_device(snapshot: Any, text: str) -> Any:
    import dataclasses

    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise UsageError(f"%gpumem: {text!r} is not a device (try cuda:0, cuda, cpu)") from None
    keep = [d for d in snapshot.devices
            if d.device == str(device) or (device.index is None and d.device.split(":")[0] == device.type)]
    if not keep:
        have = ", ".join(d.device for d in snapshot.devices)
        raise UsageError(f"%gpumem: no device {text!r} here (devices: {have})")
    return dataclasses.replace(snapshot, devices=tuple(keep))


def _with_fallback(widget: Any, fallback: Any) -> dict[str, Any]:
    """The widget's bundle, with the static rendering for frontends without widgets (nbconvert, GitHub)."""
    bundle = dict(widget._repr_mimebundle_())
    bundle.update(fallback._repr_mimebundle_())
    return bundle


class _CheckedCell:
    """One %%devcheck run: the mode and error capture around the cell, then the report."""

    def __init__(self, shell: Any, args: Any, line: str, cell: str):
        import ast

        from .check import DeviceCheckMode

        if args.output is not None and not args.output.isidentifier():
            raise UsageError(f"%%devcheck: -o needs a variable name, not {args.output!r}")
        self.shell, self.args, self.line, self.cell = shell, args, line, cell
        self.transformed = shell.transform_cell(cell)
        ast.parse(self.transformed)  # a SyntaxError is shown once, by the shell, before anything runs
        self.needs_await = bool(shell.should_run_async(cell, transformed_cell=self.transformed,
                                                       preprocessing_exc_tuple=None))
        namespace = shell.user_ns
        self.mode = DeviceCheckMode(namespace,
                                    lambda frame: frame.f_code.co_name == "<module>" and frame.f_globals is namespace)
        self.failure: list[BaseException] = []
        self.start = 0.0

    def _keep(self, shell_: Any, etype: Any, value: BaseException, tb: Any, tb_offset: Any = None) -> list[str]:
        self.failure.append(value)
        return []

    def __enter__(self) -> _CheckedCell:
        self._saved = (self.shell.custom_exceptions, self.shell.CustomTB)
        self.shell.set_custom_exc((Exception,), self._keep)
        self.start = time.perf_counter()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.mode.__exit__(*exc)
        finally:
            self.shell.custom_exceptions, self.shell.CustomTB = self._saved
        self.elapsed = time.perf_counter() - self.start

    def finish(self) -> None:
        """Show the report (and, in Jupyter, the fix buttons); raise the cell's error again."""
        from .check import DeviceCheckError, attach_note

        __tracebackhide__ = True
        shell, args, namespace = self.shell, self.args, self.shell.user_ns
        error = self.failure[0] if self.failure else None
        report = self.mode.report(error, self.elapsed)
        if args.output:
            namespace[args.output] = report
        if not args.quiet or report.has_findings:
            from IPython.display import display

            display(report)
            if report.mismatch is not None and report.mismatch.fix and getattr(shell, "kernel", None) is not None:
                # A widget frontend: offer the fix as a button, then a re-run of this cell.
                from .render.widgets import fix_panel

                source = f"%%devcheck {self.line}\n{self.cell}"
                display(fix_panel(report.mismatch, namespace, lambda: shell.run_cell(source)))
        if error is not None:
            attach_note(error, report)
            raise error.with_traceback(error.__traceback__)
        if args.strict and report.has_findings:
            raise DeviceCheckError(report)


_DEVCHECK_LINE = re.compile(r"^\s*%%devcheck(?:\s+(.*))?$")


def await_devcheck_cells(shell: Any) -> Any:
    """An input transformer: a %%devcheck cell whose body has top-level ``await`` becomes
    ``await <DevInspect>.devcheck_async(line, body)``, which the kernel runs on its loop.
    Any other cell, or anything unexpected, passes through unchanged."""

    def transform(lines: list[str]) -> list[str]:
        try:
            if not lines:
                return lines
            m = _DEVCHECK_LINE.match(lines[0].rstrip("\n"))
            if m is None:
                return lines
            body = "".join(lines[1:])
            transformed = shell.transform_cell(body)
            if not shell.should_run_async(body, transformed_cell=transformed, preprocessing_exc_tuple=None):
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


def _device_filter(text: str, result: Any) -> str:
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise UsageError(f"%devices: {text!r} is not a device (try cpu, cuda, cuda:0)") from None
    name = str(device)
    if device.index is None and device.type != "cpu":
        matches = sorted({r.device for r in result.records if r.device.split(":")[0] == device.type})
        return matches[0] if len(matches) == 1 else f"{device.type}:0"
    return name


def _with_suggestion(message: str, names: list[str], namespace: dict) -> str:
    for name in names:
        top = name.split(".")[0].split("[")[0]
        if top not in namespace:
            candidates = [n for n, v in namespace.items() if not n.startswith("_") and not callable(v)]
            close = difflib.get_close_matches(top, candidates, n=1)
            if close:
                return f"{message} (did you mean {close[0]!r}?)"
    return message


def load(shell: Any) -> None:
    """Register the magics once per shell; a second call does nothing."""
    if id(shell) in _instances:
        return
    instance = DevInspect(shell=shell)  # Magics.__init__ adds it to shell.configurables (%config)
    shell.register_magics(instance)
    shell.input_transformers_cleanup.append(await_devcheck_cells(shell))
    _instances[id(shell)] = instance


def unload(shell: Any) -> None:
    """Remove what :func:`load` registered; harmless when nothing is loaded."""
    instance = _instances.pop(id(shell), None)
    if instance is None:
        return
    instance.close()
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
