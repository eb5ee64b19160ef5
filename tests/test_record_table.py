"""The scan's records kept as columns: a RecordTable reads exactly as the tuple of its records,
and a scan that marks aliases after its walk marks the ones a per-tensor lookup would."""

from __future__ import annotations

import dataclasses
import heapq
import pickle
import random

import pytest
import torch

import devinspect
from devinspect.collect.namespace.walk import Walker
from devinspect.model.record_table import IndexNames, NameColumn, RecordTable, record_column
from devinspect.model.records import TensorRecord


def generated_records(seed: int, count: int = 60) -> list[TensorRecord]:
    """Records with every field varied, odd values included (sizes an 8-byte column cannot
    hold, no size at all, a negative size from a broken tensor class, unhashable shapes)."""
    rng = random.Random(seed)
    names = [f"t{i}" for i in range(count)]
    out = []
    for i, name in enumerate(names):
        size = rng.choice([None, 0, 12, 1 << 40, 1 << 70, -3, 2.5])
        out.append(TensorRecord(
            name=name, root=rng.choice(["a", "b", "Out"]), kind=rng.choice(["tensor", "parameter", "gradient", "error"]),
            device=rng.choice(["cpu", "cuda:0", "meta", "?", "sim:1"]), dtype=rng.choice([None, "float32", "int8"]),
            shape=rng.choice([None, (), (4,), (2, 3), ([1], 2)]), nbytes=size,
            storage_bytes=rng.choice([None, 0, 64, size]), storage_id=rng.choice([None, 0, 7, 1 << 63, -1, i + 1]),
            alias_of=rng.choice([None, None, names[0]]), requires_grad=rng.random() < 0.3,
            type_name=rng.choice(["Tensor", "Parameter", "DTensor"]), layout=rng.choice(["strided", "sparse_coo"]),
            owner=rng.choice([None, "", "model.fc"]), param=rng.choice([None, "model.fc.weight"]),
            note=rng.choice([None, "could not inspect: x"]), hidden=rng.random() < 0.2, is_leaf=rng.random() < 0.8,
        ))
    return out


@pytest.mark.parametrize("seed", range(20))
def test_a_table_reads_as_the_tuple_of_its_records(seed):
    records = generated_records(seed)
    table = RecordTable(records)
    assert len(table) == len(records)
    assert table == tuple(records) and table == records and tuple(table) == tuple(records)
    assert all(table[i] == records[i] and table[i - len(records)] == records[i] for i in range(len(records)))
    assert table[5:17:3] == tuple(records[5:17:3])
    for field in TensorRecord._fields:
        assert record_column(table, field) == [getattr(r, field) for r in records], field
        assert table.column(field, 7, 30) == [getattr(r, field) for r in records[7:30]], field
    picked = [1, 4, 9, 33]
    assert table.take(picked) == [records[i] for i in picked]
    assert pickle.loads(pickle.dumps(table)) == table
    with pytest.raises(IndexError):
        table[len(records)]


def test_records_read_back_while_the_table_grows_are_the_records_appended():
    records = generated_records(7, 4200)  # more than a table keeps before splitting them
    table = RecordTable()
    for i, record in enumerate(records):
        table.append(record)
        if i % 997 == 0:
            assert table[i] == record and table[-1] == record and table[i:] == (record,)
            assert table.column("owner", max(0, i - 3)) == [r.owner for r in records[max(0, i - 3):i + 1]]
            assert table[i:max(0, i - 5):-2] == tuple(records[i:max(0, i - 5):-2])
    assert len(table) == len(records) and table == records
    with pytest.raises(KeyError):
        table.column("colour", 4199)


def test_a_table_cut_keeps_its_first_records_exactly():
    records = generated_records(11, 700)
    for count in (0, 1, 350, 699, 700, 800):
        table = RecordTable(records)
        table.keep_first(count)
        assert table == records[:count] and len(table) == min(count, len(records))
        for field in TensorRecord._fields:
            assert table.column(field) == [getattr(r, field) for r in records[:count]]


def test_a_scan_leaves_out_what_only_history_holds_and_still_measures_it(sim):
    kept = [torch.zeros(3) for _ in range(5)]
    history_only = torch.zeros(1000, device=sim)
    ns = {"kept": kept, "Out": {3: history_only, 4: kept[0]}, "_": history_only}
    result = devinspect.scan(ns)
    assert [r.name for r in result.records] == [f"kept[{i}]" for i in range(5)]
    assert [(h.name, h.storage_bytes) for h in result.history] == [("Out[3]", 4000)]
    everything = devinspect.scan(ns, include_hidden=True)
    assert {r.name for r in everything.records} >= {"Out[3]", "Out[4]"}
    with_unnamed = devinspect.scan(ns, all_objects=True)
    assert all(not r.hidden for r in with_unnamed.records) and "kept[0]" in {r.name for r in with_unnamed.records}


