"""The mutation corpus (``benchmarks/mutation_corpus.py``): its engine, and a fixed subset run in CI.

Real, device-correct programs (transformers' modeling code, read from the installed package) lose
one device placement at a time; each mutant runs through the four entry points, its printed fix
is applied exactly as printed, and the program runs again from scratch with the fix's edits.
"""

from __future__ import annotations

import ast

import pytest
from mutation_runner import Corpus, Mutant, mutants
from mutations import mutate, placements
from programs import absolute_imports, script_cells

SOURCE = '''
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self, n, device=None):
        super().__init__()
        self.register_buffer("scale", torch.ones(n), persistent=False)
        self.bias = nn.Buffer(torch.zeros(n))
        self.skip = None
        self.register_buffer("unused", None)

    def forward(self, x):
        mask = torch.ones(x.shape[0], device=x.device, dtype=torch.bool)
        steps = torch.arange(
            x.shape[1],
            device=x.device,
        )
        y = (x * self.scale).to(x.device, torch.float32) + steps
        return y.to(dtype=torch.float16).cuda() + self.bias.to(device=x.device, dtype=y.dtype) * mask[:, None]

def host_only(t):
    return t.to("cpu"), torch.zeros(2, device="cpu"), t.to(torch.float64)
'''


def lines_of(source: str) -> list[str]:
    return [line.strip() for line in source.split("\n") if line.strip()]


def test_every_device_placement_is_found_and_each_deletion_is_one_edit():
    found = placements(SOURCE)
    kinds = [(p.kind, p.context) for p in found]
    assert kinds == [
        ("register_buffer", "Block.__init__"), ("register_buffer", "Block.__init__"),
        ("device=", "Block.forward"), ("device=", "Block.forward"), (".to()", "Block.forward"),
        (".cuda()", "Block.forward"), (".to()", "Block.forward"),
    ]  # a host placement (.to("cpu"), device="cpu"), a dtype-only .to() and a None buffer are not deletions
    mutated = {p.label: lines_of(mutate(SOURCE, p)) for p in found}
    original = lines_of(SOURCE)
    for label, lines in mutated.items():
        changed = [(a, b) for a, b in zip(original, lines) if a != b]
        assert changed, label
    by_kind = [mutate(SOURCE, p) for p in found]
    assert "self.scale = torch.ones(n)" in by_kind[0] and "register_buffer(\"scale\"" not in by_kind[0]
    assert "self.bias = torch.zeros(n)" in by_kind[1]
    assert "mask = torch.ones(x.shape[0], dtype=torch.bool)" in by_kind[2]
    assert "x.shape[1],\n        )" in by_kind[3]  # the line of a multi-line call goes with its comma
    assert "(x * self.scale).to(torch.float32)" in by_kind[4]  # the device argument only
    assert "y.to(dtype=torch.float16) + self.bias" in by_kind[5]
    assert "self.bias.to(dtype=y.dtype)" in by_kind[6]
    for mutant in by_kind:
        ast.parse(mutant)


def test_a_library_file_becomes_a_module_of_the_users_and_a_script_becomes_cells():
    pytest.importorskip("transformers")
    source = absolute_imports("transformers.models.mamba.modeling_mamba")
    imports = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ImportFrom)]
    assert imports and all(n.level == 0 for n in imports)
    assert any(n.module == "transformers.models.mamba.configuration_mamba" for n in imports)
    script = ("import argparse\nimport torch\n\ndef helper(x):\n    return x\n\n"
              "def main():\n    parser = argparse.ArgumentParser()\n    parser.add_argument('--n', type=int)\n"
              "    args = parser.parse_args()\n\n    x = torch.ones(args.n)\n    y = helper(x)\n\n"
              "if __name__ == '__main__':\n    main()\n")
    cells = script_cells(script, ["--n", "3"])
    assert cells == ["import argparse\nimport torch", "def helper(x):\n    return x",
                     "parser = argparse.ArgumentParser()\nparser.add_argument('--n', type=int)\n"
                     "args = parser.parse_args(['--n', '3'])", "x = torch.ones(args.n)\ny = helper(x)"]


# -- a fixed subset of the corpus ---------------------------------------------------------------------------

#: (program, where the placement is: "cell" or the function it is in, kind): mutants that fail, each
#: run through every entry point. Chosen by function, not line, so a new transformers keeps them.
SUBSET = (
    ("mamba", "cell", ".to()"),
    ("mamba", "cell", "device="),
    ("mamba", "mamba_selective_scan", "device="),
    ("mixtral", "load_balancing_loss_func", "device="),
    ("gpt_neox", "GPTNeoXModel.forward", "device="),
)


