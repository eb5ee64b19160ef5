"""Gradients that cross devices in a backward pass, counted while ``%%devcheck`` runs.

A ``.to()`` (``.cuda()``, ``.cpu()``) in the forward pass is a copy node in the autograd
graph; the backward pass copies the gradient back through it, inside autograd, where no
torch-function mode sees it. A hook on each such node counts it:

* a copy the check saw in the forward pass gets its hook then;
* a graph made before the check (the forward in an earlier cell, ``loss.backward()`` in
  this one) is looked through when ``.backward()`` is called, for the copy nodes it holds.

Every hook is removed when the check ends: the user's graph is left as it was.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable

from ..runtime import tensor_getters

#: The autograd node of a copy between devices (``_to_copy``: ``.to()``, ``.cuda()``, ``.cpu()``).
_COPY_NODE = "ToCopyBackward0"
#: Graph nodes looked at per ``.backward()`` for copies made before the check.
GRAPH_NODES = 100_000

#: ``count(source device, destination device, bytes)`` of a gradient copied between devices.
Count = Callable[[Any, Any, int], None]


class GradientCopies:
    """The hooks of one check; ``count`` is called for each gradient copied between devices."""

    def __init__(self, count: Count, failed: Callable[[], None]):
        self._count, self._failed = count, failed
        self._handles: list[Any] = []
        #: The copy nodes hooked, kept alive (and so their ids unique) while the check runs.
        self._nodes: dict[int, Any] = {}

    def forward_copy(self, node: Any) -> None:
        """Hook the copy node of a ``.to()`` the check saw being made."""
        if node is not None and id(node) not in self._nodes:
            self._hook(node)

    def before_backward(self, tensor: Any) -> None:
        """Hook the copy nodes of ``tensor``'s graph that no forward seen by the check made."""
        try:
            root = tensor_getters.grad_fn(tensor) if tensor_getters.is_tensor(tensor) else None
        except Exception:  # no graph to read
            return
        # Nodes seen are kept alive during the walk: a node's Python object can be made afresh
        # for each next_functions read, and a freed one's id can come back as another's.
        stack, seen = ([root] if root is not None else []), {}
        while stack and len(seen) < GRAPH_NODES:
            node = stack.pop()
            if id(node) in seen:
                continue
            seen[id(node)] = node
            if type(node).__name__ == _COPY_NODE and id(node) not in self._nodes:
                self._hook(node)
            stack.extend(child for child, _ in node.next_functions if child is not None)

    def remove(self) -> None:
        for handle in self._handles:
            with contextlib.suppress(Exception):
                handle.remove()
        self._handles.clear()
        self._nodes.clear()

    def _hook(self, node: Any) -> None:
        def after_node(grad_inputs: tuple, grad_outputs: tuple) -> None:
            try:
                into = grad_inputs[0] if grad_inputs else None
                came = grad_outputs[0] if grad_outputs else None
                if tensor_getters.is_tensor(into) and tensor_getters.is_tensor(came) and tensor_getters.device(into) != tensor_getters.device(came):
                    self._count(tensor_getters.device(came), tensor_getters.device(into), int(tensor_getters.nbytes(came)))
            except Exception:  # counted or not, the backward pass goes on
                self._failed()

        self._nodes[id(node)] = node
        self._handles.append(node.register_hook(after_node))
