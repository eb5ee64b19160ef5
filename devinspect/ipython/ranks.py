"""``--ranks``: the per-rank report of ``%devices`` and ``%gpumem``, over ipyparallel or torch.distributed."""

from __future__ import annotations

import sys
from typing import Any

from IPython.core.error import UsageError

from .magic_support import caller_result_use, calling_frame, display_live, variable_name


def show_ranks(shell: Any, magic: str, args: Any, focus: str, exclude: Any) -> Any:
    """``--ranks``: the per-rank report, over ipyparallel or torch.distributed."""
    from IPython.display import display

    from ..distributed import DistributedError, from_view, gather

    variable_name(magic, args.variable, shell)
    namespace = shell.user_ns
    try:
        view = engines_view(namespace)
        if view is not None:
            report = from_view(view, focus=focus)
        else:
            dist = getattr(sys.modules.get("torch"), "distributed", None)
            if dist is None or not (dist.is_available() and dist.is_initialized()):
                raise UsageError(f"{magic}: --ranks needs an ipyparallel client in the namespace "
                                 "(rc = ipyparallel.Client()) or an initialised torch.distributed group here")
            report = gather(namespace, exclude=exclude, focus=focus)
    except DistributedError as exc:
        raise UsageError(f"{magic} --ranks: {exc}") from None
    if report is None:  # a rank other than the one that collects: it shows nothing
        return None
    if args.variable:
        namespace[args.variable] = report
    if args.output and caller_result_use(calling_frame()) != "dropped":
        return report
    widget = None
    if getattr(shell, "kernel", None) is not None:
        try:
            from ..jupyter import ranks_widget

            widget = ranks_widget(report)
        except ImportError:  # no ipywidgets: the static report is complete
            widget = None
    if widget is not None:
        display_live(widget, report, shell)
    else:
        display(report)
    return report if args.output else None


def engines_view(namespace: Any) -> Any:
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
    from ..distributed import DistributedError

    try:
        return client[:]
    except Exception as exc:  # no engines registered yet, a closed client
        raise DistributedError(f"the ipyparallel client has no engines to ask ({type(exc).__name__}: {exc})") from None
