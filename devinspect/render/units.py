"""Human units, used only when rendering."""

from __future__ import annotations

from typing import Any

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def human_bytes(n: int | None) -> str:
    """``1536`` -> ``"1.5 KiB"``; ``None`` -> ``"?"`` (not measurable)."""
    if n is None:
        return "?"
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def shape_text(shape: tuple[Any, ...] | None) -> str:
    if shape is None:
        return "?"
    return "[" + ", ".join(str(s) for s in shape) + "]"
