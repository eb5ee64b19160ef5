"""Every magic devinspect registers takes its argument as typed: IPython's ``{expr}`` and
``$name`` expansion never runs code from a name, a path or a device someone pastes."""

from __future__ import annotations

import itertools

import pytest
from IPython.core.magic import MAGIC_NO_VAR_EXPAND_ATTR
from IPython.utils.capture import capture_output

from devinspect.ipython.extension import loaded

#: A name typed where each magic takes one (bare, after an option that takes a value).
PLACES = ("{arg}", "--why {arg}", "-v {arg}", "-d {arg}", "-f {arg}", "-o {arg}", "-n {arg}",
          "--watch {arg}", "model {arg}", "--device={arg}")
#: Code in braces and a ``$`` name: either would run the probe if the line were expanded.
HOSTILE = ("{probe()}", "$probe_value", "${probe()}", "{probe_value}", "{__import__('builtins').probe()}")


class _Counting:
    """Counts every way IPython's expansion could touch it (a call, str, format, repr)."""

    calls = 0

    def __call__(self) -> str:
        type(self).calls += 1
        return "x"

    def __str__(self) -> str:
        type(self).calls += 1
        return "x"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:
        type(self).calls += 1
        return "x"


def devinspect_magics(shell):
    """(kind, name) of every magic the loaded extension registered, read from its magic families."""
    found = []
    for family in loaded(shell).families:
        for kind, names in family.magics.items():
            found.extend((kind, name) for name in names)
    return sorted(found)


def test_every_magic_of_devinspect_is_marked_to_take_its_line_literally(ip):
    magics = devinspect_magics(ip)
    assert {name for _, name in magics} >= {"devices", "devcheck", "gpumem"}
    for kind, name in magics:
        method = ip.magics_manager.magics[kind][name]
        assert getattr(method, MAGIC_NO_VAR_EXPAND_ATTR, False), f"%{name} ({kind}) expands its argument"


def _lines():
    for place, hostile in itertools.product(PLACES, HOSTILE):
        yield place.format(arg=hostile)


@pytest.mark.parametrize("line", list(_lines()))
def test_no_argument_of_any_magic_runs_code(ip, sim, line):
    import builtins

    probe = _Counting()
    _Counting.calls = 0
    ip.run_cell("import torch\nmodel = torch.nn.Linear(2, 2)\nx = torch.ones(2)")
    ip.user_ns.update(probe=probe, probe_value=probe)
    builtins.probe = probe  # reached by __import__('builtins').probe() if the braces ran
    try:
        for kind, name in devinspect_magics(ip):
            if name == "gpumem" and "--watch" in line:
                continue  # a watch would start a timer; its argument is read as the others are
            with capture_output():
                if kind == "line":
                    ip.run_cell(f"%{name} {line}")
                else:
                    ip.run_cell(f"%%{name} {line}\ny = x + 1\n")
            assert _Counting.calls == 0, f"%{'%' if kind == 'cell' else ''}{name} {line} ran code from its argument"
    finally:
        del builtins.probe
        ip.run_line_magic("gpumem", "--stop")


def test_a_name_in_braces_is_looked_up_as_typed(ip, sim):
    """``%devices --why {…}`` looks for a variable of that name (and finds none)."""
    probe = _Counting()
    _Counting.calls = 0
    ip.user_ns["probe"] = probe
    with capture_output():
        result = ip.run_cell("%devices --why {probe()}")
    assert _Counting.calls == 0
    assert "{probe()}" in str(result.error_in_exec)
