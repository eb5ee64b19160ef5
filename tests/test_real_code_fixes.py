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

SLOW = pytest.mark.slow

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


@pytest.mark.parametrize("program", [
    INIT_HIDDEN,
    pytest.param(CACHE_DICT, marks=SLOW),
    TRANSFORM,
    pytest.param(DATACLASS_FIELDS, marks=SLOW),
    pytest.param(SCHEDULER_OBJECT, marks=SLOW),
], ids=lambda p: p.name)
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


@pytest.mark.parametrize("program", [REPLAY_BUFFER, pytest.param(SAMPLED_EARLIER, marks=SLOW)], ids=lambda p: p.name)
def test_several_tensors_returned_together_are_each_moved(ip, sim, program):
    check(ip, program)


# -- a tensor of the user's helper: named by what the edited line can read ------------------------

BALANCE_LOSS = session(
    "load_balancing",
    "def expert_load(gate_logits, k):\n"
    "    counts = torch.zeros(4)\n"
    "    for logits in gate_logits:\n"
    "        chosen = logits.topk(k, dim=-1).indices.flatten()\n"
    "        ones = torch.ones(len(chosen), device=logits.device)\n"
    "        counts = counts + torch.zeros(4, device=logits.device).scatter_add_(0, chosen, ones)\n"
    "    return counts / counts.sum()",
    "gates = [torch.randn(6, 4, device=dev) for _ in range(2)]",
    "load = expert_load(gates, 2)",
)


@SLOW
def test_an_edit_names_the_device_by_what_its_line_can_read(ip, sim):
    """The tensors on the device in the failing frame are bound after the line that made the host
    one (in the loop below it): the edit there names the notebook's device variable instead."""
    check(ip, BALANCE_LOSS)


# -- a tensor no name holds: the line of the user's code that makes it ---------------------------------

NOISE_HELPER = session(
    "temporary_in_a_helper",
    "def jitter(x, scale=0.1):\n"
    "    return x + torch.randn(x.shape) * scale",
    "encoder = nn.Linear(8, 4).to(dev)\nx = torch.randn(5, 8, device=dev)",
    "z = encoder(jitter(x))",
)

AUTOGRAD_FUNCTION = session(
    "autograd_function",
    "class ClampGrad(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, x, limit):\n"
    "        ctx.limit = limit\n"
    "        return x.clone()\n"
    "\n"
    "    @staticmethod\n"
    "    def backward(ctx, grad):\n"
    "        bound = torch.full(grad.shape, ctx.limit)\n"
    "        return torch.minimum(torch.maximum(grad, -bound), bound), None",
    "layer = nn.Linear(4, 4).to(dev)\nx = torch.randn(3, 4, device=dev)",
    "y = ClampGrad.apply(layer(x), 0.5)\ny.sum().backward()",
)

AUTOGRAD_FUNCTION_FORWARD = session(
    "autograd_function_forward",
    "class ScaleByTemperature(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, logits):\n"
    "        t = torch.tensor([2.0])\n"
    "        ctx.save_for_backward(t)\n"
    "        return logits / t\n"
    "\n"
    "    @staticmethod\n"
    "    def backward(ctx, grad):\n"
    "        (t,) = ctx.saved_tensors\n"
    "        return grad / t",
    "head = nn.Linear(4, 3).to(dev)\nx = torch.randn(2, 4, device=dev)",
    "scaled = ScaleByTemperature.apply(head(x))",
)

CACHED_MASK = session(
    "lru_cache_helper",
    "import functools\n"
    "\n"
    "@functools.lru_cache(maxsize=8)\n"
    "def causal_mask(n):\n"
    "    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)",
    "scores = torch.randn(2, 6, 6, device=dev)",
    "masked = scores.masked_fill(causal_mask(6), float('-inf')).softmax(-1)",
)

GENERATION_LOOP = session(
    "generation_loop",
    "lm = nn.Sequential(nn.Embedding(20, 8), nn.Linear(8, 20)).to(dev)\n"
    "ids = torch.tensor([[1, 2, 3]], device=dev)",
    "for _ in range(4):\n"
    "    logits = lm(ids)[:, -1]\n"
    "    tok = int(logits.argmax(-1))\n"
    "    ids = torch.cat([ids, torch.tensor([[tok]])], dim=1)",
)


