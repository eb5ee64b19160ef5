"""A torch mode the user left entered sees none of devinspect's own work: not a read of
%devices or %gpumem, not the diagnosis %%devcheck makes of a mismatch, not the explanation
after a failed plain cell. The user's own calls in a checked cell reach it as in a plain cell."""

from __future__ import annotations

import traceback

import pytest
import torch
from IPython.utils.capture import capture_output

import devinspect
from devinspect.runtime.user_modes import beneath_user_modes

PACKAGE = devinspect.__file__.rsplit("/", 1)[0] + "/"
SIMULATED_DEVICE = PACKAGE + "testing/"  # stands in for the hardware: its work is the user's call's

SETUP = """
import torch, traceback
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from devinspect import testing
dev = testing.enable()
model = torch.nn.Linear(4, 2).to(dev)
x = torch.randn(3, 4)
"""


def _origin(stack) -> str:
    """Who made a call: the innermost frame that is neither torch's, the simulated device's, nor
    a mode's handler passing a call along (the user's, or %%devcheck's own hot path)."""
    for frame in reversed(stack[:-1]):  # the counter's own frame
        name = frame.filename
        if "/torch/" in name or name.startswith(SIMULATED_DEVICE) \
                or frame.name in ("__torch_function__", "__torch_dispatch__"):
            continue
        return "devinspect" if name.startswith(PACKAGE) else "user"
    return "user"


class _Counting:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def seen(self) -> None:
        self.calls.append(_origin(traceback.extract_stack()))

    def count(self, origin: str) -> int:
        return self.calls.count(origin)


@pytest.fixture
def counting_modes(ip, sim):
    """A counting TorchFunctionMode and TorchDispatchMode, entered in a cell and left entered."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    ip.run_cell(SETUP)
    counter = _Counting()

    class CountFunctions(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            counter.seen()
            return func(*args, **(kwargs or {}))

    class CountDispatches(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            counter.seen()
            return func(*args, **(kwargs or {}))

    functions, dispatches = CountFunctions(), CountDispatches()
    ip.user_ns.update(functions=functions, dispatches=dispatches)
    ip.run_cell("functions.__enter__(); dispatches.__enter__()")
    try:
        yield counter
    finally:
        ip.run_cell("dispatches.__exit__(None, None, None); functions.__exit__(None, None, None)")
    assert torch._C._len_torch_function_stack() == 0 and torch._C._len_torch_dispatch_stack() == 0


def _run(ip, counter, code):
    counter.calls.clear()
    with capture_output():
        result = ip.run_cell(code)
    return result


@pytest.mark.parametrize("code", ["%devices", "%devices --findings model", "%devices --why model.weight",
                                  "%gpumem", "%gpumem --all-devices"])
def test_a_users_mode_sees_nothing_of_a_reading_magic(ip, counting_modes, code):
    result = _run(ip, counting_modes, code)
    assert result.error_in_exec is None
    assert counting_modes.calls == []


def test_a_checked_cell_explains_a_mismatch_unseen_and_the_users_calls_count_as_in_a_plain_cell(ip, counting_modes):
    _run(ip, counting_modes, "y = model(x)")  # warms what a first call caches
    plain = _run(ip, counting_modes, "y = model(x)")
    plain_user_calls = counting_modes.count("user")
    assert type(plain.error_in_exec) is RuntimeError
    assert counting_modes.count("devinspect") == 0  # the explanation under the failed cell

    checked = _run(ip, counting_modes, "%%devcheck\ny = model(x)\n")
    assert type(checked.error_in_exec) is RuntimeError
    assert counting_modes.count("devinspect") == 0
    assert counting_modes.count("user") == plain_user_calls > 0

    _run(ip, counting_modes, "%devcheck --last")
    assert counting_modes.calls == []


def test_the_modes_are_back_in_their_order_after_each_magic(ip, counting_modes):
    from torch.overrides import _get_current_function_mode_stack
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    before = (_get_current_function_mode_stack(), _get_current_dispatch_mode_stack())
    for code in ("%devices", "%gpumem", "%%devcheck\ny = model(x)\n", "%devcheck --last"):
        _run(ip, counting_modes, code)
        after = (_get_current_function_mode_stack(), _get_current_dispatch_mode_stack())
        assert [list(map(id, s)) for s in after] == [list(map(id, s)) for s in before], code


def test_beneath_user_modes_restores_the_stacks_when_interrupted():
    from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

    class Outer(TorchFunctionMode):
        pass

    class Inner(TorchFunctionMode):
        pass

    with Outer() as outer, Inner() as inner:
        with pytest.raises(KeyboardInterrupt):
            with beneath_user_modes():
                assert _get_current_function_mode_stack() == []
                raise KeyboardInterrupt
        assert _get_current_function_mode_stack() == [outer, inner]


WRAPPER = """
class Wrapped(torch.Tensor):
    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device,
                                                   dispatch_sizes_strides_policy="sizes", dispatch_device=True,
                                                   dispatch_layout=True)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        counter.seen()
        unwrap = lambda a: a.elem if type(a) is cls else a
        return func(*[unwrap(a) for a in args], **(kwargs or {}))

def step(batch):
    return model(batch)
"""


@pytest.mark.parametrize("code", ["out = step(Wrapped(x))\n", "held = Wrapped(x)\nout = model(held)\n"])
def test_a_wrapper_subclass_runs_none_of_its_code_for_the_explanation_of_a_mismatch(ip, sim, code):
    """The wrapper is an operand of the failing call, in a frame of the user's or the cell's
    namespace: the diagnosis reads it as constructed, its __torch_dispatch__ sees only the
    cell's own calls, in a checked cell as in a plain one."""
    counter = _Counting()
    ip.run_cell(SETUP)
    ip.user_ns["counter"] = counter
    ip.run_cell(WRAPPER)
    _run(ip, counter, code)  # warms what a first call caches
    plain = _run(ip, counter, code)
    assert type(plain.error_in_exec) is RuntimeError
    plain_calls = list(counter.calls)
    checked = _run(ip, counter, "%%devcheck\n" + code)
    assert type(checked.error_in_exec) is RuntimeError
    assert "devinspect" not in plain_calls and "devinspect" not in counter.calls
    assert counter.calls == plain_calls and plain_calls


def test_apply_fix_in_the_explorer_and_its_refresh_are_unseen(kernel_ip, counting_modes, sim):
    from devinspect.jupyter.devices_explorer import DevicesExplorer

    ip = kernel_ip
    _run(ip, counting_modes, "x = torch.ones(3, 4)")
    assert type(_run(ip, counting_modes, "y = model(x)").error_in_exec) is RuntimeError
    view = ip.run_line_magic("devices", "-o")
    explorer = DevicesExplorer(view, lambda: ip.run_line_magic("devices", "-o"), ip.user_ns, ["cpu", str(sim)],
                               shell=ip)
    counting_modes.calls.clear()
    rows = explorer.findings.children
    at = next(i for i, r in enumerate(rows) if "x" in r.children[0].value and len(r.children) > 1)
    rows[at].children[1].children[0].click()
    assert counting_modes.calls == []
    assert "✔" in explorer.findings.children[at].children[0].value
