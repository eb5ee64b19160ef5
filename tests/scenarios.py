"""Generated scenarios: notebook sessions with a device bug, built from seeds.

A scenario composes a **model family** (an MLP, a CNN with BatchNorm, transformers models
from small configs, a LoRA-wrapped model, a compiled one, one dispatched by accelerate
over two devices, a hand-made two-stage pipeline), **where the wrong device sits** (an
input, a loop variable, a module assigned after ``.to()``, a buffer reassigned in
``forward``, a plain/list/tuple/dict attribute, a local of ``forward``, an input made in the
failing call itself, an inline expression, a keyword argument a pre-hook misses, optimizer
state, a loaded state dict,
a meta model, temporaries, ...) and **an entry point** (a plain cell explained after the
fact, ``%%devcheck``, ``%devices``, Apply fix then Re-run cell). Names, styles and
unrelated tensors (decoys) are drawn from the seed too, so the same bug is written the
many ways users write it. Clean sessions (no bug) and errors that are not device
mismatches are generated beside them.

``DEVICE`` and ``DEVICE_1`` stand for the accelerator the run uses (``sim:0``/``sim:1``
here, ``cuda:0``/``cuda:1`` on a GPU). :mod:`scenario_runner` runs a scenario and checks
the fix as printed.
"""

from __future__ import annotations

import random
import re
import textwrap
from dataclasses import dataclass, field

ENTRIES = ("plain", "devcheck", "devices", "button")


@dataclass(frozen=True)
class Scenario:
    seed: int
    family: str
    bug: str
    entry: str
    #: Cells run before the failing one, in order (the session so far).
    setup: tuple[str, ...]
    #: The cell that fails because of the bug (and works once it is fixed).
    failing: str
    #: "mismatch" (a device mismatch), "device_error" (another device error, of ``error_kind``),
    #: "clean" (no bug), "other" (fails, but not for devices), "stale" (no error: an optimizer
    #: that trains nothing, shown by an assertion).
    kind: str = "mismatch"
    #: The devices of the failing call's tensors, and the line it is on (stripped), for "mismatch".
    devices: frozenset[str] = frozenset()
    line: str = ""
    #: Names that take no part in the failure: no explanation may blame them.
    decoys: tuple[str, ...] = ()
    #: Run after the fixed failing cell: assertions about what must hold then.
    after: str = ""
    needs: tuple[str, ...] = ()  # "transformers", "peft", "accelerate", "two_devices", "compile"
    #: For "device_error": what the explanation must say the error is (``DeviceError.kind``).
    error_kind: str = ""

    @property
    def name(self) -> str:
        return f"{self.family}-{self.bug}-{self.entry}-{self.seed}"


# -- model families ---------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """How to build a model of this family, make its inputs and call it."""

    name: str
    #: Expression building the model on the CPU.
    build: str
    #: ``(name, expression with {device} for the device keyword)`` of each input, and how a
    #: call passes them (``{model}`` and the input names filled in).
    inputs: tuple[tuple[str, str], ...]
    call: str
    #: Size of the last dimension of the call's result (a float tensor).
    width: int
    #: A submodule replaced after the model was moved: (path, expression building it).
    head: tuple[str, str]
    imports: str = ""
    needs: tuple[str, ...] = ()
    #: Builds the dataset of a DataLoader from the inputs (one tensor per input).
    loads: bool = True