@pytest.mark.parametrize("program", [
    pytest.param(NOISE_HELPER, marks=SLOW),
    AUTOGRAD_FUNCTION,
    pytest.param(AUTOGRAD_FUNCTION_FORWARD, marks=SLOW),
    CACHED_MASK,
    pytest.param(GENERATION_LOOP, marks=SLOW),
], ids=lambda p: p.name)
def test_a_tensor_no_name_holds_is_named_and_made_on_the_device_where_the_users_code_makes_it(ip, sim, program):
    check(ip, program)

POSITIONS = session(
    "helper_returning_a_table",
    "def sinusoids(length, dim):\n"
    "    return torch.sin(torch.arange(length * dim, dtype=torch.float32).view(length, dim) / 100)\n"
    "\n"
    "def add_positions(x):\n"
    "    return x + sinusoids(x.shape[1], x.shape[2])",
    "tokens = torch.randn(2, 5, 8, device=dev)\nproj = nn.Linear(8, 8).to(dev)",
    "h = proj(add_positions(tokens))",
)


@SLOW
def test_a_table_a_helper_returns_is_made_on_the_device_where_the_helper_makes_it(ip, sim):
    check(ip, POSITIONS)


# -- half of a cache registered: the other half becomes a buffer too ---------------------------------------

LAZY_ROTARY = session(
    "lazy_rotary_cache",
    "class Rotary(nn.Module):\n"
    "    def __init__(self, dim):\n"
    "        super().__init__()\n"
    "        self.dim, self.cached = dim, 0\n"
    "\n"
    "    def build(self, n):\n"
    "        inv = 1.0 / (10000 ** (torch.arange(0, self.dim, 2).float() / self.dim))\n"
    "        freqs = torch.outer(torch.arange(n).float(), inv)\n"
    "        self.register_buffer('cos', freqs.cos().repeat(1, 2), persistent=False)\n"
    "        self.sin = freqs.sin().repeat(1, 2)\n"
    "        self.cached = n\n"
    "\n"
    "    def forward(self, x):\n"
    "        n = x.shape[1]\n"
    "        if n > self.cached:\n"
    "            self.build(n)\n"
    "        return x * self.cos[:n] + x.flip(-1) * self.sin[:n]",
    "rope = Rotary(8)\nwarm = rope(torch.randn(1, 6, 8))  # a first call on the host builds the cache\nrope.to(dev)",
    "q = rope(torch.randn(2, 6, 8, device=dev))",
)

CACHE_IN_INIT = session(
    "cache_in_init",
    "class Rotary(nn.Module):\n"
    "    def __init__(self, dim, max_len=16):\n"
    "        super().__init__()\n"
    "        inv = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))\n"
    "        freqs = torch.outer(torch.arange(max_len).float(), inv)\n"
    "        self.register_buffer('cos', freqs.cos().repeat(1, 2), persistent=False)\n"
    "        self.sin = freqs.sin().repeat(1, 2)\n"
    "\n"
    "    def forward(self, x):\n"
    "        n = x.shape[1]\n"
    "        return x * self.cos[:n] + x.flip(-1) * self.sin[:n]",
    "rope = Rotary(8).to(dev)",
    "k = rope(torch.randn(2, 6, 8, device=dev))",
)


@pytest.mark.parametrize("program", [LAZY_ROTARY, pytest.param(CACHE_IN_INIT, marks=SLOW)], ids=lambda p: p.name)
def test_the_half_of_a_cache_left_unregistered_becomes_a_buffer_where_it_is_made(ip, sim, program):
    check(ip, program, ("plain", "devcheck", "button", "devices"))


# -- a model split by hand across two devices: the missing move is added --------------------------------

_TWO = "import torch\nfrom torch import nn\nfirst, second = torch.device('DEVICE'), torch.device('DEVICE_1')"
PIPELINE_FORWARD = Program("two_stages", "own", (
    _TWO,
    "class TwoStages(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.stage1 = nn.Sequential(nn.Linear(8, 16), nn.ReLU()).to(first)\n"
    "        self.stage2 = nn.Linear(16, 4).to(second)\n"
    "\n"
    "    def forward(self, x):\n"
    "        h = self.stage1(x.to(first))\n"
    "        return self.stage2(h)",
    "model = TwoStages()\nopt = torch.optim.SGD(model.parameters(), lr=0.1)",
    "out = model(torch.randn(3, 8))\nout.sum().backward()\nopt.step()",
), devices=frozenset({"DEVICE", "DEVICE_1"}))

