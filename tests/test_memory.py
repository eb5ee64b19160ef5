"""devinspect.collect.machine.memory_snapshot: readings, the reconciliation arithmetic, rendering, tracking."""

from __future__ import annotations

import copy
import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from devinspect.collect.machine import memory_readings
from devinspect.collect.machine.memory_readings import read
from devinspect.collect.machine.memory_snapshot import build, match_driver_devices, snapshot
from devinspect.collect.machine.memory_tracker import MemoryTracker
from devinspect.model.device_memory import MemoryHistory, TensorTally
from devinspect.model.units import human_bytes

FIXTURE = Path(__file__).parent / "fixtures" / "gpumem_cuda.json"
MiB = 1 << 20


@pytest.fixture
def recorded():
    """(readings, tallies) of the CUDA fixture; see its "provenance" for how it was made."""
    data = json.loads(FIXTURE.read_text())
    tallies = {k: TensorTally(**v) for k, v in data["tensors"].items()}
    return data["readings"], tallies


def assert_adds_up(rows):
    """Each total row equals the previous total (or the start) plus the rows in between."""
    running = 0
    for r in rows:
        if r.total:
            assert r.value_bytes == running, f"{r.label}: {r.value_bytes} != {running}"
        running = r.value_bytes if r.total else running + r.value_bytes


def test_fixture_says_where_it_comes_from():
    data = json.loads(FIXTURE.read_text())
    assert "NOT CAPTURED ON A GPU" in data["provenance"] or "captured on" in data["provenance"]
    assert "gpu_validate.py --capture" in data["provenance"]


# -- the reconciliation, from recorded readings --------------------------------


@pytest.fixture
def scenario():
    return json.loads(FIXTURE.read_text())["scenario"]


def test_recorded_cuda_device_figures(recorded):
    readings, tallies = recorded
    d = build(readings, tallies).device("cuda:0")
    raw = readings["cuda"]["devices"][0]
    stats = raw["memory_stats"]
    assert d.state == "ready" and d.name == raw["name"]
    assert (d.torch_index, d.driver_index, d.driver_match) == (0, "0", "uuid")
    assert d.allocated_bytes == stats["allocated_bytes.all.current"]
    assert d.reserved_bytes == stats["reserved_bytes.all.current"]
    assert d.peak_allocated_bytes == stats["allocated_bytes.all.peak"]
    assert d.inactive_split_bytes == stats["inactive_split_bytes.all.current"]
    assert (d.alloc_retries, d.ooms, d.segments) == (stats["num_alloc_retries"], stats["num_ooms"],
                                                     stats["segment.all.current"])
    assert d.releasable_bytes == d.reserved_bytes - d.active_bytes - d.inactive_split_bytes
    nvml = readings["nvml"]["devices"][0]
    ours = [p for p in nvml["processes"] if p["pid"] == readings["process"]["pid"]]
    assert d.process_bytes == ours[0]["used"]
    assert d.other_processes_bytes == sum(p["used"] for p in nvml["processes"]) - ours[0]["used"]
    assert d.outside_allocator_bytes == d.process_bytes - d.reserved_bytes > 0  # the CUDA context at least


def test_recorded_reconciliation_adds_up_from_tensors_to_total(recorded, scenario):
    readings, tallies = recorded
    d = build(readings, tallies).device("cuda:0")
    rows = d.reconciliation
    assert_adds_up(rows)
    by_label = {r.label.split(" (")[0]: r for r in rows}
    stats = readings["cuda"]["devices"][0]["memory_stats"]
    assert by_label["tensors named in the namespace"].value_bytes == sum(scenario["named"].values())
    assert by_label["held by output history / last traceback"].value_bytes == sum(scenario["history"].values())
    assert by_label["other live tensors"].value_bytes >= scenario["other_at_least"]
    unreachable = by_label["not reachable from Python"]
    assert unreachable.source == "derived" and unreachable.value_bytes >= scenario["unreachable_at_least"]
    rounding = by_label["rounding to 512-byte blocks"].value_bytes
    assert 0 <= rounding < 512 * stats["allocation.all.current"]  # under one block per live allocation
    assert by_label["free pieces of segments in use"].value_bytes == stats["inactive_split_bytes.all.current"]
    assert by_label["cached whole segments"].value_bytes >= scenario["cached_at_least"]
    assert by_label["reserved by PyTorch"].total and by_label["reserved by PyTorch"].source == "measured"
    assert by_label["total"].value_bytes == readings["nvml"]["devices"][0]["total"]
    assert {r.source for r in rows} == {"measured", "derived"}


