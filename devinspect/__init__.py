"""devinspect: see which PyTorch tensors sit on which device, and why.

In IPython or Jupyter::

    %load_ext devinspect
    %devices            # every tensor in the session, with findings

From plain Python::

    import devinspect
    result = devinspect.scan(globals())
    result.frame        # a pandas DataFrame
    result.findings     # what looks wrong, with the fix as code

    with devinspect.check() as c:   # copies, syncs and device mismatches in a block
        train_step()
    c.report

    devinspect.explain()            # the last error: a device mismatch, or out of memory

Importing this package loads almost nothing: torch (never initialising CUDA), pandas,
IPython and ipywidgets load with the first function, magic or view that needs them, and
``%load_ext devinspect`` registers the magics without importing torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .model import display
from .version import __version__

#: The public functions, each imported from its module when first used.
_LAZY = {"scan": "diagnose.findings", "find": "diagnose.findings", "check": "observe.checked_block",
         "explain": "diagnose.errors.explainer"}

# How every result draws itself: registered the first time a result is drawn.
display.load_with(lambda: import_module(f"{__name__}.render"))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = ["scan", "find", "check", "explain", "release_history", "release_traceback", "load_ipython_extension",
           "unload_ipython_extension", "__version__"]


def release_history() -> Any:
    """Drop IPython's output-history entries (``Out``, ``_``, ``__``, ``___``, ``_N``), the last
    traceback, and the frames of earlier errors no name reaches, that keep accelerator tensors
    alive, clearing every copy IPython keeps, never a value you assigned. Returns an
    :class:`~devinspect.actions.ActionResult` (bytes released)."""
    from .ipython import release_history_here

    return release_history_here()


def release_traceback() -> Any:
    """Release the last error's traceback: clear its frames (the tensors their locals hold) and
    drop every reference to it (``sys.last_*`` and, in IPython, the shell's own copies).
    ``%debug`` and ``%tb`` then no longer see that error. Returns an ``ActionResult``."""
    from .actions import release_traceback as release

    return release()


def load_ipython_extension(ipython: Any) -> None:
    """Register the devinspect magics (``%load_ext devinspect``). Loading twice is harmless."""
    from .ipython import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove everything :func:`load_ipython_extension` registered."""
    from .ipython import unload

    unload(ipython)