_LM = dict(imports="import transformers\n", needs=("transformers",))
FAMILIES = {
    "mlp": Family("mlp", "nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16))",
                  (("x", "torch.randn(4, 16{device})"),), "{model}({x})", 16, ("[2]", "nn.Linear(32, 16)")),
    "cnn": Family("cnn", "nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), "
                         "nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))",
                  (("x", "torch.randn(2, 3, 8, 8{device})"),), "{model}({x})", 10,
                  ("[1]", "nn.BatchNorm2d(8).eval()")),
    "gpt2": Family("gpt2", "transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, "
                           "vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0))",
                   (("ids", "torch.randint(0, 100, (2, 8){device})"),), "{model}(input_ids={ids}).logits", 100,
                   (".lm_head", "nn.Linear(32, 100, bias=False)"), **_LM),
    "llama": Family("llama", "transformers.LlamaForCausalLM(transformers.LlamaConfig(hidden_size=32, "
                             "intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, "
                             "vocab_size=100, bos_token_id=0, eos_token_id=0, pad_token_id=0))",
                    (("ids", "torch.randint(0, 100, (2, 8){device})"),), "{model}(input_ids={ids}).logits", 100,
                    (".lm_head", "nn.Linear(32, 100, bias=False)"), **_LM),
    "t5": Family("t5", "transformers.T5ForConditionalGeneration(transformers.T5Config(vocab_size=100, d_model=32, "
                       "d_kv=8, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0, pad_token_id=0))",
                 (("ids", "torch.randint(1, 100, (2, 8){device})"), ("targets", "torch.randint(1, 100, (2, 5){device})")),
                 "{model}(input_ids={ids}, decoder_input_ids={targets}).logits", 100,
                 (".lm_head", "nn.Linear(32, 100, bias=False)"), **_LM),
    "bart": Family("bart", "transformers.BartForConditionalGeneration(transformers.BartConfig(vocab_size=100, "
                           "d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, "
                           "decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, "
                           "max_position_embeddings=64))",
                   (("ids", "torch.randint(3, 100, (2, 8){device})"), ("targets", "torch.randint(3, 100, (2, 5){device})")),
                   "{model}(input_ids={ids}, decoder_input_ids={targets}).logits", 100,
                   (".lm_head", "nn.Linear(32, 100, bias=False)"), **_LM),
    "vit": Family("vit", "transformers.ViTForImageClassification(transformers.ViTConfig(image_size=16, patch_size=4, "
                         "num_channels=3, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, "
                         "intermediate_size=64, num_labels=5))",
                  (("pixels", "torch.randn(2, 3, 16, 16{device})"),), "{model}(pixel_values={pixels}).logits", 5,
                  (".classifier", "nn.Linear(32, 5)"), **_LM),
    "whisper": Family("whisper", "transformers.WhisperForConditionalGeneration(transformers.WhisperConfig("
                                 "vocab_size=100, num_mel_bins=8, encoder_layers=1, decoder_layers=1, "
                                 "encoder_attention_heads=2, decoder_attention_heads=2, d_model=32, encoder_ffn_dim=64, "
                                 "decoder_ffn_dim=64, max_source_positions=16, max_target_positions=32, "
                                 "pad_token_id=0, decoder_start_token_id=0, bos_token_id=0, eos_token_id=0))",
                      (("features", "torch.randn(2, 8, 32{device})"), ("tokens", "torch.randint(1, 100, (2, 4){device})")),
                      "{model}(input_features={features}, decoder_input_ids={tokens}).logits", 100,
                      (".proj_out", "nn.Linear(32, 100, bias=False)"), **_LM),
    "lora": Family("lora", "peft.get_peft_model(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 16)), "
                           "peft.LoraConfig(r=4, target_modules=['0', '2']))",
                   (("x", "torch.randn(4, 16{device})"),), "{model}({x})", 16,
                   (".base_model.model[2].lora_B['default']", "nn.Linear(4, 16, bias=False)"),
                   imports="import peft\n", needs=("peft",)),
}
#: Families whose model is compiled (``torch.compile``, eager backend) before it is called.
COMPILED = "compiled"
#: A GPT-2 whose blocks accelerate dispatches over two devices.
DISPATCHED = "dispatched"
#: Two user-written stages on two devices, joined by a forward pre-hook.
PIPELINE = "pipeline"

#: Names people give things (some match devinspect's input-name list, some do not).
MODEL_NAMES = ("model", "net", "m", "clf", "encoder", "policy", "my_model")
DEVICE_NAMES = ("dev", "device", "DEV", "gpu")
INPUT_NAMES = ("x", "inputs", "batch", "feats", "enc_in", "sample", "q", "data_in", "pix")
DECOY_NAMES = ("y", "labels", "cache", "weights_cpu", "old_x", "stats", "tmp", "buf", "scratch")
OPTIMIZERS = ("torch.optim.AdamW({params}, lr=1e-3)", "torch.optim.SGD({params}, lr=0.01, momentum=0.9)",
              "torch.optim.Adam({params}, lr=3e-4, weight_decay=0.01)")

