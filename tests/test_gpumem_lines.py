"""%%gpumem: a cell's accelerator memory by line and by name, run as a plain cell runs."""

from __future__ import annotations

import random
import sys

import pytest
import torch
from conftest import run

from devinspect.model.memory_profile import LineMemoryProfile
from devinspect.observe.memory_recorder import cuda_events

MIB = 1 << 20


def profiled(ip, body: str, flags: str = "-v prof") -> tuple[LineMemoryProfile, object, str]:
    result, text, _, _ = run(ip, f"%%gpumem {flags}\n{body}")
    return ip.user_ns.get("prof"), result, text


@pytest.fixture
def dev(ip, sim):
    ip.user_ns.update(torch=torch, dev=sim)
    ip.user_ns.pop("prof", None)
    return sim


def test_a_cell_known_to_the_byte(ip, dev):
    prof, result, text = profiled(ip, "a = torch.empty(4 << 20, dtype=torch.uint8, device=dev)\n"
                                      "b = torch.empty(8 << 20, dtype=torch.uint8, device=dev)\n"
                                      "c = torch.empty(1 << 20, dtype=torch.uint8, device=dev)\n"
                                      "del b")
    assert result.success
    start = prof.allocated_start
    assert [(m.line, m.change) for m in prof.lines] == [(2, 4 * MIB), (3, 8 * MIB), (4, 1 * MIB), (5, -8 * MIB)]
    assert [m.allocated_after - start for m in prof.lines] == [4 * MIB, 12 * MIB, 13 * MIB, 5 * MIB]
    assert prof.line(2).alive == (("a", 4 * MIB),) and prof.line(4).alive == (("c", 1 * MIB),)
    assert prof.line(3).alive == ()  # b was deleted: it made a temporary
    assert prof.peak.allocated - start == 13 * MIB and prof.peak.line == "line 4"
    held = dict(prof.peak.held)
    assert held["temporary on line 3"] == 8 * MIB and held["a"] == 4 * MIB and held["c"] == 1 * MIB
    assert prof.peak.largest_temporary == ("temporary on line 3", 8 * MIB)
    assert prof.peak.without_largest_temporary - start == 5 * MIB
    assert "Peak " in text and "a 4.0 MiB" in text and "temporary on line 3 8.0 MiB" in text


def generated_cell(seed: int) -> tuple[str, list[int], int, int, dict[str, int]]:
    """A cell of tensors made and deleted in an order drawn from ``seed``: its source, each
    line's change, the peak above the start, the peak's line, and the tensors alive at the end."""
    rng = random.Random(seed)
    live: dict[str, int] = {}
    lines, changes = [], []
    total = peak = 0
    peak_line = 0
    for i in range(rng.randint(3, 12)):
        if live and rng.random() < 0.35:
            name = rng.choice(sorted(live))
            size = live.pop(name)
            lines.append(f"del {name}")
            changes.append(-size)
            total -= size
        else:
            size = rng.choice([512, 4096, 1 << 16]) * rng.randint(1, 64)
            name = f"t{i}"
            if rng.random() < 0.3:  # made in a loop, a chunk per run
                runs = rng.randint(2, 4)
                lines.append(f"{name} = [torch.empty({size}, dtype=torch.uint8, device=dev) for _ in range({runs})]")
                size *= runs
            else:
                lines.append(f"{name} = torch.empty({size}, dtype=torch.uint8, device=dev)")
            live[name] = size
            changes.append(size)
            total += size
        if total > peak:
            peak, peak_line = total, len(lines) + 1
    return "\n".join(lines), changes, peak, peak_line, live


def climbed_to_peak(changes: list[int], start: int, peak_line: int) -> int:
    """The line a peak belongs to: where the total climbed to within PEAK_TOLERANCE of it, the lines
    after it up to the peak's own never falling below that (a few bytes after the jump do not take it).
    ``changes[i]`` is line ``i + 2``'s (the cell's first line is the magic's), as ``peak_line`` counts."""
    from devinspect.diagnose.memory_profile_builder import PEAK_TOLERANCE

    totals, total = {}, start
    for index, change in enumerate(changes):
        total += change
        totals[index + 2] = total
    peak = totals[peak_line]
    floor = peak - int(peak * PEAK_TOLERANCE)
    line = peak_line
    while line - 1 in totals and totals[line - 1] >= floor:
        line -= 1
    return line


