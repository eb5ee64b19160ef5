"""The per-rank view: real local jobs over gloo (2 and 4 ranks), DTensor on a CPU mesh,
ipyparallel engines started and stopped here, and the errors a user meets."""

from __future__ import annotations

import pickle
import re

import pytest
import torch
from conftest import notebook, run, run_notebook
from ranks import run_job

import devinspect
import devinspect.distributed as dd
from devinspect.model.ranks import DeviceUse, ParameterSignature, RankSummary

#: Each test starts processes or engines: the quick profile (-m "not slow") leaves them out.
pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def no_default_process_group():
    """Each test starts without a default process group, whatever an earlier test in this
    worker left (a DTensor test makes one of world size 1)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    yield


def test_four_ranks_on_the_simulated_device_name_the_outlier(tmp_path):
    report, text, html = run_job("sim", 4, tmp_path / "report.pkl")
    assert [s.rank for s in report.summaries] == [0, 1, 2, 3] and report.world_size == 4
    assert all(s.error is None for s in report.summaries)
    frame = report.frame
    assert list(frame["rank"]) == [0, 1, 2, 3] and frame["transport"].eq("gloo").all()
    assert (frame["allocated_bytes"] > 0).all()  # the simulated allocator's figures, per rank
    skew = [f for f in report.findings if f.code == "skew"]
    assert [f.ranks for f in skew] == [(2,)]
    assert re.search(r"rank 2 holds 17\.\d MiB, the median rank 1\.\d MiB \(\+\d+%", skew[0].message)
    assert "its largest: cache[" in skew[0].message
    assert text.startswith("devinspect: 4 ranks of 4 over gloo, 1 host")
    assert "memory: median rank 1." in text and "worst rank 2 17." in text
    assert "<table" in html and "rank 2 holds" in html
    # One rank's largest tensors, named as on that rank.
    top = report.tensors_frame
    assert set(top[top["rank"] == 2]["name"]) >= {"cache[0]", "cache[3]", "acts"}


def test_two_cpu_ranks_whose_models_disagree_in_dtype(tmp_path):
    report, text, _ = run_job("cpu", 2, tmp_path / "report.pkl")
    desync = [f for f in report.findings if f.code == "desync"]
    assert len(desync) == 1 and desync[0].ranks == (1,) and desync[0].severity == "error"
    message = desync[0].message
    assert message.startswith("4 parameters differ across ranks (dtype float32 on rank 0 vs float64 on rank 1)")
    assert "model[0].weight, model[0].bias" in message and "DDP needs the same model on every rank" in message
    assert "✖ 4 parameters differ" in text


def test_dtensor_placements_and_each_ranks_shard(tmp_path):
    report, text, _ = run_job("dtensor", 2, tmp_path / "report.pkl")
    assert "w: [Shard(0)] on a cpu mesh 2 (tp), global [8, 4]; local rank 0 [4, 4] · rank 1 [4, 4]" in text
    assert "model.weight: [Replicate()] on a cpu mesh 2 (tp), global [4, 8]; local rank 0 [4, 8] · rank 1 [4, 8]" \
        in text
    assert "r: [Replicate()]" in text
    frame = report.dtensors_frame
    assert set(frame["name"]) == {"model.weight", "model.bias", "w", "r"} and len(frame) == 8
    assert not [f for f in report.findings if f.code == "desync"]  # a DTensor's shards are not a desync


def test_a_failing_rank_says_why_and_the_others_still_show(tmp_path):
    report, text, _ = run_job("fails", 2, tmp_path / "report.pkl")
    ok, failed = report.summaries
    assert ok.error is None and ok.tensors == 1
    assert failed.error == "memory failed: OSError: the driver did not answer" and failed.tensors == 1
    assert "rank 1: memory failed: OSError: the driver did not answer" in text
    assert re.search(r"^  1 .*✖ memory failed", text, re.M)


def test_a_rank_over_its_time_budget_sends_what_it_has(tmp_path):
    report, text, _ = run_job("times_out", 2, tmp_path / "report.pkl")
    assert report.summaries[0].error is None
    late = report.summaries[1]
    assert late.error.startswith("timed out: ") and "over the 0 s allowed" in late.error
    assert late.tensors == 1  # the scan it finished is there
    assert "rank 1: timed out" in text


def test_ranks_with_other_devinspect_versions_are_named(tmp_path):
    report, text, _ = run_job("versions", 2, tmp_path / "report.pkl")
    versions = [f for f in report.findings if f.code == "versions"]
    assert len(versions) == 1
    assert f"{devinspect.__version__} on rank 0; 0.0.9 on rank 1" in versions[0].message


def test_the_bytes_sent_do_not_grow_with_the_tensors():
    few = dd.summary({f"t{i}": torch.zeros(4) for i in range(1_000)})
    many = dd.summary({f"t{i}": torch.zeros(4) for i in range(20_000)})
    assert few.tensors == 1_000 and many.tensors == 20_000
    sizes = [len(pickle.dumps(s.to_wire())) for s in (few, many)]
    assert abs(sizes[0] - sizes[1]) < 64, sizes  # the same top 20 and totals; only the figures differ


def test_a_summary_from_another_version_is_read():
    sent = RankSummary(rank=3, world_size=4, devices=(DeviceUse("cuda:0", 2, 100, 512),),
                       parameters=(ParameterSignature("w", "cuda", "float32", (2, 2)),)).to_wire()
    sent["added_later"] = {"x": 1}
    del sent["dtensors"]
    back = RankSummary.from_wire(sent)
    assert back.rank == 3 and back.devices[0].allocated_bytes == 512 and back.parameters[0].shape == (2, 2)
    assert back.extra == {"added_later": {"x": 1}} and back.dtensors == ()
    assert RankSummary.from_wire({"rank": 1}).error.startswith("unreadable summary")


def test_cross_rank_findings_on_recorded_summaries():
    """Foreign CUDA contexts (NVML per-process data), from summaries as a GPU job sends them."""
    from devinspect.diagnose.ranks.cross_rank import cross_rank_findings

    ranks = [RankSummary(rank=r, world_size=2, local_rank=r, pid=100 + r, own_gpu=str(r),
                         cuda_contexts=("0", "1") if r == 1 else (str(r),)) for r in range(2)]
    found = cross_rank_findings(ranks)
    assert [(f.code, f.ranks) for f in found] == [("foreign context", (1,))]
    assert "rank 1 (local rank 1, pid 101) has a CUDA context on GPU 0 besides its own GPU 1" in found[0].message
    assert "torch.cuda.set_device(local_rank)" in found[0].message
    unknown = [RankSummary(rank=0, world_size=1, cuda_contexts=None)]
    assert cross_rank_findings(unknown) == ()


# -- mistakes ---------------------------------------------------------------------------------------


def test_gather_without_a_group_is_a_one_line_error():
    with pytest.raises(dd.DistributedError, match=r"^torch.distributed is not initialised: call "):
        dd.gather({})


def test_ranks_magic_without_engines_or_a_group_is_one_line(ip):
    def error(line: str) -> str:
        result = run(ip, line)[0]
        assert type(result.error_in_exec).__name__ == "UsageError", line
        return str(result.error_in_exec)

    assert error("%devices --ranks") == (
        "%devices: --ranks needs an ipyparallel client in the namespace (rc = ipyparallel.Client()) "
        "or an initialised torch.distributed group here")
    assert "takes no names or other selection" in error("%devices model --ranks")
    assert "takes no -d, --watch, --track or --history" in error("%gpumem --ranks --track")


# -- ipyparallel ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def engines():
    ipp = pytest.importorskip("ipyparallel")
    cluster = ipp.Cluster(n=2, log_level=40)
    client = cluster.start_and_connect_sync(activate=False)
    try:
        client.wait_for_engines(2, timeout=120)
        yield client
    finally:
        client.close()
        cluster.stop_cluster_sync()


def test_engines_give_the_same_report_as_a_process_group(engines, ip):
    view = engines[:]
    view.execute("import torch\nfrom devinspect import testing\ndev = testing.enable()\n"
                 "model = torch.nn.Linear(64, 64).to(dev)\nacts = torch.zeros(256, 1024, device=dev)", block=True)
    engines[1].execute("cache = [torch.zeros(1024, 1024, device=dev) for _ in range(4)]", block=True)
    names = "_names = sorted(get_ipython().user_ns)"
    view.execute(names, block=True)
    view.execute(names, block=True)  # once more, so the list includes _names itself
    names_before = view.pull("_names", block=True)
    report = dd.from_view(view)
    assert [s.rank for s in report.summaries] == [0, 1]
    assert all(s.transport == "ipyparallel" and s.error is None for s in report.summaries)
    assert [f.ranks for f in report.findings if f.code == "skew"] == [(1,)]
    assert set(report.tensors_frame[report.tensors_frame["rank"] == 1]["name"]) >= {"cache[0]", "model.weight"}
    # The same columns as a report gathered over torch.distributed; nothing written on the engines.
    gathered = dd.make_report([dd.summary({}, rank=0, world_size=1)])
    assert list(report.frame.columns) == list(gathered.frame.columns)
    view.execute(names, block=True)
    assert view.pull("_names", block=True) == names_before
    # From the notebook: the client in the namespace is found.
    ip.user_ns["rc"] = engines
    try:
        result, text, _, _ = run(ip, "r = %devices --ranks -o\n%gpumem --ranks")
        assert result.error_in_exec is None and isinstance(ip.user_ns["r"], dd.RankReport)
        assert "devinspect: 2 ranks of 2 over ipyparallel" in text
        assert "allocated  reserved  driver (process)" in text  # %gpumem --ranks leads with memory
    finally:
        del ip.user_ns["rc"]
        ip.user_ns.pop("r", None)


def test_an_engine_that_fails_or_does_not_answer_is_its_row(engines):
    view = engines[:]
    dd.from_view(view, timeout=120)  # both engines have imported everything: what is left is one small scan
    hung = engines[1].execute("import time\ntime.sleep(15)", block=False)
    report = dd.from_view(view, timeout=5)
    rows = {s.rank: s for s in report.summaries}
    assert rows[0].error is None
    assert rows[1].error == "engine 1 did not answer within 5 s"
    assert "rank 1: engine 1 did not answer within 5 s" in repr(report)
    hung.get(timeout=60)


def test_the_widget_opens_on_the_outlier_and_shows_any_ranks_tensors():
    from devinspect.jupyter.rank_views import ranks_widget
    from devinspect.model.ranks import TopTensor

    ranks = [RankSummary(rank=r, world_size=3, devices=(DeviceUse("sim:0", 1, 100, 512 * (10 if r == 2 else 1)),),
                         top=(TopTensor(f"x{r}", "tensor", "sim:0", "float32", (4,), 100),)) for r in range(3)]
    widget = ranks_widget(dd.make_report(ranks))
    head, table, findings, pick, top = widget.children
    assert pick.value == 2 and "x2" in top.value and "rank 2 holds 5.0 KiB" in findings.value
    pick.value = 0
    assert "x0" in top.value and "x2" not in top.value
    assert "<table" in table.value and head.value.startswith("<b>devinspect: 3 ranks of 3</b>")


def test_ranks_magic_gathers_when_the_notebook_is_a_rank(ip):
    import torch.distributed as dist
    from ranks import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        run(ip, "import torch\nweights = torch.zeros(1000)")
        result, text, _, _ = run(ip, "%gpumem --ranks")
        assert result.error_in_exec is None and text.startswith("devinspect: 1 rank of 1 over gloo")
        report = ip.run_line_magic("devices", "--ranks -o")
        assert report.summaries[0].top[0].name == "weights"
        assert not any(t.name.startswith(("_i", "In", "Out")) for t in report.summaries[0].top)
    finally:
        dist.destroy_process_group()
        ip.user_ns.pop("weights", None)


def test_in_a_kernel_the_ranks_report_is_a_widget_with_a_static_fallback():
    from ranks import free_port

    cells = ["%load_ext devinspect",
             "import torch, torch.distributed as dist\n"
             f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)\n"
             "weights = torch.zeros(1000)",
             "%devices --ranks",
             "dist.destroy_process_group()"]
    nb = run_notebook(notebook(cells))
    shown = [o["data"] for o in nb.cells[2].outputs if o.get("output_type") == "display_data"]
    bundle = next(b for b in shown if "text/html" in b)  # the static copy, its own output
    assert any("application/vnd.jupyter.widget-view+json" in b for b in shown)
    assert bundle["text/plain"].startswith("devinspect: 1 rank of 1 over gloo")
    assert "<table" in bundle["text/html"] and "weights" in bundle["text/plain"]