#: Where the wrong device sits, with the families it applies to (None: all).
BUGS: dict[str, tuple[str, ...] | None] = {
    "input": None,
    "call_argument": None,
    "temporary": None,
    "loop_variable": ("mlp", "cnn", "gpt2", "llama", "vit", "lora", COMPILED),
    "assigned_after_to": ("mlp", "cnn", "gpt2", "llama", "t5", "bart", "vit", "whisper", DISPATCHED),
    "buffer_in_forward": ("mlp", "cnn", "gpt2", "vit", "t5"),
    "plain_attribute": ("mlp", "cnn", "gpt2", "llama", "vit", "whisper", "lora"),
    "list_attribute": ("mlp", "cnn", "gpt2", "bart", "vit"),
    "tuple_attribute": ("mlp", "cnn", "llama"),
    "dict_attribute": ("mlp", "cnn", "gpt2", "t5", "vit"),
    "forward_local": ("mlp", "cnn", "gpt2", "llama", "t5", "bart", "vit", "whisper", "lora", COMPILED),
    "inline": ("mlp", "cnn", "gpt2", "llama", "vit", "whisper", COMPILED),
    "hook_kwarg": (PIPELINE,),
    "optimizer_state": ("mlp", "cnn", "gpt2", "llama", "vit", "lora"),
    "state_dict": ("mlp", "cnn", "gpt2", "llama", "t5", "vit", "whisper"),
    "meta": ("mlp", "cnn", "gpt2", "llama"),
    "container_input": ("mlp", "cnn", "vit"),
    "functional_weight": ("mlp",),
    "temporaries_only": ("mlp", "cnn"),
    "stale_optimizer": ("mlp", "cnn", "gpt2", "vit"),
}
#: Sessions without a bug, and errors that are not device mismatches.
CLEAN = "clean"
NOT_MISMATCH = "not_a_mismatch"

#: Entry points that can see each bug. A plain cell and %%devcheck see every failing call;
#: %devices sees what sits in the namespace at rest; Apply fix acts where a button is offered.
AT_REST = {"input", "assigned_after_to", "plain_attribute", "list_attribute", "tuple_attribute", "dict_attribute",
           "optimizer_state", "state_dict", "meta", "stale_optimizer", "container_input", "functional_weight"}


def entries_for(bug: str) -> tuple[str, ...]:
    if bug == "stale_optimizer":
        return ("devices",)
    return ENTRIES if bug in AT_REST else ("plain", "devcheck", "button")


@dataclass
class _Draft:
    """A scenario being written: its cells and what it expects."""

    rng: random.Random
    family: str
    bug: str
    dev: str = "dev"
    model: str = "model"
    setup: list[str] = field(default_factory=list)
    failing: list[str] = field(default_factory=list)
    kind: str = "mismatch"
    error_kind: str = ""
    devices: frozenset[str] = frozenset({"cpu", "DEVICE"})
    line: str = ""
    decoys: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)
    needs: tuple[str, ...] = ()
    #: The family's input names as this scenario writes them.
    inputs: dict[str, str] = field(default_factory=dict)


def _dev_kw(dev: str) -> str:
    return f", device={dev}"


def _fill(template: str, device_kw: str) -> str:
    return template.replace("{device}", device_kw)


def generate(seed: int) -> Scenario:
    """The scenario of ``seed`` (the same seed gives the same scenario)."""
    rng = random.Random(seed)
    roll = rng.random()
    if roll < 0.06:
        bug = CLEAN
    elif roll < 0.11:
        bug = NOT_MISMATCH
    else:
        bug = rng.choice(sorted(BUGS))
    families = BUGS.get(bug) or (*FAMILIES, COMPILED)
    if bug == CLEAN:
        families = (*FAMILIES, COMPILED, DISPATCHED, PIPELINE)
    elif bug == NOT_MISMATCH:
        families = (*FAMILIES, COMPILED, DISPATCHED)
    family = rng.choice(sorted(families))
    entry = rng.choice(entries_for(bug)) if bug not in (CLEAN, NOT_MISMATCH) else rng.choice(("plain", "devcheck"))
    d = _Draft(rng, family, bug, dev=rng.choice(DEVICE_NAMES), model=rng.choice(MODEL_NAMES))
    _write(d)
    return Scenario(
        seed=seed, family=family, bug=bug, entry=entry, setup=tuple(d.setup), failing="\n".join(d.failing) + "\n",
        kind=d.kind, error_kind=d.error_kind, devices=d.devices, line=d.line, decoys=tuple(d.decoys), after="\n".join(d.after),
        needs=tuple(sorted(set(d.needs))),
    )


def _family(d: _Draft) -> Family:
    name = {COMPILED: "mlp", DISPATCHED: "gpt2", PIPELINE: "mlp"}.get(d.family, d.family)
    return FAMILIES[name]