@pytest.mark.parametrize("seed", range(12))
def test_generated_cells_give_each_line_its_bytes(ip, dev, seed):
    body, changes, peak, peak_line, live = generated_cell(seed)
    ip.run_cell("\n".join(f"{n} = None" for n in live))  # no name from an earlier seed holds memory
    prof, result, _ = profiled(ip, body)
    assert result.success, body
    assert [m.change for m in prof.lines] == changes, body
    assert prof.peak.allocated - prof.allocated_start == peak, body
    assert prof.peak.line == f"line {climbed_to_peak(changes, prof.allocated_start, peak_line)}", body
    alive = {}
    for m in prof.lines:
        for name, size in m.alive:
            root = name.split("[")[0]
            alive[root] = alive.get(root, 0) + size
    assert alive == live, body


def test_the_temporaries_of_a_line_have_one_size_wherever_they_are_named(ip, dev):
    prof, _, text = profiled(ip, "x = [torch.empty(1 << 20, dtype=torch.uint8, device=dev) for _ in range(3)]\n"
                                 "y = torch.empty(2 << 20, dtype=torch.uint8, device=dev)\n"
                                 "del x")
    start = prof.allocated_start
    assert dict(prof.peak.held)["temporary on line 2"] == 3 * MIB
    assert prof.peak.largest_temporary == ("temporary on line 2", 3 * MIB)  # the three of them, as listed
    assert prof.peak.without_largest_temporary - start == 2 * MIB
    # Tensors earlier tests left on the device may be live too, and larger: the line lists them all.
    live_then = next(line for line in text.splitlines() if line.startswith("Live then:"))
    assert "temporary on line 2 3.0 MiB" in live_then and "(temporary on line 2, 3.0 MiB)" in text


STEP = """def step(n):
    a = torch.empty(n, dtype=torch.uint8, device=dev)
    b = torch.empty(2 * n, dtype=torch.uint8, device=dev)
    return a
"""


def test_a_functions_lines_come_under_the_line_that_called_them_as_they_ran(ip, dev):
    from devinspect.render.memory.plot import as_they_ended

    ip.run_cell(STEP)
    prof, _, text = profiled(ip, "first = torch.empty(1 << 10, dtype=torch.uint8, device=dev)\n"
                                 "kept = [step(1 << 16) for _ in range(2)]\n"
                                 "last = torch.empty(1 << 12, dtype=torch.uint8, device=dev)", "-f step -v prof")
    # step's return line allocates nothing: where Python has no sys.monitoring it is not heard.
    shown = [(m.label, m.depth) for m in prof.lines if m.label != "step, line 4"]
    assert shown == [("line 2", 0), ("line 3", 0), ("step, line 2", 1), ("step, line 3", 1), ("line 4", 0)]
    assert "↳ step, line 2" in text
    # The plot reads as a timeline: a function's lines end before the line that ran them.
    ended = [m.label for m in as_they_ended(prof.lines) if m.label != "step, line 4"]
    assert ended == ["line 2", "step, line 2", "step, line 3", "line 3", "line 4"]


def test_the_note_on_lines_known_from_allocations_alone_is_said_once_a_session(ip, dev, monkeypatch):
    from devinspect.ipython import profiled_cell

    monkeypatch.setattr(profiled_cell, "uses_markers", lambda: True)  # as on a Python without sys.monitoring
    ip.run_cell(STEP)
    said = []
    for _ in range(3):
        prof, result, text = profiled(ip, "kept = step(1 << 12)", "-f step -v prof")
        assert result.success and any(m.runs is None for m in prof.lines)
        said.append("sys.monitoring" in text)
    assert said == [True, False, False]
    assert not prof.explain_unfollowed and "sys.monitoring" not in repr(prof)
    run_cell = ip.run_cell("kept = None")
    assert run_cell.success


def test_a_peak_belongs_to_the_line_that_made_the_jump_not_a_few_bytes_after(ip, dev):
    # b = a * 2 takes the total to its peak; the sum's result adds a few bytes on top: still line 3's.
    prof, result, text = profiled(ip, "a = torch.empty(16 << 20, dtype=torch.uint8, device=dev)\n"
                                      "b = a * 2\n"
                                      "c = b.sum()\n"
                                      "del a, b, c")
    assert result.success
    assert prof.peak.allocated - prof.allocated_start > 32 * MIB  # the sum's bytes counted in the peak
    assert prof.peak.line == "line 3" and "on line 3" in text


def test_a_loop_adds_its_runs_up(ip, dev):
    prof, _, _ = profiled(ip, "keep = []\nfor i in range(5):\n"
                              "    keep.append(torch.empty(1 << 20, dtype=torch.uint8, device=dev))\n"
                              "    tmp = torch.empty(2 << 20, dtype=torch.uint8, device=dev)")
    body = prof.line(4)
    assert body.runs == 5 and body.change == 5 * MIB
    assert [name for name, _ in body.alive] == [f"keep[{i}]" for i in range(5)]
    temp = prof.line(5)
    # The first run makes tmp; each later run makes a new one and frees the one before.
    assert temp.runs == 5 and temp.change == 2 * MIB and temp.alive == (("tmp", 2 * MIB),)


