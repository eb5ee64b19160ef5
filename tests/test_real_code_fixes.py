"""Device bugs in shapes real programs have, each fixed where the tensor is made.

Every scenario is a notebook session whose last cell fails with a device mismatch. For each entry
point (the plain cell explained after the fact, ``%%devcheck``, the Apply fix button, and
``%devices`` where the culprit exists before the cell runs) the printed fix is taken exactly as
printed (:mod:`mutation_runner`): its code runs, its edits are made to the cells' text, the
failing cell must then work twice and lose nothing; then the whole session runs again from its
first cell with the edits, and must not fail (the cause is gone, not only its symptom).
"""

from __future__ import annotations

import pytest
from mutation_runner import Corpus, Mutant
from programs import Program

_HEAD = "import torch\nfrom torch import nn\ndev = torch.device('DEVICE')"


def session(name: str, *cells: str) -> Program:
    return Program(name, "own", (_HEAD, *cells))


def check(ip, program: Program, entries: tuple[str, ...] = ("plain", "devcheck", "button")) -> None:
    outcome = Corpus(ip, entries=entries).run(Mutant(program), reference=False)
    assert outcome.probe == "effect", f"{outcome.probe}: {outcome.error}"
    assert set(outcome.entries) == set(entries)
    for entry, o in outcome.entries.items():
        assert o.verdict == "pass", f"{entry}: [{o.stage}] {o.reason}\nfix:\n{o.fix_text}"
        assert outcome.cause_removed[entry], f"{entry}: the session fails again from its start\nfix:\n{o.fix_text}"


# -- the tensor is made again when the cell runs again: the line that makes it is the fix --------------

INIT_HIDDEN = session(
    "init_hidden",
    "class Tagger(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.rnn = nn.RNN(8, 16, batch_first=True)\n"
    "        self.head = nn.Linear(16, 5)\n"
    "\n"
    "    def init_hidden(self, batch_size):\n"
    "        return torch.zeros(1, batch_size, 16)\n"
    "\n"
    "    def forward(self, x, hidden):\n"
    "        out, hidden = self.rnn(x, hidden)\n"
    "        return self.head(out), hidden",
    "model = Tagger().to(dev)\nx = torch.randn(4, 6, 8, device=dev)",
    "hidden = model.init_hidden(4)\nlogits, hidden = model(x, hidden)",
)

CACHE_DICT = session(
    "cache_dict",
    "def new_cache(batch, heads, dim):\n"
    "    return {'k': torch.zeros(batch, heads, 0, dim), 'v': torch.zeros(batch, heads, 0, dim)}",
    "q = torch.randn(2, 2, 1, 4, device=dev)",
    "cache = new_cache(2, 2, 4)\n"
    "for step in range(3):\n"
    "    cache['k'] = torch.cat([cache['k'], q], dim=2)\n"
    "    cache['v'] = torch.cat([cache['v'], q], dim=2)",
)

TRANSFORM = session(
    "transform_attribute",
    "class Standardize:\n"
    "    def __init__(self, mean, std):\n"
    "        self.mean = torch.tensor(mean).view(-1, 1, 1)\n"
    "        self.std = torch.tensor(std).view(-1, 1, 1)\n"
    "\n"
    "    def __call__(self, images):\n"
    "        return (images - self.mean) / self.std",
    "standardize = Standardize([0.5, 0.4, 0.3], [0.2, 0.2, 0.2])\n"
    "net = nn.Conv2d(3, 4, 3).to(dev)",
    "images = torch.rand(2, 3, 8, 8, device=dev)\nout = net(standardize(images))",
)

DATACLASS_FIELDS = session(
    "dataclass_fields",
    "from dataclasses import dataclass, field\n"
    "\n"
    "@dataclass\n"
    "class LossWeights:\n"
    "    classes: torch.Tensor = field(default_factory=lambda: torch.tensor([1.0, 2.0, 0.5]))",
    "weights = LossWeights()\nclassifier = nn.Linear(6, 3).to(dev)",
    "features = torch.randn(4, 6, device=dev)\ntargets = torch.tensor([0, 2, 1, 0], device=dev)\n"
    "loss = nn.functional.cross_entropy(classifier(features), targets, weight=weights.classes)",
)