PIPELINE_CELL = Program("two_stages_in_a_cell", "own", (
    _TWO,
    "encoder = nn.Linear(8, 16).to(first)\ndecoder = nn.Linear(16, 4).to(second)\n"
    "x = torch.randn(3, 8, device=first)",
    "h = encoder(x)\ny = decoder(h)",
), devices=frozenset({"DEVICE", "DEVICE_1"}))


@pytest.mark.parametrize("program", [PIPELINE_FORWARD, pytest.param(PIPELINE_CELL, marks=SLOW)], ids=lambda p: p.name)
def test_a_model_split_by_hand_gets_the_missing_move_not_one_device(ip, sim, program):
    check(ip, program)


def test_the_missing_move_of_a_split_model_is_not_called_a_wasted_copy(ip, sim):
    import devinspect

    ip.run_cell(_TWO.replace("DEVICE_1", "sim:1").replace("DEVICE", "sim:0"))
    ip.run_cell(PIPELINE_FORWARD.cells[1])
    ip.run_cell(PIPELINE_FORWARD.cells[2])
    ip.run_cell(PIPELINE_FORWARD.cells[3])
    fix = devinspect.explain(namespace=ip.user_ns).mismatch.fix
    assert [e.new.strip() for e in fix.edits] == ["return self.stage2(h.to(second))"] and fix.note is None


# -- sessions that are right get no warning --------------------------------------------------------------

_DISTILL = ("teacher = nn.Linear(8, 4).to(dev).eval()\nstudent = nn.Linear(8, 4).to(dev)\n"
            "opt = torch.optim.SGD(student.parameters(), lr=0.1)\n"
            "loader = [(torch.randn(4, 8), torch.randint(0, 4, (4,))) for _ in range(3)]")

MOVED_IN_A_FUNCTION = session(
    "moved_in_a_step_function", _DISTILL,
    "def distill_step(xb, yb):\n"
    "    xb, yb = xb.to(dev), yb.to(dev)\n"
    "    with torch.no_grad():\n"
    "        soft = teacher(xb).softmax(-1)\n"
    "    logits = student(xb)\n"
    "    loss = nn.functional.cross_entropy(logits, yb) + nn.functional.kl_div(logits.log_softmax(-1), soft,\n"
    "                                                                          reduction='batchmean')\n"
    "    opt.zero_grad()\n"
    "    loss.backward()\n"
    "    opt.step()\n"
    "\n"
    "for xb, yb in loader:\n"
    "    distill_step(xb, yb)",
)

MOVED_IN_THE_CALL = session(
    "moved_in_the_call", _DISTILL,
    "for xb, yb in loader:\n"
    "    logits = student(input=xb.to(dev))\n"
    "    loss = nn.functional.cross_entropy(logits, yb.to(dev))\n"
    "    opt.zero_grad()\n"
    "    loss.backward()\n"
    "    opt.step()",
)

MOVED_BY_A_LAMBDA = session(
    "passed_to_a_lambda", _DISTILL,
    "loss_of = lambda xb, yb: nn.functional.cross_entropy(student(xb), yb)\n"
    "for xb, yb in loader:\n"
    "    loss = loss_of(xb.to(dev), yb.to(dev))\n"
    "    opt.zero_grad()\n"
    "    loss.backward()\n"
    "    opt.step()",
)


@pytest.mark.parametrize("program", [
    MOVED_IN_A_FUNCTION,
    pytest.param(MOVED_IN_THE_CALL, marks=SLOW),
    pytest.param(MOVED_BY_A_LAMBDA, marks=SLOW),
], ids=lambda p: p.name)
def test_inputs_moved_where_they_are_passed_get_no_warning(ip, sim, program):
    outcome = Corpus(ip).original(program)
    assert outcome.probe == "clean", outcome.error
    assert outcome.clean_findings == []


# -- at rest: %devices finds it before the cell runs, and its fix edits the line that made it -------------

INPUT_AT_REST = session("input_made_on_the_host", "model = nn.Linear(4, 2).to(dev)", "x = torch.randn(3, 4)",
                        "y = model(x)")