TRAINING = '''
class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 2048)
        self.fc2 = torch.nn.Linear(2048, 8)

    def forward(self, x):
        acts = torch.relu(self.fc1(x))
        return self.fc2(acts)

net = Net().to(dev)
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(512, 256, device=dev)
'''


def test_a_training_step_names_the_forward_line_that_holds_the_activations(ip, dev):
    ip.run_cell(TRAINING)
    prof, result, text = profiled(ip, "loss = net(x).square().mean()\nloss.backward()\nopt.step()",
                                  "-f net -v prof")
    assert result.success
    forward = [m for m in prof.lines if m.function == "forward"]
    assert [m.text for m in forward] == ["acts = torch.relu(self.fc1(x))", "return self.fc2(acts)"]
    acts = forward[0]
    # relu's output, saved for backward (fc1's is freed on the line: relu's backward needs its result).
    assert acts.change == 512 * 2048 * 4
    if acts.runs is not None:  # followed line by line (sys.monitoring); else known from its allocations
        assert acts.runs == 1 and acts.peak - acts.allocated_before == 2 * 512 * 2048 * 4
    assert prof.peak.line == "line 3" and prof.line(3).peak == max(m.peak for m in prof.lines)  # backward, on top of the activations
    held = dict(prof.peak.held)
    assert held["temporary on forward, line 8"] >= 512 * 2048 * 4
    grads = dict(prof.line(3).alive)
    assert grads["net.fc1.weight.grad"] == 2048 * 256 * 4
    assert "forward, line 8" in text


def test_an_error_mid_cell_shows_the_lines_up_to_it_and_fails_as_plain(ip, dev):
    plain, _, _, _ = run(ip, "y = torch.ones(4, device=dev)\nz = y @ torch.ones(3, 3, device=dev)\nw = 1")
    prof, result, text = profiled(ip, "y = torch.ones(4, device=dev)\nz = y @ torch.ones(3, 3, device=dev)\nw = 1")
    assert type(result.error_in_exec) is type(plain.error_in_exec)
    assert str(result.error_in_exec) == str(plain.error_in_exec)
    assert [m.line for m in prof.lines] == [2, 3]
    assert prof.error.startswith("RuntimeError") and "the lines up to it are shown" in text


def test_markers_go_before_every_statement_of_the_cell_and_nowhere_else():
    import ast

    from devinspect.observe.line_tracers import MARKER, mark_statements

    source = ("for i in range(2):\n    if i:\n        a = 1\n    else:\n        b = 2\n"
              "try:\n    c = 3\nexcept Exception:\n    d = 4\nfinally:\n    e = 5\n"
              "def f():\n    g = 6\n    return g\nwith open(__file__) as h:\n    k = 7\nwhile False:\n    m = 8\n")
    tree = mark_statements(ast.parse(source))
    marks = [node.args[0].value for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == MARKER]
    statements = [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, ast.stmt)
                  and node.lineno not in (13, 14)]  # f's body is not marked
    assert sorted(marks) == sorted(statements)
    compile(tree, "<cell>", "exec")  # every marker has a location


def test_keyboard_interrupt_stops_the_cell_as_a_plain_cell(ip, dev):
    ip.user_ns.pop("after", None)
    prof, result, _ = profiled(ip, "before = torch.ones(8, device=dev)\nraise KeyboardInterrupt\nafter = 1")
    assert type(result.error_in_exec) is KeyboardInterrupt
    assert "after" not in ip.user_ns and [m.line for m in prof.lines] == [2, 3]
    assert sys.gettrace() is not prof  # the tracer is gone


def test_the_cell_runs_as_plain_no_cache_emptied_no_peak_reset(ip, dev):
    import builtins

    from devinspect.observe.line_tracers import MARKER

    body = "u = torch.ones(1 << 18, device=dev)\ndel u\nv = torch.ones(16, device=dev)\nv.sum().item()"
    trace_before = sys.gettrace()
    ip.run_cell(body)  # a first run: the cache holds what the cell needs
    run(ip, "u = v = None")
    ip.run_cell(body)
    plain = torch.sim.memory_stats(0)
    run(ip, "u = v = None")
    result, text, _, _ = run(ip, f"%%gpumem\n{body}")
    profiled = torch.sim.memory_stats(0)
    for key in ("allocated_bytes.all.current", "reserved_bytes.all.current", "allocated_bytes.all.peak",
                "segment.all.freed", "num_alloc_retries"):
        assert profiled[key] == plain[key], key  # nothing emptied, no peak reset, no extra allocation
    assert result.result == 16.0  # the last expression's value, shown as a plain cell shows it
    assert sys.gettrace() is trace_before and MARKER not in builtins.__dict__


