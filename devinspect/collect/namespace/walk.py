"""The walk: every tensor a namespace reaches, as records, read-only.

The walk never runs user code (see :mod:`devinspect.collect.objects.static_getters`), copies, moves, synchronises
or prints nothing, does not initialise CUDA, and its result holds no reference to any user object; devinspect's own
objects (results in ``Out``) and non-user frames in ``sys.last_traceback`` are not walked.
"""

from __future__ import annotations

import collections
import dataclasses
import gc
import operator
import sys
import types
from itertools import compress, repeat
from typing import Any

import torch

from ...model import (
    IndexNames,
    LoaderSummary,
    ModuleSummary,
    OptimizerSummary,
    RecordTable,
    TensorRecord,
    Truncation,
    Unregistered,
    spans_touched,
)
from ...runtime import tensor_getters
from .. import device_names, dtype_names, shape_of, tensor_facts
from ..code import error_locals, traceback_locals
from ..objects import (
    ATOM_IDS,
    OPAQUE,
    PROXY_TYPES,
    SCHEDULER_MODULES,
    class_name,
    dict_items,
    foreign_container_note,
    instance_dict,
    is_opaque_package,
    odd_instance_dict,
    optimizer_summary,
    paused_locals,
    proxied_dict,
    proxy_referent,
    recomputed_attributes,
    scheduler_kwargs,
    script_members,
    script_object,
    sequence_items,
    slot_values,
    static_class_attr,
    str_items,
    type_module,
    type_name,
    user_class_attributes,
)
from .aliases import link_aliases
from .module_summary import SUMMARY_FIELDS, module_bytes, module_summary, only_parameters, unregistered_attribute
from .names import attr_name, child_name, describe_error, dict_item_name, key_text, module_tree_paths
from .placement import ON_HOST_BY_DESIGN, ON_HOST_NOTE, offloaded_note, offloads_weights

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter
_Module = torch.nn.Module
_Optimizer = torch.optim.Optimizer
_strided = torch.strided
_new = tuple.__new__
_storage_bytes = torch._C.StorageBase.nbytes
_storage_key = torch._C.StorageBase.__dict__["_cdata"].__get__
_TRACEBACK_OF = BaseException.__dict__["__traceback__"].__get__


_MODULE_INTERNALS = frozenset(vars(torch.nn.Module()))  #: what every module has; the rest of its __dict__ is the user's


@dataclasses.dataclass(frozen=True)
class ScanOptions:
    """Bounds and switches of a walk. Every bound that cuts something is reported."""

    #: Nesting of containers and plain objects below a root (modules do not count).
    max_depth: int = 8
    #: Items looked at in one container; the rest are reported as skipped.
    max_items: int = 200_000
    #: Objects looked at in the whole walk.
    max_objects: int = 2_000_000
    #: List IPython's history names (``_``, ``_12``, ``Out``) and other ``_`` names.
    include_hidden: bool = False
    #: Also list live tensors no name reaches, found through the garbage collector.
    all_objects: bool = False


