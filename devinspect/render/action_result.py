"""What an action did, as text and HTML: a ✔ or ✖ and its one sentence, as the Apply fix
buttons show it."""

from __future__ import annotations

from html import escape
from typing import Any


def render_text(result: Any) -> str:
    return ("✔ " if result.ok else "✖ ") + result.message


def render_html(result: Any) -> str:
    colour = "var(--jp-success-color1, #2e7d32)" if result.ok else "var(--jp-error-color1, #c62828)"
    return (f'<div class="devinspect-action-result"><span style="color:{colour}">{"✔" if result.ok else "✖"}</span> '
            f"{escape(result.message)}</div>")