def test_a_run_of_plain_tensors_is_checked_before_the_table_grows():
    table = RecordTable(generated_records(0, 5))
    before = tuple(table)
    with pytest.raises((ValueError, OverflowError, TypeError)):
        table.extend_plain(["x", "y"], "x", "tensor", None, False, ["cpu", "cpu"], ["float32", "float32"],
                           [(1,), (1,)], [4, 4], [4, 4], [11, 0])
    with pytest.raises((ValueError, OverflowError, TypeError)):
        table.extend_plain(["x"], "x", "tensor", None, False, ["cpu"], ["float32"], [(1,)], [1 << 70], [4], [11])
    assert tuple(table) == before


def generated_namespace(seed: int) -> dict:
    """Tensors that share memory across every path the walk takes: runs of plain tensors in
    lists and dicts, views and the same tensors again in later containers, parameters and
    buffers also held loose, a module reached only inside a container, optimizer state."""
    rng = random.Random(seed)
    torch.manual_seed(seed)
    pool = [torch.randn(rng.randint(1, 6)) for _ in range(rng.randint(3, 12))]
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.BatchNorm1d(3))
    held = torch.nn.Linear(2, 2)
    held.register_buffer("shared", rng.choice(pool))
    ns: dict = {}
    for n in range(rng.randint(2, 6)):
        kind = rng.choice(["list", "dict", "tuple", "views", "mixed", "odd"])
        picks = [rng.choice(pool) for _ in range(rng.randint(2, 8))]
        if kind == "odd":
            # One item that is not an ordinary tensor with memory, anywhere in a run of plain ones.
            odd = rng.choice([torch.empty(2, device="meta"), torch.ones(2, requires_grad=True),
                              torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8), torch.zeros(0),
                              torch.eye(2).to_sparse()])
            picks.insert(rng.randint(0, len(picks)), odd)
        if kind == "dict":
            value = {f"k{i}": t for i, t in enumerate(picks)}
        elif kind == "tuple":
            value = tuple(picks)
        elif kind == "views":
            value = [t[:1] for t in picks] + [t.detach() for t in picks]
        elif kind == "mixed":
            value = picks + [model[1].running_mean, held]
        else:
            value = list(picks)
        ns[rng.choice("abcdefgh") + str(n)] = value
    ns["model"] = model
    ns["zz_holder"] = [held, model[0].weight]
    if rng.random() < 0.5:
        model(torch.randn(4, 3)).sum().backward()
        opt = torch.optim.Adam(model.parameters())
        opt.step()
        ns["opt"] = opt
    if rng.random() < 0.5:
        ns["loose"] = rng.choice(pool)
    if rng.random() < 0.5:
        # An optimizer over tensors that need no gradient, named first as variables and in a
        # module's attribute list: they are not its orphans.
        frozen = torch.zeros(3)
        ns["frozen"] = frozen
        model[0].extra = [torch.zeros(2), torch.zeros(2)]
        ns["sgd"] = torch.optim.SGD([frozen, model[0].extra[1]], lr=0.1)
    return ns


@pytest.mark.parametrize("seed", range(40))
def test_runs_of_tensors_read_as_the_walk_reads_them_one_by_one(seed, monkeypatch):
    ns = generated_namespace(seed)
    in_runs = devinspect.scan(ns)
    monkeypatch.setattr(Walker, "records_runs", False)
    one_by_one = devinspect.scan(ns)
    assert tuple(in_runs.records) == tuple(one_by_one.records)
    assert (in_runs.modules, in_runs.devices) == (one_by_one.modules, one_by_one.devices)


@pytest.mark.parametrize("seed", range(40))
def test_aliases_marked_after_the_walk_are_those_a_lookup_per_tensor_finds(seed, monkeypatch):
    ns = generated_namespace(seed)
    views_of_unnamed = [torch.zeros(4)[1:], torch.zeros(4)]  # alive, reached by no name
    views_of_unnamed.append(views_of_unnamed[1][2:])
    after, after_all = devinspect.scan(ns), devinspect.scan(ns, all_objects=True)
    monkeypatch.setattr(Walker, "keeps_first_names", True)
    looked_up, looked_up_all = devinspect.scan(ns), devinspect.scan(ns, all_objects=True)
    assert tuple(after.records) == tuple(looked_up.records)
    assert (after.modules, after.optimizers, after.devices) == (looked_up.modules, looked_up.optimizers,
                                                                looked_up.devices)
    assert [f.code for f in after.findings] == [f.code for f in looked_up.findings]
    assert "stale-optimizer" not in {f.code for f in after.findings}
    # Every tensor alive: the named ones are not listed again as unnamed.
    assert tuple(after_all.records) == tuple(looked_up_all.records)
    named = {r.storage_id for r in after.records}
    assert not any(r.kind == "unnamed" and r.alias_of in {n.name for n in after.records} for r in after_all.records)
    assert all(r.storage_id not in named for r in after_all.records if r.kind == "unnamed")
    # Each memory is counted once, under its first name.
    first: dict[int, str] = {}
    for r in after.records:
        if r.storage_id is not None:
            assert r.alias_of == (None if first.setdefault(r.storage_id, r.name) == r.name else first[r.storage_id])


