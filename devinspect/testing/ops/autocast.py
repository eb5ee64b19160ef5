"""``torch.autocast("sim")`` casts as CUDA's autocast does.

PyTorch ships autocast kernels for CUDA, CPU, XPU and a few more; a PrivateUse1 backend
gets none, so every op under ``torch.autocast("sim")`` failed. Here the
``AutocastPrivateUse1`` key gets kernels by CUDA's published op lists (see
"Autocast Op Reference" in PyTorch's AMP documentation):

- ops that run in the autocast dtype (matmuls, convolutions, linear, attention, RNN cells)
  cast their floating-point inputs on the device to it;
- ops that need the range of float32 (exp, log, pow, norms, losses, softmax…) cast to float32;
- ops with an optional ``dtype`` (softmax, sum, cumsum…) are asked for float32 output;
- ops that mix inputs (cat, stack, addcmul…) cast to the widest floating type among them;
- every other op falls through, and autocast stays on inside it, as on CUDA.

As on CUDA, float64 inputs and tensors on other devices are never cast, the listed op runs
with autocast off inside it, and ``binary_cross_entropy`` is refused.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_map

from ..identity import DEVICE_TYPE

_KEY = torch._C.DispatchKey.AutocastPrivateUse1

LOWER_PRECISION = frozenset({
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
})
FLOAT32 = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm",
    "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
})
FLOAT32_OUTPUT = frozenset({
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm", "linalg_matrix_norm", "sum",
    "_softmax", "_log_softmax",
})
PROMOTE = frozenset({
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put", "tensordot",
    "scatter_add", "stack", "cat", "index_copy",
})
REFUSED = frozenset({"binary_cross_entropy"})

_library: Any = None


def install() -> None:
    """Register the kernels (once per process): a fallthrough for every op, and a kernel for
    each overload of the listed ones."""
    global _library
    if _library is not None:
        return
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, "AutocastPrivateUse1")
    kernels = torch.library.Library("aten", "IMPL")
    for name in LOWER_PRECISION | FLOAT32 | FLOAT32_OUTPUT | PROMOTE | REFUSED:
        packet = getattr(torch.ops.aten, name, None)
        if packet is None:  # not in this torch
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            if any(a.is_out for a in op._schema.arguments):
                continue
            kernels.impl(op, _kernel_for(op), "AutocastPrivateUse1")
    _library = (fallthrough, kernels)


def _kernel_for(op: Any) -> Any:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        return _autocast_kernel(op, *args, **kwargs)

    return kernel


def _eligible(x: Any) -> bool:
    return (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype is not torch.float64
            and x.device.type == DEVICE_TYPE)


def _cast_to(dtype: torch.dtype) -> Any:
    return lambda x: x.to(dtype) if _eligible(x) and x.dtype is not dtype else x


def _widest(args: tuple, kwargs: dict) -> torch.dtype | None:
    found: list[torch.dtype] = []
    tree_map(lambda x: found.append(x.dtype) if _eligible(x) else None, (args, kwargs))
    if not found:
        return None
    widest = found[0]
    for dtype in found[1:]:
        widest = torch.promote_types(widest, dtype)
    return widest


def _autocast_kernel(op: Any, *args: Any, **kwargs: Any) -> Any:
    name = op._schema.name.split("::")[-1]
    if name in REFUSED:
        raise RuntimeError(
            "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
            "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
            "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
            "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
            "safe to autocast."
        )
    if name in LOWER_PRECISION:
        cast = _cast_to(torch.get_autocast_dtype(DEVICE_TYPE))
    elif name in FLOAT32:
        cast = _cast_to(torch.float32)
    elif name in FLOAT32_OUTPUT and any(a.name == "dtype" for a in op._schema.arguments):
        # dtype may come by position (log_softmax(x, dim, None) from cross_entropy) or by name.
        at = next(i for i, a in enumerate(op._schema.arguments) if a.name == "dtype")
        if any(_eligible(x) for x in args[:1]):
            if at < len(args):
                if args[at] is None:
                    args = (*args[:at], torch.float32, *args[at + 1:])
            elif kwargs.get("dtype") is None:
                kwargs = {**kwargs, "dtype": torch.float32}
        return _without_autocast(op, args, kwargs)
    else:
        widest = _widest(args, kwargs)
        cast = _cast_to(widest) if widest is not None else (lambda x: x)
    return _without_autocast(op, tree_map(cast, args), tree_map(cast, kwargs))


def _without_autocast(op: Any, args: tuple, kwargs: dict) -> Any:
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(_KEY)):
        return op(*args, **kwargs)
