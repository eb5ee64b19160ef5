"""The simulated device agrees with the CPU on PyTorch's own op samples (a fixed subset).

Every seventh op of ``op_db`` (in its own order, so the subset is the same on every run
and moves with PyTorch's list), in float32 and in one other dtype the op supports, one
sample each, outputs and gradients. ``benchmarks/sim_opinfo.py`` runs all of them.
"""

from __future__ import annotations

import opinfo_sim
import pytest
import torch

# Differences the README lists, by op name: the simulated device holds dense tensors only; and where
# the CPU has a fused kernel (which one depends on the torch version), the device runs PyTorch's
# composite reference, which rounds differently in the last bits.
KNOWN = {"to_sparse", "sparse.mm", "sparse.sampled_addmm",
         "nn.functional.mish", "prod", "nn.functional.linear_cross_entropy",
         "nn.functional.scaled_dot_product_attention"}
OTHER_DTYPES = (torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64)
STRIDE = 7


def _subset() -> list[tuple]:
    cases = []
    for i, op in enumerate(opinfo_sim.op_db()):
        if i % STRIDE or op.name in KNOWN:
            continue
        supported = opinfo_sim.dtypes_of(op)
        for dtype in [torch.float32] + [d for d in OTHER_DTYPES if d in supported][(i // STRIDE) % 2:][:1]:
            if dtype in supported:
                cases.append((op, dtype))
    return cases


CASES = _subset()


def test_the_subset_covers_a_fair_share_of_op_db():
    assert len({op.name for op, _ in CASES}) >= len(opinfo_sim.op_db()) // STRIDE - len(KNOWN)
    assert len({dtype for _, dtype in CASES}) >= 4


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}.{c[0].variant_test_name}-{c[1]}".replace("torch.", ""))
def test_op_samples_agree_with_the_host(sim, case):
    op, dtype = case
    differences = [o for o in opinfo_sim.compare_op(op, dtype, sim, samples=1) if not o.agree]
    assert not differences, [(o.part, o.reason) for o in differences]
