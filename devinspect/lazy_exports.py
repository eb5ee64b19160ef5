"""A package's public surface, imported on first use: each sub-package's ``__init__`` names
what other parts of devinspect use from it, without loading every module when one is
imported (``%load_ext devinspect`` stays light)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_surface(package: str, surface: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports ``surface[name]`` (a module of
    the package) when ``name`` is first read from the package, and returns its attribute."""

    def __getattr__(name: str) -> Any:
        module = surface.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
