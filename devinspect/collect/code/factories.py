"""The torch functions that make a tensor: on the device their ``device=`` names, else the default."""

from __future__ import annotations

#: ``torch.<factory>(…)`` calls that make a tensor on the device their ``device=`` names, else the default.
FACTORIES = frozenset({
    "ones", "zeros", "empty", "full", "rand", "randn", "randint", "randperm", "arange", "linspace", "logspace",
    "eye", "tensor", "as_tensor", "asarray", "scalar_tensor", "normal", "bernoulli_", "tril_indices", "triu_indices",
    "empty_strided", "sparse_coo_tensor", "sparse_csr_tensor", "sparse_compressed_tensor",
    # The signal windows an STFT or a filter multiplies by: made on the host unless told.
    "hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window",
})
#: ``torch.<factory>_like(t)`` calls: on ``t``'s device unless ``device=`` says otherwise.
LIKE_FACTORIES = frozenset({"ones_like", "zeros_like", "empty_like", "full_like", "rand_like", "randn_like",
                            "randint_like"})