def _subset_mutants(program_name: str, where: str, kind: str) -> list[Mutant]:
    from programs import transformers_programs

    program = next(p for p in transformers_programs() if p.name == program_name)
    chosen = [m for m in mutants(program) if m.kind == kind
              and (m.site[0] == "cell" if where == "cell" else m.placement.context == where)]
    assert chosen, f"{program_name} has no {kind} placement in {where} any more: choose another for the subset"
    return chosen[:1]


#: What the unmutated programs did: (states by program, outcomes by program).
_ORIGINALS: tuple[dict, dict] = ({}, {})


@pytest.mark.slow
@pytest.mark.parametrize("program_name,where,kind", SUBSET, ids=lambda v: str(v))
def test_a_deleted_device_placement_of_a_real_program_is_fixed_where_it_was(ip, sim, program_name, where, kind):
    pytest.importorskip("transformers")
    import transformers

    transformers.logging.set_verbosity_error()
    corpus = Corpus(ip)
    # The unmutated program runs once for all its mutants (its states and findings do not change).
    corpus.original_states.update(_ORIGINALS[0])
    corpus.originals.update(_ORIGINALS[1])
    for mutant in _subset_mutants(program_name, where, kind):
        outcome = corpus.run(mutant)
        assert outcome.probe == "effect", f"{mutant.name}: {outcome.probe} {outcome.error}"
        for entry, o in outcome.entries.items():
            assert o.verdict == "pass", f"{mutant.name} [{entry}] [{o.stage}] {o.reason}\nfix:\n{o.fix_text}"
            assert outcome.cause_removed[entry], f"{mutant.name} [{entry}]: the program fails again\n{o.fix_text}"
            assert not o.lost and not o.invented
        if outcome.at_rest:
            assert outcome.at_rest_found, f"{mutant.name}: %devices did not find {outcome.at_rest[:3]} before the cell"
    original = corpus.originals[program_name]  # the unmutated program, run first
    assert original.probe == "clean" and original.clean_findings == []
    _ORIGINALS[0].update(corpus.original_states)
    _ORIGINALS[1].update(corpus.originals)


#: (program of ``benchmarks/library_programs.py``, words of the deleted placement's line, kind): a
#: target made on the host in a cell, and a factory in the user's copy of roma's utilities that lost
#: its ``device=`` (roma is a small pure-Python package).
LIBRARY_SUBSET = (
    ("roma_rotations", "target = mappings.rotvec_to_rotmat", "device="),
    ("roma_rotations", "x0 = torch.rand(size", "device="),
)


@pytest.mark.slow
@pytest.mark.parametrize("program_name,words,kind", LIBRARY_SUBSET, ids=lambda v: str(v))
def test_a_deleted_placement_in_another_librarys_code_is_fixed(ip, sim, program_name, words, kind):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from library_programs import library_programs

    program = next((p for p in library_programs() if p.name == program_name), None)
    assert program is not None, f"{program_name} needs a package the test extra installs"
    (mutant,) = [m for m in mutants(program) if m.kind == kind and words in m.placement.text]
    outcome = Corpus(ip).run(mutant)
    assert outcome.probe == "effect", f"{mutant.name}: {outcome.probe} {outcome.error}"
    for entry, o in outcome.entries.items():
        assert o.verdict == "pass", f"{mutant.name} [{entry}] [{o.stage}] {o.reason}\nfix:\n{o.fix_text}"
        assert outcome.cause_removed[entry], f"{mutant.name} [{entry}]: the program fails again\n{o.fix_text}"
        assert not o.lost and not o.invented
    if outcome.at_rest:
        assert outcome.at_rest_found, f"{mutant.name}: %devices did not find {outcome.at_rest[:3]} before the cell"


def test_a_copied_package_imports_its_own_copies(tmp_path, monkeypatch):
    """``absolute_imports`` with ``local``: an import of a module the user copied too imports the copy
    (``from . import _utils as det_utils`` -> ``import det_utils as det_utils``), others the package."""
    package = tmp_path / "copiedpkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("")
    (package / "base.py").write_text("VALUE = 1\n")
    (package / "sub" / "_utils.py").write_text("def f():\n    return 2\n")
    (package / "sub" / "model.py").write_text(
        "from ..base import VALUE\nfrom . import _utils as det_utils\nfrom ._utils import f\n"
        "def g():\n    return VALUE + det_utils.f() + f()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    source = absolute_imports("copiedpkg.sub.model", {"copiedpkg.sub._utils": "det_utils"})
    assert source.split("\n")[:3] == ["from copiedpkg.base import VALUE", "import det_utils as det_utils",
                                      "from det_utils import f"]