def test_the_total_shown_is_the_drivers_and_what_the_driver_keeps_is_its_own_row(recorded):
    # NVML's total (85,520,809,984 B on the H100) is the device's memory; CUDA's total
    # (mem_get_info, the "total capacity" of an out-of-memory message) is 480 MiB less: what
    # the driver keeps. The reconciliation ends at NVML's total, with the difference as a row.
    readings, tallies = recorded
    nvml = readings["nvml"]["devices"][0]
    cuda_total = readings["cuda"]["devices"][0]["mem_get_info"][1]
    d = build(readings, tallies).device("cuda:0")
    rows = {r.label: r for r in d.reconciliation}
    assert rows["total"].value_bytes == d.driver_total_bytes == nvml["total"] > cuda_total == d.capacity_bytes
    kept = rows["reserved by the driver"]
    assert kept.value_bytes == nvml["total"] - cuda_total == 480 * MiB and kept.source == "measured"
    assert_adds_up(d.reconciliation)
    # NVML before its v2 memory API counts that memory as used: the row is then the difference.
    old = copy.deepcopy(readings)
    del old["nvml"]["devices"][0]["reserved"]
    old["nvml"]["devices"][0]["used"] = nvml["total"] - nvml["free"]
    d = build(old, tallies).device("cuda:0")
    rows = {r.label: r for r in d.reconciliation}
    assert rows["reserved by the driver"].value_bytes == 480 * MiB and rows["reserved by the driver"].source == "derived"
    assert rows["used (driver)"].value_bytes == nvml["used"]
    assert_adds_up(d.reconciliation)


def test_recorded_rendering_text_and_html(recorded):
    readings, tallies = recorded
    snap = build(readings, tallies)
    text = repr(snap)
    d = snap.device("cuda:0")
    assert f"cuda:0  {d.name}  (torch 0 · NVML 0 by uuid" in text
    assert f"empty_cache() would release {human_bytes(d.releasable_bytes)}" in text
    assert "= reserved by PyTorch" in text and human_bytes(d.reserved_bytes) in text
    assert "  rounding to 512-byte blocks" in text
    html = snap._repr_mimebundle_()["text/html"]
    assert "<meter" in html and "cached whole segments" in html and "<script" not in html
    assert list(snap.frame["device"]) == ["cuda:0", "cpu"]
    assert snap.frame.loc[0, "releasable_bytes"] == d.releasable_bytes
    recon = snap.reconciliation_frame
    assert set(recon["source"]) == {"measured", "derived"}
    assert recon[recon["device"] == "cuda:0"]["bytes"].notna().all()


def test_recorded_without_tensor_walk_starts_at_the_allocator(recorded):
    readings, _ = recorded
    rows = build(readings, None).device("cuda:0").reconciliation
    assert rows[0].label == "requested by live allocations" and not rows[0].total
    assert_adds_up(rows)


def test_not_initialised_cuda_says_so_and_measures_nothing(recorded):
    readings, _ = recorded
    readings = copy.deepcopy(readings)
    readings["cuda"] = {"compiled": True, "version": "12.8", "initialized": False, "device_count": 1}
    others = [p for p in readings["nvml"]["devices"][0]["processes"] if p["pid"] != readings["process"]["pid"]]
    readings["nvml"]["devices"][0]["processes"] = others  # without CUDA this process has no context
    d = build(readings).device("cuda:0")
    assert d.state == "not initialised" and "not initialised" in d.status and "never starts it" in d.status
    assert d.allocated_bytes is None and d.reserved_bytes is None and d.releasable_bytes is None
    assert d.name == readings["nvml"]["devices"][0]["name"] and d.driver_match == "order"  # from NVML
    assert d.process_bytes == 0 and d.other_processes_bytes == sum(p["used"] for p in others)
    assert_adds_up(d.reconciliation)
    assert "not initialised" in repr(build(readings))


def test_nvml_missing_uses_cudamemgetinfo_and_says_why(recorded):
    readings, tallies = recorded
    readings = copy.deepcopy(readings)
    readings["nvml"] = {"error": "nvidia-ml-py is not installed (pip install 'devinspect[nvml]')"}
    snap = build(readings, tallies)
    d = snap.device("cuda:0")
    assert any("NVML unavailable: nvidia-ml-py is not installed" in n for n in snap.notes)
    assert d.driver_total_bytes == readings["cuda"]["devices"][0]["mem_get_info"][1]
    assert d.process_bytes is None and d.other_processes_bytes is None
    assert d.driver_status.startswith("per-process use unavailable")
    labels = [r.label for r in d.reconciliation]
    assert "outside the allocator (context, others)" in labels
    assert_adds_up(d.reconciliation)


