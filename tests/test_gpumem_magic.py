"""%gpumem through a real InteractiveShell, and its dashboard through widget clicks."""

from __future__ import annotations

import gc
import time
import weakref

import pytest
import torch
from conftest import run, widget_frontend

from devinspect import actions
from devinspect.model.device_memory import MemoryHistory, MemorySnapshot


@pytest.fixture
def dashboard_ip(kernel_ip):
    """The shell as a Jupyter kernel looks to %gpumem (a widget frontend); the dashboard's
    refresh stopped after the test."""
    yield kernel_ip
    kernel_ip.run_line_magic("gpumem", "--stop")


def instance(shell):
    return shell.magics_manager.registry["GpumemMagics"]


def test_gpumem_text_and_html_without_widgets(ip, sim):
    result, text, html, _ = run(ip, "import torch\nx = torch.ones(250, 1000)\n%gpumem")
    assert result.success
    assert "devinspect: memory of" in text and "and this process" in text
    assert "cpu  this process" in text and "tensors named in the namespace" in text
    assert "976.6 KiB" in text  # x: 1,000,000 bytes
    assert "<meter" in html and "where the memory is" in html


def test_gpumem_o_returns_the_snapshot_with_frames(ip):
    run(ip, "import torch\nx = torch.ones(10)")
    snap = ip.run_line_magic("gpumem", "-o")
    assert isinstance(snap, MemorySnapshot)
    assert "named_tensor_bytes" in snap.frame.columns and len(snap.reconciliation_frame) > 0
    assert snap.device("cpu").tensors.named_bytes == 40


def test_gpumem_device_filter_and_mistakes(ip):
    snap = ip.run_line_magic("gpumem", "-d cpu -o --no-tensors")
    assert [d.device for d in snap.devices] == ["cpu"] and snap.devices[0].tensors is None
    for line, message in (("-d cuda:3", "no device 'cuda:3' in this process"), ("-d banana", "'banana' is not a device"),
                          ("--watch 0", "between 0.2 and 3600"), ("--watch 2", "needs a Jupyter kernel"),
                          ("--track --untrack", "contradict"), ("--bogus", "unrecognized arguments")):
        result, text, _, captured = run(ip, f"%gpumem {line}")
        assert not result.success or "UsageError" in captured.stderr + text
        assert message in captured.stderr + text, line


def test_track_history_and_untrack(ip):
    events = ip.events.callbacks
    before_pre, before_post = list(events["pre_run_cell"]), list(events["post_run_cell"])
    run(ip, "%gpumem --track")
    first, *_ = run(ip, "import torch\nbig = torch.ones(4 << 20)\nbig += 1")
    second, *_ = run(ip, "del big")
    history = ip.run_line_magic("gpumem", "--history -o")
    assert isinstance(history, MemoryHistory)
    sources = [c.source for c in history.cells]
    assert "import torch" in sources and "del big" in sources
    cell = history.cells[sources.index("import torch")]
    assert cell.cell is not None and cell.wall_s > 0
    # The numbers are the execution counts the cells ran as (In[N]), not one more.
    assert [c.cell for c in history.cells if c.source in ("import torch", "del big")] == [
        first.execution_count, second.execution_count]
    _, text, _, captured = run(ip, "%gpumem --history")
    assert "memory per cell" in text and "cpu resident" in text
    # A terminal gets the table as text, no plot object it cannot show.
    assert not any("image/png" in o.data for o in captured.outputs) and "Image object" not in text
    with widget_frontend(ip):  # a frontend that shows images gets the plot
        _, _, _, captured = run(ip, "%gpumem --history")
    assert any("image/png" in o.data and "data-jp-theme-light" in o.data.get("text/html", "")
               for o in captured.outputs)  # a light and a dark rendering, picked by the page's theme
    run(ip, "%gpumem --untrack")
    assert events["pre_run_cell"] == before_pre and events["post_run_cell"] == before_post
    n = len(ip.run_line_magic("gpumem", "--history -o").cells)
    run(ip, "1 + 1")
    assert len(ip.run_line_magic("gpumem", "--history -o").cells) == n  # no longer recording


def test_failed_cell_is_recorded_as_failed(ip):
    run(ip, "%gpumem --track")
    run(ip, "raise ValueError('boom')")
    history = ip.run_line_magic("gpumem", "--history -o")
    assert history.cells[-1].failed and "✖" in repr(history)
    run(ip, "%gpumem --untrack")


