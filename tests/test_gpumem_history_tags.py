"""%%gpumem's path for CUDA's tagged memory history, through a stand-in for CUDA's memory API
(tests/cuda_standin.py) over the simulated device's allocator: the profile the history gives
equals the one the allocator's own events give, and what it costs per line does not grow
with the lines run. (The same on a real GPU: the %%gpumem cases of tests/test_cuda.py.)"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import torch
from conftest import run
from cuda_standin import CudaMemoryStandIn
from test_gpumem_lines import generated_cell

import devinspect.ipython.profiled_cell as profiled_cell
from devinspect.model.memory_profile import LineMemoryProfile
from devinspect.observe.memory_recorder import LineMemoryRecorder

MIB = 1 << 20


@pytest.fixture
def standin(ip, sim, monkeypatch):
    """The stand-in in CUDA's place; %%gpumem profiles "cuda:0" (whose allocations are sim:0's)."""
    ip.user_ns.update(torch=torch, dev=sim)
    api = CudaMemoryStandIn().install(monkeypatch)
    names = profiled_cell.named_allocations
    monkeypatch.setattr(profiled_cell, "named_allocations",
                        lambda namespace, device, exclude=(), wanted=None: names(namespace, sim, exclude, wanted))
    yield api
    api.remove()


def profile(ip, body: str, device: str, monkeypatch, flags: str = "") -> LineMemoryProfile:
    """``body`` under %%gpumem on ``device`` ("sim:0", or "cuda:0": the stand-in), from an empty cache."""
    torch.sim.empty_cache()
    chosen = torch.device(device)
    monkeypatch.setattr(profiled_cell, "profiled_device", lambda text: chosen)
    result, _, _, _ = run(ip, f"%%gpumem -v prof {flags}\n{body}")
    assert result.success, body
    return ip.user_ns.pop("prof")


def comparable(prof: LineMemoryProfile) -> tuple:
    start = prof.allocated_start
    rows = tuple((m.label, m.runs, m.change, m.alive, m.alive_unnamed,
                  *(None if v is None else v - start for v in (m.allocated_before, m.allocated_after, m.peak)),
                  m.reserved_before, m.reserved_after) for m in prof.lines)
    peak = prof.peak
    return rows, peak.allocated - start, peak.line, peak.held, peak.largest_temporary


@pytest.mark.parametrize("seed", range(8))
def test_the_tagged_history_gives_the_profile_the_allocator_events_give(ip, standin, monkeypatch, seed):
    body, _, _, _, live = generated_cell(seed)
    clear = "\n".join(f"{n} = None" for n in live) or "pass"
    run(ip, clear)
    told = profile(ip, body, "sim:0", monkeypatch)
    run(ip, clear)
    tagged = profile(ip, body, "cuda:0", monkeypatch)
    assert tagged.events_source == "CUDA's memory history" and told.events_source == "sim's allocator events"
    assert comparable(tagged) == comparable(told), body


def test_the_history_records_the_bytes_asked_for_and_a_line_counts_the_block(ip, standin, monkeypatch):
    # CUDA's history records what was asked for (1000 bytes), its counter the 512-byte blocks.
    body = ("a = torch.empty(1000, dtype=torch.uint8, device=dev)\n"
            "b = torch.empty(100, dtype=torch.uint8, device=dev)\n"
            "del b")
    prof = profile(ip, body, "cuda:0", monkeypatch)
    assert [e["size"] for e in standin.history_seen if e["action"] == "alloc"] == [1000, 100]
    assert [(m.line, m.change) for m in prof.lines] == [(2, 1024), (3, 512), (4, -512)]
    assert prof.line(2).alive == (("a", 1024),) and prof.allocated_end - prof.allocated_start == 1024


LOOP = """def step(n):
    kept = []
    for _ in range(n):
        kept.append(torch.empty(4096, dtype=torch.uint8, device=dev))
        scratch = torch.empty(1 << 16, dtype=torch.uint8, device=dev)
    return kept
