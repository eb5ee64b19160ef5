"""Apply fix buttons: for a %%devcheck mismatch, an error explained after the fact, and next
to each %devices finding.

Composed from stock ipywidgets. Every click goes through :func:`devinspect.actions.apply_fix`
(all or nothing, never raising); what happened, in bytes, or why nothing did, is
written into the panel. The fix's code is not repeated here: the report above shows it.
"""

from __future__ import annotations

from html import escape
from typing import Any, Callable, Iterable, MutableMapping

from ..model import EmptyCache, Finding, Fix, ReleaseHistory


def result_html(ok: bool, message: str, by_hand: Iterable[Any] = ()) -> str:
    """An action's outcome, ✔ or ✖ and its message; then each edit the user has to make by hand."""
    html = ("✔ " if ok else "✖ ") + escape(message)
    hand = [f"<div>Not made (not a notebook cell): edit {escape(e.where.where)} to <code>{escape(e.new)}</code></div>"
            for e in by_hand]
    return html + "".join(hand)


class FixButton:
    """An Apply fix button and its status line; offers a follow-up (release graphs) when the
    action says one would let it succeed."""

    def __init__(self, fix: Fix, namespace: MutableMapping[str, Any], *, label: str = "Apply fix",
                 shell: Any = None, after: Callable[[Any], None] | None = None):
        import ipywidgets as widgets

        self.fix, self.namespace, self.shell, self.after = fix, namespace, shell, after
        summary = fix.summary if len(fix.summary) <= 200 else fix.summary[:199] + "…"
        self.button = widgets.Button(description=label, icon="wrench", tooltip=summary,
                                     layout=widgets.Layout(width="auto", min_width="fit-content"))
        self.follow_up = widgets.Button(description="Release graphs, then apply", icon="unlink",
                                        layout=widgets.Layout(width="auto", display="none"))
        self.status = widgets.HTML("")
        self.box = widgets.HBox([self.button, self.follow_up, self.status],
                                layout=widgets.Layout(flex_flow="row wrap", align_items="center"))
        self._pending: Any = None
        from .. import actions

        # The objects the fix was made for, by identity: applied after the cell ran again, it refuses.
        self.made_for = actions.made_for(namespace, fix.action) if fix.action is not None else None
        if fix.action is None:
            self.button.disabled = True
            self.button.tooltip = "This fix is an edit to your code: make it there, then run again."
        self.button.on_click(lambda _b: self.apply())
        self.follow_up.on_click(lambda _b: self.release_then_apply())

    def _run(self, action: Any, released_first: Any = None) -> Any:
        from .. import actions
        from ..runtime import beneath_user_modes

        kwargs = {"made_for": self.made_for}
        if self.shell is not None:
            kwargs.update(displayhook=self.shell.displayhook, hidden=self.shell.user_ns_hidden)
        try:
            with beneath_user_modes():  # a mode the user left entered sees none of the fix's own calls
                if released_first is not None:
                    return actions.apply_after_release(self.namespace, released_first, action, **kwargs)
                return actions.apply_fix(self.namespace, action, **kwargs)
        except Exception as exc:  # shown in the panel, never a traceback
            return actions.ActionResult(False, f"{type(exc).__name__}: {exc}")

    def _show(self, result: Any, also: str = "") -> None:
        self.status.value = result_html(result.ok, result.message + also, self.by_hand if result.ok else ())

    @property
    def by_hand(self) -> list[Any]:
        """The edits this fix shows that Apply fix cannot make (a file's lines, not a cell's)."""
        from ..diagnose import edits_by_hand

        return edits_by_hand(self.fix)

    def apply(self, released_first: Any = None) -> Any:
        self.button.disabled = True
        self.follow_up.layout.display = "none"
        result = self._run(self.fix.action, released_first)
        self._show(result, shown_in_editors(self.fix, result))
        if result.ok:  # done: the button stays disabled (its fix would do nothing, or harm, again)
            if self.after is not None:
                self.after(result)
        else:
            self.button.disabled = False
            self._pending = result.follow_up
            if result.follow_up is not None:
                self.follow_up.layout.display = None
        return result

    def release_then_apply(self) -> Any:
        self.follow_up.disabled = True
        try:
            # One action: what the release did is said whether or not the fix then applies.
            return self.apply(released_first=self._pending)
        finally:
            self.follow_up.disabled = False