SCHEDULER_OBJECT = session(
    "noise_schedule",
    "class NoiseSchedule:\n"
    "    def __init__(self, steps):\n"
    "        self.betas = torch.linspace(1e-4, 0.02, steps)\n"
    "        self.alphas_cumprod = torch.cumprod(1 - self.betas, dim=0)\n"
    "\n"
    "    def add_noise(self, x, noise, t):\n"
    "        a = self.alphas_cumprod[t].view(-1, 1)\n"
    "        return a.sqrt() * x + (1 - a).sqrt() * noise",
    "schedule = NoiseSchedule(50)\ndenoiser = nn.Linear(4, 4).to(dev)",
    "x0 = torch.randn(3, 4, device=dev)\nt = torch.randint(0, 50, (3,), device=dev)\n"
    "noisy = schedule.add_noise(x0, torch.randn_like(x0), t)\nloss = (denoiser(noisy) - x0).pow(2).mean()",
)


@pytest.mark.parametrize("program", [INIT_HIDDEN, CACHE_DICT, TRANSFORM, DATACLASS_FIELDS, SCHEDULER_OBJECT],
                         ids=lambda p: p.name)
def test_a_tensor_made_again_by_the_code_the_cell_runs_is_fixed_where_it_is_made(ip, sim, program):
    check(ip, program)


# -- several tensors returned together: every one is moved, never the tuple ----------------------------

REPLAY_BUFFER = session(
    "replay_buffer",
    "class ReplayBuffer:\n"
    "    def __init__(self, capacity):\n"
    "        self.states = torch.randn(capacity, 4)\n"
    "        self.actions = torch.randint(0, 2, (capacity,))\n"
    "        self.rewards = torch.randn(capacity)\n"
    "\n"
    "    def sample(self, batch_size):\n"
    "        idx = torch.randint(0, len(self.states), (batch_size,))\n"
    "        return self.states[idx], self.actions[idx], self.rewards[idx]",
    "buffer = ReplayBuffer(100)\nq_net = nn.Linear(4, 2).to(dev)\nq_opt = torch.optim.Adam(q_net.parameters())",
    "states, actions, rewards = buffer.sample(8)\n"
    "q = q_net(states).gather(1, actions.unsqueeze(1)).squeeze(1)\n"
    "loss = (q - rewards).pow(2).mean()\nloss.backward()\nq_opt.step()",
)

SAMPLED_EARLIER = session(
    "sampled_in_an_earlier_cell",
    "def sample_batch(n):\n"
    "    x = torch.randn(n, 3)\n"
    "    return x, (x.sum(1) > 0).long()",
    "model = nn.Linear(3, 2).to(dev)",
    "inputs, labels = sample_batch(16)",
    "loss = nn.functional.cross_entropy(model(inputs), labels)",
)


@pytest.mark.parametrize("program", [REPLAY_BUFFER, SAMPLED_EARLIER], ids=lambda p: p.name)
def test_several_tensors_returned_together_are_each_moved(ip, sim, program):
    check(ip, program)


# -- a tensor of the user's helper: named by what the edited line can read ------------------------

BALANCE_LOSS = session(
    "load_balancing",
    "def expert_load(gate_logits, k):\n"
    "    counts = torch.zeros(4)\n"
    "    for logits in gate_logits:\n"
    "        chosen = logits.topk(k, dim=-1).indices.flatten()\n"
    "        counts = counts + torch.zeros(4, device=logits.device).scatter_add_(0, chosen, torch.ones(len(chosen), device=logits.device))\n"
    "    return counts / counts.sum()",
    "gates = [torch.randn(6, 4, device=dev) for _ in range(2)]",
    "load = expert_load(gates, 2)",
)


def test_an_edit_names_the_device_by_what_its_line_can_read(ip, sim):
    """The tensors on the device in the failing frame are bound after the line that made the host
    one (in the loop below it): the edit there names the notebook's device variable instead."""
    check(ip, BALANCE_LOSS)