def test_top_level_await(ip, dev):
    prof, result, _ = profiled(ip, "import asyncio\nawait asyncio.sleep(0)\nq = torch.ones(10, device=dev)")
    assert result.success and prof.line(4).alive == (("q", 512),)


def test_mistakes_are_one_line_usage_errors(ip, dev):
    ip.run_cell("numbers = [1, 2]")
    for flags, words in [("-f nowhere", "no such name"), ("-f numbers", "is a list"),
                         ("--track", "--track belongs to %gpumem on a line"), ("-d cpu", "-d cpu has none"),
                         ("-d sim:7", "sim:7")]:
        ip.user_ns.pop("ran", None)
        result, _, _, captured = run(ip, f"%%gpumem {flags}\nran = 1")
        assert result.error_in_exec is not None and words in str(result.error_in_exec), flags
        assert "ran" not in ip.user_ns and "Traceback" not in captured.stdout + captured.stderr


def test_without_an_accelerator_it_says_so(ip, monkeypatch):
    monkeypatch.setattr(torch._C, "_get_privateuse1_backend_name", lambda: "privateuseone")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: False)
    result, _, _, _ = run(ip, "%%gpumem\nran = 1")
    assert "no accelerator in this process" in str(result.error_in_exec)


def test_output_forms(ip, dev):
    result, text, html, _ = run(ip, "%%gpumem -o\nk = torch.ones(256, device=dev)")
    prof = result.result
    assert isinstance(prof, LineMemoryProfile) and prof.line(2).alive == (("k", 1024),)
    assert list(prof.frame.columns)[:4] == ["function", "line", "code", "runs"]
    assert "<table" in prof._repr_mimebundle_()["text/html"]
    from devinspect.render.memory.plot import LinesPlot

    assert "memory by line" in LinesPlot(prof)._repr_mimebundle_()["text/html"]


def test_in_a_kernel_the_widget_follows_its_static_copy(kernel_ip, dev):
    _, _, html, captured = run(kernel_ip, "%%gpumem\nk2 = torch.ones(256, device=dev)")
    bundles = [o.data for o in captured.outputs]
    static = next(b["text/html"] for b in bundles if "devinspect-static" in b.get("text/html", ""))
    # The static copy (what nbconvert and a notebook opened without a kernel show) has the plot too.
    assert 'alt="memory by line"' in static and "max-width:100%" in static
    assert any("application/vnd.jupyter.widget-view+json" in b for b in bundles)


def test_cuda_history_entries_map_to_the_traced_lines():
    traced = {("cell.py", "<module>"), ("model.py", "forward")}
    entries = [
        {"action": "segment_alloc", "addr": 0, "size": 2 * MIB, "frames": []},
        {"action": "alloc", "addr": 16, "size": 512, "frames": [
            {"filename": "torch/nn/functional.py", "name": "linear", "line": 5},
            {"filename": "model.py", "name": "forward", "line": 12},
            {"filename": "cell.py", "name": "<module>", "line": 3}]},
        {"action": "free_requested", "addr": 16, "size": 512, "frames": []},
        {"action": "free_completed", "addr": 16, "size": 512, "frames": []},
    ]
    events = cuda_events(entries, lambda filename, name: (filename, name) in traced)
    assert [e[0] for e in events] == ["segment_alloc", "alloc", "free"]
    assert events[1][3] == (("model.py", "forward", 12), ("cell.py", "<module>", 3))


def test_a_backend_without_events_gets_counters_and_says_what_is_missing(ip, dev, monkeypatch):
    # As MPS and XPU: allocated and reserved through the device's API, no allocation events.
    monkeypatch.setattr(type(torch.sim), "memory_observers", None)
    prof, result, text = profiled(ip, "n = torch.empty(2 << 20, dtype=torch.uint8, device=dev)\nm = 1")
    assert result.success and not prof.has_events
    assert prof.line(2).change == 2 * MIB and prof.line(2).peak is None and prof.line(2).alive == ()
    assert "No allocation events: sim exposes no allocation events" in text and "no peak inside a line" in text


def test_memory_another_device_gained_is_said_to_be_unprofiled(ip, dev):
    other = f"{dev.type}:1"
    prof, _, text = profiled(ip, f"a = torch.empty(1 << 20, device='{other}')\nb = torch.empty(1 << 19, device=dev)")
    assert prof.elsewhere and prof.elsewhere[0][0] == other and prof.elsewhere[0][2] - prof.elsewhere[0][1] == 4 << 20
    assert f"Not profiled: {other}" in text and f"%%gpumem -d {other}" in text
    run(ip, "del a")
    getattr(torch, dev.type).empty_cache()