"""


def test_the_history_is_read_once_whatever_the_number_of_lines(ip, standin, monkeypatch):
    run(ip, LOOP)
    calls = []
    for n in (5, 50):
        run(ip, "out = t = None")
        standin.calls.clear()
        prof = profile(ip, f"out = step({n})\nfor i in range({n}):\n    t = torch.empty(512, device=dev)", "cuda:0",
                       monkeypatch)
        assert prof.line(2).change == n * 4096 and prof.line(4).runs == n
        calls.append(dict(standin.calls))
        # Per line: one tag and nothing read; the allocator once at each end, the history once.
        assert standin.calls["_snapshot"] == 1 and standin.calls["memory_stats_as_nested_dict"] == 2
        assert standin.calls["memory_stats"] == 0
        assert standin.calls["memory_allocated"] == standin.calls["memory_reserved"] == 0
        assert standin.calls["_record_memory_history"] == 2 and not standin.recording
        lines_run = sum(m.runs or 0 for m in prof.lines)
        assert standin.calls["_cuda_setMemoryMetadata"] <= 2 * lines_run + 2
        assert standin.get_metadata() == ""  # the thread's metadata is as it was
    assert {k: v for k, v in calls[0].items() if k != "_cuda_setMemoryMetadata"} == \
           {k: v for k, v in calls[1].items() if k != "_cuda_setMemoryMetadata"}


def test_a_named_functions_lines_agree_with_the_allocator_events(ip, standin, monkeypatch):
    # Where Python follows no function line by line (before 3.12), its lines come from the
    # Python stack CUDA records with each event, as the simulated device's come from the stack.
    run(ip, LOOP)
    told = profile(ip, "out = step(3)\nlast = torch.empty(512, device=dev)", "sim:0", monkeypatch, "-f step")
    run(ip, "out = last = None")
    tagged = profile(ip, "out = step(3)\nlast = torch.empty(512, device=dev)", "cuda:0", monkeypatch, "-f step")
    assert comparable(tagged) == comparable(told)
    assert {"step, line 4", "step, line 5"} <= {m.label for m in tagged.lines if m.function == "step"}


def test_lines_heard_one_by_one_are_replayed_in_order_with_the_allocations(sim, standin):
    # As sys.monitoring tells a function's lines (Python 3.12+): the listener hears each one;
    # the function's lines and the cell's are each allocation's, from the tags alone.
    def cell():
        pass

    def function():
        pass

    outer, inner = cell.__code__, function.__code__
    profiles = []
    for device in (torch.device("sim", 0), torch.device("cuda", 0)):
        torch.sim.empty_cache()
        recorder = LineMemoryRecorder(device, frozenset({outer, inner}))
        with recorder:
            hear = recorder.listener
            hear.enter(outer, 0)
            hear.line(outer, 1)
            a = torch.empty(1 << 20, dtype=torch.uint8, device=sim)
            hear.enter(inner, 0)
            kept = []
            for _ in range(3):  # one line run three times, each run its own allocation and free
                hear.line(inner, 10)
                kept.append(torch.empty(1 << 16, dtype=torch.uint8, device=sim))
                scratch = torch.empty(1 << 18, dtype=torch.uint8, device=sim)
                hear.line(inner, 11)  # allocates nothing
            hear.leave(inner, 0, None)
            b = torch.empty(1 << 19, dtype=torch.uint8, device=sim)  # the caller's line again, after the call
            hear.line(outer, 2)
            del a, scratch
            hear.leave(outer, 0, None)
        profiles.append(recorder.recording)
        del kept, b
    told, tagged = profiles
    assert tagged.has_events and tagged.events_source == "CUDA's memory history"
    start_told, start_tagged = told.allocated_start, tagged.allocated_start
    assert [(k, t.runs, t.change, t.peak - start_told, t.allocated_after - start_told)
            for k, t in told.lines.items()] == \
           [(k, t.runs, t.change, t.peak - start_tagged, t.allocated_after - start_tagged)
            for k, t in tagged.lines.items()]
    assert tagged.lines[(inner.co_filename, "function", 10)].change == 3 * (1 << 16) + (1 << 18)
    assert tagged.lines[(inner.co_filename, "function", 11)].change == 0
    assert tagged.lines[(outer.co_filename, "cell", 1)].change == (1 << 20) + 3 * (1 << 16) + (1 << 18) + (1 << 19)
    assert [e[3][0][1:] for e in tagged.events if e[0] == "alloc"] == \
           [("cell", 1), *[("function", 10)] * 6, ("cell", 1)]


def test_another_threads_allocations_count_on_the_line_running_then(ip, standin, monkeypatch):
    # CUDA's metadata is per thread: autograd's backward thread allocates untagged.
    ip.user_ns["threading"] = threading
    body = ("box = []\n"
            "worker = threading.Thread(target=lambda: box.append(torch.empty(1 << 20, dtype=torch.uint8, device=dev)))\n"
            "worker.start(); worker.join()\n"
            "after = torch.empty(1 << 16, dtype=torch.uint8, device=dev)")
    prof = profile(ip, body, "cuda:0", monkeypatch)
    assert prof.line(4).change == 1 << 20 and prof.line(5).change == 1 << 16
    assert prof.line(4).alive == (("box[0]", 1 << 20),)


def test_a_recording_of_the_users_own_is_read_never_written_into(ip, standin, monkeypatch):
    standin.record_memory_history(enabled="all", context="all", stacks="python")
    run(ip, "mine = torch.empty(1 << 16, dtype=torch.uint8, device=dev)")
    standin.calls.clear()
    prof = profile(ip, "x = torch.empty(1 << 20, dtype=torch.uint8, device=dev)\ny = 1", "cuda:0", monkeypatch)
    assert prof.line(2).change == 1 << 20 and prof.line(2).alive == (("x", 1 << 20),)
    assert standin.recording and standin.calls["_cuda_setMemoryMetadata"] == 0  # still on, and untagged
    assert not any("user_metadata" in e for e in standin.trace)
    assert standin.calls["memory_allocated"] > 0  # so the counters are read at each line instead
    standin.record_memory_history(enabled=None)
    standin.set_metadata("my run")  # metadata of the user's: left alone too
    standin.calls.clear()
    profile(ip, "z = torch.empty(1 << 16, dtype=torch.uint8, device=dev)", "cuda:0", monkeypatch)
    assert standin.get_metadata() == "my run" and standin.calls["_cuda_setMemoryMetadata"] == 0
    standin.set_metadata("")


TRACE = Path(__file__).parent / "fixtures" / "cuda_tiny_trace.json"


def test_a_history_cuda_recorded_replays_onto_the_line_that_made_it(sim, monkeypatch):
    # tests/fixtures/cuda_tiny_trace.json: CUDA's entries for a loop of tiny allocations, in the
    # form CUDA gives them (captured by benchmarks/gpu_check.py). Replayed as %%gpumem would
    # have heard the loop: the loop's line, then the entries CUDA recorded while it ran.
    data = json.loads(TRACE.read_text())
    assert "NOT CAPTURED ON A GPU" in data["provenance"] or "captured on a real GPU" in data["provenance"]
    groups: list[list[dict]] = []
    for entry in data["entries"]:
        if entry["action"] == "alloc" or not groups:
            groups.append([])
        groups[-1].append(entry)
    api = CudaMemoryStandIn()
    api.install_functions(monkeypatch)

    def loop():
        pass

    code = loop.__code__
    recorder = LineMemoryRecorder(torch.device("cuda", 0), frozenset({code}))
    with recorder:
        hear = recorder.listener
        hear.enter(code, 0)
        for group in groups:
            hear.line(code, 4)
            api.trace.extend(dict(entry, user_metadata=api.get_metadata()) for entry in group)
        hear.leave(code, 0, None)
    line = recorder.recording.lines[(code.co_filename, "loop", 4)]
    counted = {"alloc": 1, "free_requested": -1}
    assert line.runs == len(groups) and line.change == sum(counted.get(e["action"], 0) * e["size"]
                                                           for e in data["entries"])
    made = [e for e in recorder.recording.events if e[0] == "alloc"]
    assert len(made) == sum(e["action"] == "alloc" for e in data["entries"]) == data["count"]
    assert {e[3] for e in recorder.recording.events} == {((code.co_filename, "loop", 4),)}


def test_memory_a_name_of_its_own_holds_is_named_without_walking_the_namespace(sim, monkeypatch):
    import devinspect.collect.namespace.scan as scan_module
    from devinspect.observe.memory_recorder import named_allocations

    namespace = {"t": torch.ones(4, device=sim), "holder": {"deep": torch.ones(8, device=sim)}}
    everything = named_allocations(namespace, sim)
    top, deep = ({a for a, n in everything.items() if n == name} for name in ("t", 'holder["deep"]'))
    assert top and deep
    walked, original = [], scan_module.scan
    monkeypatch.setattr(scan_module, "scan", lambda *a, **k: walked.append(1) or original(*a, **k))
    assert named_allocations(namespace, sim, wanted=top) == {a: "t" for a in top} and not walked
    assert named_allocations(namespace, sim, wanted=top | deep) == everything and walked


@pytest.mark.parametrize("seed", range(6))
def test_a_flat_log_replayed_as_arrays_equals_its_replay_step_by_step(seed, monkeypatch):
    # The cell's statements one frame at a time (the usual log): added up as arrays, it must give
    # exactly what the replay one line event at a time gives.
    import random

    from devinspect.model.memory_profile import Recording

    rng = random.Random(seed)

    def statement():
        pass

    def other():
        pass

    log, numbers = [], {statement.__code__: (2, 3, 4), other.__code__: (5, 6)}
    for _ in range(rng.randint(1, 6)):
        code = rng.choice(list(numbers))
        log.append((0, code, 0, 0))
        log += [(1, code, rng.choice(numbers[code]), 0) for _ in range(rng.randint(0, 30))]
        log.append((2, code, 0, 0))
    allocated, reserved, total = [], [], 1000
    for _ in log:
        total += rng.choice((0, 0, 512, -512, 4096))
        allocated.append(total)
        reserved.append(1 << 20)
    highest = [rng.choice((-1, -1, total + 512)) for _ in range(len(log) + 1)]

    def replayed(flat: bool):
        recorder = LineMemoryRecorder.__new__(LineMemoryRecorder)
        recorder.open_lines, recorder._lines_of, recorder.lines_now = [], {}, ()
        recorder.recording = Recording("cuda:0", has_events=True)
        if not flat:
            monkeypatch.setattr(LineMemoryRecorder, "_replay_flat", lambda self, *a: None)
        after = recorder.replay_log(log, allocated, reserved, highest)
        monkeypatch.undo()
        return after, recorder.recording.lines, recorder.lines_now

    by_arrays, step_by_step = replayed(True), replayed(False)
    assert by_arrays == step_by_step
    assert [tuple(t.__dict__.items()) if hasattr(t, "__dict__") else repr(t) for t in by_arrays[1].values()] == \
           [tuple(t.__dict__.items()) if hasattr(t, "__dict__") else repr(t) for t in step_by_step[1].values()]