def _write(d: _Draft) -> None:
    fam = _family(d)
    d.needs = fam.needs + (("compile",) if d.family == COMPILED else ()) + (
        ("accelerate", "two_devices") if d.family == DISPATCHED else ()) + (("two_devices",) if d.family == PIPELINE else ())
    rng = d.rng
    names = list(INPUT_NAMES)
    rng.shuffle(names)
    # The inputs keep the family's own names for transformers (they are the keyword names users copy).
    d.inputs = {n: (names.pop() if fam.name in ("mlp", "cnn", "lora") else n) for n, _ in fam.inputs}
    prelude = f"import torch, torch.nn as nn, torch.nn.functional as F\n{fam.imports}torch.manual_seed({rng.randrange(100)})\n"
    prelude += f'{d.dev} = torch.device("DEVICE")\n'
    d.setup.append(prelude)
    writer = {
        CLEAN: _clean, NOT_MISMATCH: _not_a_mismatch, "input": _input, "call_argument": _call_argument,
        "temporary": _temporary,
        "loop_variable": _loop_variable, "assigned_after_to": _assigned_after_to,
        "buffer_in_forward": _user_module, "plain_attribute": _user_module, "list_attribute": _user_module,
        "tuple_attribute": _user_module, "dict_attribute": _user_module, "forward_local": _user_module,
        "inline": _user_module, "hook_kwarg": _hook_kwarg, "optimizer_state": _optimizer_state,
        "state_dict": _state_dict, "meta": _meta, "container_input": _container_input,
        "functional_weight": _functional_weight, "temporaries_only": _temporaries_only,
        "stale_optimizer": _stale_optimizer,
    }[d.bug]
    writer(d)
    _decoys(d)


# -- pieces ---------------------------------------------------------------------------------


def _inputs_code(d: _Draft, on_device: bool, skip: str | None = None) -> list[str]:
    fam = _family(d)
    out = []
    for name, template in fam.inputs:
        if name == skip:
            continue
        out.append(f"{d.inputs[name]} = {_fill(template, _dev_kw(d.dev) if on_device else '')}")
    return out


def _call(d: _Draft, model: str | None = None, **override: str) -> str:
    fam = _family(d)
    args = {n: override.get(n, d.inputs[n]) for n, _ in fam.inputs}
    return fam.call.format(model=model or d.model, **args)


def _build_model(d: _Draft, move: bool = True) -> list[str]:
    """The model, built and moved the way the family is used."""
    fam = _family(d)
    lines = []
    if d.family == DISPATCHED:
        # lm_head shares its weight with wte (tied), so both sit on one device, as accelerate's own maps put them.
        lines.append("from accelerate import dispatch_model")
        lines.append(f"{d.model} = {fam.build}")
        lines.append(f'{d.model} = dispatch_model({d.model}, device_map={{"transformer.wte": "DEVICE", '
                     f'"transformer.wpe": "DEVICE", "transformer.drop": "DEVICE", "transformer.h.0": "DEVICE", '
                     f'"transformer.h.1": "DEVICE_1", "transformer.ln_f": "DEVICE_1", "lm_head": "DEVICE"}})')
        return lines
    style = d.rng.choice(("to", "chain"))
    if move and style == "chain":
        lines.append(f"{d.model} = {fam.build}.to({d.dev})")
    else:
        lines.append(f"{d.model} = {fam.build}")
        if move:
            lines.append(f"{d.model}.to({d.dev})" if d.rng.random() < 0.5 else f"{d.model} = {d.model}.to({d.dev})")
    if d.family == COMPILED:
        lines.append(f'{d.model} = torch.compile({d.model}, backend="eager")')
    return lines


def _step(d: _Draft, call: str, optimizer: str | None = None) -> list[str]:
    """The failing cell's body: a forward, or a training step around ``call``."""
    if optimizer is None:
        return [f"out = {call}"]
    return [f"out = {call}", "loss = out.float().pow(2).mean()", "loss.backward()",
            f"{optimizer}.step()", f"{optimizer}.zero_grad()"]


