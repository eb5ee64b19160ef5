"""devinspect: see which PyTorch tensors sit on which device, and why.

In IPython or Jupyter::

    %load_ext devinspect
    %devices            # every tensor in the session, with findings

From plain Python::

    import devinspect
    result = devinspect.scan(globals())
    result.frame        # a pandas DataFrame
    result.findings     # what looks wrong, with the fix as code

Importing this package imports neither IPython nor torch; both load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["scan", "find", "load_ipython_extension", "unload_ipython_extension", "__version__"]

if TYPE_CHECKING:
    from .findings import find
    from .scan import scan


def __getattr__(name: str) -> Any:
    # Lazy so that `import devinspect` stays cheap and never imports torch early.
    if name == "scan":
        from .scan import scan

        return scan
    if name == "find":
        from .findings import find

        return find
    if name in ("model", "findings", "testing", "render", "magics"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'devinspect' has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """Register the devinspect magics (``%load_ext devinspect``). Loading twice is harmless."""
    from .magics import load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """Remove everything :func:`load_ipython_extension` registered."""
    from .magics import unload

    unload(ipython)
