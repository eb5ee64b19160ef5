"""The IPython layer: magics, argument parsing and configuration. Nothing else imports IPython."""

from __future__ import annotations

import difflib
import time
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring
from traitlets import Bool, CaselessStrEnum, Int

from .model import KINDS
from .render.table import DEFAULT_MAX_ROWS, SORTS

#: The magics each loaded instance registers, so unloading removes exactly these.
_MAGIC_NAMES = {"line": ("devices",), "cell": ("devcheck",)}
#: One instance per shell; loading again is a no-op.
_instances: dict[int, DevInspect] = {}


@magics_class
class DevInspect(Magics):
    """Device inspection magics for PyTorch (``%devices``). Configure with ``%config DevInspect``."""

    max_rows = Int(DEFAULT_MAX_ROWS, help="Rows a %devices table shows before '… N more' (0: all).").tag(config=True)
    sort = CaselessStrEnum(SORTS, default_value="walk", help="Default row order of %devices.").tag(config=True)
    include_hidden = Bool(False, help="List IPython's history names (_, _12, Out) and other _ names by default.").tag(
        config=True
    )
    max_depth = Int(8, help="How deep %devices follows containers and plain objects below a name.").tag(config=True)
    max_items = Int(200_000, help="Items %devices looks at in one container.").tag(config=True)

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
        from .scan import is_history_name, scan

        namespace = self.shell.user_ns
        hidden = self.shell.user_ns_hidden
        # IPython's own variables, unless the user rebound them; history names stay,
        # since the scan measures what they hold.
        exclude = [n for n, v in hidden.items() if namespace.get(n, v) is v and not is_history_name(n)]
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
        args = parse_argstring(self.devcheck, line)
        if args.output is not None and not args.output.isidentifier():
            raise UsageError(f"%%devcheck: -o needs a variable name, not {args.output!r}")
        import ast

        from .check import DeviceCheckError, DeviceCheckMode, attach_note

        transformed = self.shell.transform_cell(cell)
        ast.parse(transformed)  # a SyntaxError is shown once, by the shell, before anything runs
        shell = self.shell
        if _event_loop_running() and shell.should_run_async(cell, transformed_cell=transformed, preprocessing_exc_tuple=None):
            raise UsageError(
                "%%devcheck: top-level await cannot run inside %%devcheck in a running kernel. "
                "Put the awaited code in an async function and use `with devinspect.check(): ...` inside it."
            )
        namespace = shell.user_ns
        mode = DeviceCheckMode(namespace, lambda frame: frame.f_code.co_name == "<module>" and frame.f_globals is namespace)
        failure: list[BaseException] = []

        def keep(shell_: Any, etype: Any, value: BaseException, tb: Any, tb_offset: Any = None) -> list[str]:
            failure.append(value)
            return []

        saved = (shell.custom_exceptions, shell.CustomTB)
        shell.set_custom_exc((Exception,), keep)
        start = time.perf_counter()
        try:
            with mode:
                shell.run_cell(cell, store_history=False)
        finally:
            shell.custom_exceptions, shell.CustomTB = saved
        error = failure[0] if failure else None
        report = mode.report(error, time.perf_counter() - start)
        if args.output:
            namespace[args.output] = report
        if not args.quiet or report.has_findings:
            from IPython.display import display

            display(report)
            if report.mismatch is not None and report.mismatch.fix and getattr(shell, "kernel", None) is not None:
                # A widget frontend: offer the fix as a button, then a re-run of this cell.
                from .render.widgets import fix_panel

                display(fix_panel(report.mismatch, namespace, lambda: shell.run_cell(f"%%devcheck {line}\n{cell}")))
        if error is not None:
            attach_note(error, report)
            raise error.with_traceback(error.__traceback__)
        if args.strict and report.has_findings:
            raise DeviceCheckError(report)


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
    _instances[id(shell)] = instance


def unload(shell: Any) -> None:
    """Remove what :func:`load` registered; harmless when nothing is loaded."""
    instance = _instances.pop(id(shell), None)
    if instance is None:
        return
    manager = shell.magics_manager
    for kind, names in _MAGIC_NAMES.items():
        for name in names:
            bound = manager.magics[kind].get(name)
            if getattr(bound, "__self__", None) is instance:
                del manager.magics[kind][name]
    if manager.registry.get(type(instance).__name__) is instance:
        del manager.registry[type(instance).__name__]
    shell.configurables[:] = [c for c in shell.configurables if c is not instance]