def test_a_module_met_after_a_list_that_holds_its_buffer_counts_that_memory_once():
    held = torch.nn.Linear(2, 2)
    held.register_buffer("scale", torch.ones(1000))
    result = devinspect.scan({"a_list": [held.scale, torch.zeros(3)], "b_holder": [held]})
    names = {r.name: r for r in result.records}
    assert names["b_holder[0].scale"].alias_of == "a_list[0]"
    (summary,) = [m for m in result.modules if m.name == "b_holder[0]"]
    assert summary.buffers == 1 and summary.buffer_bytes == 0
    assert dataclasses.replace(summary, buffer_bytes=4000) != summary


@pytest.mark.parametrize("seed", range(20))
def test_totals_and_kinds_read_from_the_columns_are_those_of_the_records(seed):
    from devinspect.model.scan_result import ScanResult, device_totals, size_keys
    from devinspect.render.table import size_key

    records = [r for r in generated_records(seed) if type(r.nbytes) is int and type(r.storage_bytes) is int
               and r.nbytes >= 0 and r.storage_bytes >= 0 and r.nbytes < 1 << 62] or generated_records(seed)
    records += [r._replace(name=f"{r.name}.none", nbytes=None, storage_bytes=None) for r in records[:3]]
    table = RecordTable(records)
    assert device_totals(table) == device_totals(tuple(records))
    assert size_keys(table) == [size_key(r) for r in records]
    sizes = size_keys(records)
    for limit in (1, 5, 17, len(records), len(records) + 3):
        # The largest records, the first met among equals, in walk order.
        expected = sorted(heapq.nlargest(limit, range(len(records)), key=sizes.__getitem__))
        assert ScanResult(records=table).select().largest(limit) == expected
    for kinds in (("parameter",), ("gradient", "error"), ("unknown",)):
        assert ScanResult(records=table).of_kind(*kinds) == ScanResult(records=tuple(records)).of_kind(*kinds)


def test_records_are_picked_by_kind_among_many_combinations_of_shared_fields():
    records = [r._replace(owner=f"model.layers[{i}]") for i, r in enumerate(generated_records(3, 600))]
    table = RecordTable(records)
    for kinds in (("parameter",), ("gradient", "tensor"), ("tensor", "parameter", "gradient", "error"), ()):
        assert table.indexes_where("kind", kinds) == [i for i, r in enumerate(records) if r.kind in kinds]


@pytest.mark.parametrize("seed", range(6))
def test_the_explorer_frame_of_a_table_is_that_of_its_records(seed):
    from devinspect.jupyter.explorer_table import table_frame

    def measurable(size):  # a size a real tensor can have
        return size is None or (type(size) is int and 0 <= size < 1 << 62)

    records = [r for r in generated_records(seed) if measurable(r.storage_bytes) and measurable(r.nbytes)]
    expected = table_frame(tuple(records))
    got = table_frame(RecordTable(records))  # a table whose records are not split yet
    assert got.equals(expected)


@pytest.mark.parametrize("seed", range(30))
def test_a_column_of_names_reads_as_the_list_of_its_names(seed):
    """Runs of list items kept as their pattern read back, whole, cut, sliced and picked,
    as the list of the names they stand for."""
    rng = random.Random(seed)
    column, names = NameColumn(), []
    for _ in range(rng.randint(0, 8)):
        if rng.random() < 0.5:
            last = column._parts[-1] if column._parts else None  # a run that goes on
            if isinstance(last, IndexNames) and rng.random() < 0.5:
                prefix, start = last.prefix, last.stop
            else:
                prefix, start = rng.choice(["x[", "batches[3]["]), rng.randint(0, 5)
            stop = start + rng.randint(0, 9)
            column += IndexNames(prefix, start, stop)
            names += [f"{prefix}{i}]" for i in range(start, stop)]
        else:
            more = [f"n{rng.randint(0, 99)}" for _ in range(rng.randint(0, 4))]
            column += more
            names += more
        if names and rng.random() < 0.3:
            cut = rng.randint(0, len(names))
            del column[cut:]
            del names[cut:]
    assert len(column) == len(names) and list(column) == names
    assert [column[i] for i in range(-len(names), len(names))] == names + names if names else True
    for start in range(-2, len(names) + 2):
        for stop in range(-2, len(names) + 2):
            assert column[start:stop] == names[start:stop]
    assert column[::2] == names[::2]
    picked = sorted(rng.sample(range(len(names)), min(len(names), 5)))
    assert column.pick(picked) == [names[i] for i in picked]
    assert column.pick(range(1, len(names))) == names[1:]
    with pytest.raises(IndexError):
        column[len(names)]


def test_a_long_list_of_tensors_keeps_no_string_per_name_and_names_each_item():
    batches = [torch.zeros(2) for _ in range(10_000)]
    result = devinspect.scan({"batches": batches, "x": torch.ones(1)})
    names = result.records._names  # how the names are kept
    assert sum(isinstance(part, IndexNames) for part in names._parts) == 1
    # A tensor named directly comes first; the list's items follow, each with its own name.
    assert result.records[4098].name == "batches[4097]"
    assert record_column(result.records, "name") == ["x"] + [f"batches[{i}]" for i in range(10_000)]