def _decoys(d: _Draft) -> None:
    """Unrelated tensors on both devices: nothing may blame them."""
    if d.rng.random() < 0.5:
        return
    written = "\n".join(d.setup + d.failing)
    names = [n for n in DECOY_NAMES if n not in d.inputs.values() and n != d.model
             and not re.search(rf"\b{n}\b", written)]
    d.rng.shuffle(names)
    lines = []
    for name in names[: d.rng.randint(1, 3)]:
        where = d.rng.choice(("", _dev_kw(d.dev)))
        lines.append(f"{name} = torch.zeros({d.rng.randint(2, 9)}{where})")
        d.decoys.append(name)
    d.setup.append("\n".join(lines) + "\n")


# -- the bugs -------------------------------------------------------------------------------


def _clean(d: _Draft) -> None:
    """Sessions without a bug, written the ways users write them: they must get no error or warning."""
    d.kind = "clean"
    d.devices = frozenset()
    if d.family == PIPELINE:
        _hook_kwarg(d)
        d.kind, d.devices, d.line = "clean", frozenset(), ""
        d.failing = [f"out = second(first({d.inputs['x']}), shift)"]  # positionally: the hook moves it
        return
    variant = d.rng.choice(("forward", "train", "ema", "loader", "scheduler", "no_grad"))
    if d.family == DISPATCHED:
        variant = d.rng.choice(("forward", "no_grad"))
    if variant == "loader" and not _family(d).loads:
        variant = "forward"
    lines = _build_model(d)
    if variant == "loader":
        fam = _family(d)
        lines.append("from torch.utils.data import DataLoader, TensorDataset")
        lines += _inputs_code(d, False)
        names = [d.inputs[n] for n, _ in fam.inputs]
        lines.append(f"loader = DataLoader(TensorDataset({', '.join(names)}), batch_size=2)")
        d.setup.append("\n".join(lines) + "\n")
        batch = [f"{n}_b" for n in names]
        moved = ", ".join(f"{b}.to({d.dev})" for b in batch)
        d.failing = [f"for {', '.join(batch)} in loader:" if len(batch) > 1 else f"for {batch[0]}, in loader:",
                     f"    {', '.join(batch)} = {moved}",
                     f"    out = {_call(d, **{n: b for (n, _), b in zip(fam.inputs, batch)})}"]
        return
    d.setup.append("\n".join(lines + _inputs_code(d, True)) + "\n")
    if variant in ("train", "ema", "scheduler"):
        d.setup.append(f"opt = {d.rng.choice(OPTIMIZERS).format(params=d.model + '.parameters()')}\n")
        d.failing = _step(d, _call(d), "opt")
        if variant == "ema":
            d.setup.append(f"ema = torch.optim.swa_utils.AveragedModel({d.model})\n")
            d.failing.append(f"ema.update_parameters({d.model})")
        elif variant == "scheduler":
            d.setup.append("sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)\n")
            d.failing.append("sched.step()")
    elif variant == "no_grad":
        d.failing = ["with torch.no_grad():", f"    out = {_call(d)}"]
    else:
        d.failing = _step(d, _call(d))


def _not_a_mismatch(d: _Draft) -> None:
    """Errors that are not device mismatches, some with tensors on two devices nearby."""
    d.kind = "other"
    d.devices = frozenset()
    d.setup.append("\n".join(_build_model(d) + _inputs_code(d, True)) + "\n")
    d.setup.append("host_copy = torch.zeros(3)\n")
    variant = d.rng.choice(("value_error", "index", "recursion", "key", "assert", "shape", "checkpoint", "view_as"))
    first = d.inputs[_family(d).inputs[0][0]]
    if variant == "value_error":
        d.failing = [f"if {first}.device.type != 'cpu':",
                     f"    raise ValueError(f\"expected a host tensor, got {{{first}.device.type}} and {{host_copy.device}}\")"]
    elif variant == "index":
        d.failing = [f"row = {first}[1000]"]
    elif variant == "recursion":
        d.failing = ["def deeper(t, n):", "    return deeper(t + 1, n + 1)", f"deeper({first}, 0)"]
    elif variant == "key":
        d.failing = ["table = {'a': host_copy, 'b': " + first + "}", "value = table['c']"]
    elif variant == "assert":
        d.failing = [f"assert {first}.shape[0] == 99, 'batch of 99 expected'"]
    elif variant == "checkpoint":
        # A host checkpoint into the model on the device is how loading works; its shapes are wrong.
        d.failing = [f"ckpt = {{k: torch.zeros(*(s + 1 for s in v.shape)) for k, v in {d.model}.state_dict().items()}}",
                     f"{d.model}.load_state_dict(ckpt)"]
    elif variant == "view_as":
        # Mixed devices, but only the shape is read from the host tensor, and the shape is wrong.
        d.failing = [f"out = {first}.view_as(torch.zeros({first}.numel() + 1))"]
    else:
        fam = _family(d)
        if fam.name in ("mlp", "lora"):
            d.failing = [f"out = {d.model}(torch.randn(4, 17, device={d.dev}))"]
        else:
            d.failing = [f"out = {first}.float() @ torch.randn(3, 3, device={d.dev})"]