class Walker:
    """One walk's state. Holds user objects only by ``id()`` while it runs."""

    #: Whether a container of plain tensors is recorded in one step (:meth:`_plain_tensors`);
    #: a walk that records tensors its own way (its own :meth:`_tensor`) goes item by item.
    records_runs = True
    #: Whether every tensor's and every memory's first name is kept as the walk goes (a lookup
    #: by object needs them). A scan does without for runs of plain tensors, which would double
    #: its peak memory, and marks their aliases once the walk is done (:meth:`link_aliases`).
    keeps_first_names = False

    def __init__(self, options: ScanOptions):
        self.options = options
        self.records = RecordTable()
        self.modules: list[ModuleSummary] = []
        #: (position in ``modules``, first record, end of its records) of each module summary.
        self._module_spans: list[tuple[int, int, int]] = []
        #: How many records of kind "attribute" each module owner has (a module's plain tensor
        #: attributes, which ``.to()`` does not move).
        self._attribute_records: dict[str | None, int] = {}
        self.loaders: list[LoaderSummary] = []
        self.optimizers: list[OptimizerSummary] = []
        self.truncated: list[Truncation] = []
        self.hidden = False
        #: Index of the first record found through history names or the traceback.
        self.first_hidden: int | None = None
        self._storage_first: dict[int, str] = {}
        #: One tuple per distinct shape: most tensors of a large namespace share a few shapes.
        self._shapes: dict[tuple, tuple] = {}
        self._tensor_first: dict[int, str] = {}
        #: The first name of each tensor whose facts could not be read (kept apart: it names no memory).
        self._unreadable_first: dict[int, str] = {}
        self.visited: set[int] = set()
        self._param_names: dict[int, str] = {}
        #: Parameters first named through an optimizer: no module or variable holds them.
        self._orphans: set[int] = set()
        self._deferred: list[tuple[str, str, Any]] = []
        self._postponed: list[tuple[str, str, Any]] = []
        self._budget = options.max_objects
        self._out_of_budget = False
        self._held: list[str] = []
        self.module_types: list[tuple[str, str]] = []
        #: (name, class, id of its optimizer, rebuild kwargs) of each LR scheduler met.
        self.scheduler_parts: list[tuple[str, type, int, Any]] = []
        self.optimizer_names: dict[int, str] = {}
        #: find_tensor's name: the one object this walk keeps a reference to, when it is met.
        self.wanted: str | None = None
        self.found: Any = None

    # -- roots --------------------------------------------------------------

    def root(self, name: str, value: Any) -> None:
        self._visit(value, name, name, 0, None)

    def link_aliases(self) -> None:
        """Mark every record whose memory an earlier record holds (the first name wins), and
        recount the bytes of the module summaries whose records that changed."""
        changed = link_aliases(self.records)
        spans = self._module_spans
        for n in spans_touched([(start, stop) for _, start, stop in spans], changed) if changed else ():
            at, start, stop = spans[n]
            self.modules[at] = dataclasses.replace(self.modules[at], **module_bytes(self._columns_of(start, stop)))

    def _columns_of(self, start: int, stop: int | None = None) -> dict[str, list]:
        """The columns a module summary reads, of the records from ``start`` to ``stop``."""
        return {field: self.records.column(field, start, stop) for field in SUMMARY_FIELDS}

    def flush_deferred(self) -> None:
        while self._deferred:
            name, root, opt = self._deferred.pop(0)
            self._guarded(self._optimizer, opt, name, root)

    def postpone_deferred(self) -> None:
        """Read what is deferred now only in :meth:`flush_postponed`, after every other name."""
        self._postponed, self._deferred = self._postponed + self._deferred, []

    def flush_postponed(self) -> None:
        self._deferred, self._postponed = self._postponed + self._deferred, []
        self.flush_deferred()

    def name_parameters(self, m: Any, name: str) -> None:
        """Learn the names of a module's parameters without recording anything (a parameter
        shared by two modules keeps the first name the walk would give it)."""
        for module, path in module_tree_paths(m, name, set()):
            for pname, p in str_items(instance_dict(module).get("_parameters")):
                if p is not None:
                    self._param_names.setdefault(id(p), child_name(path, pname, type(module)))

    def traceback(self) -> None:
        """Measure the locals of the user's and libraries' frames in ``sys.last_traceback``."""
        for function, key, value in traceback_locals(sys.__dict__.get("last_traceback")):
            self._visit(value, f"sys.last_traceback:{function}.{key}", "sys.last_traceback", 1, None)

    def unnamed(self) -> None:
        """Tensors alive that no name reaches (garbage-collector walk); a finished error's local is named after it."""
        count = 0
        named = set(self.records.storage_ids())  # memory already named (runs of plain tensors too)
        named.update(self._storage_first)
        objects = gc.get_objects()
        try:
            of_errors = error_locals(objects, self.visited)
            for o in objects:
                if issubclass(type(o), _Tensor) and id(o) not in self._tensor_first:
                    try:
                        facts = tensor_facts(o)
                    except Exception:
                        continue
                    key = facts[5]
                    if key is not None and key in named:
                        continue
                    name = of_errors.get(id(o))
                    if name is None:
                        count += 1
                        name = f"<unnamed {count}>"
                    self._tensor(o, name, "<unnamed>", "unnamed", facts=facts)
                    if key is not None:
                        named.add(key)
        finally:
            del objects

    # -- dispatch ------------------------------------------------------------

    def _visit(self, value: Any, name: str, root: str, depth: int, owner: str | None) -> None:
        vt = type(value)
        if id(vt) in ATOM_IDS:
            return
        if issubclass(vt, _Tensor):
            self._guarded(self._tensor, value, name, root, "attribute" if owner is not None else "tensor", owner)
            return
        if self._out_of_budget:
            return
        self._budget -= 1
        if self._budget < 0:
            self._out_of_budget = True
            self.truncated.append(Truncation(name, f"object budget of {self.options.max_objects:,} reached"))
            return
        oid = id(value)
        if oid in self.visited:
            return
        if issubclass(vt, _Module):
            self.visited.add(oid)
            self._guarded(self._module_root, value, name, root)
            return
        if issubclass(vt, _Optimizer):
            self.visited.add(oid)
            d = instance_dict(value)
            if "param_groups" not in d and issubclass(type(d.get("optimizer")), _Optimizer):
                # A wrapper (accelerate's AcceleratedOptimizer): the optimizer it keeps holds the state.
                value, name = d["optimizer"], attr_name(name, "optimizer")
                self.visited.add(id(value))
            self._deferred.append((name, root, value))
            return
        if issubclass(vt, PROXY_TYPES):
            if proxy_referent(value) is None:
                self._error_record(value, name, root, ReferenceError("a dead weakref.proxy (its object is gone)"))
            return
        if depth >= self.options.max_depth:
            if self._may_hold_tensors(vt):
                self.truncated.append(Truncation(name, f"deeper than {self.options.max_depth} levels"))
            return
        self.visited.add(oid)
        self._guarded(self._object, value, name, root, vt, depth, owner)

    def _guarded(self, fn: Any, value: Any, name: str, root: str, *args: Any) -> None:
        """Run one step; an object that cannot be inspected becomes an error record."""
        try:
            fn(value, name, root, *args)
        except RecursionError:
            self.truncated.append(Truncation(name, "nested too deeply to follow"))
        except Exception as exc:  # any failure is reported as data
            self._error_record(value, name, root, exc)

    def _error_record(self, value: Any, name: str, root: str, exc: BaseException) -> None:
        alias = None
        if tensor_getters.is_tensor(value):
            # The same unreadable tensor under a second name is that name's alias, as a readable one is.
            alias = self._unreadable_first.setdefault(id(value), name)
            alias = alias if alias != name else None
        self.records.append(
            TensorRecord(
                name=name, root=root, kind="error", device="?", dtype=None, shape=None, nbytes=None,
                storage_bytes=None, storage_id=None, alias_of=alias, type_name=type_name(type(value)),
                note=f"could not inspect: {describe_error(exc)}", hidden=self.hidden,
            )
        )

    @staticmethod
    def _may_hold_tensors(vt: type) -> bool:
        return not issubclass(vt, OPAQUE) and id(vt) not in ATOM_IDS and not is_opaque_package(vt)

    # -- tensors -------------------------------------------------------------

    def _tensor(
        self,
        t: Any,
        name: str,
        root: str,
        kind: str = "tensor",
        owner: str | None = None,
        param: str | None = None,
        note: str | None = None,
        facts: tuple | None = None,
    ) -> None:
        tid = id(t)
        if name == self.wanted:
            self.found = t
        if facts is None:
            facts = tensor_facts(t)
        device, dtype, shape, nbytes, storage_bytes, key, layout, facts_note = facts
        same_object = tid in self._tensor_first
        alias = self._first_name(tid, key, name)
        cls = type(t)
        # A Parameter is one by its class (nn.Parameter or a subclass of it), or, made from a
        # tensor subclass, which it keeps as its class, by the _is_param mark.
        if kind == "tensor" and cls is not _Tensor and (issubclass(cls, _Parameter) or "_is_param" in instance_dict(t)):
            kind = "parameter"
        requires_grad = tensor_getters.requires_grad(t)
        is_leaf = tensor_getters.is_leaf(t) if requires_grad else True
        if shape is not None:
            shape = self._shapes.setdefault(shape, shape)
        self.records.append(
            _new(TensorRecord, (
                name, root, kind, device, dtype, shape, nbytes, storage_bytes, key, alias, requires_grad,
                type_name(cls), layout, owner, param, note or facts_note, self.hidden, is_leaf,
            ))
        )
        if kind == "attribute":
            self._count_attributes(owner, 1)
        # Reading .grad of a non-leaf warns; only leaves (or retain_grad()) have one.
        if requires_grad and kind != "gradient" and not same_object and (is_leaf or tensor_getters.retains_grad(t)):
            grad = tensor_getters.grad(t)
            if grad is not None:
                self._tensor(grad, f"{name}.grad", root, "gradient", owner, param=name)

    def _first_name(self, tid: int, key: int | None, name: str) -> str | None:
        """The first name of the tensor ``tid`` (or, keeping first names, of its memory ``key``)
        when one was met before, else None with ``name`` noted as its first. Each tensor met one
        by one keeps its first name (an optimizer names its parameters after it; a gradient is
        walked once); a scan marks shared memory once the walk is done."""
        alias = self._tensor_first.get(tid)
        if alias is None and key is not None and self.keeps_first_names:
            alias = self._storage_first.get(key)
        if alias is None:
            self._tensor_first[tid] = name
            if key is not None and self.keeps_first_names:
                self._storage_first[key] = name
        elif tid not in self._tensor_first:
            self._tensor_first[tid] = alias
        return alias

    # -- modules -------------------------------------------------------------

    def _module_root(self, m: Any, name: str, root: str) -> None:
        start = len(self.records)
        unregistered: list[Unregistered] = []
        outer_held, self._held = self._held, []  # a module kept in another's plain attribute nests
        try:
            self._module(m, name, root, unregistered, set())
            if not self.hidden:  # modules seen only through history or a traceback make no findings
                self._module_spans.append((len(self.modules), start, len(self.records)))
                self.modules.append(module_summary(m, name, self._columns_of(start), unregistered, self._held))
        finally:
            self._held = outer_held

    def _module(self, m: Any, name: str, root: str, unregistered: list[Unregistered], seen: set[int]) -> None:
        seen.add(id(m))
        self.visited.add(id(m))
        d = instance_dict(m)
        mt = type(m)
        if not self.hidden:
            self.module_types.append((name, type_name(mt)))
        script = script_object(d)
        if script is not None:
            self._guarded(self._script_module, script[0], name, root, script[1])
            return
        params = d.get("_parameters")
        if params is not None and not issubclass(type(params), dict):
            self.truncated.append(Truncation(name, f"a {type_name(mt)}: its parameters live behind a wrapper "
                                                   "devinspect does not open"))
            return
        offloaded = offloads_weights(d)
        for pname, p in str_items(params):
            if p is not None:
                pfull = child_name(name, pname, mt)
                self._param_names.setdefault(id(p), pfull)
                self._guarded(self._tensor_visit, p, pfull, root, "parameter", name, offloaded_note(p, offloaded))
                if issubclass(type(p), _Tensor) and tensor_getters.use_count(p) > 2:
                    self._held.append(pfull)
        non_persistent = d.get("_non_persistent_buffers_set") or ()
        on_host = ON_HOST_BY_DESIGN.get((type_module(mt), type_name(mt)), ())
        for bname, b in str_items(d.get("_buffers")):
            if b is not None:
                note = "non-persistent" if type(non_persistent) is set and bname in non_persistent else None
                if bname in on_host:
                    note = ON_HOST_NOTE
                note = offloaded_note(b, offloaded) or note
                self._guarded(self._tensor_visit, b, child_name(name, bname, mt), root, "buffer", name, note)
        recomputed = recomputed_attributes(d)
        for attr, value in d.items():
            if attr in _MODULE_INTERNALS:
                continue
            vt = type(value)
            if id(vt) in ATOM_IDS:
                continue
            full = attr_name(name, attr)
            if attr in recomputed:
                if issubclass(vt, _Tensor):
                    self._guarded(self._tensor_visit, value, full, root, "attribute", name,
                                  f"recomputed before each forward by {recomputed[attr]}")
                continue
            if issubclass(vt, _Tensor) or issubclass(vt, (list, tuple, dict, set)):
                before = self._attribute_records.get(name, 0)
                self._visit(value, full, root, 1, name)
                if self._attribute_records.get(name, 0) > before and not only_parameters(value, self._param_names):
                    unregistered.append(unregistered_attribute(mt, full, name, attr, vt))
            elif not issubclass(vt, OPAQUE):
                self._visit(value, full, root, 1, None)
        for cname, child in str_items(d.get("_modules")):
            if child is None or id(child) in seen:
                continue
            self._guarded(self._module, child, child_name(name, cname, mt), root, unregistered, seen)

    def _script_module(self, c: Any, name: str, root: str, indexable: bool) -> None:
        """The tensors and submodules of a TorchScript module's C++ object ``c``."""
        for kind, full, value in script_members(c, name, indexable):
            if kind == "module":
                if not self.hidden:
                    self.module_types.append((full, class_name(value)))
                self._guarded(self._script_module, value, full, root, indexable)
                continue
            if kind == "parameter":
                self._param_names.setdefault(id(value), full)
            self._guarded(self._tensor_visit, value, full, root, kind, name)

    def _tensor_visit(self, t: Any, name: str, root: str, kind: str, owner: str | None, note: str | None = None) -> None:
        if issubclass(type(t), _Tensor):
            self._tensor(t, name, root, kind, owner, note=note)

    # -- optimizers, loaders, containers, objects -----------------------------

    def _scheduler(self, sched: Any, vt: type, name: str) -> None:
        """A learning-rate scheduler: which optimizer it drives (named once the walk is done)."""
        if self.hidden:
            return
        d = instance_dict(sched)
        optimizer = d.get("optimizer")
        if issubclass(type(optimizer), _Optimizer):
            self.scheduler_parts.append((name, vt, id(optimizer), scheduler_kwargs(name, vt, d)))

    def _optimizer(self, opt: Any, name: str, root: str) -> None:
        self.optimizer_names.setdefault(id(opt), name)
        d = instance_dict(opt)
        groups = d.get("param_groups")
        groups = sequence_items(groups, list) if issubclass(type(groups), list) else []
        parameters = orphans = 0
        orphan_shapes, held = [], []  # held: each parameter's name, in group order
        for gi, group in enumerate(groups):
            params = dict(str_items(group)).get("params") if issubclass(type(group), dict) else None
            for pi, p in enumerate(sequence_items(params, list) if issubclass(type(params), list) else ()):
                if not issubclass(type(p), _Tensor):
                    continue
                parameters += 1
                # A parameter another optimizer met first is still this one's orphan (two optimizers
                # over an earlier model): only a module or a variable makes it not one.
                named = id(p) in self._param_names or id(p) in self._tensor_first
                if not self.hidden and (not named or id(p) in self._orphans):
                    orphans += 1
                    orphan_shapes.append(shape_of(p) or ())
                if named:
                    held.append(self._param_names.get(id(p)) or self._tensor_first.get(id(p)))
                    continue
                pname = self._param_names[id(p)] = f'{name}.param_groups[{gi}]["params"][{pi}]'
                held.append(pname)
                self._orphans.add(id(p))
                self._tensor(p, pname, root, "parameter")
        state = d.get("state")
        if issubclass(type(state), dict):
            for p, entry in dict_items(state):
                pname = self._param_names.get(id(p)) or self._tensor_first.get(id(p)) or "<parameter>"
                if not issubclass(type(entry), dict):
                    continue
                for key, value in dict_items(entry):
                    typed_key = key_text(key) or "<key>"
                    sname = f"{name}.state[{pname}][{typed_key}]"
                    if issubclass(type(value), _Tensor):
                        self._guarded(self._tensor, value, sname, root, "optimizer_state", None, pname)
                    else:
                        self._visit(value, sname, root, 2, None)
        if not self.hidden:
            self.optimizers.append(optimizer_summary(opt, name, d, len(groups), parameters, orphans, orphan_shapes,
                                                     held if orphans else []))

    def _object(self, o: Any, name: str, root: str, vt: type, depth: int, owner: str | None) -> None:
        if vt is list or vt is tuple or vt is dict or issubclass(vt, (list, tuple, dict, set, frozenset, collections.deque)):
            self._container(o, vt, name, root, depth, owner)
            return
        if issubclass(vt, type):  # a class the user wrote holds its class attributes (Cfg.table = t)
            for attr, value in user_class_attributes(o):
                self._visit(value, attr_name(name, attr), root, depth + 1, owner)
            return
        if vt is types.MappingProxyType:  # its items are typed proxy["key"], as those of the dict it reads
            inner = proxied_dict(o)
            if inner is None:
                self.truncated.append(Truncation(name, "a mappingproxy over another kind of mapping: not inspected"))
            else:
                self._container(inner, type(inner), name, root, depth, owner)
            return
        paused = paused_locals(o, vt)
        if paused is not None:  # a paused generator's or coroutine's locals: gen.gi_frame.f_locals["t"]
            for i, (key, value) in enumerate(paused[1]):
                self._visit(value, dict_item_name(f"{name}.{paused[0]}.f_locals", i, key), root, depth + 1, owner)
            return
        if issubclass(vt, OPAQUE) or is_opaque_package(vt):
            return
        module = type_module(vt).split(".", 1)[0]
        if module in ("numpy", "pandas"):
            note = foreign_container_note(o, vt, module)
            if note is not None:
                self.truncated.append(Truncation(name, note))
            return
        if type_module(vt).startswith(SCHEDULER_MODULES):
            self._scheduler(o, vt, name)
        if issubclass(vt, torch.utils.data.DataLoader):
            d = instance_dict(o)
            batch_size = d.get("batch_size")
            self.loaders.append(LoaderSummary(name, d.get("pin_memory", False) is True,
                                              int.__index__(d["num_workers"]) if type(d.get("num_workers")) is int else 0,
                                              batch_size if type(batch_size) is int else None))
            if "dataset" in d:
                self._visit(d["dataset"], f"{name}.dataset", root, depth + 1, owner)
            return
        if issubclass(vt, BaseException):  # an error kept (saved = e) keeps its frames' locals alive
            for function, key, value in traceback_locals(_TRACEBACK_OF(o)):
                self._visit(value, f"{name}.__traceback__:{function}.{key}", root, depth + 1, owner)
            for attr in ("args", "__cause__", "__context__"):  # C-level fields, read statically
                self._visit(BaseException.__dict__[attr].__get__(o), f"{name}.{attr}", root, depth + 1, owner)
        odd = odd_instance_dict(o)
        if odd is not None:
            self.truncated.append(Truncation(name, f"{odd}: not inspected"))
        for attr, value in dict.items(instance_dict(o)):
            if id(type(value)) not in ATOM_IDS:
                self._visit(value, attr_name(name, attr), root, depth + 1, owner)
        for attr, value in slot_values(o):
            if id(type(value)) not in ATOM_IDS:
                self._visit(value, attr_name(name, attr), root, depth + 1, owner)

    def takes_whole(self, o: Any, vt: type, name: str, owner: str | None) -> bool:
        """Whether the container was taken in whole, without visiting its items (a walk that
        only notes plain tensors may)."""
        return False

    def _container(self, o: Any, vt: type, name: str, root: str, depth: int, owner: str | None) -> None:
        limit = self.options.max_items
        if self.takes_whole(o, vt, name, owner):
            return
        if issubclass(vt, dict):
            items = dict_items(o, limit + 1)  # one copy: keys and values read at the same moment
            total = len(items) if len(items) <= limit else max(dict.__len__(o), len(items))
            del items[limit:]
            keys = [k for k, _ in items]
            values = [v for _, v in items]
            if not any(issubclass(type(k), _Tensor) for k in keys) and self._plain_tensors(
                    values, lambda run: [dict_item_name(name, i, keys[i]) for i in run], root,
                    "attribute" if owner is not None else "tensor", owner):
                values = ()
            for i, (key, value) in enumerate(zip(keys, values)):
                if issubclass(type(key), _Tensor):
                    self._visit(key, f"list({name})[{i}]", root, depth + 1, owner)
                if id(type(value)) in ATOM_IDS:
                    continue
                self._visit(value, dict_item_name(name, i, key), root, depth + 1, owner)
        else:
            values = sequence_items(o, vt, limit)  # one copy: a thread may be changing the container
            if issubclass(vt, (list, tuple)):
                total = list.__len__(o) if issubclass(vt, list) else tuple.__len__(o)
                fields = static_class_attr(vt, "_fields") if issubclass(vt, tuple) and vt is not tuple else None
                if not (type(fields) is tuple and tuple.__len__(fields) == total
                        and all(type(f) is str for f in tuple.__iter__(fields))):
                    fields = None
                prefix = f"{name}["
            elif issubclass(vt, collections.deque):
                total = collections.deque.__len__(o)
                fields, prefix = None, f"{name}["
            else:
                total = set.__len__(o) if issubclass(vt, set) else frozenset.__len__(o)
                fields, prefix = None, f"list({name})["
            total = max(total, len(values))
            kind = "attribute" if owner is not None else "tensor"
            if self._plain_tensors(values, lambda run: [f"{name}.{fields[i]}" for i in run] if fields is not None
                                   else IndexNames(prefix, run.start, run.stop), root, kind, owner):
                values = []
            atoms, tensor_type, record = ATOM_IDS, _Tensor, self._tensor
            # Mixed items: tensors are recorded inline, each in its own try so one bad
            # item becomes an error record and the rest go on.
            for i, value in enumerate(values):
                vtype = type(value)
                if id(vtype) in atoms:
                    continue
                child = f"{name}.{fields[i]}" if fields is not None else f"{prefix}{i}]"
                if issubclass(vtype, tensor_type):
                    try:
                        record(value, child, root, kind, owner)
                    except Exception as exc:  # reported as data
                        self._error_record(value, child, root, exc)
                else:
                    self._visit(value, child, root, depth + 1, owner)
        if total > limit:
            self.truncated.append(Truncation(name, f"more than {limit:,} items", total - limit))

    def _plain_tensors(self, values: list, names_of: Any, root: str, kind: str, owner: str | None) -> bool:
        """Record ``values`` at once when every one is a plain tensor (exactly ``torch.Tensor``,
        strided, not nested, not meta): the hot path of a large namespace (a list of batches,
        a dict of features, a state dict). Each fact is read for a run of items through
        TensorBase's C getters; the records are the ones :meth:`_tensor` makes, in the same
        order. A tensor that requires grad goes through :meth:`_tensor` (its gradient is walked
        too). ``names_of(positions)`` names a range of items. False, recording nothing, otherwise."""
        if len(values) < 2 or self.wanted is not None or not self.records_runs:
            return False
        if any(map(operator.is_not, map(type, values), repeat(_Tensor))):
            return False
        try:
            # A meta tensor (no memory) is told by its device, read with the columns.
            if any(map(operator.is_not, map(tensor_getters.layout, values), repeat(_strided))) or any(map(tensor_getters.is_nested, values)):
                return False
        except Exception:  # an item that cannot be read goes the item-by-item way
            return False
        for start in range(0, len(values), _RUN):
            # Each run's names are made with its records: the walk holds no list of every name.
            run, run_names = values[start:start + _RUN], names_of(range(start, min(start + _RUN, len(values))))
            try:
                columns = self._columns(run)
            except Exception:  # a tensor that cannot be read: item by item, as an error record
                columns = None
            if columns is None:
                for t, name in zip(run, run_names):
                    self._guarded(self._tensor, t, name, root, kind, owner)
                continue
            self._plain_run(run, run_names, columns, root, kind, owner)
        return True

    def _columns(self, values: list) -> tuple[list, ...] | None:
        """Devices, dtypes, shapes, sizes, storage sizes and keys of a run of plain tensors;
        None when one is a meta tensor (it holds no memory: its record says so)."""
        devices = list(map(device_names.__getitem__, map(tensor_getters.device, values)))
        if "meta" in devices:
            return None
        dtypes = list(map(dtype_names.__getitem__, map(tensor_getters.dtype, values)))
        # One tuple per distinct shape, found by the torch.Size itself (equal and hashed alike).
        sizes = list(map(tensor_getters.shape, values))
        shapes = list(map(self._shapes.get, sizes))
        if None in shapes:
            for i in compress(range(len(shapes)), map(operator.is_, shapes, repeat(None))):
                shape = tuple(sizes[i])
                shapes[i] = self._shapes.setdefault(shape, shape)
        nbytes = list(map(tensor_getters.nbytes, values))
        storages = list(map(tensor_getters.storage, values))
        return devices, dtypes, shapes, nbytes, list(map(_storage_bytes, storages)), list(map(_storage_key, storages))

    def _plain_run(self, values: list, names: list[str], columns: tuple[list, ...], root: str, kind: str,
                   owner: str | None) -> None:
        # A bounded run, so the walk's peak memory stays near what its records keep.
        devices, dtypes, shapes, nbytes, storage_bytes, keys = columns
        notes = list(map(_QUANTIZED.get, dtypes))
        tensor_first, storage_first = self._tensor_first, self._storage_first
        grads = list(map(tensor_getters.requires_grad, values))
        if not any(grads) and not any(notes) and (not self.keeps_first_names or (
                len(set(keys)) == len(keys) and storage_first.keys().isdisjoint(keys))):
            # The common case: no alias to look up as the walk goes (memory met before is marked
            # once the walk is done, see link_aliases), or none when every memory is new.
            try:
                self.records.extend_plain(names, root, kind, owner, self.hidden, devices, dtypes, shapes, nbytes,
                                          storage_bytes, keys)
            except (ValueError, OverflowError, TypeError):
                pass  # a size or identity the columns cannot hold: item by item
            else:
                if self.keeps_first_names or owner is not None:
                    # A module's attribute may be an optimizer's parameter too: named after it.
                    tensor_first.update(zip(map(id, values), names))
                if self.keeps_first_names:
                    storage_first.update(zip(keys, names))
                if kind == "attribute":
                    self._count_attributes(owner, len(names))
                return
        append, hidden, record = self.records.append, self.hidden, self._tensor
        for t, tid, name, device, dtype, shape, nb, sb, key, note, requires_grad in zip(
                values, map(id, values), names, devices, dtypes, shapes, nbytes, storage_bytes, keys, notes, grads):
            if requires_grad:
                self._guarded(record, t, name, root, kind, owner)
                continue
            alias = self._first_name(tid, key, name)
            append(_new(TensorRecord, (
                name, root, kind, device, dtype, shape, nb, sb, key, alias, False, "Tensor", "strided", owner, None,
                note, hidden, True,
            )))
            if kind == "attribute":
                self._count_attributes(owner, 1)

    def _count_attributes(self, owner: str | None, count: int) -> None:
        self._attribute_records[owner] = self._attribute_records.get(owner, 0) + count


_RUN = 4096  #: items of a container read as one run of columns
#: The note of a quantized tensor, by dtype name (a strided tensor is quantized exactly when its dtype is).
_QUANTIZED = dict.fromkeys(("qint8", "quint8", "qint32", "quint4x2", "quint2x4"), "quantized")
