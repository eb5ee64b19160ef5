"""Re-run cell: the notebook runs the cell again, so its new output and state replace the old.

A kernel cannot rewrite a finished cell's outputs or its error state: only a new run
of that cell by the notebook can. The button is an anywidget view (one small ES
module, no build step) that finds the cell it is shown in, makes it the notebook's
active cell and asks the notebook to run it (JupyterLab's and Notebook 7's "run
cell" keystroke, Ctrl-Enter, handled by their own command registry). Where there is
no such notebook (another frontend, anywidget not installed), the cell runs inside
the panel instead, and the panel says that the cell's own output still shows the
earlier run.
"""

from __future__ import annotations

from typing import Any, Callable

_ESM = """
function render({ model, el }) {
  const button = document.createElement("button");
  button.className = "jupyter-button widget-button";
  button.innerHTML = '<i class="fa fa-redo"></i> Re-run cell';
  button.title = "Run this cell again: its output and error state are replaced";
  const sync = () => { button.disabled = model.get("disabled"); };
  sync();
  model.on("change:disabled", sync);
  button.addEventListener("click", () => {
    const cell = el.closest(".jp-Cell");
    const notebook = el.closest(".jp-Notebook");
    if (!cell || !notebook) {
      model.send({ event: "no-notebook" });
      return;
    }
    // A click on the cell's prompt makes it the active cell and focuses the notebook; the
    // run-cell keystroke then goes to the focused element, where the notebook's shortcut listens.
    const prompt = cell.querySelector(".jp-InputPrompt") || cell;
    prompt.dispatchEvent(new MouseEvent("mousedown", { bubbles: true, cancelable: true, button: 0 }));
    prompt.dispatchEvent(new MouseEvent("mouseup", { bubbles: true, cancelable: true, button: 0 }));
    const focused = notebook.contains(document.activeElement) ? document.activeElement : notebook;
    const keys = { key: "Enter", code: "Enter", keyCode: 13, which: 13, bubbles: true, cancelable: true };
    const mac = navigator.platform.toUpperCase().includes("MAC");
    focused.dispatchEvent(new KeyboardEvent("keydown", mac ? { ...keys, metaKey: true } : { ...keys, ctrlKey: true }));
    model.send({ event: "rerun" });
  });
  el.appendChild(button);
}
export default { render };
"""


def rerun_button(run_here: Callable[[], Any]) -> Any:
    """A Re-run cell button; ``run_here`` runs the cell inside the panel where no notebook can."""
    try:
        import anywidget
        import traitlets
    except ImportError:
        return None

    class RerunButton(anywidget.AnyWidget):
        _esm = _ESM
        disabled = traitlets.Bool(True).tag(sync=True)

    button = RerunButton()
    button.run_here = run_here
    button.requests: list[str] = []

    def on_message(widget: Any, content: Any, buffers: Any) -> None:
        event = content.get("event") if isinstance(content, dict) else None
        button.requests.append(str(event))
        if event == "no-notebook":
            run_here()

    button.on_msg(on_message)
    return button