MODEL_AT_REST = session("model_left_on_the_host", "model = nn.Linear(4, 2)\nopt = torch.optim.Adam(model.parameters())",
                        "x = torch.randn(3, 4, device=dev)", "y = model(x)\ny.sum().backward()\nopt.step()")


TEACHER_AT_REST = session(
    "teacher_left_on_the_host", "student = nn.Linear(8, 4).to(dev)\nteacher = nn.Linear(8, 4)",
    "x = torch.randn(3, 8, device=dev)",
    "with torch.no_grad():\n    soft = teacher(x).softmax(-1)\n"
    "loss = nn.functional.kl_div(student(x).log_softmax(-1), soft, reduction='batchmean')")


@pytest.mark.parametrize("program", [INPUT_AT_REST, pytest.param(MODEL_AT_REST, marks=SLOW),
                                     pytest.param(TEACHER_AT_REST, marks=SLOW)], ids=lambda p: p.name)
def test_a_culprit_at_rest_is_found_before_the_cell_runs_and_its_line_is_edited(ip, sim, program):
    check(ip, program, ("plain", "devcheck", "button", "devices"))


SCAN_STATE = session(
    "state_made_over_several_lines",
    "def scan(decay, inputs):\n"
    "    state = torch.zeros(\n"
    "        inputs.shape[0],\n"
    "        inputs.shape[2],\n"
    "        dtype=inputs.dtype,\n"
    "    )\n"
    "    outputs = []\n"
    "    for t in range(inputs.shape[1]):\n"
    "        state = decay * state + inputs[:, t]\n"
    "        outputs.append(state)\n"
    "    return torch.stack(outputs, dim=1)",
    "decay = torch.rand(4, device=dev)\nu = torch.randn(2, 5, 4, device=dev)",
    "y = scan(decay, u)",
)


def test_a_state_a_loop_carries_is_made_on_the_device_by_its_factory_over_several_lines(ip, sim):
    """The state is read by the line that failed and reassigned there on every step: the fix is the
    call that made it before the loop (written over several lines), not a copy on each step."""
    import devinspect

    check(ip, SCAN_STATE)
    for cell in SCAN_STATE.cells:
        ip.run_cell(cell.replace("DEVICE", "sim:0"))
    (edit,) = devinspect.explain(namespace=ip.user_ns).mismatch.fix.edits
    assert (edit.old, edit.new) == ("dtype=inputs.dtype,", "dtype=inputs.dtype, device=decay.device,")


# -- a batch that enters through the user's training function: fixed where it enters ----------------------

_VAE = ("class AutoEncoder(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.enc, self.dec = nn.Linear(12, 4), nn.Linear(4, 12)\n"
        "\n"
        "    def encode(self, x):\n"
        "        return torch.relu(self.enc(x))\n"
        "\n"
        "    def forward(self, x):\n"
        "        return self.dec(self.encode(x.view(-1, 12)))")

BATCH_IN_A_FUNCTION = session(
    "batch_through_a_training_function", _VAE,
    "model = AutoEncoder().to(dev)\nopt = torch.optim.Adam(model.parameters())\n"
    "data_set = torch.utils.data.TensorDataset(torch.rand(12, 3, 4), torch.zeros(12))\n"
    "loader = torch.utils.data.DataLoader(data_set, batch_size=4)",
    "def train():\n"
    "    for step, (data, _) in enumerate(loader):\n"
    "        data = data\n"
    "        opt.zero_grad()\n"
    "        loss = (model(data) - data.view(-1, 12)).pow(2).mean()\n"
    "        loss.backward()\n"
    "        opt.step()",
    "train()",
)

ONE_OF_A_PAIR = session(
    "one_of_a_pair_moved",
    "model = nn.Linear(6, 3).to(dev)\n"
    "loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 6), "
    "torch.randint(0, 3, (8,))), batch_size=4)",
    "def evaluate():\n"
    "    correct = 0\n"
    "    with torch.no_grad():\n"
    "        for data, target in loader:\n"
    "            data, target = data.to(dev), target\n"
    "            output = model(data)\n"
    "            loss = nn.functional.cross_entropy(output, target)\n"
    "            correct += (output.argmax(1) == target).sum().item()\n"
    "    return correct",
    "evaluate()",
)

