"""A kernel driven as JupyterLab drives it, without a browser.

Each cell is an editor with a cell id: running it sends an ``execute_request`` with the
editor's text and ``metadata.cellId``; the reply's ``set_next_input`` payload with
``replace`` changes the editor's text only when the reply's status is ok (JupyterLab's
``runCell``); a re-run clears the cell's outputs. Widgets are followed through their comm
messages (``jupyter.widget``: open, update, close), and a click or a choice is sent as the
front end sends it (a ``custom`` click event; an ``update`` of a dropdown's ``index``).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from typing import Any

TIMEOUT = 120


@dataclass
class Cell:
    text: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    outputs: list[dict] = field(default_factory=list)
    reply: dict = field(default_factory=dict)
    execution_count: int | None = None

    @property
    def failed(self) -> bool:
        return self.reply.get("status") == "error"

    def text_of_outputs(self) -> str:
        parts = []
        for out in self.outputs:
            if out["output_type"] == "stream":
                parts.append(out["text"])
            elif out["output_type"] == "error":
                parts.append(f"{out['ename']}: {out['evalue']}")
            else:
                parts.append(out.get("data", {}).get("text/plain", ""))
        return "\n".join(parts)

    def widget_ids(self) -> list[str]:
        """The ids of the widgets shown in this cell's outputs (the top-level views)."""
        return [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] for o in self.outputs
                if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]


class Frontend:
    """One kernel, its cells as editors, and the widgets it has open."""

    def __init__(self, kernel_name: str = "python3", cwd: str | None = None, env: dict | None = None):
        from jupyter_client.manager import KernelManager

        self.manager = KernelManager(kernel_name=kernel_name)
        self.manager.start_kernel(cwd=cwd, env={**os.environ, **(env or {})})
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=TIMEOUT)
        #: comm id -> the widget's state as the front end knows it (None once closed)
        self.widgets: dict[str, dict | None] = {}
        #: comms of another target (devinspect's panel): comm id -> the messages it carried, in order
        self.comms: dict[str, list[dict]] = {}
        self.closed_comms: set[str] = set()

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)

    # -- running cells -------------------------------------------------------------------

    def run(self, cell: Cell | str) -> Cell:
        """Run ``cell`` as JupyterLab runs it: its outputs cleared, the editor's text sent with its id."""
        cell = Cell(cell) if isinstance(cell, str) else cell
        cell.outputs = []
        msg = self.client.session.msg("execute_request", {
            "code": cell.text, "silent": False, "store_history": True, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True})
        msg["metadata"]["cellId"] = cell.id
        self.client.shell_channel.send(msg)
        self._drain(msg["header"]["msg_id"], cell)
        reply = self._reply(msg["header"]["msg_id"])
        cell.reply = reply["content"]
        cell.execution_count = cell.reply.get("execution_count")
        if cell.reply.get("status") == "ok":
            for payload in cell.reply.get("payload", []):
                if payload.get("source") == "set_next_input" and payload.get("replace"):
                    cell.text = payload["text"]
        return cell

    def _reply(self, msg_id: str) -> dict:
        while True:
            reply = self.client.get_shell_msg(timeout=TIMEOUT)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def _drain(self, msg_id: str, cell: Cell | None) -> None:
        """Read iopub until the kernel is idle after ``msg_id``, filing outputs and widget messages."""
        while True:
            msg = self.client.get_iopub_msg(timeout=TIMEOUT)
            kind, content = msg["msg_type"], msg["content"]
            if kind == "comm_open" and content.get("target_name") == "jupyter.widget":
                self.widgets[content["comm_id"]] = dict(content["data"].get("state", {}))
            elif kind == "comm_msg" and content["comm_id"] in self.widgets:
                data = content["data"]
                if data.get("method") in ("update", "echo_update") and self.widgets[content["comm_id"]] is not None:
                    self.widgets[content["comm_id"]].update(data.get("state", {}))
            elif kind == "comm_open":
                self.comms[content["comm_id"]] = [content["data"]]
            elif kind == "comm_msg" and content["comm_id"] in self.comms:
                self.comms[content["comm_id"]].append(content["data"])
            elif kind == "comm_close" and content["comm_id"] in self.comms:
                self.closed_comms.add(content["comm_id"])
            elif kind == "comm_close":
                self.widgets[content["comm_id"]] = None
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            if kind == "status" and content["execution_state"] == "idle":
                return
            if cell is None:
                continue
            if kind == "stream":
                cell.outputs.append({"output_type": "stream", "name": content["name"], "text": content["text"]})
            elif kind in ("display_data", "execute_result"):
                cell.outputs.append({"output_type": kind, "data": content["data"]})
            elif kind == "error":
                cell.outputs.append({"output_type": "error", **content})
            elif kind == "clear_output":
                cell.outputs = []

    # -- widgets ---------------------------------------------------------------------------

    def alive(self) -> list[str]:
        return [comm for comm, state in self.widgets.items() if state is not None]

    def descendants(self, model_id: str) -> list[str]:
        """``model_id`` and every widget below it (children, and the tabs' and boxes' contents)."""
        seen, stack = [], [model_id]
        while stack:
            current = stack.pop()
            state = self.widgets.get(current)
            if current in seen or state is None:
                continue
            seen.append(current)
            for child in state.get("children", []):
                stack.append(child.removeprefix("IPY_MODEL_"))
        return seen

    def find(self, cell: Cell, model_name: str, **state: Any) -> list[str]:
        """Widgets of ``model_name`` (ButtonModel, DropdownModel …) in ``cell``'s outputs whose state has ``state``."""
        found = []
        for top in cell.widget_ids():
            for comm in self.descendants(top):
                widget = self.widgets[comm]
                if widget.get("_model_name") == model_name and all(widget.get(k) == v for k, v in state.items()):
                    found.append(comm)
        return found

    def html(self, cell: Cell) -> str:
        """The text of every HTML widget in ``cell``'s outputs, in order."""
        return "\n".join(self.widgets[c].get("value", "") for top in cell.widget_ids() for c in self.descendants(top)
                         if self.widgets[c].get("_model_name") in ("HTMLModel", "LabelModel"))

    def click(self, comm_id: str) -> None:
        """A click on a button, as the front end sends it."""
        self.send_custom(comm_id, {"event": "click"})

    def send_custom(self, comm_id: str, content: dict) -> None:
        """A custom message from a widget's view (``model.send(content)``)."""
        self._send_comm(comm_id, {"method": "custom", "content": content})

    def choose(self, comm_id: str, label: str) -> None:
        """A choice in a dropdown, as the front end sends it (the option's index)."""
        index = list(self.widgets[comm_id]["_options_labels"]).index(label)
        self._send_comm(comm_id, {"method": "update", "state": {"index": index}, "buffer_paths": []})

    def open_comm(self, target: str, data: dict) -> str:
        """Open a comm to ``target`` in the kernel, as a front end extension does; its id."""
        comm_id = uuid.uuid4().hex
        self.comms[comm_id] = []
        msg = self.client.session.msg("comm_open", {"comm_id": comm_id, "target_name": target, "data": data})
        self.client.shell_channel.send(msg)
        self._drain(msg["header"]["msg_id"], None)
        return comm_id

    def send_comm(self, comm_id: str, data: dict) -> None:
        """A message on a comm from the front end (not a widget's)."""
        self._send_comm(comm_id, data)

    def _send_comm(self, comm_id: str, data: dict) -> None:
        msg = self.client.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        self.client.shell_channel.send(msg)
        self._drain(msg["header"]["msg_id"], None)
