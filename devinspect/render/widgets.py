"""Live ipywidgets views. Composed from stock widgets; callbacks go through devinspect.actions."""

from __future__ import annotations

from html import escape
from typing import Any, Callable, MutableMapping

from ..model import Mismatch


def fix_panel(
    mismatch: Mismatch,
    namespace: MutableMapping[str, Any],
    rerun: Callable[[], Any] | None = None,
) -> Any:
    """Buttons for a diagnosed mismatch: apply the namespace-level fix, then re-run the cell.

    Each button is disabled while its action runs; what happened (or why nothing did)
    is written into the panel, never raised as a traceback from devinspect.
    """
    import ipywidgets as widgets

    from .. import actions

    fix_html = widgets.HTML(f"<pre style=\"margin:0\">{escape(mismatch.fix or '')}</pre>")
    apply = widgets.Button(description="Apply fix", icon="wrench", tooltip=(mismatch.fix or "").splitlines()[0][:120])
    again = widgets.Button(description="Re-run cell", icon="redo", disabled=True)
    status = widgets.HTML("")
    output = widgets.Output()
    if mismatch.action is None:
        apply.disabled = True
        status.value = "This fix is in your code (a class or a function): edit it there, then re-run."

    def on_apply(button: Any) -> None:
        button.disabled = True
        try:
            result = actions.apply_fix(namespace, mismatch.action or {})
        except Exception as exc:  # noqa: BLE001 - shown in the panel
            result = actions.ActionResult(False, f"{type(exc).__name__}: {exc}")
        status.value = ("✔ " if result.ok else "✖ ") + escape(result.message)
        if result.ok:
            again.disabled = rerun is None
        else:
            button.disabled = False

    def on_rerun(button: Any) -> None:
        button.disabled = True
        output.clear_output()
        with output:
            try:
                rerun()  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 - shown in the panel
                print(f"{type(exc).__name__}: {exc}")
        button.disabled = False

    apply.on_click(on_apply)
    again.on_click(on_rerun)
    return widgets.VBox([fix_html, widgets.HBox([apply, again]), status, output])