FORMATTED_LOG = session(
    "a_loop_that_prints_with_percent_formatting",
    "net = nn.Linear(4, 1).to(dev)\nloader = [(torch.randn(2, 4), torch.zeros(2)) for _ in range(2)]",
    "for i, data in enumerate(loader):\n"
    "    real = data[0]\n"
    "    out = net(real)\n"
    "    print('[%d] %.3f'\n"
    "          % (i, out.sum().item()))",
)


POSITIONS_THROUGH_LAYERS = session(
    "positions_passed_through_layers",
    "class Gate(nn.Module):\n"
    "    def forward(self, x, position_ids):\n"
    "        reset = position_ids[:, :, None] == 0\n"
    "        return torch.where(reset, x, x * 0.5)\n"
    "\n"
    "class Block(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.proj = nn.Linear(4, 4)\n"
    "        self.gate = Gate()\n"
    "\n"
    "    def forward(self, x, position_ids):\n"
    "        kept = (position_ids[:, :, None] >= 0).float()\n"
    "        return self.gate(self.proj(x), position_ids) * kept\n"
    "\n"
    "class Stack(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.layers = nn.ModuleList([Block(), Block()])\n"
    "\n"
    "    def forward(self, x, position_ids=None, past=0):\n"
    "        if position_ids is None:\n"
    "            position_ids = torch.arange(x.shape[1]) + past\n"
    "            position_ids = position_ids.unsqueeze(0)\n"
    "        for layer in self.layers:\n"
    "            x = layer(x, position_ids)\n"
    "        return x",
    "stack = Stack().to(dev)\nx = torch.randn(2, 5, 4, device=dev)",
    "out = stack(x)",
)

PASSED_OVER_SEVERAL_LINES = session(
    "mask_passed_over_several_lines",
    "class Embed(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.emb = nn.Embedding(10, 4)\n"
    "\n"
    "    def forward(self, ids, mask=None):\n"
    "        out = self.emb(ids)\n"
    "        mask = mask.unsqueeze(-1)\n"
    "        return out * mask\n"
    "\n"
    "class Encoder(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.embed = Embed()\n"
    "\n"
    "    def forward(self, ids, mask=None):\n"
    "        if mask is None:\n"
    "            mask = torch.ones(ids.shape)\n"
    "        return self.embed(\n"
    "            ids,\n"
    "            mask=mask,\n"
    "        )",
    "enc = Encoder().to(dev)\nids = torch.randint(0, 10, (2, 5), device=dev)",
    "out = enc(ids)",
)


@pytest.mark.parametrize("program", [BATCH_IN_A_FUNCTION, pytest.param(ONE_OF_A_PAIR, marks=SLOW),
                                     pytest.param(PASSED_OVER_SEVERAL_LINES, marks=SLOW),
                                     pytest.param(POSITIONS_THROUGH_LAYERS, marks=SLOW),
                                     pytest.param(FORMATTED_LOG, marks=SLOW)], ids=lambda p: p.name)
def test_a_batch_is_moved_where_the_users_code_takes_it_in(ip, sim, program):
    check(ip, program)


MODEL_OVER_SEVERAL_LINES = session(
    "a_model_made_over_several_lines",
    "class Net(nn.Module):\n"
    "    def __init__(self, d_in, d_out, dropout):\n"
    "        super().__init__()\n"
    "        self.lin, self.drop = nn.Linear(d_in, d_out), nn.Dropout(dropout)\n"
    "\n"
    "    def forward(self, x):\n"
    "        return self.drop(self.lin(x))",
    "features = torch.randn(5, 8, device=dev)",
    "net = Net(\n"
    "    d_in=8,       # features per node\n"
    "    d_out=3,      # classes\n"
    "    dropout=0.1,\n"
    ")",
    "logits = net(features)",
)


def test_a_model_made_over_several_lines_gets_to_after_its_closing_bracket(ip, sim):
    check(ip, MODEL_OVER_SEVERAL_LINES, ("plain", "devcheck", "button", "devices"))


# -- values a loader of the user's returns: its device argument, or its return ------------------------------

_LOADER = ("def load_graph(n=6, device='cpu'):\n"
           "    x = torch.randn(n, 4)\n"
           "    adj = (torch.rand(n, n) > 0.5).float()\n"
           "    return {returned}")
