"""Writes quickstart.ipynb (outputs empty); edit here, then run this script."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

cells = [
    new_markdown_cell(
        "# devinspect quickstart\n\n"
        "`%devices` lists every tensor in your session with its device, dtype, shape and bytes, "
        "and says what looks wrong. It reads only: nothing is moved, copied or synchronised, "
        "and CUDA is never initialised by it.\n\n"
        "Without a GPU this notebook uses devinspect's simulated accelerator (`sim:0`), "
        "which behaves like one through PyTorch's dispatcher."
    ),
    new_code_cell("%load_ext devinspect"),
    new_code_cell(
        "import torch\n"
        "from torch import nn\n"
        "from devinspect import testing\n\n"
        "device = torch.device(\"cuda\") if torch.cuda.is_available() else testing.enable()\n"
        "device"
    ),
    new_markdown_cell(
        "A small model with two classic device bugs: a positional encoding stored as a plain "
        "attribute (so `.to()` leaves it behind), and an optimizer whose state was loaded before "
        "the model moved."
    ),
    new_code_cell(
        "class PositionalEncoding(nn.Module):\n"
        "    def __init__(self, dim, length=64):\n"
        "        super().__init__()\n"
        "        self.pe = torch.randn(length, dim)  # should be self.register_buffer(\"pe\", ...)\n\n"
        "    def forward(self, x):\n"
        "        return x + self.pe[: x.shape[1]]\n\n"
        "class Tiny(nn.Module):\n"
        "    def __init__(self, dim=32):\n"
        "        super().__init__()\n"
        "        self.embed = nn.Embedding(100, dim)\n"
        "        self.pos = PositionalEncoding(dim)\n"
        "        self.head = nn.Linear(dim, 2)\n\n"
        "    def forward(self, ids):\n"
        "        return self.head(self.pos(self.embed(ids))).mean(1)\n\n"
        "model = Tiny()\n"
        "opt = torch.optim.AdamW(model.parameters())\n"
        "model(torch.randint(0, 100, (4, 8))).sum().backward()\n"
        "opt.step()\n\n"
        "model.to(device)  # moves the parameters; the optimizer state stays on the CPU\n"
        "batch = {\"ids\": torch.randint(0, 100, (4, 8)), \"labels\": torch.randint(0, 2, (4,))}"
    ),
    new_code_cell("%devices"),
    new_markdown_cell("Only the findings, each with its fix as code:"),
    new_code_cell("%devices --findings"),
    new_markdown_cell("Apply the fixes the findings suggest, then look again:"),
    new_code_cell(
        "model.pos.register_buffer(\"pe\", model.pos.__dict__.pop(\"pe\"))\n"
        "model.to(device)\n"
        "batch = {k: v.to(device) for k, v in batch.items()}\n"
        "for p, state in opt.state.items():\n"
        "    for k, v in state.items():\n"
        "        if torch.is_tensor(v) and v.dim() > 0:\n"
        "            state[k] = v.to(p.device)\n"
        "%devices --findings"
    ),
    new_markdown_cell("Keep the result to work with it as data:"),
    new_code_cell(
        "r = %devices\n"
        "r.frame[[\"name\", \"kind\", \"device\", \"dtype\", \"shape\", \"storage_bytes\", \"alias_of\"]].head(8)"
    ),
    new_code_cell("%devices opt --kind optimizer_state --sort bytes"),
    new_code_cell("%devices --device {device} --sort bytes -n 5".replace("{device}", "$device")),
    new_markdown_cell(
        "## Where is the memory? `%gpumem`\n\n"
        "Per device: what PyTorch's allocator has allocated and reserved, peaks, what "
        "`empty_cache()` would release, and what the driver sees, in a table that adds up from "
        "the tensors you named to the device's total. Without a GPU it shows this process's "
        "memory. In JupyterLab the buttons act (empty the cache, reset peaks, collect garbage, "
        "release the tensors only the output history holds) and report what they freed."
    ),
    new_code_cell("%gpumem"),
    new_markdown_cell(
        "`--track` records every following cell: memory before and after, and the peak while it ran "
        "(from the allocator's peak counters, reset before each cell; no polling thread)."
    ),
    new_code_cell("%gpumem --track"),
    new_code_cell("activations = [torch.randn(256, 1024, device=device) for _ in range(16)]"),
    new_code_cell("del activations"),
    new_code_cell("%gpumem --untrack\n%gpumem --history"),
    new_code_cell(
        "snap = %gpumem -o --no-tensors\n"
        "snap.frame[[\"device\", \"state\", \"allocated_bytes\", \"reserved_bytes\", \"process_bytes\"]]"
    ),
    new_markdown_cell("The same core works from plain Python, without IPython:"),
    new_code_cell(
        "import devinspect\n"
        "result = devinspect.scan(globals())\n"
        "[(d.device, d.tensors, d.storage_bytes) for d in result.devices]"
    ),
    new_code_cell(
        "from devinspect import memory\n"
        "memory.snapshot(globals()).reconciliation_frame.head(6)"
    ),
]

notebook = new_notebook(cells=cells, metadata={
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"},
})
nbformat.write(notebook, Path(__file__).with_name("quickstart.ipynb"))
