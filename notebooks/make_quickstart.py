"""Writes quickstart.ipynb (outputs empty); edit here, then run this script."""

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def failing(source: str):
    """A cell that is meant to fail: Run All goes on past it (the raises-exception tag)."""
    cell = new_code_cell(source)
    cell.metadata["tags"] = ["raises-exception"]
    return cell


cells = [
    new_markdown_cell(
        "# devinspect quickstart\n\n"
        "Three magics for PyTorch in a notebook:\n\n"
        "* `%devices`: every tensor in your session, where it is, and what looks wrong, with the fix;\n"
        "* `%%devcheck`: runs a cell, names the variables behind a device error, and counts the copies "
        "and host syncs each line makes;\n"
        "* `%gpumem`: where the accelerator memory is, from your tensors to the device's total.\n\n"
        "Without a GPU this notebook uses devinspect's simulated accelerator (`sim:0`), which goes "
        "through PyTorch's dispatcher as a GPU does."
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
        "## What is where: `%devices`\n\n"
        "A small model with three classic device bugs: a positional encoding kept as a plain "
        "attribute (so `.to()` leaves it behind), an optimizer whose state stayed on the CPU when the "
        "model moved, and a batch that was never moved."
    ),
    new_code_cell(
        "class PositionalEncoding(nn.Module):\n"
        "    def __init__(self, dim, length=64):\n"
        "        super().__init__()\n"
        "        self.pe = torch.randn(length, dim)  # a plain attribute, not a buffer\n\n"
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
    new_markdown_cell(
        "In JupyterLab this is a live view: sort and filter the table (filter with words such as "
        "`device:cpu` or `kind:parameter`), open the module tree, move a tensor or a module with "
        "**Move to ▾**, and press **Apply fix** next to a finding. Every fix is also printed as code "
        "that runs as printed, and as the edit to make in your own class."
    ),
    new_code_cell("%devices"),
    new_markdown_cell(
        "## Why did it fail: `%%devcheck`\n\n"
        "Run a cell under the check. When it fails with a device mismatch, the report names the "
        "inputs as you know them and prints the fix once; in JupyterLab **Apply fix** carries it out "
        "and **Re-run cell** runs the cell again. The cell still fails as it would without the check, "
        "so \"Run All\" stops on it (this one is tagged to let the notebook go on)."
    ),
    failing("%%devcheck -v report\nlogits = model(batch[\"ids\"].to(device))"),
    new_markdown_cell(
        "Here is what **Apply fix** does (`devinspect.actions` carries out the fix's action, all or "
        "nothing, and says how many bytes it moved):"
    ),
    new_code_cell(
        "from devinspect import actions\n"
        "if report.mismatch is None:   # Apply fix and Re-run cell above fixed it already\n"
        "    print(\"fixed: the cell above ran\")\n"
        "else:\n"
        "    print(actions.apply_fix(globals(), report.mismatch.fix.action, displayhook=get_ipython().displayhook))"
    ),
    new_markdown_cell("The same cell now runs. The check counts the copies between host and device, and the "
                      "times the host waits for the device, on each line:"),
    new_code_cell(
        "%%devcheck\n"
        "logits = model(batch[\"ids\"].to(device))\n"
        "labels = batch[\"labels\"].to(device)\n"
        "for step in range(12):\n"
        "    loss = nn.functional.cross_entropy(logits, labels)\n"
        "    print(f\"{step}: {loss.item():.3f}\", end=\" \")   # a host sync on every step\n"
        "host = logits.detach().cpu() * 2\n"
        "back = host.to(device)                              # data that left the device comes back"
    ),
    new_markdown_cell("The findings left: apply each fix from the view above, or run them by hand as printed:"),
    new_code_cell("%devices --findings"),
    new_code_cell(
        "batch = {k: v.to(device) for k, v in batch.items()}\n"
        "for p, state in opt.state.items():\n"
        "    for k, v in state.items():\n"
        "        if torch.is_tensor(v) and v.device != p.device and not (v.dim() == 0 and v.device.type == \"cpu\"):\n"
        "            state[k] = v.to(p.device)\n"
        "%devices --findings"
    ),
    new_markdown_cell("Keep a result to work with it as data:"),
    new_code_cell(
        "r = %devices\n"
        "r.frame[[\"name\", \"kind\", \"device\", \"shape\", \"storage_bytes\"]].head(8)"
    ),
    new_code_cell("%devices opt --kind optimizer_state --sort bytes"),
    new_markdown_cell(
        "## Where is the memory: `%gpumem`\n\n"
        "Per device: what PyTorch's allocator has allocated and reserved, peaks, what "
        "`empty_cache()` would release, and what the driver sees, in a table that adds up from "
        "the tensors you named to the device's total. In JupyterLab the buttons act (empty the "
        "cache, reset peaks, collect garbage, release the tensors only the output history holds) "
        "and report what they freed."
    ),
    new_code_cell("%gpumem"),
    new_markdown_cell(
        "`--track` records every following cell: memory before and after, and the peak while it ran "
        "(from the allocator's peak counters, reset before each cell; no polling thread). "
        "`--history` shows the table and a plot."
    ),
    new_code_cell("%gpumem --track"),
    new_code_cell("activations = [torch.randn(256, 1024, device=device) for _ in range(16)]"),
    new_code_cell("del activations"),
    new_code_cell("%gpumem --untrack\n%gpumem --history"),
    new_code_cell(
        "snap = %gpumem -o --no-tensors\n"
        "snap.frame[[\"device\", \"state\", \"allocated_bytes\", \"reserved_bytes\", \"process_bytes\"]]"
    ),
    new_markdown_cell(
        "## Memory by line: `%%gpumem`\n\n"
        "Which line ate the memory, and what still holds it? `%%gpumem` runs the cell as a plain cell "
        "would (no `empty_cache`, sync or allocation added) and shows, for each line, allocated memory "
        "before and after, the peak inside it, reserved before and after, and the tensors it made that "
        "are still alive, by your names. Lines in loops add up; `-f NAME` profiles the lines of a "
        "function (or a module's `forward`) too. Last comes the cell's peak: the line, what was live, "
        "and the peak without the largest temporary. In JupyterLab a step plot and the `%gpumem` "
        "buttons follow."
    ),
    new_code_cell(
        "mlp = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(device)\n\n"
        "def train_step(x):\n"
        "    out = mlp(x)\n"
        "    loss = out.pow(2).mean()\n"
        "    loss.backward()\n"
        "    return loss.detach()"
    ),
    new_code_cell(
        "%%gpumem -f train_step\n"
        "x = torch.randn(512, 1024, device=device)\n"
        "losses = [train_step(x) for _ in range(3)]\n"
        "mlp.zero_grad(set_to_none=True)"
    ),
    new_markdown_cell(
        "## After the fact: errors explained\n\n"
        "Cells fail without `%%devcheck` too. Once loaded, devinspect reads the traceback of every cell "
        "that fails with a device mismatch or an out-of-memory error and explains it under the "
        "traceback: the tensors by your names, the fix, and in JupyterLab **Apply fix**. A cell that "
        "succeeds, or fails for another reason, costs a few microseconds and shows nothing. "
        "(`%config DevInspect.explain_errors = False` turns it off; `%devcheck --last` or "
        "`devinspect.explain()` explains the last error on demand.)"
    ),
    failing(
        "features = torch.randn(4, 32)   # torch.randn makes it on the CPU\n"
        "scores = model.head(features)"
    ),
    new_markdown_cell(
        "The fix edits the line that made `features` on the host, since this cell makes it: moving it now would "
        "not last, as the cell makes it again on every run. In JupyterLab **Apply fix** makes the edit in the cell "
        "and **Re-run cell** runs it. The cell, as the fix edits it:"
    ),
    new_code_cell(
        "features = torch.randn(4, 32, device=device)   # torch.randn makes it on the CPU\n"
        "scores = model.head(features)\n"
        "scores.shape"
    ),
    new_markdown_cell(
        "### Out of memory: what was alive\n\n"
        "The simulated device has no limit until you give it one: `testing.enable(memory=\"256MiB\")` makes "
        "it run out as a small card would, with CUDA's error and CUDA's allocator rules (on a GPU "
        "the cell below asks for more than the card has)."
    ),
    new_code_cell(
        "if device.type == \"cuda\":\n"
        "    capacity = torch.cuda.mem_get_info()[1]\n"
        "else:\n"
        "    testing.enable(memory=\"256MiB\")\n"
        "    capacity = 256 << 20\n"
        "cache = [torch.randn(1024, 1024, device=device) for _ in range(16)]   # 64 MiB, kept by a name\n\n"
        "def step(x):\n"
        "    hidden = x @ x.T                                   # 4 MiB more\n"
        "    return hidden.repeat(capacity // hidden.nbytes, 1)  # as much as the whole device"
    ),
    failing("out = step(cache[0])"),
    new_markdown_cell(
        "What failed, what was alive, and what the last error's traceback still holds: after an "
        "exception in a notebook its frames keep their tensors (`hidden` above) until the next "
        "error. **Release history** lets them go, with the tensors only `Out` holds. "
        "`%devices --why` shows every path that keeps a tensor alive, here `cache[0]` is also the "
        "traceback's `x`:"
    ),
    new_code_cell("%devices --why cache[0]"),
    new_code_cell(
        "import devinspect\n"
        "devinspect.release_history()"
    ),
    new_code_cell(
        "del cache\n"
        "if device.type != \"cuda\":\n"
        "    testing.enable(memory=None)   # no limit again\n"
        "%gpumem --no-tensors"
    ),
    new_markdown_cell("The same core works from plain Python, without IPython:"),
    new_code_cell(
        "import devinspect\n"
        "result = devinspect.scan(globals())\n"
        "[(d.device, d.tensors, d.storage_bytes) for d in result.devices]"
    ),
    new_code_cell(
        "with devinspect.check() as c:\n"
        "    model(batch[\"ids\"]).sum().item()\n"
        "c.report.totals"
    ),
]

# Ids that stay the same from one run of this script to the next (only an edited cell changes).
for number, cell in enumerate(cells):
    cell.id = f"{cell.cell_type}-{number}"


def kernel_metadata() -> dict:
    """The kernelspec and language_info JupyterLab writes when it opens the notebook with the
    python3 kernel: the same values, so the notebook opens unmodified (with a Python of another
    version JupyterLab still updates language_info's version)."""
    from ipykernel.ipkernel import IPythonKernel
    from jupyter_client.kernelspec import KernelSpecManager

    spec = KernelSpecManager().get_kernel_spec("python3")
    return {"kernelspec": {"name": "python3", "display_name": spec.display_name, "language": spec.language},
            "language_info": dict(IPythonKernel.language_info)}


notebook = new_notebook(cells=cells, metadata=kernel_metadata())
nbformat.write(notebook, Path(__file__).with_name("quickstart.ipynb"))
