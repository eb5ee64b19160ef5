"""The fix corpus: problems a user meets, as cells, each with the code that fails because of it.

Every case is run by ``test_fixes_run.py``: the setup cell, then the failing cell (it must
fail, or its assertion must), then the fix devinspect prints, taken exactly as printed
(its code run as a cell, its source edits applied to the setup cell, which runs again),
then the failing cell again, which must now work, with no error finding left in
``%devices``. The same again with the Apply fix button instead of the printed code.

``source`` says where the fix comes from: ``devcheck`` (the failing cell run under
``%%devcheck``) or a finding code of ``%devices``. ``DEVICE`` is replaced by the
accelerator the run uses (``sim:0`` here, ``cuda:0`` on a GPU).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    name: str
    setup: str
    failing: str
    sources: tuple[str, ...] = ("devcheck",)
    #: Run after the fixed cell works: asserts about the objects (identity kept, tying kept …).
    after: str = ""
    #: Keys ("code", "edits", "action") the fix must have; a fix without code says why in its note.
    expect: tuple[str, ...] = ("code", "action")
    #: Run when the case ends, fixed or not (global flags the setup changed).
    teardown: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


PRELUDE = """import torch, torch.nn as nn, torch.nn.functional as F
torch.manual_seed(0)
dev = torch.device("DEVICE")
"""

TINY_GPT2 = """from transformers import GPT2Config, GPT2LMHeadModel
model = GPT2LMHeadModel(GPT2Config(n_layer=3, n_embd=32, n_head=2, vocab_size=100, n_positions=64,
                                   bos_token_id=0, eos_token_id=0)).to(dev)
ids = torch.randint(0, 100, (2, 8), device=dev)
"""
TINY_LLAMA = """from transformers import LlamaConfig, LlamaForCausalLM
model = LlamaForCausalLM(LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                     num_attention_heads=2, num_key_value_heads=2, vocab_size=100,
                                     bos_token_id=0, eos_token_id=0, pad_token_id=0)).to(dev)
ids = torch.randint(0, 100, (2, 8), device=dev)
"""
TINY_BERT = """from transformers import BertConfig, BertForSequenceClassification
model = BertForSequenceClassification(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                 intermediate_size=64, vocab_size=100, num_labels=3)).to(dev)
ids = torch.randint(0, 100, (2, 8), device=dev)
"""

TINY_WHISPER = """from transformers import BatchFeature, WhisperConfig, WhisperForConditionalGeneration
model = WhisperForConditionalGeneration(WhisperConfig(
    vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
    decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8, max_source_positions=16,
    max_target_positions=32, decoder_start_token_id=1, pad_token_id=0, eos_token_id=2, bos_token_id=1)).to(dev).eval()
