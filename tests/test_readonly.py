"""Proofs that inspecting changes nothing, runs no user code and keeps nothing."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import devinspect


class Tripwire:
    """Every way of running user code on this object records a call."""

    calls: list[str] = []

    def __init__(self):
        self.__dict__["payload"] = torch.zeros(2)

    @property
    def prop(self):
        Tripwire.calls.append("property")
        return torch.zeros(1)

    def __getattr__(self, name):
        Tripwire.calls.append(f"__getattr__({name})")
        return torch.zeros(1)

    def __getattribute__(self, name):
        if name not in ("__dict__", "__class__"):
            Tripwire.calls.append(f"__getattribute__({name})")
        return object.__getattribute__(self, name)

    def __eq__(self, other):
        Tripwire.calls.append("__eq__")
        return False

    def __hash__(self):
        Tripwire.calls.append("__hash__")
        return 1

    def __len__(self):
        Tripwire.calls.append("__len__")
        return 1

    def __iter__(self):
        Tripwire.calls.append("__iter__")
        return iter([])

    def __repr__(self):
        Tripwire.calls.append("__repr__")
        return "Tripwire"


class TripList(list):
    def __iter__(self):
        Tripwire.calls.append("list.__iter__")
        return iter([])

    def __len__(self):
        Tripwire.calls.append("list.__len__")
        return 0


class TripDict(dict):
    def items(self):
        Tripwire.calls.append("dict.items")
        return []

    def __getitem__(self, key):
        Tripwire.calls.append("dict.__getitem__")
        return None


class WatchedTensor(torch.Tensor):
    """A tensor subclass whose torch-function hook records every call made on it."""

    calls: list[str] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        WatchedTensor.calls.append(getattr(func, "__name__", str(func)))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_no_user_code_runs():
    Tripwire.calls.clear()
    ns = {"trip": Tripwire(), "tl": TripList([torch.zeros(1)]), "td": TripDict(a=torch.zeros(1)), "nested": [Tripwire()]}
    result = devinspect.scan(ns)
    assert Tripwire.calls == []
    names = {r.name for r in result.records}
    # The real contents are still found, through the C-level methods.
    assert {"trip.payload", "tl[0]", 'td["a"]', "nested[0].payload"} <= names


def test_generators_and_iterators_are_not_consumed():
    gen = (torch.zeros(1) for _ in range(3))
    it = iter([torch.zeros(1), torch.zeros(1)])
    devinspect.scan({"gen": gen, "it": it})
    assert len(list(gen)) == 3
    assert len(list(it)) == 2


def test_tensor_subclass_hooks_and_printing_are_not_called():
    WatchedTensor.calls.clear()
    t = torch.zeros(3).as_subclass(WatchedTensor)
    WatchedTensor.calls.clear()
    original_str, original_repr = torch.Tensor.__str__, torch.Tensor.__repr__
    printed = []
    torch.Tensor.__repr__ = lambda self, *a, **k: printed.append("repr") or original_repr(self, *a, **k)
    torch.Tensor.__str__ = lambda self: printed.append("str") or original_str(self)
    try:
        rec = devinspect.scan({"t": t, "plain": torch.zeros(2)}).records
    finally:
        torch.Tensor.__str__, torch.Tensor.__repr__ = original_str, original_repr
    assert WatchedTensor.calls == []
    assert printed == []
    assert rec[0].type_name == "WatchedTensor" and rec[0].shape == (3,)


def test_no_tensor_op_is_dispatched(sim):
    """Nothing is copied, moved, synchronised or computed: a dispatch mode sees no op."""
    model = torch.nn.Linear(4, 4).to(sim)
    model(torch.ones(1, 4, device=sim)).sum().backward()
    opt = torch.optim.AdamW(model.parameters())
    opt.step()
    ns = {"model": model, "opt": opt, "x": torch.ones(3, device=sim), "v": torch.ones(4)[1:]}
    before = {n: (p.device, p.data_ptr() if p.device.type == "cpu" else id(p)) for n, p in model.named_parameters()}
    seen = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    with Recorder():
        devinspect.scan(ns, all_objects=True)
    assert seen == []
    after = {n: (p.device, p.data_ptr() if p.device.type == "cpu" else id(p)) for n, p in model.named_parameters()}
    assert before == after


def test_no_reference_to_user_objects_survives():
    big = torch.zeros(1000)
    model = torch.nn.Linear(3, 3)
    model(torch.ones(1, 3)).sum().backward()
    holder = {"t": big, "m": model, "l": [big[1:]]}
    refs = [weakref.ref(big), weakref.ref(model), weakref.ref(model.weight), weakref.ref(model.weight.grad)]
    result = devinspect.scan({"holder": holder, "big": big, "model": model}, all_objects=True)
    _ = result.frame, result.findings, repr(result), result._repr_mimebundle_()
    del big, model, holder
    gc.collect()
    assert [r() for r in refs] == [None, None, None, None]
    assert len(result.records) > 0  # the result itself is still usable


#: Runs in a fresh interpreter: every way into CUDA initialisation is replaced by a recorder
#: *before* devinspect loads, so a call fails this test even on a CPU-only build (where the
#: real functions would just raise and a swallowed error would hide the attempt).
CUDA_RECORDER = """
import torch, torch.cuda
calls = []
def recorder(name):
    def record(*args, **kwargs):
        calls.append(name)
    return record
torch.cuda._lazy_init = recorder("torch.cuda._lazy_init")
torch.cuda.init = recorder("torch.cuda.init")
torch._C._cuda_init = recorder("torch._C._cuda_init")
"""


def run_with_cuda_recorder(code: str) -> str:
    out = subprocess.run([sys.executable, "-c", CUDA_RECORDER + code + "\nprint('CALLS', calls)"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.rsplit("CALLS", 1)[1].strip()


def test_the_cuda_recorder_sees_an_initialising_call():
    """The control: a call that initialises CUDA is recorded (so the test below can fail)."""
    control = "try:\n    torch.cuda.current_device()\nexcept Exception:\n    pass"
    assert "torch.cuda._lazy_init" in run_with_cuda_recorder(control)


def test_scanning_checking_and_loading_never_initialise_cuda():
    code = """
import devinspect
from devinspect import testing
from IPython.testing.globalipapp import get_ipython
ip = get_ipython()
ip.run_line_magic("load_ext", "devinspect")
ip.run_cell("import torch; from devinspect import testing; dev = testing.enable(); x = torch.zeros(3); "
            "m = torch.nn.Linear(2, 2).to(dev)")
ip.run_line_magic("devices", "")
ip.run_line_magic("devices", "--all --hidden")
ip.run_cell("%%devcheck\\ny = m(torch.ones(1, 2, device=dev)); z = y.cpu(); y.sum().item()")
ip.run_cell("%%devcheck\\nm(torch.ones(1, 2))")
ip.run_line_magic("gpumem", "")
ip.run_line_magic("gpumem", "--track")
ip.run_cell("w = torch.ones(4)")
ip.run_line_magic("gpumem", "--history")
devinspect.scan({"x": torch.zeros(1)}, all_objects=True)
import devinspect.collect.machine.memory_snapshot, devinspect.collect.machine.devices
devinspect.collect.machine.memory_snapshot.snapshot({"x": torch.zeros(1)})
devinspect.collect.machine.devices.present()
import devinspect.collect.machine.environment, devinspect.render.environment_text
devinspect.render.environment_text.render(devinspect.collect.machine.environment.gather())
print("initialised:", torch.cuda.is_initialized())
"""
    assert run_with_cuda_recorder(code) == "[]"