def _input(d: _Draft) -> None:
    fam = _family(d)
    culprit = d.rng.choice([n for n, _ in fam.inputs])
    lines = _build_model(d) + _inputs_code(d, True, skip=culprit)
    template = dict(fam.inputs)[culprit]
    lines.append(f"{d.inputs[culprit]} = {_fill(template, '')}  # made on the host")
    d.setup.append("\n".join(lines) + "\n")
    train = d.rng.random() < 0.4 and d.family not in (DISPATCHED,)
    if train:
        d.setup.append(f"opt = {d.rng.choice(OPTIMIZERS).format(params=d.model + '.parameters()')}\n")
    d.failing = _step(d, _call(d), "opt" if train else None)
    d.line = d.failing[0]


def _call_argument(d: _Draft) -> None:
    """An input made right in the failing call, on the host: ``out = model(torch.randn(4, 16))``."""
    fam = _family(d)
    culprit = d.rng.choice([n for n, _ in fam.inputs])
    d.setup.append("\n".join(_build_model(d) + _inputs_code(d, True, skip=culprit)) + "\n")
    d.failing = _step(d, _call(d, **{culprit: _fill(dict(fam.inputs)[culprit], "")}))
    d.line = d.failing[0]


def _temporary(d: _Draft) -> None:
    """A target made in the failing cell itself, on the host."""
    d.setup.append("\n".join(_build_model(d) + _inputs_code(d, True)) + "\n")
    variant = d.rng.choice(("zeros", "randint", "ones_like_shape"))
    if variant == "zeros":
        d.failing = [f"out = {_call(d)}", "target = torch.zeros(out.shape)", "loss = F.mse_loss(out, target)"]
        d.line = "loss = F.mse_loss(out, target)"
    elif variant == "randint":
        d.failing = [f"out = {_call(d)}", f"labels = torch.randint(0, {_family(d).width}, out.shape[:-1])",
                     "loss = F.cross_entropy(out.flatten(0, -2), labels.flatten())"]
        d.line = "loss = F.cross_entropy(out.flatten(0, -2), labels.flatten())"
    else:
        d.failing = [f"out = {_call(d)}", "noise = torch.randn(out.shape) * 0.01", "out = out + noise"]
        d.line = "out = out + noise"
    d.failing.append("loss = out.float().mean()" if variant == "ones_like_shape" else "loss.item()")


def _loop_variable(d: _Draft) -> None:
    fam = _family(d)
    lines = _build_model(d)
    lines.append("from torch.utils.data import DataLoader, TensorDataset")
    lines += _inputs_code(d, False)
    names = [d.inputs[n] for n, _ in fam.inputs]
    lines.append(f"loader = DataLoader(TensorDataset({', '.join(names)}), batch_size=2)")
    d.setup.append("\n".join(lines) + "\n")
    batch = [f"{n}_b" for n in names]
    loop = f"for {batch[0]}, in loader:" if len(batch) == 1 else f"for {', '.join(batch)} in loader:"
    if d.rng.random() < 0.5 and len(batch) == 1:
        loop = f"for ({batch[0]},) in loader:"
    call = _call(d, **{n: b for (n, _), b in zip(fam.inputs, batch)})
    d.failing = [loop, f"    out = {call}", "    total = out.float().sum()"]
    d.line = f"out = {call}"


def _assigned_after_to(d: _Draft) -> None:
    fam = _family(d)
    path, build = fam.head
    if d.family == COMPILED:
        raise AssertionError("not generated")
    lines = _build_model(d) + _inputs_code(d, True)
    lines.append(f"{d.model}{path} = {build}  # a new part, made after the move")
    d.setup.append("\n".join(lines) + "\n")
    if d.family == DISPATCHED:
        d.devices = frozenset({"cpu", "DEVICE_1"})
    d.failing = _step(d, _call(d))
    d.line = d.failing[0]


