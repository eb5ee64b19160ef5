"""Fix-corpus cases (``fix_cases.py``) about objects ``model.to()`` never reaches: each a mapping of
:class:`fix_cases.Case`'s fields, made into cases there."""

from __future__ import annotations

OBJECT_CASES: list[dict] = [
    dict(
        name="sampler-table-left-on-the-host",
        setup=(
            "class Sampler:\n"
            "    def __init__(self, steps, device):\n"
            "        betas = torch.linspace(1e-4, 0.02, steps)\n"
            "        self.betas = betas.to(device)\n"
            "        self.alphas_cumprod = torch.cumprod(1 - betas, 0)\n"
            "\n"
            "    def q_sample(self, x0, t, noise):\n"
            "        a = self.alphas_cumprod[t].view(-1, 1)\n"
            "        return a.sqrt() * x0 + (1 - a).sqrt() * noise * self.betas[t].view(-1, 1)\n"
            "\n"
            "model = nn.Linear(4, 4).to(dev)\n"
            "sampler = Sampler(10, dev)\n"
            "x0 = torch.randn(2, 4, device=dev)\n"
            "t = torch.tensor([1, 3], device=dev)\n"),
        failing="y = model(sampler.q_sample(x0, t, torch.randn_like(x0)))\n",
        sources=("host-table-in-object",),
        expect=("code", "edits", "action"),
        after="assert sampler.alphas_cumprod.device == dev and sampler.betas.device == dev",
    ),
]
