"""Real, device-correct programs for the mutation corpus (:mod:`mutations`, :mod:`mutation_runner`).

A :class:`Program` is a notebook session: its cells, in order, and the module files next to the
notebook that the cells import (a ``model.py`` in the working folder). None of their code is kept
here: it is read when the corpus runs.

* :func:`transformers_programs`: transformers' own modeling code for architectures the generated
  scenarios do not have (a state-space model, mixtures of experts, rotary and ALiBi attention, a
  contrastive image–text model, windowed attention, recurrent blocks, a decision transformer),
  read from the installed package, its relative imports made absolute, and saved as the user's
  ``modeling_<name>.py``. The cells build a tiny model from a small config (never downloaded
  weights), train a step and, for language models, generate.
* ``benchmarks/mutation_corpus.py --examples PATH`` adds PyTorch's own examples (a checkout of
  the pytorch/examples repository), turned into cells there.

``DEVICE`` in a cell stands for the accelerator (``sim:0`` here, ``cuda:0`` on a GPU).
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Program:
    name: str
    #: Where the code comes from: "transformers", "pytorch/examples".
    origin: str
    cells: tuple[str, ...]
    #: Module files in the notebook's folder: (file name, source).
    files: tuple[tuple[str, str], ...] = ()
    #: Code the harness runs first and hides from the mutations (synthetic data in place of a
    #: download, tiny arguments): not part of the program.
    prepare: str = ""
    #: Data files the program reads, written into its working folder: (relative path, text).
    data: tuple[tuple[str, str], ...] = ()
    needs: tuple[str, ...] = ()
    #: Cell indices whose code is the harness's own wiring rather than the program's: never mutated.
    fixed_cells: frozenset[int] = field(default_factory=frozenset)
    #: The devices of the call that fails when a placement is missing (``DEVICE``: the accelerator).
    devices: frozenset[str] = frozenset({"cpu", "DEVICE"})


def absolute_imports(module_name: str, local: Mapping[str, str] | None = None) -> str:
    """The source of ``module_name`` with every relative import made absolute, so that it runs
    as a module of its own outside its package (the user's copy of a library's model file).
    ``local`` maps modules of the package the user copied too (full name -> the copy's module
    name): an import of one of them imports the copy (``from . import _utils as det_utils`` ->
    ``import det_utils``)."""
    local = local or {}
    module = importlib.import_module(module_name)
    source = inspect.getsource(module)
    package = module_name.rsplit(".", 1)[0].split(".")
    lines = source.split("\n")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
            line = lines[node.lineno - 1]
            copied = [f"{target}.{a.name}" in local for a in node.names] if node.module is None else [False]
            if all(copied) and node.lineno == node.end_lineno:
                indent = line[: len(line) - len(line.lstrip())]
                lines[node.lineno - 1] = indent + "import " + ", ".join(
                    local[f"{target}.{a.name}"] + (f" as {a.asname}" if a.asname else f" as {a.name}")
                    for a in node.names)
                continue
            target = local.get(target, target)
            written = "." * node.level + (node.module or "")
            start = line.index("from ", node.col_offset) + len("from ")
            start = start + len(line[start:]) - len(line[start:].lstrip())
            if line[start: start + len(written)] != written:
                raise ValueError(f"{module_name}:{node.lineno}: unexpected import {line.strip()!r}")
            lines[node.lineno - 1] = line[:start] + target + line[start + len(written):]
    return "\n".join(lines)


@dataclass(frozen=True)
class _Architecture:
    """One transformers architecture at a tiny size: the model class, its config, inputs and a step."""

    name: str
    model_class: str
    config: str
    inputs: str
    step: str
    generate: bool = False


_LM_INPUTS = "ids = torch.randint(1, 64, (2, 8), device=device)  # no padding token (0)"
_LM_STEP = "out = model(input_ids=ids, labels=ids)\nout.loss.backward()\nopt.step()\nopt.zero_grad()"
_GENERATE = ("with torch.no_grad():\n"
             "    generated = model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)")

ARCHITECTURES = (
    _Architecture("mamba", "MambaForCausalLM",
                  "MambaConfig(vocab_size=64, hidden_size=16, state_size=4, num_hidden_layers=2, expand=2, "
                  "conv_kernel=3, time_step_rank=4)", _LM_INPUTS, _LM_STEP, generate=True),
    _Architecture("mixtral", "MixtralForCausalLM",
                  "MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, "
                  "num_attention_heads=2, num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=2, "
                  "output_router_logits=True)", _LM_INPUTS, _LM_STEP, generate=True),
    _Architecture("gpt_neox", "GPTNeoXForCausalLM",
                  "GPTNeoXConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, "
                  "intermediate_size=32, max_position_embeddings=64)", _LM_INPUTS, _LM_STEP, generate=True),
    _Architecture("bloom", "BloomForCausalLM",
                  "BloomConfig(vocab_size=64, hidden_size=16, n_layer=2, n_head=2)", _LM_INPUTS, _LM_STEP,
                  generate=True),
    _Architecture("falcon", "FalconForCausalLM",
                  "FalconConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, "
                  "alibi=True, bias=True)", _LM_INPUTS, _LM_STEP, generate=True),
    _Architecture("rwkv", "RwkvForCausalLM",
                  "RwkvConfig(vocab_size=64, hidden_size=16, num_hidden_layers=2, attention_hidden_size=16, "
                  "intermediate_size=32, context_length=32)", _LM_INPUTS, _LM_STEP, generate=True),
    _Architecture("recurrent_gemma", "RecurrentGemmaForCausalLM",
                  "RecurrentGemmaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, "
                  "num_attention_heads=2, num_key_value_heads=1, lru_width=16, attention_window_size=8, "
                  "conv1d_width=3, block_types=['recurrent', 'attention'], pad_token_id=0)",
                  _LM_INPUTS, _LM_STEP, generate=True),
    _Architecture("deberta_v2", "DebertaV2ForMaskedLM",
                  "DebertaV2Config(vocab_size=64, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, "
                  "intermediate_size=32, max_position_embeddings=32, relative_attention=True, position_buckets=8, "
                  "pos_att_type=['p2c', 'c2p'])", _LM_INPUTS, _LM_STEP),
    _Architecture("clip", "CLIPModel",
                  "CLIPConfig(text_config=dict(vocab_size=64, hidden_size=16, intermediate_size=32, "
                  "num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=16), "
                  "vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, "
                  "num_attention_heads=2, image_size=16, patch_size=8), projection_dim=8)",
                  "ids = torch.randint(0, 64, (2, 7), device=device)\n"
                  "pixels = torch.randn(2, 3, 16, 16, device=device)",
                  "out = model(input_ids=ids, pixel_values=pixels, return_loss=True)\nout.loss.backward()\n"
                  "opt.step()\nopt.zero_grad()"),
    _Architecture("swin", "SwinForImageClassification",
                  "SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 2], "
                  "window_size=4, num_labels=3)",
                  "pixels = torch.randn(2, 3, 32, 32, device=device)\n"
                  "labels = torch.tensor([0, 2], device=device)",
                  "out = model(pixel_values=pixels, labels=labels)\nout.loss.backward()\nopt.step()\nopt.zero_grad()"),
    _Architecture("decision_transformer", "DecisionTransformerModel",
                  "DecisionTransformerConfig(state_dim=4, act_dim=2, hidden_size=16, n_layer=1, n_head=2, "
                  "max_ep_len=32)",
                  "states = torch.randn(1, 5, 4, device=device)\n"
                  "actions = torch.randn(1, 5, 2, device=device)\n"
                  "rewards = torch.randn(1, 5, 1, device=device)\n"
                  "returns_to_go = torch.randn(1, 5, 1, device=device)\n"
                  "timesteps = torch.arange(5, device=device).unsqueeze(0)\n"
                  "attention_mask = torch.ones(1, 5, dtype=torch.long, device=device)",
                  "out = model(states=states, actions=actions, rewards=rewards, returns_to_go=returns_to_go, "
                  "timesteps=timesteps, attention_mask=attention_mask)\n"
                  "loss = torch.nn.functional.mse_loss(out.action_preds, actions)\nloss.backward()\n"
                  "opt.step()\nopt.zero_grad()"),
)


def transformers_program(arch: _Architecture) -> Program:
    module = f"modeling_{arch.name}"
    source = absolute_imports(f"transformers.models.{arch.name}.{module}")
    cells = [
        f"import torch\nimport transformers\nfrom {module} import {arch.model_class}\ndevice = torch.device('DEVICE')",
        f"torch.manual_seed(0)\nconfig = transformers.{arch.config}\n"
        f"model = {arch.model_class}(config).to(device)\n"
        "opt = torch.optim.AdamW(model.parameters(), lr=1e-3)",
        arch.inputs,
        arch.step,
    ]
    if arch.generate:
        cells.append(_GENERATE)
    return Program(arch.name, "transformers", tuple(cells), files=((f"{module}.py", source),),
                   needs=("transformers",), fixed_cells=frozenset({0}))


def transformers_programs() -> list[Program]:
    return [transformers_program(a) for a in ARCHITECTURES]


def script_cells(source: str, argv: list[str] | None = None) -> list[str]:
    """A script as a notebook user splits it into cells: the ``if __name__ == "__main__":`` block
    and the body of the ``main()`` it calls run at top level; a class or function is a cell of its
    own; other statements are grouped as the script groups them (a blank line starts a new cell).
    ``parse_args()`` reads ``argv`` (a notebook has no command line)."""
    tree = ast.parse(source)
    lines = source.split("\n")
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    inlined: set[str] = set()

    def calls_main(node: ast.stmt) -> str | None:
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                and not node.value.args and not node.value.keywords):
            name = node.value.func.id
            f = functions.get(name)
            if f is not None and not f.args.args and not any(isinstance(n, ast.Return) for n in f.body):
                return name
        return None

    def expand(statements: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for node in statements:
            if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                    and ast.unparse(node.test).replace("'", '"') == '__name__ == "__main__"'):
                out += expand(node.body)
            elif (name := calls_main(node)) is not None:
                inlined.add(name)
                out += expand(functions[name].body)
            else:
                out.append(node)
        return out

    statements = expand(tree.body)
    statements = [n for n in statements if not (isinstance(n, ast.FunctionDef) and n.name in inlined)]

    def first_line(node: ast.stmt) -> int:
        decorators = getattr(node, "decorator_list", [])
        return min([node.lineno] + [d.lineno for d in decorators])

    def text(node: ast.stmt) -> str:
        import textwrap

        return textwrap.dedent("\n".join(lines[first_line(node) - 1: node.end_lineno]))

    cells: list[list[str]] = []
    previous: ast.stmt | None = None
    for node in statements:
        is_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        was_def = isinstance(previous, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        gap = previous is not None and any(not lines[i].strip() for i in range(previous.end_lineno, first_line(node) - 1))
        if previous is None or is_def or was_def or (gap and not (isinstance(node, (ast.Import, ast.ImportFrom))
                                                               and isinstance(previous, (ast.Import, ast.ImportFrom)))):
            cells.append([])
        cells[-1].append(text(node))
        previous = node
    out = ["\n".join(c) for c in cells]
    if argv is not None:
        out = [c.replace("parse_args()", f"parse_args({argv!r})") for c in out]
    return out
