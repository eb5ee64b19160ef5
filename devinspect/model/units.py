"""Human units: written for rendering, and read back from what people and PyTorch write."""

from __future__ import annotations

import re
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


def signed_bytes(n: int | None) -> str:
    """A change in bytes with its sign: ``+4.0 MiB``, ``-512 B``, ``+0 B``; ``?`` when unknown."""
    if n is None:
        return "?"
    return ("+" if n >= 0 else "-") + human_bytes(abs(n))


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]?)(i?)B?\s*$", re.IGNORECASE)


def parse_bytes(text: str | int) -> int:
    """``"8GiB"``, ``"512 MiB"``, ``"2.00 GiB"`` (as PyTorch writes them), ``"1GB"`` (decimal) or a
    number of bytes; ``ValueError`` for anything else."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"a size cannot be negative: {text}")
        return text
    m = _SIZE.match(str(text))
    if m is None:
        raise ValueError(f"not a size: {text!r} (write it as 8GiB, 512MiB or a number of bytes)")
    number, prefix, binary = m.groups()
    power = "KMGTP".find(prefix.upper()) + 1 if prefix else 0
    base = 1024 if binary or not prefix else 1000
    return int(float(number) * base**power)


def shape_text(shape: tuple[Any, ...] | None) -> str:
    if shape is None:
        return "?"
    return "[" + ", ".join(str(s) for s in shape) + "]"
