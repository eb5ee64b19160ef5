"""``%devices``: every tensor in the session with its device, and what looks wrong."""

from __future__ import annotations

import shlex
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class, no_var_expand
from IPython.core.magic_arguments import argument, magic_arguments

from ..model import KINDS, SORTS
from ..runtime import beneath_user_modes
from .magic_support import (
    DevInspectMagics,
    caller_result_use,
    calling_frame,
    device_argument,
    display_live,
    variable_name,
    with_suggestion,
)
from .ranks import show_ranks


@magics_class
class DevicesMagics(DevInspectMagics):
    """``%devices`` (and ``%devices --why``, ``--ranks``)."""

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
    @beneath_user_modes()  # no mode the user left entered sees devinspect's own reads
    @no_var_expand  # a name, a path or code is taken as typed: {…} and $x never run
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
        try:
            args = self._parse(self.devices, line)
        except UsageError:
            args = self._posix_args(line)  # a --why name quoted as a POSIX shell quotes it
            if args is None:
                raise
        if args.ranks:
            if args.names or args.device or args.kind or args.why or args.findings or args.all_objects:
                raise UsageError("%devices: --ranks shows whole ranks; it takes no names or other selection")
            return show_ranks(self.shell, "%devices", args, "devices", self._ipython_names())
        if args.why is not None:
            return self._why(args, line)
        if args.max_rows is not None and args.max_rows < 0:
            raise UsageError(f"%devices: -n takes a number of rows, 0 or more (0 shows all), not {args.max_rows}")
        from ..diagnose import scan
        from ..model import Display, Selection

        namespace = self.shell.user_ns
        include_hidden = bool(args.hidden or self.settings.include_hidden)
        device = device_argument("%devices", args.device)
        variable_name("%devices", args.variable, self.shell)
        max_rows = self.settings.max_rows if args.max_rows is None else args.max_rows
        # A name in quotes means the name ("x", 'Out[3]'), as --why takes it.
        args.names = [n[1:-1] if len(n) > 1 and n[0] == n[-1] and n[0] in "'\"" else n for n in args.names]
        selection = Selection(names=tuple(args.names), device=device, kind=args.kind)
        display_settings = Display(max_rows=max_rows, sort=args.sort or self.settings.sort, findings_only=args.findings)

        def scan_view() -> Any:
            try:
                result = scan(
                    namespace,
                    roots=args.names or None,
                    include_hidden=include_hidden,
                    all_objects=args.all_objects,
                    exclude=self._ipython_names(),
                    max_depth=self.settings.max_depth,
                    max_items=self.settings.max_items,
                )
            except LookupError as exc:
                # Raised outside the handler, so the error keeps no context: the walk's frames, and
                # the user's objects in them, would stay alive in sys.last_value until the next error.
                missing = str(exc)
            else:
                return result.select(selection, display_settings)
            raise UsageError(f"%devices: {with_suggestion(missing, args.names, namespace)}")

        view = scan_view()
        if args.variable:
            namespace[args.variable] = view
        return self._show(view, args.output, scan_view)

    def _posix_args(self, line: str) -> Any:
        """The arguments as a POSIX shell splits ``line`` (``shlex.quote``'s quoting of a name
        that holds both quote kinds), when that gives a --why and parses; else None."""
        if "--why" not in line:
            return None
        try:
            args = self.devices.parser.parse_args(shlex.split(line))
        except (ValueError, UsageError, SystemExit):
            return None
        return args if args.why is not None else None

    def _why_names(self, args: Any, line: str) -> list[str]:
        """What --why may name: the name as IPython splits the line (as %devices lists it,
        typed bare or in one pair of quotes), then as a POSIX shell unquotes it."""
        names = []
        if args.names and not (args.device or args.kind) and _balanced(" ".join([args.why, *args.names])) \
                and not _balanced(args.why):
            args.why, args.names = " ".join([args.why, *args.names]), []  # d[("t", 1)]: split at its space
        if not (args.names or args.device or args.kind):
            name = args.why.strip()
            if len(name) > 1 and name[0] == name[-1] and name[0] in "'\"":
                name = name[1:-1]  # %devices --why 'Out[3]'
            names.append(name)
        posix = self._posix_args(line)
        if posix is not None and not (posix.names or posix.device or posix.kind) and posix.why not in names:
            names.append(posix.why)
        return names

    def _why(self, args: Any, line: str) -> Any:
        """``%devices --why NAME``: the reference paths that keep that tensor alive."""
        from IPython.display import display

        from ..collect import holders

        variable_name("%devices", args.variable, self.shell)
        candidates = self._why_names(args, line)
        if not candidates:
            raise UsageError("%devices: --why takes one name and no other selection")
        namespace = self.shell.user_ns
        shell = self.shell
        found = missing = None
        for name in candidates:
            try:
                found = holders(namespace, name, exclude=self._ipython_names(),
                                plumbing=(shell.user_ns_hidden, shell.displayhook,
                                          getattr(shell.displayhook, "__dict__", None)))
            except LookupError as exc:
                missing = missing or (name, str(exc))  # raised below, outside the handler (see scan_view)
            else:
                break
        if found is None:
            raise UsageError(f"%devices --why: {with_suggestion(missing[1], [missing[0]], namespace)}")
        if args.variable:
            namespace[args.variable] = found
        if args.output and caller_result_use(calling_frame()) != "dropped":
            return found  # shown by IPython (the cell's last line), or kept by the code
        display(found)
        return found if args.output else None

    def _show(self, view: Any, output: bool, rescan: Any = None) -> Any:
        """Display ``view`` once, and return it where the code uses it. Assigned (``r = %devices``)
        it is returned and not displayed, as an assignment shows nothing elsewhere in IPython.
        As a cell's last line it is not returned, so IPython's ``Out`` keeps no copy, unless
        ``-o`` asks for it (IPython then shows it, once). In Jupyter it is the live explorer,
        with the static tables beside it for other viewers."""
        from IPython.display import display

        use = caller_result_use(calling_frame())
        shown_by_caller = use == "shown"
        if (shown_by_caller and output) or use == "kept":
            return view
        explorer = self._explorer(view, rescan) if getattr(self.shell, "kernel", None) is not None else None
        if explorer is not None:
            self._last_explorer = explorer
            display_live(explorer.widget, view, self.shell)
        else:
            display(view)
        return None if shown_by_caller else view

    def _explorer(self, view: Any, rescan: Any) -> Any:
        try:
            from ..collect import present
            from ..jupyter import DevicesExplorer
        except ImportError:  # no ipywidgets: the static output is complete
            return None
        return DevicesExplorer(view, rescan or (lambda: view), self.shell.user_ns, present(), shell=self.shell)


def _balanced(text: str) -> bool:
    """Whether the brackets and quotes of a name are closed (``d[("t", 1)]`` is; ``d[("t",`` is not)."""
    depth, quote = 0, None
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{<":  # <unnamed 3>, as --all lists it, is one name
            depth += 1
        elif ch in ")]}>":
            depth -= 1
    return depth == 0 and quote is None