def _user_module(d: _Draft) -> None:
    """A user-written module around the family's model, with the bug in its own code."""
    fam = _family(d)
    w = fam.width
    inits: list[str] = []
    body: list[str] = []
    factory = d.rng.choice((f"torch.ones({w})", f"torch.full(({w},), 0.5)", f"torch.linspace(0, 1, {w})",
                            f"torch.zeros({w})", f"torch.rand({w})"))
    if d.bug == "buffer_in_forward":
        inits.append(f'self.register_buffer("scale", torch.ones({w}))')
        body += [f"self.scale = {factory} * 0.5", "h = h * self.scale"]
        d.line = "h = h * self.scale"
    elif d.bug == "plain_attribute":
        inits.append(f"self.offset = {factory}")
        body.append("h = h + self.offset")
        d.line = body[-1]
    elif d.bug == "list_attribute":
        inits.append(f"self.anchors = [torch.linspace(0, 1, {w}), torch.linspace(1, 2, {w})]")
        body.append("h = h + self.anchors[0] - self.anchors[1]")
        d.line = body[-1]
    elif d.bug == "tuple_attribute":
        inits.append(f"self.bounds = (torch.full(({w},), -3.0), torch.full(({w},), 3.0))")
        body.append("h = h.clamp(self.bounds[0], self.bounds[1])")
        d.line = body[-1]
    elif d.bug == "dict_attribute":
        inits.append(f'self.stats = {{"mean": torch.zeros({w}), "std": torch.ones({w})}}')
        body.append('h = (h - self.stats["mean"]) / self.stats["std"]')
        d.line = body[-1]
    elif d.bug == "forward_local":
        local = d.rng.choice(("mask", "weights", "bias_term", "gate"))
        body += [f"{local} = {factory}", f"h = h * {local}"]
        d.line = body[-1]
    elif d.bug == "inline":
        body.append(f"h = h * {factory}")
        d.line = body[-1]
    params = ", ".join(d.inputs[n] for n, _ in fam.inputs)
    inner = fam.call.format(model="self.backbone", **{n: d.inputs[n] for n, _ in fam.inputs})
    cls = "\n".join([
        "class Net(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        f"        self.backbone = {fam.build}",
        *(f"        {line}" for line in inits),
        "",
        f"    def forward(self, {params}):",
        f"        h = {inner}",
        *(f"        {line}" for line in body),
        "        return h",
    ])
    d.setup.append(cls + "\n")
    fam_build = fam.build
    d.setup.append("\n".join([line.replace(fam_build, "Net()") for line in _build_model(d)] + _inputs_code(d, True)) + "\n")
    d.failing = _step(d, f"{d.model}({params})")


def _hook_kwarg(d: _Draft) -> None:
    d.devices = frozenset({"DEVICE", "DEVICE_1"})
    x = d.inputs["x"]
    d.setup.append(textwrap.dedent(f"""\
        class Stage(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(16, 16)

            def forward(self, h, shift=None):
                h = self.lin(h)
                if shift is not None:
                    h = h + shift
                return h

        first, second = Stage().to("DEVICE"), Stage().to("DEVICE_1")

        def to_second(module, args):
            return tuple(a.to("DEVICE_1") for a in args)

        second.register_forward_pre_hook(to_second)
        {x} = torch.randn(4, 16, device="DEVICE")
        shift = torch.full((16,), 0.1, device="DEVICE")
        """))
    d.failing = [f"out = second(first({x}), shift=shift)"]
    d.line = "h = h + shift"


def _optimizer_state(d: _Draft) -> None:
    fam = _family(d)
    opt = d.rng.choice(("opt", "optimizer"))
    lines = [f"{d.model} = {fam.build}",
             f"{opt} = {d.rng.choice(OPTIMIZERS[:1] + OPTIMIZERS[2:]).format(params=d.model + '.parameters()')}"]
    warm = _call(d, **{n: f"{d.inputs[n]}_warm" for n, _ in fam.inputs})
    lines += [line.replace(" = ", "_warm = ", 1) for line in _inputs_code(d, False)]
    lines += [f"{warm}.float().pow(2).mean().backward()", f"{opt}.step()  # one step on the host",
              f"{opt}.zero_grad()", f"{d.model}.to({d.dev})"]
    lines += _inputs_code(d, True)
    d.setup.append("\n".join(lines) + "\n")
    d.failing = _step(d, _call(d), opt)
    d.line = f"{opt}.step()"
    d.after.append(f"assert all(v.device == p.device for p, s in {opt}.state.items() for v in s.values() "
                   f"if torch.is_tensor(v) and v.dim() > 0)")