DEVICE_LEFT_TO_ITS_DEFAULT = session(
    "device_argument_left_to_its_default", _LOADER.format(returned="x.to(device), adj.to(device)"),
    "gnn = nn.Linear(4, 2).to(dev)", "x, adj = load_graph()", "h = adj @ gnn(x)")
RETURNED_UNMOVED = session(
    "one_returned_value_not_moved", _LOADER.format(returned="x, adj.to(device)"),
    "gnn = nn.Linear(4, 2).to(dev)", "x, adj = load_graph(device=dev)", "h = adj @ gnn(x)")


ONE_HELPER_SEVERAL_VALUES = session(
    "several_values_one_helper_returned",
    "def batchify(data, bsz):\n"
    "    nbatch = data.size(0) // bsz\n"
    "    data = data.narrow(0, 0, nbatch * bsz)\n"
    "    return data.view(bsz, -1).t().contiguous()",
    "train_data = batchify(torch.arange(64), 4)\nval_data = batchify(torch.arange(40), 2)",
    "emb = nn.Embedding(64, 8).to(dev)",
    "out = emb(train_data)\nval = emb(val_data)",
)


@pytest.mark.parametrize("program", [DEVICE_LEFT_TO_ITS_DEFAULT, pytest.param(RETURNED_UNMOVED, marks=SLOW),
                                     ONE_HELPER_SEVERAL_VALUES], ids=lambda p: p.name)
def test_values_a_loader_returns_are_fixed_by_its_device_argument_or_at_its_return(ip, sim, program):
    check(ip, program, ("plain", "devcheck", "button", "devices"))


# -- modules kept in a plain list: model.to() leaves them, so each moves, and where they are made ------------

MODULE_LIST = session(
    "layers_in_a_plain_list",
    "class Layer(nn.Linear):\n"
    "    def forward(self, x):\n"
    "        return super().forward(x).relu()\n"
    "\n"
    "class Net(nn.Module):\n"
    "    def __init__(self, dims):\n"
    "        super().__init__()\n"
    "        self.layers = []\n"
    "        for d in range(len(dims) - 1):\n"
    "            self.layers = self.layers + [Layer(dims[d], dims[d + 1])]\n"
    "\n"
    "    def predict(self, x):\n"
    "        for layer in self.layers:\n"
    "            x = layer(x)\n"
    "        return x",
    "net = Net([4, 8, 2])\nx = torch.randn(3, 4, device=dev)",
    "out = net.predict(x)",
)


MODULE_LIST_MADE_BY_THE_CELL = session(
    "layers_in_a_plain_list_made_by_the_failing_cell", MODULE_LIST.cells[1],
    "x = torch.randn(3, 4, device=dev)", "net = Net([4, 8, 2])\nout = net.predict(x)")


@pytest.mark.parametrize("program", [MODULE_LIST, pytest.param(MODULE_LIST_MADE_BY_THE_CELL, marks=SLOW)],
                         ids=lambda p: p.name)
def test_modules_kept_in_a_plain_list_are_each_moved_and_made_on_the_device(ip, sim, program):
    check(ip, program)


# -- a model made in one branch of an if: that branch's line is edited; state it made from device inputs ---

MODEL_CHOSEN_IN_A_BRANCH = session(
    "model_chosen_in_a_branch",
    "class Causal(nn.Module):\n"
    "    def __init__(self):\n"
    "        super().__init__()\n"
    "        self.proj = nn.Linear(4, 4)\n"
    "        self.mask = None\n"
    "\n"
    "    def forward(self, x):\n"
    "        if self.mask is None or self.mask.size(0) != len(x):\n"
    "            self.mask = torch.tril(torch.ones(len(x), len(x))).to(x.device)\n"
    "        return self.proj(self.mask @ x)",
    "kind = 'causal'\nif kind == 'causal':\n    model = Causal()\nelse:\n    model = nn.Linear(4, 4).to(dev)",
    "x = torch.randn(5, 4, device=dev)",
    "y = model(x)",
)


def test_a_model_made_in_one_branch_of_an_if_is_fixed_on_that_branchs_line(ip, sim):
    check(ip, MODEL_CHOSEN_IN_A_BRANCH, ("plain", "devcheck", "button", "devices"))