def test_unload_removes_hooks_and_stops_watchers(dashboard_ip):
    ip = dashboard_ip
    events = ip.events.callbacks
    before_pre, before_post = list(events["pre_run_cell"]), list(events["post_run_cell"])
    run(ip, "%gpumem --track")
    run(ip, "%gpumem --watch 0.2")
    loaded = instance(ip)
    watcher = loaded._watchers[0]
    assert watcher.running
    ip.run_line_magic("unload_ext", "devinspect")
    assert not watcher.running and not watcher.thread.is_alive()
    ours = [c for e in ("pre_run_cell", "post_run_cell") for c in events[e] if getattr(c, "__self__", None) is loaded]
    assert ours == []
    ip.run_line_magic("load_ext", "devinspect")  # the fixture unloads again
    # Loaded again: the same callbacks as before --track and --watch (the error explainer only).
    assert len(events["pre_run_cell"]) == len(before_pre) and len(events["post_run_cell"]) == len(before_post)


# -- the dashboard -----------------------------------------------------------------


def dashboard_of(ip, line="--watch 0.2"):
    _, _, _, captured = run(ip, f"%gpumem {line}")
    return captured.outputs[-1].data, instance(ip)._last_dashboard(), captured.outputs[-2].data


def test_dashboard_bundle_has_widget_and_static_fallback(dashboard_ip):
    bundle, dashboard, static = dashboard_of(dashboard_ip)
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == dashboard.widget.model_id
    assert "memory of" in static["text/plain"] and "<meter" in static["text/html"]  # nbconvert, GitHub


def test_watch_refreshes_without_blocking_and_stops(dashboard_ip):
    ip = dashboard_ip
    _, dashboard, _ = dashboard_of(ip)
    watcher = instance(ip)._watchers[0]
    result, _, _, _ = run(ip, "1 + 1")  # the kernel stays free while watching: cells run meanwhile
    assert result.result == 2 and watcher.thread.is_alive()
    deadline = time.time() + 120  # a bound on a busy machine only; the loop ends on the state it waits for
    while watcher.ticks < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert watcher.ticks >= 2 and "refreshing every 0.2 s" in dashboard.watching.value
    _, text, _, _ = run(ip, "%gpumem --stop")
    assert "stopped 1 refreshing dashboard" in text
    assert not watcher.thread.is_alive() and dashboard.watching.value == "not refreshing"
    ticks = watcher.ticks
    time.sleep(0.5)
    assert watcher.ticks == ticks


def test_watch_stops_when_the_widget_is_closed(dashboard_ip):
    ip = dashboard_ip
    _, dashboard, _ = dashboard_of(ip)
    watcher = instance(ip)._watchers[0]
    dashboard.widget.close()
    watcher.thread.join(timeout=3)
    assert not watcher.thread.is_alive()
    run(ip, "2 + 2")  # the after-cell hook forgets it
    assert instance(ip)._watchers == []


def test_a_second_watch_replaces_the_first(dashboard_ip):
    ip = dashboard_ip
    dashboard_of(ip)
    first = instance(ip)._watchers[0]
    dashboard_of(ip)
    assert not first.running and len(instance(ip)._watchers) == 1


def test_release_history_button_frees_history_tensors(dashboard_ip, sim):
    ip = dashboard_ip
    count = run(ip, "import torch\ntorch.ones(1000, device='sim:0')")[0].execution_count
    held = weakref.ref(ip.user_ns["Out"][count])
    _, bundle_dashboard, _ = dashboard_of(ip, "")
    assert instance(ip)._watchers == []  # no --watch
    button = bundle_dashboard.buttons["release_history"]
    assert button.description == "Release history: 3.9 KiB"  # shown before clicking
    button.click()
    gc.collect()
    assert held() is None
    assert bundle_dashboard.status.value.startswith("✔ released Out[")
    assert "3.9 KiB of tensors only they held" in bundle_dashboard.status.value
    # Released: nothing is left to release, so the button rests (and says why) until some is.
    assert button.description == "Release history: 0 B" and button.disabled and "Nothing in Out" in button.tooltip
    result, *_ = run(ip, "torch.zeros(2)")
    assert ip.user_ns["Out"][result.execution_count].shape == (2,)  # history goes on
    run(ip, "torch.ones(1000, device='sim:0')")
    bundle_dashboard.refresh_clicked()
    assert button.description == "Release history: 3.9 KiB" and not button.disabled