def _state_dict(d: _Draft) -> None:
    lines = _build_model(d) + _inputs_code(d, True)
    lines.append(f"checkpoint = {{k: v.cpu() for k, v in {d.model}.state_dict().items()}}  # saved on the host")
    lines.append(f"{d.model}.load_state_dict(checkpoint, assign=True)")
    d.setup.append("\n".join(lines) + "\n")
    d.failing = _step(d, _call(d))
    d.line = d.failing[0]


def _meta(d: _Draft) -> None:
    fam = _family(d)
    lines = ['with torch.device("meta"):', f"    {d.model} = {fam.build}"] + _inputs_code(d, True)
    d.setup.append("\n".join(lines) + "\n")
    d.devices = frozenset({"meta", "DEVICE"})
    d.failing = _step(d, _call(d))
    d.line = d.failing[0]
    if "transformers" in fam.needs:
        # Its embedding and attention run their meta kernels beside device ids (meta outranks the
        # device, on CUDA too): the call gives an output without data, and reading it fails.
        d.failing.append("tokens = out.argmax(-1).tolist()")
        d.line, d.kind, d.error_kind = d.failing[-1], "device_error", "meta data"


def _container_input(d: _Draft) -> None:
    fam = _family(d)
    name, template = fam.inputs[0]
    holder = d.rng.choice(("inputs_list", "shards", "chunks"))
    lines = _build_model(d)
    lines.append(f"{holder} = [{_fill(template, '')} for _ in range(3)]  # made on the host")
    d.setup.append("\n".join(lines) + "\n")
    call = fam.call.format(model=d.model, **{name: "t"})
    d.failing = [f"outs = [{call} for t in {holder}]"]
    d.line = d.failing[0]


def _functional_weight(d: _Draft) -> None:
    x = d.inputs["x"]
    lines = [f"{x} = torch.randn(4, 16, device={d.dev})", "w = torch.randn(8, 16)  # made on the host",
             f"b = torch.zeros(8, device={d.dev})"]
    d.setup.append("\n".join(lines) + "\n")
    d.failing = [f"y = F.linear({x}, w, b)"]
    d.line = d.failing[0]


def _temporaries_only(d: _Draft) -> None:
    """Two tensors made inline on one line, on different devices; the namespace has others."""
    d.setup.append(f"aux = torch.ones(2)\nref = torch.ones(2, device={d.dev})\n")
    d.decoys += ["aux", "ref"]
    d.failing = [f"pair = torch.cat([torch.ones(2), torch.ones(2, device={d.dev})])"]
    d.line = d.failing[0]


def _stale_optimizer(d: _Draft) -> None:
    """The model's cell ran again after the optimizer and its scheduler were made."""
    d.kind = "stale"
    fam = _family(d)
    sched = d.rng.choice(("torch.optim.lr_scheduler.StepLR({opt}, step_size=10, gamma=0.5)",
                          "torch.optim.lr_scheduler.CosineAnnealingLR({opt}, T_max=100)",
                          "torch.optim.lr_scheduler.LambdaLR({opt}, lr_lambda=lambda epoch: 0.95 ** epoch)"))
    d.setup.append("\n".join(_build_model(d) + _inputs_code(d, True)) + "\n")
    d.setup.append(f"opt = {d.rng.choice(OPTIMIZERS).format(params=d.model + '.parameters()')}\n"
                   f"sched = {sched.format(opt='opt')}\n")
    d.setup.append("\n".join(_build_model(d)) + "  # the model's cell, run again\n")
    first = "next(iter(" + d.model + ".parameters()))"
    d.failing = [f"before = {first}.detach().clone()"] + _step(d, _call(d), "opt") + [
        "sched.step()",
        f"assert not torch.equal(before, {first}.detach()), 'the step changed nothing'",
        "assert sched.optimizer is opt, 'the scheduler drives another optimizer'",
    ]
    d.devices = frozenset()
    del fam


def devices_of(devices: frozenset[str], device: str) -> frozenset[str]:
    kind = device.split(":")[0]
    return frozenset(d.replace("DEVICE_1", f"{kind}:1").replace("DEVICE", f"{kind}:0") for d in devices)
