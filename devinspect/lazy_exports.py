"""A package's public surface, imported on first use: each package's ``__init__`` names
what other parts of devinspect use from it, without loading every module when one is
imported (``%load_ext devinspect`` stays light). Other packages import these names only
through the ``__init__`` (the layer test holds that), so a module can move inside its
package without touching its users."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_surface(package: str, surface: Mapping[str, str],
                 submodules: Mapping[str, str] | None = None) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``surface`` maps a name to the module of the
    package that defines it (imported when the name is first read); ``submodules`` maps a
    name to a module of the package that is itself the value (for users that read several
    of its names through one module object)."""
    submodules = submodules or {}

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{submodules[name]}")
        module = surface.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
