from __future__ import annotations

import contextlib
import gc
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest
import torch

from devinspect import testing
from devinspect.testing.real_devices import refusal


def has_cuda() -> bool:
    return torch.cuda.is_available()


#: The real accelerator in this process (a visible GPU), asked before anything enables the
#: simulated device, which cannot share a process with one (testing.enable() refuses).
REAL_ACCELERATOR = testing.real_accelerator()
#: How a test module enables the simulated device itself (in its process, a subprocess or a kernel).
_ENABLES = ("testing.enable(", "testing.device(")


def run_python(code: str, timeout: int = 180) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (for what must not touch this process: an abort, a crash,
    CUDA's initialisation), its exit status and output as text; the test asserts on them."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)


def _uses_simulated_device(item: Any, sources: dict) -> bool:
    if "sim" in item.fixturenames:
        return True
    if "cuda" in item.keywords:
        return False
    path = str(item.fspath)
    if path not in sources:
        sources[path] = Path(path).read_text(encoding="utf-8")
    return any(call in sources[path] for call in _ENABLES)


def pytest_collection_modifyitems(config: Any, items: list) -> None:
    if not has_cuda():
        skip = pytest.mark.skip(reason="needs a CUDA GPU")
        for item in items:
            if "cuda" in item.keywords:
                item.add_marker(skip)
    if REAL_ACCELERATOR is not None:
        # On a GPU machine the CUDA cases run without the simulated device in their process.
        skip = pytest.mark.skip(reason=f"uses the simulated device, which cannot share a process with a real "
                                       f"accelerator ({REAL_ACCELERATOR.type}); run it with CUDA_VISIBLE_DEVICES=\"\"")
        sources: dict[str, str] = {}
        for item in items:
            if _uses_simulated_device(item, sources):
                item.add_marker(skip)


@pytest.fixture(scope="session")
def sim() -> torch.device:
    """The simulated accelerator, ``sim:0`` (never beside a real accelerator: skipped there)."""
    if REAL_ACCELERATOR is not None:
        pytest.skip(refusal(REAL_ACCELERATOR))
    return testing.enable()


@pytest.fixture
def stale_optimizer(sim):
    """(model, opt): a Linear(3, 2) moved to ``sim`` whose AdamW state, loaded from a
    checkpoint taken before the move, is still on the CPU (exp_avg, exp_avg_sq)."""
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    opt.step()
    checkpoint = opt.state_dict()
    model.to(sim)
    opt = torch.optim.AdamW(model.parameters())
    opt.load_state_dict(checkpoint)
    # load_state_dict casts state to the parameter's device; a checkpoint loaded
    # before the move (the common bug) leaves it behind. Reproduce that directly:
    for state in opt.state.values():
        state["exp_avg"], state["exp_avg_sq"] = state["exp_avg"].cpu(), state["exp_avg_sq"].cpu()
    return model, opt


@pytest.fixture
def ip():
    """A real InteractiveShell with devinspect loaded, a clean namespace and HTML on."""
    from IPython.testing.globalipapp import get_ipython

    shell = get_ipython()
    shell.display_formatter.active_types = shell.display_formatter.format_types
    shell.run_line_magic("load_ext", "devinspect")
    before = set(shell.user_ns)
    outputs_before = set(shell.user_ns["Out"])
    yield shell
    for name in set(shell.user_ns) - before:
        del shell.user_ns[name]
    # Output history is shared by every test on this shell: drop what this one added.
    for key in set(shell.user_ns["Out"]) - outputs_before:
        del shell.user_ns["Out"][key]
        shell.user_ns_hidden.pop(f"_{key}", None)
    # _, __ and ___ too: the shell keeps them in three places, which must agree (or IPython
    # takes them for the user's own and never updates them again).
    for store in (shell.user_ns, shell.user_ns_hidden, shell.displayhook.__dict__):
        store.update({"_": "", "__": "", "___": ""})
    shell.run_line_magic("unload_ext", "devinspect")
    # The test's last error goes with it: its frames may hold what must be shut down while this
    # test is still the one timed (a DataLoader's worker processes), not in a later test's collection.
    import devinspect

    devinspect.release_traceback()
    gc.collect()
    # What outlives a test's collection (imported libraries, the shell) lives for the session:
    # frozen, so later collections walk only what later tests make (a full collection over
    # transformers' objects costs 0.3 s, and every test that takes this shell ends in one).
    gc.freeze()


def run(shell: Any, code: str) -> Any:
    """Run a cell; return (result, text/plain, text/html) of what it displayed."""
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        result = shell.run_cell(code, store_history=True)
    bundles = [o.data for o in captured.outputs]
    if result.result is not None:
        # What a kernel sends for the cell's value: the shell's own formatters.
        bundles.append(shell.display_formatter.format(result.result)[0])
    texts = [b.get("text/plain", "") for b in bundles]
    htmls = [b.get("text/html", "") for b in bundles]
    # The terminal displayhook prints the value again on stdout; keep stdout only without one.
    stdout = captured.stdout if result.result is None else ""
    return result, "\n".join(texts) + stdout, "\n".join(htmls), captured


@contextlib.contextmanager
def widget_frontend(shell: Any) -> Iterator[Any]:
    """The shell as devinspect sees it in a Jupyter kernel: a frontend that shows widgets and
    images (devinspect asks for ``shell.kernel``)."""
    shell.kernel = object()
    try:
        yield shell
    finally:
        del shell.kernel


@pytest.fixture
def kernel_ip(ip: Any) -> Iterator[Any]:
    """:func:`ip` as a Jupyter kernel looks to devinspect (a widget frontend)."""
    with widget_frontend(ip):
        yield ip


def notebook(cells: Sequence[str], raising: Sequence[int] = ()) -> Any:
    """A notebook of code ``cells``; those at the indices in ``raising`` are tagged to raise (Run
    All goes on past them, as JupyterLab's and nbclient's ``raises-exception`` tag says)."""
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    for index in raising:
        nb.cells[index].metadata["tags"] = ["raises-exception"]
    return nb


def run_notebook(nb: Any, timeout: int = 120, kernel_name: str = "python3", **options: Any) -> Any:
    """Run every cell of ``nb`` in a real kernel, as Run All does (stopping at a failed cell with
    CellExecutionError); returns the notebook with its outputs."""
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=timeout, kernel_name=kernel_name, **options).execute()
    return nb