def test_buttons_report_bytes_and_errors_stay_in_the_widget(dashboard_ip, monkeypatch):
    ip = dashboard_ip
    _, dashboard, _ = dashboard_of(ip)
    dashboard.buttons["empty_cache"].click()
    assert dashboard.status.value.startswith("✔ empty_cache() released")  # the simulated device's cache
    dashboard.buttons["reset_peak_stats"].click()
    assert "peak" in dashboard.status.value
    run(ip, "class Node:\n    pass\nn = Node(); n.me = n; n.t = __import__('torch').ones(1 << 18)\ndel n")
    dashboard.buttons["collect_garbage"].click()
    assert "gc.collect() found" in dashboard.status.value and "cpu 1.0 MiB" in dashboard.status.value

    seen = []

    def broken():
        seen.append([b.disabled for b in dashboard.buttons.values()])
        raise RuntimeError("driver went away")

    dashboard._actions["empty_cache"] = broken
    dashboard.buttons["empty_cache"].click()
    assert seen == [[True, True, True, True]]  # disabled while running
    assert dashboard.status.value == "✖ empty_cache failed: RuntimeError: driver went away"
    # Enabled again, but for one with nothing to do (no history holds accelerator memory here).
    assert [k for k, b in dashboard.buttons.items() if b.disabled] == \
        (["release_history"] if dashboard.buttons["release_history"].description.endswith(": 0 B") else [])


def test_empty_cache_button_shows_what_it_will_release(recorded_snapshot):
    from devinspect.jupyter.memory_dashboard import MemoryDashboard

    dashboard = MemoryDashboard(lambda count: recorded_snapshot, {"empty_cache": actions.empty_cache})
    from devinspect.model.units import human_bytes

    d = recorded_snapshot.device("cuda:0")
    assert dashboard.buttons["empty_cache"].description == f"empty_cache: frees {human_bytes(d.releasable_bytes)}"
    view = dashboard._views["cuda:0"]
    assert view.bar("allocated").value == d.allocated_bytes and view.bar("used (driver)").max == d.driver_total_bytes
    reserved = view.bars.index(view.bar("reserved"))
    assert view.bar_labels[reserved].value == f"{human_bytes(d.reserved_bytes)} of {human_bytes(d.driver_total_bytes)}"
    assert "cached whole segments" in view.table.value


@pytest.fixture
def recorded_snapshot():
    import json
    from pathlib import Path

    from devinspect.collect.machine.memory_snapshot import build
    from devinspect.model.device_memory import TensorTally

    data = json.loads((Path(__file__).parent / "fixtures" / "gpumem_cuda.json").read_text())
    return build(data["readings"], {k: TensorTally(**v) for k, v in data["tensors"].items()})


def test_after_cell_recounts_only_when_accelerator_memory_changed(recorded_snapshot):
    from devinspect.jupyter.memory_dashboard import MemoryDashboard

    counted = []

    def collect(count):
        counted.append(count)
        return recorded_snapshot

    dashboard = MemoryDashboard(collect, {})
    dashboard.after_cell()
    assert counted == [True, False]  # allocated unchanged: no tensor walk
    assert torch.cuda.is_initialized() is False


def test_the_how_column_says_it_in_words_with_the_call_in_a_tooltip(recorded_snapshot, sim):
    import dataclasses
    from html import unescape

    from devinspect.collect.machine.memory_readings import read
    from devinspect.collect.machine.memory_snapshot import build
    from devinspect.render.memory.snapshot_html import reconciliation_table
    from devinspect.render.memory.snapshot_text import details

    cuda = recorded_snapshot.accelerators[0]
    html = unescape(reconciliation_table(cuda))
    assert "the allocator's count of what live allocations asked for, before rounding" in html
    assert "title=\"torch.cuda.memory_stats()['requested_bytes.all.current']\"" in html
    assert 'title="torch.cuda.memory_allocated()"' in html and 'title="torch.cuda.memory_reserved()"' in html
    assert ">torch.cuda" not in html  # no call shows as the text itself
    simulated = next(d for d in build(read(nvml=False), None).accelerators if d.device.startswith("sim"))
    assert "title=\"torch.accelerator.memory_stats()['requested_bytes.all.current']\"" in \
        unescape(reconciliation_table(simulated))
    once = details(dataclasses.replace(cuda, alloc_retries=1, ooms=1))
    assert "1 allocation retry · 1 out-of-memory error" in once
    assert "2 allocation retries · 2 out-of-memory errors" in details(dataclasses.replace(cuda, alloc_retries=2, ooms=2))