def shown_in_editors(fix: Fix, result: Any) -> str:
    """After an action succeeded, the fix's edits of other cells go to the notebook's editors
    where a front end shows them (devinspect's JupyterLab extension); what to add to the message."""
    from ..actions import cells

    if not result.ok:
        return ""
    done = cells.edits_of(fix.action)
    shown = cells.show_in_editors(e for e in fix.edits if e not in done)
    if not shown:
        return ""
    named = ", ".join(f"Cell In[{n}]" for n in shown)
    return f"; {named} changed in the notebook's editor: run it again, and the cells after it that use what it makes"


def fix_panel(fix: Fix, namespace: MutableMapping[str, Any], rerun: Callable[[], Any] | None = None,
              shell: Any = None) -> Any:
    """Apply fix, then Re-run cell (the notebook runs the cell again, replacing its output)."""
    import ipywidgets as widgets

    from .rerun import rerun_button

    output = widgets.Output()

    def run_here() -> None:
        output.clear_output()
        with output:
            print("Ran here: the cell's own output above still shows the earlier run.")
            try:
                rerun()  # type: ignore[misc]
            except Exception as exc:  # shown in the panel
                print(f"{type(exc).__name__}: {exc}")

    # Re-run cell only where running the cell again can work once the fix is applied; a fix
    # of code that runs before the cell (a class, an earlier cell) says which cells to run.
    offered = rerun is not None and fix.rerun
    again = rerun_button(run_here) if offered else None
    if again is None and offered:
        again = widgets.Button(description="Re-run cell", icon="redo", disabled=True,
                               layout=widgets.Layout(width="auto", min_width="fit-content"))
        again.on_click(lambda _b: run_here())

    def enable_rerun(_result: Any) -> None:
        if again is not None:
            again.disabled = False

    apply = FixButton(fix, namespace, shell=shell, after=enable_rerun)
    buttons = [apply.box] + ([again] if again is not None else [])
    panel = widgets.VBox([widgets.HBox(buttons, layout=widgets.Layout(flex_flow="row wrap")), output])
    panel.apply = apply  # for tests and the re-run logic
    panel.again = again
    return panel


def findings_panel(findings: Iterable[Finding], namespace: MutableMapping[str, Any], shell: Any = None,
                   on_change: Callable[[], None] | None = None) -> Any | None:
    """One row per finding that has an action: its message and an Apply fix button."""
    import ipywidgets as widgets

    rows = []
    for f in findings:
        if f.fix is None or f.fix.action is None:
            continue
        button = FixButton(f.fix, namespace, shell=shell, after=(lambda _r: on_change()) if on_change else None)
        label = widgets.HTML(f"<b>{escape(f.severity)}</b> {escape(f.subject)}: {escape(f.fix.summary)}",
                             layout=widgets.Layout(flex="1 1 20em"))
        rows.append(widgets.HBox([label, button.box], layout=widgets.Layout(flex_flow="row wrap",
                                                                             align_items="center")))
    if not rows:
        return None
    return widgets.VBox(rows)


#: Button labels of the out-of-memory fixes, by action.
_ACTION_LABELS = {ReleaseHistory: ("Release history", "history"), EmptyCache: ("empty_cache", "recycle")}


def explanation_panel(explanation: Any, namespace: MutableMapping[str, Any], rerun: Callable[[], Any] | None = None,
                      shell: Any = None) -> Any:
    """The buttons under an explained error: Apply fix and Re-run cell for a device error;
    Release history and empty_cache for an out-of-memory error, each saying what it did in bytes."""
    import ipywidgets as widgets

    explained = explanation.mismatch or explanation.device_error
    if explained is not None and explained.fix is not None:
        return fix_panel(explained.fix, namespace, rerun, shell=shell)
    rows = []
    for fix in explanation.fixes:
        label, icon = _ACTION_LABELS.get(type(fix.action), ("Apply fix", "wrench"))
        button = FixButton(fix, namespace, label=label, shell=shell)
        button.button.icon = icon
        rows.append(button.box)
    return widgets.VBox(rows)
