"""``nn.LSTM``, ``nn.GRU`` and their cells on the simulated device.

On an accelerator (CUDA, or any PrivateUse1 device) PyTorch's recurrent layers compute each
step with one fused cell op, ``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell``, whose only
kernels are CUDA's, and whose backward ops are CUDA kernels too. For the simulated device the
fused cells are given an autograd kernel that computes the cell from the ops a CPU's cell
uses (PyTorch's ``LSTMCell``/``GRUCell`` in RNN.cpp), so that autograd differentiates those:
the same numbers as on the CPU, and no backward kernel needed. The third output (the
workspace a CUDA backward reads) holds the activated gates, as CUDA's does.
"""

from __future__ import annotations

import torch

_installed = False


def _with_bias(gates: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return gates if bias is None else gates + bias


def lstm_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, cx: torch.Tensor,
              input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> tuple:
    """(hy, cy, workspace) of one LSTM step from its gates' pre-activations, as CUDA's fused cell."""
    gates = _with_bias(hidden_gates, hidden_bias) + _with_bias(input_gates, input_bias)
    ingate, forgetgate, cellgate, outgate = gates.chunk(4, 1)
    ingate, forgetgate, cellgate, outgate = ingate.sigmoid(), forgetgate.sigmoid(), cellgate.tanh(), outgate.sigmoid()
    cy = forgetgate * cx + ingate * cellgate
    hy = outgate * cy.tanh()
    return hy, cy, torch.cat([ingate, forgetgate, cellgate, outgate], 1)


def gru_cell(input_gates: torch.Tensor, hidden_gates: torch.Tensor, hx: torch.Tensor,
             input_bias: torch.Tensor | None = None, hidden_bias: torch.Tensor | None = None) -> tuple:
    """(hy, workspace) of one GRU step from its gates' pre-activations, as CUDA's fused cell."""
    input_reset, input_update, input_new = _with_bias(input_gates, input_bias).chunk(3, 1)
    hidden_reset, hidden_update, hidden_new = _with_bias(hidden_gates, hidden_bias).chunk(3, 1)
    reset = (hidden_reset + input_reset).sigmoid()
    update = (hidden_update + input_update).sigmoid()
    new = (input_new + hidden_new * reset).tanh()
    hy = (hx - new) * update + new
    return hy, torch.cat([reset, update, new, hx, hidden_new], 1)


def install() -> None:
    """Register the cells for the simulated device's autograd key (once per process)."""
    global _installed
    if _installed:
        return
    for op, cell in (("aten::_thnn_fused_lstm_cell", lstm_cell), ("aten::_thnn_fused_gru_cell", gru_cell)):
        torch.library.impl(op, "AutogradPrivateUse1")(cell)
    _installed = True