"""

#: The helpers of a language-model notebook (word_language_model's shape): batches cut from one
#: tensor, fetched by index, and a training loop over them.
BATCHIFY = ("def batchify(data, bsz):\n"
            "    rows = data.size(0) // bsz * bsz\n"
            "    return data[:rows].view(bsz, -1, 8)\n")
TRAIN_ON_BATCHES = ("def get_batch(source, i):\n"
                    "    return source[i], i\n"
                    "def train():\n"
                    "    for i in range(train_data.size(0)):\n"
                    "        x, _ = get_batch(train_data, i)\n"
                    "        out = model(x)\n"
                    "    return out\n")

CASES: list[Case] = [
    Case(
        "input-left-on-host",
        "model = nn.Linear(8, 3).to(dev)\nx = torch.randn(4, 8)\n",
        "y = model(x)\n",
        sources=("devcheck", "input-on-other-device"),
    ),
    Case(
        # A value computed from two tensors the helper made on the host: editing one factory leaves
        # the other on the host (meshgrid would raise next), so both lines get device=.
        "two-host-factories-combined-in-a-helper",
        "def neighbourhood(centres, radius):\n"
        "    di = torch.linspace(-radius, radius, 2 * radius + 1)\n"
        "    dj = torch.linspace(-radius, radius, 2 * radius + 1)\n"
        "    delta = torch.stack(torch.meshgrid(di, dj, indexing='ij'), dim=-1)\n"
        "    return centres.view(-1, 1, 1, 2) + delta\n"
        "centres = torch.rand(4, 2, device=dev)\n",
        "grid = neighbourhood(centres, 2)\n",
        expect=("edits",),
        after="assert grid.device == dev",
    ),
    # The host factory is on one line of an expression written over several: that line alone does
    # not parse, and the edit is made on it in the expression's own columns.
    *(Case(f"host-factory-on-the-{which}-line-of-an-expression",
           "def relative_offsets(q, n):\n"
           "    dist = (\n"
           f"        torch.arange(n{first}).unsqueeze(-1) * 2 -\n"
           f"        torch.arange(n{second}).unsqueeze(0) * 2\n"
           "    )\n"
           "    return q + dist.sum(0)\n"
           "q = torch.randn(2, 4, device=dev)\n",
           "out = relative_offsets(q, 4)\n",
           expect=("edits",),
           after="assert out.device == dev")
      for which, first, second in (("first", "", ", device=q.device"), ("second", ", device=q.device", ""))),
    Case(
        # A helper handed only sizes makes the grid, as a factory would: its call is where the device
        # is given (device= to the helper's own parameter), not each place the grid is used.
        "helper-with-a-device-parameter-left-to-its-default",
        "def coords_grid(n, h, w, device='cpu'):\n"
        "    ys, xs = torch.meshgrid(torch.arange(h, device=device), torch.arange(w, device=device), indexing='ij')\n"
        "    return torch.stack([xs, ys]).float()[None].repeat(n, 1, 1, 1)\n"
        "class Flow(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.head = nn.Conv2d(2, 2, 1)\n"
        "    def forward(self, image):\n"
        "        start = coords_grid(image.shape[0], image.shape[2], image.shape[3])\n"
        "        moved = self.head(image) + 0.0\n"
        "        flow = moved - start\n"
        "        return flow, moved + start\n"
        "model = Flow().to(dev)\n"
        "image = torch.randn(2, 2, 4, 4, device=dev)\n",
        "flow, ends = model(image)\n",
        expect=("edits",),
        after="assert flow.device == dev and ends.device == dev",
    ),
    Case(
        "helper-handed-only-sizes-returns-a-host-tensor",
        "def angles(n, dim):\n"
        "    steps = torch.arange(n).float()[:, None]\n"
        "    return steps / (10000 ** (torch.arange(dim).float() / dim))\n"
        "def encode(x):\n"
        "    table = angles(x.shape[0], x.shape[1])\n"
        "    return x + table.sin() + table.cos()\n"
        "x = torch.randn(6, 4, device=dev)\n",
        "y = encode(x)\n",
        expect=("edits",),
        after="assert y.device == dev",
    ),
    Case(
        # forward replaces a buffer with what a method of its own makes from a size: moving the buffer
        # would not last (the next new size makes it again), so the line that replaces it is edited.
        "forward-replaces-a-buffer-by-a-method-handed-a-size",
        "class Attn(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(3, 2)\n"
        "        self.register_buffer('rel', torch.zeros(1, 1, 1, 3), persistent=False)\n"
        "    def make_rel(self, n):\n"
        "        idx = torch.arange(n, dtype=torch.float32)\n"
        "        d = idx[None, :] - idx[:, None]\n"
        "        return torch.stack([d, d.abs(), d ** 2], dim=-1)[None]\n"
        "    def forward(self, x):\n"
        "        n = x.shape[1]\n"
        "        if self.rel.shape[1] != n:\n"
        "            self.rel = self.make_rel(n)\n"
        "        out = x[..., None] * self.proj(self.rel).sum(-1)\n"
        "        x = out.mean(-1)\n"
        "        return x\n"
        "model = Attn().to(dev)\n"
        "x = torch.randn(2, 4, device=dev)\n",
        "y = model(x)\n",
        expect=("edits",),
        after="assert y.device == dev and model.rel.device == dev",
    ),
    Case(
        # The factory follows another tensor's device (device = base.device): base is the cause, a list
        # attribute that the method handed the device re-makes without moving it.
        "factory-follows-the-device-of-a-list-a-method-forgot-to-move",
        "class Anchors(nn.Module):\n"
        "    def __init__(self, sizes):\n"
        "        super().__init__()\n"
        "        self.cell = [torch.tensor([[-s, -s, s, s]]) for s in sizes]\n"
        "    def set_cell(self, dtype, device):\n"
        "        self.cell = [c.to(dtype=dtype) for c in self.cell]\n"
        "    def grid(self, n, strides):\n"
        "        out = []\n"
        "        for base, stride in zip(self.cell, strides):\n"
        "            device = base.device\n"
        "            shifts = torch.arange(0, n, dtype=torch.float32, device=device) * stride\n"
        "            out.append(shifts.view(-1, 1, 1) + base.view(1, -1, 4))\n"
        "        return out\n"
        "    def forward(self, feature):\n"
        "        self.set_cell(feature.dtype, feature.device)\n"
        "        strides = [torch.full((), 4.0, device=feature.device) for _ in self.cell]\n"
        "        return torch.cat([a.reshape(-1, 4) for a in self.grid(feature.shape[-1], strides)]) + feature.mean()\n"
        "anchors = Anchors([1.0, 2.0]).to(dev)\n"
        "feature = torch.randn(1, 3, 5, 5, device=dev)\n",
        "boxes = anchors(feature)\n",
        expect=("edits",),
        after="assert boxes.device == dev and all(c.device == dev for c in anchors.cell)",
    ),
    Case(
        # The model's forward rebinds its input (images = self.prep(images)) to an object whose attribute
        # its body reads: the trail goes through the rebinding and the attribute to the cell's list.
        "input-list-rebound-to-a-batch-object-in-forward",
        "class Batch:\n"
        "    def __init__(self, tensors):\n"
        "        self.tensors = tensors\n"
        "class Prep(nn.Module):\n"
        "    def forward(self, images):\n"
        "        return Batch(torch.stack([i * 2 for i in images]))\n"
        "class Body(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 4, 3)\n"
        "    def forward(self, x):\n"
        "        return torch.relu(self.conv(x))\n"
        "class Detector(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.prep, self.body = Prep(), Body()\n"
        "    def forward(self, images):\n"
        "        images = self.prep(images)\n"
        "        return self.body(images.tensors)\n"
        "model = Detector().to(dev)\n"
        "images = [torch.rand(3, 8, 8) for _ in range(2)]\n",
        "out = model(images)\n",
        expect=("code", "action", "edits"),
        after="assert out.device == dev and all(i.device == dev for i in images)",
    ),
    Case(
        # A part's forward reads the device from its inputs but binds what its own helper makes on the
        # default device without moving it: the caller's loop meets host tensors, made in that part.
        "a-parts-forward-keeps-what-its-helper-made-on-the-host",
        "class Priors(nn.Module):\n"
        "    def _grid(self, h, w):\n"
        "        ys, xs = torch.meshgrid(torch.arange(h) / h, torch.arange(w) / w, indexing='ij')\n"
        "        return torch.stack([xs, ys], -1).reshape(-1, 2)\n"
        "    def forward(self, features):\n"
        "        device = features[0].device\n"
        "        grid = self._grid(*features[0].shape[-2:])\n"
        "        return [grid for _ in features]\n"
        "class Head(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(3, 2, 1)\n"
        "        self.priors = Priors()\n"
        "    def forward(self, images):\n"
        "        features = [self.conv(images)]\n"
        "        priors = self.priors(features)\n"
        "        out = []\n"
        "        for f, p in zip(features, priors):\n"
        "            offsets = f.flatten(2).transpose(1, 2) - p\n"
        "            out.append(offsets * p)\n"
        "        return out\n"
        "model = Head().to(dev)\n"
        "images = torch.randn(2, 3, 4, 4, device=dev)\n",
        "out = model(images)\n",
        expect=("edits",),
        after="assert out[0].device == dev",
    ),
    Case(
        # A detector's images: a list the cell passes to the model, made by a comprehension of host
        # factories. %devices moves its tensors and gives the comprehension device=.
        "list-of-host-images-passed-to-a-model",
        "model = nn.Conv2d(3, 4, 3).to(dev)\n"
        "class Detector(nn.Module):\n"
        "    def __init__(self, body):\n"
        "        super().__init__()\n"
        "        self.body = body\n"
        "    def forward(self, images):\n"
        "        return [self.body(image[None]) for image in images]\n"
        "detector = Detector(model)\n"
        "images = [torch.rand(3, 8, 8) for _ in range(2)]\n",
        "features = detector(images)\n",
        sources=("devcheck", "input-on-other-device"),
        expect=("code", "action", "edits"),
        after="assert all(i.device == dev for i in images)",
    ),
    Case(
        # Each block keeps its own plain tensor attribute: registering the first one's leaves the
        # next block failing, so every block of that class gets its buffer.
        "every-block-keeps-a-plain-tensor-attribute",
        "class Block(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = nn.Linear(4, 4)\n"
        "        self.shift = torch.zeros(4)\n"
        "    def forward(self, x):\n"
        "        return self.lin(x) + self.shift\n"
        "model = nn.Sequential(Block(), Block(), Block()).to(dev)\n"
        "x = torch.randn(2, 4, device=dev)\n",
        "y = model(x)\n",
        after="assert all(b.shift.device == dev and 'shift' in dict(b.named_buffers()) for b in model)",
    ),
    Case(
        # Not passed to the model: passed with its output to a loss, which meets it on the model's device.
        "labels-meet-the-models-output-in-a-loss",
        "model = nn.Linear(8, 3).to(dev)\nx = torch.randn(4, 8, device=dev)\nlabels = torch.tensor([0, 2, 1, 1])\n",
        "loss = F.cross_entropy(model(x), labels)\n",
        sources=("devcheck", "input-on-other-device"),
    ),
    Case(
        # The failing call's parameter is also named by a part the notebook made first: the whole
        # model moves (its head would fail next), and the model's line is the one edited.
        "model-assembled-from-named-parts",
        "class Net(nn.Module):\n"
        "    def __init__(self, body, head):\n"
        "        super().__init__()\n"
        "        self.body, self.head = body, head\n"
        "    def forward(self, x):\n"
        "        return self.head(self.body(x).mean((2, 3)))\n"
        "backbone = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())\n"
        "head = nn.Linear(4, 2)\n"
        "model = Net(backbone, head)\n"
        "x = torch.randn(1, 3, 8, 8, device=dev)\n",
        "y = model(x)\n",
        after="assert {p.device for p in model.parameters()} == {dev} and model.body is backbone",
    ),
    Case(
        # A detector's targets: a list of dicts, one tensor of each made on the host, read in a loop
        # of the user's own helper: the loop is not the cause (it iterates what it was handed);
        # the cell's list is moved dict by dict and its line gets device=.
        "targets-list-of-dicts-read-in-a-helper-loop",
        "def match(anchors, targets):\n"
        "    scores = []\n"
        "    for anchors_per_image, targets_per_image in zip(anchors, targets):\n"
        "        boxes = targets_per_image['boxes']\n"
        "        scores.append(boxes @ anchors_per_image.T)\n"
        "    return scores\n"
        "class Matcher(nn.Module):\n"
        "    def forward(self, anchors, targets):\n"
        "        return match(anchors, targets)\n"
        "matcher = Matcher()\n"
        "anchors = [torch.rand(5, 4, device=dev) for _ in range(2)]\n"
        "targets = [{'boxes': torch.rand(1, 4),\n"
        "            'labels': torch.tensor([1], device=dev)} for _ in range(2)]\n",
        "scores = matcher(anchors, targets)\n",
        after="assert all(t['boxes'].device == dev and t['labels'].device == dev for t in targets)",
        expect=("code", "action", "edits"),
    ),
    Case(
        "head-replaced-after-to",
        "model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(dev)\n"
        "model[2] = nn.Linear(16, 4)  # a new head, made after the move: on the CPU\n"
        "x = torch.randn(5, 8, device=dev)\n",
        "y = model(x)\n",
        sources=("devcheck", "mixed-device-module"),
    ),
    Case(
        "head-replaced-and-input-on-host",
        "model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(dev)\n"
        "model[2] = nn.Linear(16, 4)\n"
        "x = torch.randn(5, 8)  # the input was never moved either\n",
        "y = model(x)\n",
        sources=("devcheck",),
        after="assert x.device == dev and {p.device for p in model.parameters()} == {dev}",
    ),
    Case(
        "one-block-moved-graph-alive",
        "class Net(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.GELU()) for _ in range(4))\n"
        "        self.out = nn.Linear(8, 2)\n"
        "    def forward(self, x):\n"
        "        for block in self.blocks:\n"
        "            x = block(x)\n"
        "        return self.out(x)\n"
        "model = Net().to(dev)\n"
        "model.blocks[2].to('cpu')\n"
        "x = torch.randn(3, 8, device=dev, requires_grad=True)\n",
        "loss = model(x).sum()\nloss.backward()\n",
        sources=("devcheck", "mixed-device-module"),
        after="assert x.grad is not None and x.grad.device == dev",
    ),
    Case(
        "split-model-and-its-input",
        "model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Linear(4, 2))\n"
        "model[3].to(dev)\n"
        "x = torch.randn(2, 4, requires_grad=True)\n",
        "out = model(x)\n",
        sources=("devcheck",),
    ),
    Case(
        "swap-flag-set",
        "torch.__future__.set_swap_module_params_on_conversion(True)\n"
        "model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4), nn.Linear(4, 2))\n"
        "model[3].to(dev)\n"
        "x = torch.randn(2, 4, device=dev, requires_grad=True)\n",
        "out = model(x)\nout.sum().backward()\n",
        sources=("devcheck", "mixed-device-module"),
        teardown="torch.__future__.set_swap_module_params_on_conversion(False)",
    ),
    Case(
        "gpt2-one-block-moved",
        TINY_GPT2 + "model.transformer.h[1].to('cpu')\n",
        "out = model(ids, labels=ids)\nout.loss.backward()\n",
        sources=("devcheck", "mixed-device-module"),
        after="assert model.lm_head.weight is model.transformer.wte.weight  # tied weights stay tied",
        tags=("transformers",),
    ),
    Case(
        "gpt2-head-untied-then-left-behind",
        TINY_GPT2 + "model.lm_head = nn.Linear(32, 100, bias=False)  # a new head, on the CPU\n",
        "out = model(ids, labels=ids)\n",
        sources=("devcheck", "mixed-device-module"),
        tags=("transformers",),
    ),
    Case(
        "llama-one-layer-moved",
        TINY_LLAMA + "model.model.layers[2].to('cpu')\n",
        "out = model(ids, labels=ids)\nout.loss.backward()\n",
        sources=("devcheck", "mixed-device-module"),
        tags=("transformers",),
    ),
    Case(
        "bert-classifier-replaced",
        TINY_BERT + "model.classifier = nn.Linear(32, 3)\nlabels = torch.tensor([0, 2], device=dev)\n",
        "out = model(ids, labels=labels)\n",
        sources=("devcheck", "mixed-device-module"),
        tags=("transformers",),
    ),
    Case(
        "bert-input-ids-on-host",
        TINY_BERT + "ids = ids.cpu()\nlabels = torch.tensor([0, 2])\n",
        "out = model(ids, labels=labels)\n",
        sources=("devcheck", "input-on-other-device"),
        tags=("transformers",),
    ),
    Case(
        "optimizer-state-after-checkpoint-load",
        "model = nn.Linear(3, 2)\n"
        "opt = torch.optim.AdamW(model.parameters())\n"
        "model(torch.ones(1, 3)).sum().backward(); opt.step()\n"
        "checkpoint = opt.state_dict()\n"
        "model.to(dev)\n"
        "opt = torch.optim.AdamW(model.parameters())\n"
        "opt.load_state_dict(checkpoint)\n"
        "for state in opt.state.values():  # state loaded before the move, as in the common bug\n"
        "    state['exp_avg'], state['exp_avg_sq'] = state['exp_avg'].cpu(), state['exp_avg_sq'].cpu()\n"
        "model(torch.ones(1, 3, device=dev)).sum().backward()\n",
        "opt.step()\n",
        sources=("devcheck", "optimizer-state-device"),
        after="assert all(s['exp_avg'].device == dev and s['step'].device.type == 'cpu' for s in opt.state.values())",
    ),
    Case(
        "optimizer-state-model-split-on-purpose",
        "model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))\n"
        "opt = torch.optim.AdamW(model.parameters())\n"
        "model(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad()\n"
        "model[0].to('DEVICE_0'); model[1].to('DEVICE_1')  # model parallel, on purpose\n",
        "out = model[1](model[0](torch.randn(2, 4, device='DEVICE_0')).to('DEVICE_1'))\n"
        "out.sum().backward()\nopt.step()\n",
        sources=("devcheck", "optimizer-state-device"),
        after="assert all(s['exp_avg'].device == p.device for p, s in opt.state.items())",
    ),
    Case(
        "gpt2-optimizer-state-left-on-host",
        TINY_GPT2 + "model.cpu()\nopt = torch.optim.AdamW(model.parameters())\n"
        "model(ids.cpu(), labels=ids.cpu()).loss.backward(); opt.step(); opt.zero_grad()\n"
        "model.to(dev)  # the optimizer's state stays behind\n"
        "model(ids, labels=ids).loss.backward()\n",
        "opt.step()\n",
        sources=("devcheck", "optimizer-state-device"),
        tags=("transformers",),
    ),
    Case(
        "unregistered-attribute",
        "class ScaledNet(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(8, 8)\n"
        "        self.scale = torch.ones(8)  # not a buffer: .to() leaves it behind\n"
        "    def forward(self, x):\n"
        "        return self.fc(x) * self.scale\n"
        "model = ScaledNet().to(dev)\n"
        "x = torch.randn(2, 8, device=dev)\n",
        "y = model(x)\n",
        sources=("devcheck", "unregistered-tensor-attribute"),
        expect=("code", "edits", "action"),
        after="keys = set(model.state_dict()); model.to('cpu'); assert model.scale.device.type == 'cpu'; "
              "model.to(dev); assert model.scale.device == dev and set(model.state_dict()) == keys",
    ),
    Case(
        "positional-encoding-view",
        "class PositionalEncoding(nn.Module):\n"
        "    def __init__(self, dim=8, length=16):\n"
        "        super().__init__()\n"
        "        self.proj = nn.Linear(dim, dim)\n"
        "        self.pe = torch.randn(length, dim)\n"
        "    def forward(self, x):\n"
        "        return self.proj(x) + self.pe[: x.shape[0]]\n"
        "model = nn.Sequential(PositionalEncoding()).to(dev)\n"
        "x = torch.randn(4, 8, device=dev)\n",
        "y = model(x)\n",
        sources=("devcheck", "unregistered-tensor-attribute"),
        expect=("code", "edits", "action"),
    ),
    Case(
        "lazy-cache-with-class-default",
        "class Cached(nn.Module):\n"
        "    pe = None  # filled on the first forward\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(8, 8)\n"
        "    def forward(self, x):\n"
        "        if self.pe is None:\n"
        "            self.pe = torch.arange(8.0)\n"
        "        return self.fc(x) + self.pe\n"
        "model = Cached()\n"
        "model(torch.randn(1, 8))  # the cache is made on the CPU\n"
        "model.to(dev)\n"
        "x = torch.randn(2, 8, device=dev)\n",
        "y = model(x)\n",
        sources=("devcheck", "unregistered-tensor-attribute"),
        expect=("code", "edits", "action"),
    ),
    Case(
        "mask-made-in-forward",
        "class MaskNet(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc1 = nn.Linear(8, 8)\n"
        "    def forward(self, x):\n"
        "        h = self.fc1(x)\n"
        "        mask = torch.ones(x.shape[0], x.shape[1])\n"
        "        return h * mask\n"
        "model = MaskNet().to(dev)\n"
        "x = torch.randn(4, 8, device=dev)\n",
        "y = model(x)\n",
        expect=("edits",),  # a local of the user's forward: only their own line can change it
    ),
    Case(
        "mask-made-in-one-branch-feeds-a-helper",
        "def position_bias(mask, heads):\n"
        "    slopes = torch.arange(1, heads + 1, device=mask.device).float()\n"
        "    return (mask.cumsum(-1) - 1)[:, None, :] * slopes[None, :, None]\n"
        "class BiasNet(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(8, 8)\n"
        "    def forward(self, x, attention_mask=None):\n"
        "        batch, length, _ = x.shape\n"
        "        mask = (\n"
        "            torch.ones((batch, length), dtype=torch.long)\n"
        "            if attention_mask is None\n"
        "            else attention_mask\n"
        "        )\n"
        "        bias = position_bias(mask, 2)\n"
        "        bias = bias.reshape(batch, 2, length)\n"
        "        return self.fc(x).sum(-1, keepdim=True).transpose(1, 2) + bias\n"
        "model = BiasNet().to(dev)\n"
        "x = torch.randn(3, 5, 8, device=dev)\n",
        "y = model(x)\n",
        expect=("edits",),  # computed from a mask made in the user's forward: that line is the cause
    ),
    Case(
        "state-list-made-in-a-comprehension-passed-down",
        "def scan_step(state, k):\n"
        "    num, top = state\n"
        "    return torch.maximum(top, k) + num\n"
        "class Recurrent(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.key = nn.Linear(4, 4)\n"
        "    def layer(self, x, state):\n"
        "        parts = tuple(s[:, :, 0] for s in state[1:]) if state is not None else None\n"
        "        return scan_step(parts, self.key(x))\n"
        "    def forward(self, x, state=None):\n"
        "        if state is None:\n"
        "            shape = (x.size(0), 4, 2)\n"
        "            state = [\n"
        "                torch.zeros(\n"
        "                    *shape, dtype=x.dtype\n"
        "                )\n"
        "                for i in range(3)\n"
        "            ]\n"
        "        return self.layer(x, state=state)\n"
        "model = Recurrent().to(dev)\n"
        "x = torch.randn(2, 4, device=dev)\n",
        "y = model(x)\n",
        expect=("edits",),  # made in the user's forward and passed down: that line is the cause
    ),
    Case(
        "host-data-reaches-the-model-through-a-helper",
        "class Tagger(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = nn.Linear(8, 3)\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n"
        "    def init_state(self, n):\n"
        "        return self.fc.weight.new_zeros(n, 3)\n"
        "model = Tagger().to(dev)\n"
        + BATCHIFY
        + "train_data = batchify(torch.randn(20, 8), 2)\n"
        + TRAIN_ON_BATCHES
        + "def first_state():\n"
        "    return model.init_state(2)  # a method of the model that never runs it\n",
        "out = train()\n",
        sources=("devcheck", "input-on-other-device"),
        expect=("code", "edits", "action"),
    ),
    Case(
        "splits-made-by-the-same-helper-all-move",
        "model = nn.Linear(8, 3).to(dev)\n"
        + BATCHIFY
        + "train_data = batchify(torch.randn(20, 8), 2)\n"
        "val_data = batchify(torch.randn(12, 8), 2)\n"
        + TRAIN_ON_BATCHES
        + "def evaluate(source):\n"
        "    return [model(get_batch(source, i)[0]) for i in range(source.size(0))]\n",
        "out = train()\nscores = evaluate(val_data)\n",
        sources=("input-on-other-device",),  # at rest: train_data is seen going in; val_data is made alike
        expect=("code", "edits", "action"),
        after="assert train_data.device == dev and val_data.device == dev",
    ),
    Case(
        "a-loader-returns-a-value-made-of-two-host-tensors",
        "model = nn.Linear(6, 6).to(dev)\n"
        "def load_graph(n, device):\n"
        "    feats = torch.randn(n, 6)\n"
        "    links = torch.randint(0, 2, (n, n)).float()\n"
        "    links = torch.eye(n) + links  # self-loops\n"
        "    return feats.to(device), links\n"
        "feats, links = load_graph(6, dev)\n",
        "out = links @ model(feats)\n",
        expect=("code", "edits", "action"),
        after="assert links.device == dev and feats.device == dev",
    ),
    Case(
        "an-analysis-window-made-on-the-host",
        "signal = torch.randn(2, 256, device=dev)\n"
        "window = torch.hann_window(64)\n",
        "spec = torch.stft(signal, 64, hop_length=16, window=window, return_complex=True)\n",
        expect=("code", "edits", "action"),
        after="assert window.device == dev",
    ),
    Case(
        "loss-weight-left-on-host",
        "model = nn.Linear(8, 3).to(dev)\n"
        "loss_fn = nn.CrossEntropyLoss(weight=torch.tensor([1.0, 2.0, 1.0]))\n"
        "x = torch.randn(4, 8, device=dev)\ny = torch.tensor([0, 1, 2, 1], device=dev)\n",
        "loss = loss_fn(model(x), y)\n",
    ),
    Case(
        "labels-in-a-batch-dict",
        "model = nn.Linear(8, 3).to(dev)\n"
        "batch = {'x': torch.randn(4, 8, device=dev), 'labels': torch.tensor([0, 1, 2, 0])}\n",
        "loss = F.cross_entropy(model(batch['x']), batch['labels'])\n",
        sources=("devcheck", "input-on-other-device"),
    ),
    Case(
        "functional-call-with-host-params",
        "model = nn.Linear(8, 3)\n"
        "params = {k: v.detach().clone() for k, v in model.named_parameters()}\n"
        "model.to(dev)\n"
        "x = torch.randn(4, 8, device=dev)\n",
        "out = torch.func.functional_call(model, params, (x,))\n",
        after="assert model.weight.device == dev and all(v.device == dev for v in params.values())",
    ),
    Case(
        "functional-call-of-a-users-module-with-host-params",
        "class MLP(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc1, self.fc2 = nn.Linear(8, 16), nn.Linear(16, 3)\n"
        "    def forward(self, x):\n"
        "        return self.fc2(F.relu(self.fc1(x)))\n"
        "mlp = MLP()\n"
        "mparams = {k: v.detach().clone() for k, v in mlp.named_parameters()}\n"
        "mlp.to(dev)\n"
        "x = torch.randn(4, 8, device=dev)\n",
        "out = torch.func.functional_call(mlp, mparams, (x,))\n",
        after="assert all(v.device == dev for v in mparams.values())",
    ),
    Case(
        "whisper-features-in-a-batch-feature-left-on-host",
        TINY_WHISPER + "feats = BatchFeature({'input_features': torch.randn(2, 8, 32)})\n",
        "gen = model.generate(**feats, max_new_tokens=3)\n",
        after="assert type(feats) is BatchFeature and feats['input_features'].device == dev",
        tags=("transformers",),
    ),
    Case(
        "functional-call-params-trained-by-an-optimizer",
        "model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))\n"
        "params = {k: v.detach().clone().requires_grad_() for k, v in model.named_parameters()}\n"
        "opt = torch.optim.Adam(params.values(), lr=0.01)\n"
        "x, y = torch.randn(3, 8), torch.tensor([0, 1, 2])\n"
        "F.cross_entropy(torch.func.functional_call(model, params, (x,)), y).backward()\n"
        "opt.step()\nopt.zero_grad()\n"
        "model.to(dev)\nx, y = x.to(dev), y.to(dev)\n",
        "loss = F.cross_entropy(torch.func.functional_call(model, params, (x,)), y)\nloss.backward()\nopt.step()\n",
        after="assert all(p is q for p, q in zip(opt.param_groups[0]['params'], params.values()))\n"
              "assert all(p.is_leaf and p.device == dev for p in params.values())",
        expect=("code",),  # each tensor moved in place, keeping what the optimizer holds: no button
    ),
    Case(
        "noise-made-in-a-helper-without-device",
        "model = nn.Linear(8, 3).to(dev)\n"
        "def add_noise(t, scale=0.1):\n"
        "    return t + scale * torch.randn(t.shape)\n"
        "x = torch.randn(3, 8, device=dev)\n",
        "y = model(add_noise(x))\n",
        expect=("edits",),  # made in the user's helper: only their own line can change it
    ),
    Case(
        "batch-encoding-made-from-loose-tensors",
        TINY_BERT + "from transformers import BatchEncoding\n"
        "input_ids = torch.randint(1, 100, (3, 7))\nlabels = torch.randint(0, 3, (3,))\n"
        "batch = BatchEncoding({'input_ids': input_ids, 'labels': labels})\n",
        'loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss\n',
        expect=("code", "edits", "action"),
        tags=("transformers",),
    ),
    Case(
        "leaf-held-by-an-optimizer",
        "w = torch.randn(8, 3, requires_grad=True)\n"
        "b = torch.zeros(3, device=dev, requires_grad=True)\n"
        "opt = torch.optim.SGD([w, b], lr=0.1)\n"
        "x = torch.randn(4, 8, device=dev)\n",
        "loss = (x @ w + b).sum()\nloss.backward()\nopt.step()\n",
        after="assert opt.param_groups[0]['params'][0] is w and w.is_leaf and w.device == dev",
    ),
    Case(
        "parameter-held-by-an-optimizer",
        "p = nn.Parameter(torch.randn(8, 3))\n"
        "opt = torch.optim.Adam([p])\n"
        "x = torch.randn(4, 8, device=dev)\n",
        "loss = (x @ p).sum()\nloss.backward()\nopt.step()\n",
        after="assert opt.param_groups[0]['params'][0] is p and isinstance(p, nn.Parameter) and p.device == dev",
    ),
    Case(
        "odd-dict-keys",
        "model = nn.Linear(8, 2).to(dev)\n"
        "batch = {'in\"put\\n': torch.randn(2, 8), 'nul\\x00key': torch.randn(2, 8)}\n",
        "y = model(batch['in\"put\\n']) + model(batch['nul\\x00key'])\n",
        sources=("devcheck",),
    ),
    Case(
        "odd-attribute-name",
        "class Holder: pass\n"
        "h = Holder()\n"
        "setattr(h, 'my input', torch.randn(2, 8))\n"
        "model = nn.Linear(8, 2).to(dev)\n",
        "y = model(getattr(h, 'my input'))\n",
        sources=("devcheck",),
    ),
    Case(
        "stale-optimizer-after-model-cell-ran-again",
        "model = nn.Linear(4, 2).to(dev)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)\n"
        "model = nn.Linear(4, 2).to(dev)  # the model's cell ran again\n"
        "x = torch.randn(3, 4, device=dev)\n",
        "before = model.weight.detach().clone()\n"
        "model(x).sum().backward()\nopt.step()\n"
        "assert not torch.equal(before, model.weight), 'the step did not train model'\n",
        sources=("stale-optimizer",),
        after="assert opt.param_groups[0]['weight_decay'] == 0.1 and opt.param_groups[0]['lr'] == 0.01",
    ),
    Case(
        "memory-held-by-output-history",
        "import gc, weakref\n"
        "big = torch.ones(1 << 16, device=dev)\n"
        "ref = weakref.ref(big)\n",
        "assert ref() is None, 'still held'\n",
        sources=("held-by-output-history",),
        tags=("history",),
    ),
]

# Cases kept beside this file, by topic.
from fix_cases_objects import OBJECT_CASES  # noqa: E402

CASES += [Case(**fields) for fields in OBJECT_CASES]
