"""Generated scenarios for the device errors a notebook user meets beside a plain mismatch.

Each scenario is one of five **kinds** — a move whose result is dropped (``x.to(dev)`` as a
statement), a device tensor read as a NumPy array, a DataLoader pinning a dataset that holds
device tensors, the same dataset loaded in worker processes, a random op given a generator of
another device — written in one of several **shapes** (in the cell, in a loop, in a helper
function, in a class, through a library call, after a move whose result is dropped, a list of
tensors handed to a library), met through an **entry point** (a plain cell
explained after the fact, ``%%devcheck``, the Apply fix button; ``%devices`` for a dropped move,
which it finds before anything fails). Names, the device variable and the values are drawn
from the seed. Errors near these kinds that are not device errors, and clean sessions that
look like them, are generated beside them: they must get no device explanation and no finding.

``DEVICE`` and ``DEVTYPE`` stand for the accelerator the run uses (``sim:0``/``sim``, or
``cuda:0``/``cuda``); :mod:`scenario_runner` runs a scenario and checks the printed fix.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from scenarios import DEVICE_NAMES, Scenario

#: The kinds, with the shapes each is written in and the kind of explanation it gets.
KINDS: dict[str, tuple[str, ...]] = {
    "dropped_move": ("cell", "same_cell", "loop", "helper", "class", "chain", "named_method"),
    "host_array": ("cell", "loop", "helper", "class", "library", "dropped_cpu", "list"),
    "pinned_dataset": ("cell", "loop", "helper", "class", "library", "getitem"),
    "worker_dataset": ("cell", "loop", "helper", "class", "getitem"),
    "generator": ("cell", "loop", "helper", "class", "library"),
}
#: What the explanation of each kind says it is (``DeviceError.kind``; a dropped move is a mismatch).
EXPLAINED_AS = {"host_array": "host array", "pinned_dataset": "pinned device tensor",
                "worker_dataset": "device tensor in a worker", "generator": "generator device"}
#: Errors and clean sessions near these kinds.
NEAR = "near"
ENTRIES = ("plain", "devcheck", "button")

MODEL_NAMES = ("model", "net", "clf", "head")
TENSOR_NAMES = ("x", "feats", "inputs", "sample", "emb")
LOADER_NAMES = ("loader", "train_loader", "dl", "batches")
DATASET_NAMES = ("ds", "dataset", "train_ds", "data")
GEN_NAMES = ("g", "gen", "rng")


@dataclass
class _Draft:
    rng: random.Random
    kind: str
    shape: str
    dev: str
    model: str
    setup: list[str] = field(default_factory=list)
    failing: list[str] = field(default_factory=list)
    line: str = ""
    needs: tuple[str, ...] = ()
    kind_of_scenario: str = "device_error"
    devices: frozenset[str] = frozenset()
    decoys: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)


#: Every kind in every shape, in turn: a sample of a few dozen seeds has each of them.
_COMBINATIONS = [(kind, shape) for kind in sorted(KINDS) for shape in KINDS[kind]]
_NEAR_SHAPES = ("numpy_requires_grad", "worker_error", "generator_error", "clean_move", "index_error",
                "host_list_requires_grad")
#: One seed in this many is an error near the kinds, or a clean session that looks like them.
_NEAR_EVERY = 8


def generate_error(seed: int) -> Scenario:
    """The device-error scenario of ``seed`` (the same seed gives the same scenario): the kinds and
    shapes in turn, each entry point in turn within a kind, everything else drawn from the seed."""
    rng = random.Random(10_000_019 * seed + 7)
    turn = seed - seed // _NEAR_EVERY
    if seed % _NEAR_EVERY == _NEAR_EVERY - 1:
        kind, shape = NEAR, _NEAR_SHAPES[(seed // _NEAR_EVERY) % len(_NEAR_SHAPES)]
    else:
        kind, shape = _COMBINATIONS[turn % len(_COMBINATIONS)]
    rounds = turn // len(_COMBINATIONS)  # a combination met again is met through the next entry point
    d = _Draft(rng, kind, shape, dev=rng.choice(DEVICE_NAMES), model=rng.choice(MODEL_NAMES))
    d.setup.append("import torch, torch.nn as nn, torch.nn.functional as F\n"
                   f"torch.manual_seed({rng.randrange(100)})\n{d.dev} = torch.device(\"DEVICE\")\n"
                   f"{d.model} = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to({d.dev})\n")
    {NEAR: _near, "dropped_move": _dropped_move, "host_array": _host_array, "pinned_dataset": _dataset,
     "worker_dataset": _dataset, "generator": _generator}[kind](d)
    _decoys(d)
    if kind == NEAR:
        entry = ("plain", "devcheck")[turn % 2]
    elif kind == "dropped_move" and shape in ("cell", "chain", "named_method"):
        entry = (*ENTRIES, "devices")[(turn + rounds) % 4]
    else:
        entry = ENTRIES[(turn + rounds) % len(ENTRIES)]
    return Scenario(seed=seed, family=shape, bug=kind, entry=entry, setup=tuple(d.setup),
                    failing="\n".join(d.failing) + "\n", kind=d.kind_of_scenario, devices=d.devices, line=d.line,
                    decoys=tuple(d.decoys), after="\n".join(d.after), needs=tuple(sorted(set(d.needs))),
                    error_kind=EXPLAINED_AS.get(kind, ""))


def _renamed(code: str, old: str, new: str) -> str:
    """``code`` with the name ``old`` written as ``new`` (whole words only)."""
    return re.sub(rf"\b{re.escape(old)}\b", new, code)


def _decoys(d: _Draft) -> None:
    """Unrelated tensors on both devices: no explanation or fix may name them."""
    if d.rng.random() < 0.5:
        return
    written = "\n".join(d.setup + d.failing)
    names = [n for n in ("stats", "cache", "old_out", "scratch") if n not in written]
    lines = []
    for name in names[: d.rng.randint(1, 2)]:
        lines.append(f"{name} = torch.zeros({d.rng.randint(2, 6)}{d.rng.choice(('', f', device={d.dev}'))})")
        d.decoys.append(name)
    d.setup.append("\n".join(lines) + "\n")


# -- a move whose result is dropped -----------------------------------------------------------


def _dropped_move(d: _Draft) -> None:
    d.kind_of_scenario = "mismatch"
    d.devices = frozenset({"cpu", "DEVICE"})
    x = d.rng.choice(TENSOR_NAMES)
    move = d.rng.choice((f"{x}.to({d.dev})", f"{x}.to(\"DEVICE\")", f"{x}.to({d.dev}, non_blocking=True)"))
    call = f"out = {d.model}({x})"
    if d.shape == "cell":  # made and moved in an earlier cell, used in the next
        d.setup.append(f"{x} = torch.randn(4, 8)\n{move}\n")
        d.failing = [call]
        d.line = call
    elif d.shape == "same_cell":
        d.setup.append(f"{x} = torch.randn(4, 8)\n")
        d.failing = [move, call, "loss = out.sum()"]
        d.line = call
    elif d.shape == "chain":
        d.setup.append(f"{x} = torch.randn(4, 8, dtype=torch.float64)\n{x}.float().to({d.dev})\n")
        d.failing = [f"out = {d.model}({x}.float())"]
        d.line = d.failing[0]
    elif d.shape == "named_method":  # .cuda() on a GPU, .sim() on the simulated device
        d.setup.append(f"{x} = torch.randn(4, 8)\n{x}.DEVTYPE()\n")
        d.failing = [call]
        d.line = call
    elif d.shape == "loop":
        d.setup.append("from torch.utils.data import DataLoader, TensorDataset\n"
                       "loader = DataLoader(TensorDataset(torch.randn(8, 8), torch.randint(0, 3, (8,))), batch_size=4)\n")
        d.failing = ["for xb, yb in loader:", f"    xb.to({d.dev})", f"    out = {d.model}(xb)",
                     "    loss = F.cross_entropy(out, yb.to(out.device))"]
        d.line = f"out = {d.model}(xb)"
    elif d.shape == "helper":
        d.setup.append(f"def predict(m, batch):\n    batch.to({d.dev})\n    return m(batch)\n")
        d.failing = [f"out = predict({d.model}, torch.randn(2, 8))"]
        d.line = "return m(batch)"
    else:  # class
        d.setup.append("class Runner:\n    def __init__(self, m, device):\n        self.m, self.device = m, device\n\n"
                       "    def step(self, batch):\n        batch.to(self.device)\n        return self.m(batch)\n\n"
                       f"runner = Runner({d.model}, {d.dev})\n")
        d.failing = ["out = runner.step(torch.randn(3, 8))"]
        d.line = "return self.m(batch)"


# -- a device tensor read as a NumPy array ----------------------------------------------------


def _host_array(d: _Draft) -> None:
    z = d.rng.choice(("z", "preds", "scores", "logits"))
    grad = d.rng.random() < 0.6
    made = f"{z} = {d.model}(torch.randn(5, 8, device={d.dev}))" if grad else \
        f"with torch.no_grad():\n    {z} = {d.model}(torch.randn(5, 8, device={d.dev}))"
    d.setup.append("import numpy as np\n" + made + "\n")
    read = d.rng.choice((f"{z}.numpy()", f"{z}.detach().numpy()", f"np.asarray({z})"))
    if d.shape == "cell":
        d.failing = [f"arr = {read}", "total = float(arr.sum())"]
        d.line = d.failing[0]
    elif d.shape == "loop":
        d.setup.append(f"parts = list({z}.unbind(0))\n")
        d.failing = ["rows = []", "for part in parts:", f"    rows.append({_renamed(read, z, 'part')})"]
        d.line = d.failing[-1].strip()
    elif d.shape == "helper":
        d.setup.append(f"def to_array(t):\n    return {_renamed(read, z, 't')}\n")
        d.failing = [f"arr = to_array({z})"]
        d.line = d.failing[0]
    elif d.shape == "list":  # a loss per step kept in a list, then handed to a library
        d.setup.append(f"history = []\nfor step in range(3):\n    history.append({d.model}(torch.randn(2, 8, device={d.dev})).sum()"
                       f"{d.rng.choice(('', '.detach()'))})\n")
        d.failing = [d.rng.choice(("m = np.mean(history)", "arr = np.array(history)", "s = np.std(history, ddof=1)"))]
        if d.rng.random() < 0.4:
            d.needs = ("matplotlib",)
            d.failing = ["import matplotlib", "matplotlib.use('Agg')", "import matplotlib.pyplot as plt",
                         "lines = plt.plot(history)", "plt.close('all')"]
        d.line = next(line for line in d.failing if "history" in line)
    elif d.shape == "dropped_cpu":  # the copy to the host written as a statement: its result is dropped
        d.setup.append(d.rng.choice((f"{z}.cpu()\n", f"{z}.to(\"cpu\")\n")))
        d.failing = [f"arr = {read}", "total = float(arr.sum())"]
        d.line = d.failing[0]
    elif d.shape == "class":
        d.setup.append("class Collector:\n    def __init__(self):\n        self.rows = []\n\n"
                       f"    def add(self, t):\n        self.rows.append({_renamed(read, z, 't')})\n\n"
                       "collector = Collector()\n")
        d.failing = [f"collector.add({z})"]
        d.line = d.failing[0]
    else:
        library = d.rng.choice(("numpy", "pandas", "matplotlib", "sklearn"))
        if library == "numpy":
            d.failing = [f"m = np.mean(np.asarray({z}), axis=0)"]
        elif library == "pandas":
            d.failing = ["import pandas as pd", f"frame = pd.DataFrame({{'a': {z}[:, 0], 'b': {z}[:, 1]}})"]
        elif library == "matplotlib":
            d.failing = ["import matplotlib", "matplotlib.use('Agg')", "import matplotlib.pyplot as plt",
                         f"lines = plt.plot(torch.arange(5), {z}[:, 0])", "plt.close('all')"]
            d.needs = ("matplotlib",)
        else:
            d.needs = ("sklearn",)
            d.setup.append("labels = torch.randint(0, 3, (5,))\n")
            d.failing = ["from sklearn.metrics import accuracy_score",
                         f"acc = accuracy_score(labels, {z}.argmax(1))"]
        d.line = next(line for line in d.failing if z in line)


# -- a DataLoader over a dataset on the device --------------------------------------------------


def _dataset(d: _Draft) -> None:
    loader, ds = d.rng.choice(LOADER_NAMES), d.rng.choice(DATASET_NAMES)
    pinned = d.kind == "pinned_dataset"
    options = "pin_memory=True" if pinned else d.rng.choice(("num_workers=2", "num_workers=2, persistent_workers=True",
                                                             "num_workers=1"))
    if pinned and d.rng.random() < 0.3:
        options = "shuffle=True, " + options
    d.setup.append("from torch.utils.data import DataLoader, Dataset, TensorDataset\n")
    if d.shape == "class":  # the tutorial pattern: the data moves to the device in __init__
        d.setup.append(f"class Points(Dataset):\n    def __init__(self, n, device):\n"
                       f"        self.X = torch.randn(n, 8).to(device)\n"
                       f"        self.y = torch.randint(0, 3, (n,), device=device)\n\n"
                       f"    def __len__(self):\n        return len(self.X)\n\n"
                       f"    def __getitem__(self, i):\n        return self.X[i], self.y[i]\n\n"
                       f"{ds} = Points(12, {d.dev})\n")
    elif d.shape == "getitem":  # the data stays on the host; each item is moved to the device as it is loaded
        d.setup.append(f"class Rows(Dataset):\n    def __init__(self, n, device):\n"
                       f"        self.X, self.y = torch.randn(n, 8), torch.randint(0, 3, (n,))\n"
                       f"        self.device = device\n\n"
                       f"    def __len__(self):\n        return len(self.X)\n\n"
                       f"    def __getitem__(self, i):\n        return self.X[i].to(self.device), self.y[i].to(self.device)\n\n"
                       f"{ds} = Rows(12, {d.dev})\n")
    else:
        d.setup.append(f"{ds} = TensorDataset(torch.randn(12, 8).to({d.dev}), "
                       f"torch.randint(0, 3, (12,), device={d.dev}))\n")
    if d.shape == "helper":
        d.setup.append(f"def make_loader(data):\n    return DataLoader(data, batch_size=4, {options})\n\n"
                       f"{loader} = make_loader({ds})\n")
    elif d.shape == "library":
        d.setup.append(f"{loader} = DataLoader({ds}, batch_size=4,\n"
                       f"                {options})\n")
    else:
        d.setup.append(f"{loader} = DataLoader({ds}, batch_size=4, {options})\n")
    body = [f"    out = {d.model}(xb)", "    loss = F.cross_entropy(out, yb)"]
    if d.shape == "loop":
        d.failing = ["for epoch in range(2):", f"    for xb, yb in {loader}:", *("    " + b for b in body)]
        d.line = f"for xb, yb in {loader}:"
    elif d.shape == "library":
        d.failing = [f"xb, yb = next(iter({loader}))", f"out = {d.model}(xb)"]
        d.line = d.failing[0]
    else:
        d.failing = [f"for xb, yb in {loader}:", *body]
        d.line = d.failing[0]


# -- a generator of another device --------------------------------------------------------------


def _generator(d: _Draft) -> None:
    g = d.rng.choice(GEN_NAMES)
    default = d.rng.random() < 0.6 or d.shape == "library"
    where = "" if default else f", device={d.dev}"
    if default:
        d.setup.append(f"torch.set_default_device({d.dev})\n")
    d.setup.append(f"{g} = torch.Generator().manual_seed({d.rng.randrange(1000)})\n")
    draw = d.rng.choice((f"torch.randperm(12, generator={g}{where})", f"torch.randn(12, 8, generator={g}{where})",
                         f"torch.randint(0, 10, (12,), generator={g}{where})"))
    if d.shape == "cell":
        d.failing = [f"picked = {draw}", "total = picked.float().sum()"]
        d.line = d.failing[0]
    elif d.shape == "loop":
        d.failing = ["draws = []", "for step in range(3):", f"    draws.append({draw})"]
        d.line = d.failing[-1].strip()
    elif d.shape == "helper":
        d.setup.append(f"def sample(gen):\n    return {_renamed(draw, g, 'gen')}\n")
        d.failing = [f"picked = sample({g})"]
        d.line = d.failing[0]
    elif d.shape == "class":
        d.setup.append(f"class Sampler:\n    def __init__(self, gen):\n        self.gen = gen\n\n"
                       f"    def draw(self):\n        return {_renamed(draw, g, 'self.gen')}\n\n"
                       f"sampler = Sampler({g})\n")
        d.failing = ["picked = sampler.draw()"]
        d.line = d.failing[0]
    else:  # a DataLoader that shuffles under the default device: its fix is a generator of the device
        loader = d.rng.choice(LOADER_NAMES)
        d.needs = ("device_generator",)
        d.setup.append("from torch.utils.data import DataLoader, TensorDataset\n"
                       f"{loader} = DataLoader(TensorDataset(torch.randn(12, 8), torch.randint(0, 3, (12,))), "
                       "batch_size=4, shuffle=True)\n")
        d.failing = [f"for xb, yb in {loader}:", f"    out = {d.model}(xb)"]
        d.line = d.failing[0]


# -- near them: not device errors, and clean sessions -------------------------------------------


def _near(d: _Draft) -> None:
    d.kind_of_scenario = "other"
    if d.shape == "numpy_requires_grad":  # a host tensor that requires grad: a NumPy error, not a device one
        d.setup.append(f"w = torch.randn(4, requires_grad=True)\nhost_copy = torch.zeros(3, device={d.dev})\n")
        d.failing = ["arr = w.numpy()"]
    elif d.shape == "worker_error":  # a worker fails for a reason of its own, the model on the device
        d.setup.append("from torch.utils.data import DataLoader, Dataset\n"
                       "class Broken(Dataset):\n    def __len__(self):\n        return 8\n\n"
                       "    def __getitem__(self, i):\n        raise KeyError(f'no row {i}')\n\n"
                       "loader = DataLoader(Broken(), batch_size=4, num_workers=1, pin_memory=True)\n")
        d.failing = ["for xb in loader:", f"    out = {d.model}(xb)"]
    elif d.shape == "generator_error":  # a random op refused for its arguments
        d.setup.append("g = torch.Generator().manual_seed(0)\n")
        d.failing = ["perm = torch.randperm(-3, generator=g)"]
    elif d.shape == "host_list_requires_grad":  # host losses that require grad, handed to NumPy: not a device error
        d.setup.append("import numpy as np\nw = torch.randn(3, requires_grad=True)\n"
                       f"history = [(w * step).sum() for step in range(3)]\nkept = torch.ones(2, device={d.dev})\n")
        d.failing = ["m = np.mean(history)"]
    elif d.shape == "index_error":
        d.setup.append(f"table = torch.arange(6, device={d.dev})\n")
        d.failing = ["row = table[99]"]
    else:  # a move dropped where the tensor is on the device already: nothing to say
        d.kind_of_scenario = "clean"
        d.setup.append(f"x = torch.randn(4, 8, device={d.dev})\nx.to({d.dev})\n")
        d.failing = [f"out = {d.model}(x)", "loss = out.sum()"]