def test_no_nvml_and_no_context_reads_no_driver_figures(recorded):
    readings, _ = recorded
    readings = copy.deepcopy(readings)
    readings["nvml"] = {"error": "NVML could not start (NVMLError_LibraryNotFound: NVML Shared Library Not Found)"}
    dev = readings["cuda"]["devices"][0]
    dev["has_context"] = False
    del dev["mem_get_info"]
    d = build(readings).device("cuda:0")
    assert d.driver_total_bytes is None
    assert d.driver_status.startswith("unavailable: NVML could not start")
    assert "would create a CUDA context" in d.driver_status
    assert d.reconciliation[-1].label == "reserved by PyTorch"


def test_process_not_listed_by_nvml_in_a_container(recorded):
    readings, _ = recorded
    readings = copy.deepcopy(readings)
    readings["process"]["pid"] = 17  # the container's pid; NVML lists the host's
    d = build(readings).device("cuda:0")
    assert d.process_bytes is None and "container" in d.driver_status
    assert_adds_up(d.reconciliation)


# -- which NVML device is cuda:i ---------------------------------------------------


GPUS = [
    {"index": "0", "uuid": "GPU-aaaa1111-0000", "name": "A100"},
    {"index": "1", "uuid": "GPU-bbbb2222-0000", "name": "A100"},
    {"index": "2", "uuid": "GPU-cccc3333-0000", "name": "A100", "mig_enabled": True},
    {"index": "2:0", "uuid": "MIG-dddd4444-0000", "name": "A100 MIG 1g.10gb", "parent_uuid": "GPU-cccc3333-0000",
     "gi": 1, "ci": 0},
    {"index": "2:1", "uuid": "MIG-eeee5555-0000", "name": "A100 MIG 1g.10gb", "parent_uuid": "GPU-cccc3333-0000",
     "gi": 2, "ci": 0},
]


def indices(matches):
    return [m[0]["index"] if m[0] else None for m in matches]


@pytest.mark.parametrize(("visible", "expected"), [
    ("1,0", ["1", "0"]),
    ("GPU-bbbb", ["1"]),                       # a UUID prefix, as CUDA accepts
    ("MIG-eeee5555-0000", ["2:1"]),
    ("MIG-GPU-cccc3333-0000/1/0", ["2:0"]),    # the older MIG form
    ("1,x,0", ["1"]),                          # CUDA stops at the first invalid entry
    ("0,0", []),                               # a repeated entry hides every device
])
def test_cuda_visible_devices_forms(visible, expected):
    matches = match_driver_devices(len(expected), [], GPUS, {"CUDA_VISIBLE_DEVICES": visible,
                                                             "CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    assert indices(matches) == expected


def test_uuid_wins_once_cuda_is_initialised_and_order_is_marked_approximate():
    matches = match_driver_devices(2, ["bbbb2222-0000", None], GPUS, {"CUDA_VISIBLE_DEVICES": None})
    assert matches[0] == (GPUS[1], "uuid")
    mixed = GPUS[:2] + [{"index": "2", "uuid": "GPU-ffff", "name": "T4"}]
    assert match_driver_devices(3, [], mixed, {})[2][1].startswith("order (approximate")


# -- the real machine: no GPU here ------------------------------------------------


def test_snapshot_without_accelerator_shows_process_memory():
    x = torch.ones(1000, 1000)  # 4,000,000 bytes, named below
    snap = snapshot({"x": x})
    cpu = snap.device("cpu")
    assert cpu.tensors.named_bytes >= 4_000_000 and cpu.tensors.named_count >= 1
    assert cpu.process_bytes and cpu.process_bytes > 4_000_000
    assert_adds_up(cpu.reconciliation)
    plain = build({"torch": "2.13.0+cpu", "cuda": {"compiled": False}, "process": {"rss": 1 << 30}})
    assert plain.notes == ("No accelerator: this PyTorch build (2.13.0+cpu) has no CUDA; showing this process's memory.",)


def test_nvml_failure_is_a_reason_not_an_exception(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert memory_readings.read_nvml() == {"error": "nvidia-ml-py is not installed (pip install 'devinspect[nvml]')"}
    monkeypatch.delitem(sys.modules, "pynvml")
    pytest.importorskip("pynvml")
    result = memory_readings.read_nvml()
    if "error" in result:  # no driver on this machine
        assert result["error"].startswith("NVML could not start (NVMLError")


def test_the_simulated_device_answers_through_its_device_module(sim):
    before = torch.sim.memory_allocated(0)
    y = torch.ones(10, device=sim)  # 40 bytes: one 512-byte block
    snap = snapshot({"y": y})
    d = snap.device("sim:0")
    assert d.state == "ready" and d.allocated_bytes == before + 512 and d.tensors.named_bytes == 40
    assert d.reserved_bytes >= 2 << 20 and d.segments >= 1
    assert d.driver_status.startswith("unavailable: the simulated device has no capacity")


def test_a_backend_without_allocator_statistics_says_so_in_words():
    error = ('RuntimeError: device_allocator INTERNAL ASSERT FAILED at "c10/core/CachingDeviceAllocator.h":261, '
             "please report a bug to PyTorch. Allocator for foo is not a DeviceAllocator.")
    readings = {"cuda": {"compiled": False}, "process": {"rss": 1 << 30},
                "accelerator": {"type": "foo", "initialized": True, "devices": [{"index": 0, "error": error}]}}
    d = build(readings).device("foo:0")
    assert d.state == "unavailable" and "keeps no caching-allocator statistics" in d.status
    assert "INTERNAL ASSERT" not in d.status and "RuntimeError" not in d.status and "DeviceAllocator" not in d.status
    assert d.allocated_bytes is None


def test_reading_changes_nothing(monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("reading must not act")

    for target, name in ((gc, "collect"), (torch.cuda, "empty_cache"), (torch.cuda, "synchronize"),
                         (torch.cuda, "reset_peak_memory_stats"), (torch.cuda, "init")):
        monkeypatch.setattr(target, name, forbidden)
    before = gc.isenabled()
    snapshot({"t": torch.zeros(3)})
    assert gc.isenabled() == before


def test_reading_never_initialises_cuda():
    code = (
        "import torch, devinspect.collect.machine.memory_snapshot as m, IPython\n"
        "from IPython.testing.globalipapp import get_ipython\n"
        "ip = get_ipython(); ip.run_line_magic('load_ext', 'devinspect')\n"
        "ip.run_cell('import torch; x = torch.ones(3)')\n"
        "ip.run_cell('%gpumem'); ip.run_cell('%gpumem --track'); ip.run_cell('y = x * 2')\n"
        "ip.run_cell('%gpumem --history'); m.snapshot({}); m.read()\n"
        "print('INIT', torch.cuda.is_initialized())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "INIT False" in out.stdout
    if not torch.cuda._is_compiled():
        assert "has no CUDA; showing this process's memory" in out.stdout


def test_readings_are_plain_json():
    json.dumps(read())


# -- per-cell tracking ----------------------------------------------------------------


def test_tracker_records_before_after_and_the_peak_of_a_cell():
    tracker = MemoryTracker()
    tracker.before(1, "big = torch.ones(...)")
    big = torch.ones(64 * MiB // 4)
    big += 1  # touch every page
    del big
    cell = tracker.after()
    assert cell.cell == 1 and cell.wall_s >= 0 and not cell.failed
    cpu = {d.device: d for d in cell.devices}["cpu"]
    assert cpu.allocated_before and cpu.allocated_after
    if tracker._can_reset_rss_peak:
        assert cpu.peak_allocated >= cpu.allocated_before + 48 * MiB  # the 64 MiB lived during the cell
    assert tracker.after() is None  # nothing begun
    history = tracker.history()
    assert isinstance(history, MemoryHistory) and len(history.frame[history.frame.device == "cpu"]) == 1
    text = repr(history)
    assert "[1]" in text and "cpu resident" in text and "big = torch.ones" in text


def test_history_plot_is_a_matplotlib_figure():
    pytest.importorskip("matplotlib")
    tracker = MemoryTracker()
    for i in range(3):
        tracker.before(i, f"cell {i}")
        tracker.after()
    fig = tracker.history().figure()
    assert type(fig).__name__ == "Figure" and "cpu" in [ax.get_title(loc="left") for ax in fig.axes]
    from devinspect.render.memory.plot import history_png

    assert history_png(tracker.history()).startswith(b"\x89PNG")
