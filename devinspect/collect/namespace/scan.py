"""Walk a namespace and list every tensor in it, read-only: :func:`scan` and its lookups.

The walk itself is :mod:`devinspect.collect.namespace.walk`; this module chooses its roots
(the user's names, then IPython's history and the last traceback, measured apart),
runs it with the cyclic collector paused, and shapes the result. The lookups the
failed-call diagnosis needs (the user's name for a live tensor, module paths) come
from the same walk.
"""

from __future__ import annotations

import dataclasses
import gc
import re
import sys
import types
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch

from ...model import Finding, HistoryHold, ScanResult, SchedulerSummary, Selection, TensorRecord, device_is_accelerator
from ...runtime import tensor_getters
from .. import tensor_facts
from ..objects import type_module, type_name
from .names import HISTORY_RE, PLUMBING, binds_module, is_history_name, module_tree_paths, namespace_items, root_items
from .path_lookup import MISSING, object_at
from .reach_walkers import HolderWalker, ReachWalker
from .walk import ScanOptions, Walker

_Module = torch.nn.Module
_Tensor = torch.Tensor
_Optimizer = torch.optim.Optimizer


def scan(
    namespace: Mapping[str, Any] | None = None,
    roots: Iterable[str] | None = None,
    *,
    include_hidden: bool = False,
    all_objects: bool = False,
    exclude: Iterable[str] = (),
    max_depth: int = ScanOptions.max_depth,
    max_items: int = ScanOptions.max_items,
    max_objects: int = ScanOptions.max_objects,
    rules: Callable[[ScanResult], Iterable[Finding]] | None = None,
) -> ScanResult:
    """List every tensor reachable from ``namespace`` (default: the caller's globals).

    ``namespace`` may be any Mapping of names to values. ``roots`` restricts the walk
    to those names (a dotted name such as ``model.encoder`` walks ``model`` and keeps
    what lies below ``model.encoder``). ``exclude`` names are never walked (IPython's
    own variables, say).

    Returns a :class:`~devinspect.model.scan_result.ScanResult`; its ``storage_bytes``
    count memory held by PyTorch's caching allocator for these tensors, which is less
    than ``nvidia-smi`` shows (the allocator's free cache, the CUDA context and other
    processes are not tensors). ``rules`` say what looks wrong (its ``findings``);
    :func:`devinspect.scan` gives devinspect's own.
    """
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    options = ScanOptions(max_depth, max_items, max_objects, include_hidden, all_objects)
    items = namespace_items(namespace)
    excluded = set(exclude) | PLUMBING
    prefixes: list[str] = []
    if roots is not None:
        present = {name for name, _ in items}
        wanted: list[str] = []
        for root in roots:
            top = re.split(r"[.\[]", root.removeprefix("list(").replace(")", "", 1) if root.startswith("list(")
                           else root, maxsplit=1)[0]  # list(d)[0]: a key of d, as %devices names it
            if top not in present:
                raise LookupError(f"no variable named {top!r}" if top else f"{root!r} is not a name %devices lists")
            if top not in wanted:
                wanted.append(top)
            prefixes.append(root)
        if all(p in wanted for p in prefixes):
            prefixes = []  # whole variables only: nothing to cut from their records
        user = [(n, v) for n, v in items if n in wanted]
        history = [(n, v) for n, v in items if HISTORY_RE.match(n) and n not in wanted]
    else:
        user, history = root_items(items, excluded, include_hidden)
    walker = Walker(options)
    _walk_paused(walker, items, roots is not None, user, history, all_objects)
    result = _result(walker, [n for n, _ in user], prefixes, include_hidden, all_objects, max_depth, rules,
                     torch_bound=binds_module(namespace, "torch"))
    for path in prefixes:
        # A path that picks nothing because nothing is there (model.h.0 for model.h[0]) says so.
        if not any(map(Selection(names=(path,)).keeps, result.records)) and object_at(namespace, path) is MISSING:
            raise LookupError(f"nothing is at {path!r} (names are written as %devices lists them: "
                              "model.layers[0], d[\"key\"])")
    if rules is not None:
        # What the user's cells pass to their models and functions: the rules read inputs from it.
        from .. import table_holders
        from ..code import dropped_records, function_calls, model_calls, moved_in_cells

        top = {m.name for m in walker.modules if "." not in m.name and "[" not in m.name}
        result = dataclasses.replace(result, calls=tuple(model_calls(namespace, top)) if top else (),
                                     function_calls=tuple(function_calls(namespace, top)),
                                     moved_in_cells=tuple(moved_in_cells()),
                                     dropped_moves=tuple(dropped_records(namespace)),
                                     holders=tuple(table_holders(user)))
    return result


def find_tensor(namespace: Mapping[str, Any], name: str, *, exclude: Iterable[str] = ()) -> Any:
    """The live tensor ``%devices`` lists as ``name`` (``model.fc.weight``, ``Out[3]``,
    ``sys.last_traceback:forward.h``, ``<unnamed 2>`` as ``--all`` numbers it); LookupError
    when no such name is listed now. Found by the same read-only walk as the scan."""
    # A name that is a path (``model.fc.weight``, ``Out[3]``) is read directly: what it costs
    # is set by the path, not by the size of the namespace.
    if not name.startswith("<") and ":" not in name and re.split(r"[.\[(]", name, maxsplit=1)[0] not in set(exclude):
        direct = object_at(namespace, name)
        if issubclass(type(direct), torch.Tensor):
            return direct
    # <unnamed 2>, <ValueError from Cell In[3], line 1>:f.x: found by the garbage collector's walk.
    options = ScanOptions(include_hidden=True, all_objects=name.startswith("<"))
    items = namespace_items(namespace)
    user, history = root_items(items, set(exclude) | PLUMBING, True)
    walker = Walker(options)
    walker.wanted = name
    _walk_paused(walker, items, False, user, history, options.all_objects)
    found, walker.found = walker.found, None
    if found is None:
        raise LookupError(f"no tensor named {name!r} (a name as %devices lists it)")
    return found


def finished_errors_no_name_reaches(namespace: Mapping[str, Any], *, exclude: Iterable[str] = ()
                                    ) -> list[tuple[BaseException, str]]:
    """``(error, label)`` of each error that is over and that no name reaches (neither the
    namespace, the output history nor the last traceback), as a scan with ``all_objects``
    names its frames' tensors (``<ValueError from Cell In[3], line 1>:f.x``): for the action
    that releases their frames."""
    from ..code import finished_errors

    items = namespace_items(namespace)
    user, history = root_items(items, set(exclude) | PLUMBING, True)
    walker = Walker(ScanOptions(include_hidden=True))
    _walk_paused(walker, items, False, user, history, False)
    objects = gc.get_objects()
    try:
        return list(finished_errors(objects, walker.visited))
    finally:
        del objects


def _walk_paused(walker: Walker, items: list[tuple[str, Any]], restricted: bool, user: list[tuple[str, Any]],
                 history: list[tuple[str, Any]], all_objects: bool) -> None:
    """:func:`_walk` with the cyclic garbage collector paused.

    The walk allocates one record per tensor; letting the collector run meanwhile
    re-traverses the whole heap many times for nothing (it doubles the cost of a
    100,000-tensor walk). It is paused, never triggered, and restored.
    """
    # Out first, so history entries are named Out[12] rather than _12.
    history.sort(key=lambda item: (item[0] not in ("Out", "_oh"), item[0]))
    collector_was_on = gc.isenabled()
    gc.disable()
    try:
        _walk(walker, items, restricted, user, history, all_objects)
    finally:
        if collector_was_on:
            gc.enable()


def walk_user_roots(walker: Walker, user: list[tuple[str, Any]]) -> None:
    """Walk the user's names. Call with torch-function dispatch disabled."""

    # Modules first, so parameters get their natural names (model.fc.weight) even when a
    # list of them comes first; then tensors named directly (an optimizer's loose parameter
    # is `w`, not opt.param_groups[0]["params"][0]); optimizers next, so that each keeps its
    # own name (not sched.optimizer), though each is read only once every other name has
    # been walked: the models a list, a dict or an object holds (an ensemble, cfg["model"])
    # then have their names, and an optimizer over them is not taken for a stale one.
    for name, value in sorted(user, key=_root_rank):
        walker.root(name, value)
        if issubclass(type(value), _Optimizer):
            walker.postpone_deferred()
        else:
            walker.flush_deferred()
    walker.flush_postponed()


#: Roots the walk never enters (see static_getters.OPAQUE; a class is entered for its attributes).
_HOLDS_NO_TENSOR = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _root_rank(item: tuple[str, Any]) -> int:
    vt = type(item[1])
    return 0 if issubclass(vt, _Module) else 1 if issubclass(vt, _Tensor) else 2 if issubclass(vt, _Optimizer) else 3


def _walk(walker: Walker, items: list[tuple[str, Any]], restricted: bool, user: list[tuple[str, Any]],
          history: list[tuple[str, Any]], all_objects: bool) -> None:
    # No torch function (subclass or mode), no dispatch mode of the user's and no subclass's
    # __torch_dispatch__ sees any read the walk makes (a wrapper is read as constructed).
    with tensor_getters.reading():
        if restricted:
            # Name parameters after the namespace's modules even when only an
            # optimizer is asked for: opt.state[model.fc.weight], not param_groups[0].
            for name, value in items:
                if not name.startswith("_") and issubclass(type(value), _Module):
                    walker.name_parameters(value, name)
        walk_user_roots(walker, user)
        walker.hidden = True
        walker.first_hidden = len(walker.records)
        for name, value in history:
            walker.root(name, value)
        walker.traceback()
        walker.flush_deferred()
        walker.hidden = False
        if all_objects:
            walker.unnamed()


def _in_hidden(name: str) -> bool:
    """Whether a name is reached through the output history or the last traceback."""
    name = name.removeprefix("list(")  # list(d.values())[1], list(s)[0]
    return name.startswith("sys.last_traceback") or is_history_name(re.split(r"[.\[]", name, maxsplit=1)[0])


def _result(walker: Walker, user_names: list[str], prefixes: list[str], include_hidden: bool,
            all_objects: bool, max_depth: int, rules: Any = None, torch_bound: bool = True) -> ScanResult:
    walker.link_aliases()
    records: Sequence[TensorRecord] = walker.records
    hidden = records[walker.first_hidden :] if walker.first_hidden is not None else ()
    history = tuple(
        HistoryHold(r.name, r.device, r.storage_bytes)
        for r in hidden
        if r.hidden and r.alias_of is None and r.storage_bytes and device_is_accelerator(r.device)
    )
    if not include_hidden and hidden:
        if all_objects:  # the unnamed tensors come after the hidden ones
            records = walker.records.take(walker.records.indexes_where("hidden", (False,)))
        else:  # the hidden ones are the last: the walk is done, so its table is cut where they start
            walker.records.keep_first(walker.first_hidden)
    if prefixes:
        keep = Selection(names=tuple(prefixes)).keeps
        records = tuple(r for r in records if keep(r))
    return ScanResult(
        records=records,
        modules=tuple(walker.modules),
        loaders=tuple(walker.loaders),
        # What history and the last traceback hold is measured, but a cut inside them (a compiler's
        # frames) is not the user's to act on: listed only when hidden names are asked for.
        truncated=tuple(t for t in walker.truncated if include_hidden or not _in_hidden(t.name)),
        history=history,
        roots=tuple(user_names),
        options={"include_hidden": include_hidden, "all_objects": all_objects, "max_depth": max_depth,
                 "swap_flag": bool(torch.__future__.get_swap_module_params_on_conversion()),
                 "torch_bound": torch_bound,
                 "has_traceback": type(sys.__dict__.get("last_traceback")) is types.TracebackType},
        optimizers=tuple(walker.optimizers),
        schedulers=tuple(_schedulers(walker)),
        module_types=tuple(walker.module_types),
        rules=rules,
    )


def _schedulers(walker: Walker) -> list[SchedulerSummary]:
    """The learning-rate schedulers the walk met, each with the name of the optimizer it drives."""
    out = []
    for name, cls, optimizer_id, kwargs in walker.scheduler_parts:
        tname = type_name(cls)
        module = type_module(cls)
        package = "torch.optim.lr_scheduler" if module.startswith("torch.optim.lr_scheduler") else "torch.optim.swa_utils"
        out.append(SchedulerSummary(name, tname, f"{package}.{tname}", walker.optimizer_names.get(optimizer_id), kwargs))
    return out


_KIND_SOURCE = {"parameter": "parameter", "buffer": "buffer", "attribute": "attribute", "gradient": "gradient",
                "optimizer_state": "optimizer_state", "tensor": "namespace"}


class NameIndex:
    """The user's names for live tensors, and the scan they come from (for explaining errors).

    Built from the user's own names only: neither output history nor an earlier
    error's traceback may name an operand. Valid while the tensors asked about are
    alive (it maps object ids, which is why it is used at once and dropped).

    Walked in two steps, in the scan's own order, so names are the scan's: first the
    names bound to modules, tensors and optimizers (what a failing call's operands
    usually are, and few objects), then, only when a question needs them, every other
    name (lists, dicts and objects, where most of a large namespace sits). ``result``
    is the whole scan; ``lookup`` and ``record`` walk the rest only on a miss.
    """

    def __init__(self, namespace: Mapping[str, Any]):
        self._walker = Walker(ScanOptions())
        self._walker.keeps_first_names = True  # lookups go by object
        user, _history = root_items(namespace_items(namespace), PLUMBING, include_hidden=False)
        ordered = sorted(user, key=_root_rank)
        self._ordered = ordered
        first = [item for item in ordered if _root_rank(item) < 3]
        self._rest = ordered[len(first):]
        self._first_roots = frozenset(name for name, _ in first)
        self._user_names = [n for n, _ in user]
        self._roots = frozenset(self._user_names)
        self._reach: ReachWalker | None = None
        self._holders: ScanResult | None = None
        self._walk(first)

    @staticmethod
    def _run(walker: Walker, roots: list[tuple[str, Any]]) -> None:
        collector_was_on = gc.isenabled()
        gc.disable()
        try:
            with tensor_getters.reading():
                for name, value in roots:
                    walker.root(name, value)
                    walker.flush_deferred()
        finally:
            if collector_was_on:
                gc.enable()

    def _walk(self, roots: list[tuple[str, Any]]) -> None:
        self._run(self._walker, roots)
        walker = self._walker
        self._result = self._result_of(walker)
        # name -> index (the last record of a name wins); a record is made only when asked for.
        self._by_name = dict(zip(walker.records.column("name"), range(len(walker.records))))
        self._tensor_first = walker._tensor_first
        self._storage_first = walker._storage_first

    @property
    def complete(self) -> bool:
        return not self._rest

    def _finish(self) -> None:
        rest, self._rest = self._rest, []
        if rest:
            self._walk(rest)

    def _rest_may_name(self, t: Any) -> bool:
        """Whether a name not walked yet could reach ``t`` (or its memory): a walk over the same
        objects that names nothing answers it, and a tensor it does not meet, no name of the
        rest would name (a temporary made on the failing line, a local of the user's function)."""
        if self._reach is None:
            self._reach = ReachWalker(ScanOptions())
            self._run(self._reach, self._rest)
        try:
            with tensor_getters.reading():
                return self._reach.may_name(t)
        except Exception:  # when in doubt, the whole walk decides
            return True

    @property
    def result(self) -> ScanResult:
        """The scan of every user name (walks the rest when it has not been walked)."""
        self._finish()
        return self._result

    @property
    def holders(self) -> ScanResult:
        """The scan less the plain tensors outside modules and optimizers (see
        :class:`~devinspect.collect.namespace.reach_walkers.HolderWalker`): what moving a model must
        release or carry along, without a record for every tensor of a large namespace."""
        if not self._rest:
            return self._result
        if self._holders is None:
            walker = HolderWalker(ScanOptions())
            self._run(walker, self._ordered)
            self._holders = self._result_of(walker)
        return self._holders

    def _result_of(self, walker: Walker) -> ScanResult:
        """What ``walker`` found, as the scan of the user's own names returns it."""
        result = _result(walker, self._user_names, [], False, False, ScanOptions.max_depth)
        if walker is self._walker and self._rest:
            # The walk goes on into the rest later: this result keeps the records found so far.
            result = dataclasses.replace(result, records=walker.records.take(range(len(walker.records))))
        return result

    def _walked(self, name: str) -> bool:
        """Whether everything the whole scan would name ``name`` (or below it) is named already:
        a name is given by the first root that reaches it, and the first step's roots come first."""
        if not self._rest:
            return True
        root = re.match(r"[A-Za-z_][A-Za-z0-9_]*", name)
        return root is not None and root.group(0) in self._first_roots

    def result_under(self, name: str) -> ScanResult:
        """A scan that holds what the whole scan holds under ``name``'s root."""
        if not self._walked(name):
            self._finish()
        return self._result

    def record(self, name: str) -> TensorRecord | None:
        """The record named ``name`` (as the user types it), or None (also for any text that is
        not a name under one of the user's names: ``None``, ``x + 1``)."""
        root = re.match(r"[A-Za-z_][A-Za-z0-9_]*", name)
        if root is None or root.group(0) not in self._roots:
            return None
        if not self._walked(name):
            self._finish()
        return self._named(name)

    def rest_roots(self) -> frozenset[str]:
        """The user's names not walked yet that could hold a tensor (lists, dicts and objects: where a
        large namespace sits; not an imported module or a function)."""
        return frozenset(name for name, value in self._rest if not issubclass(type(value), _HOLDS_NO_TENSOR))

    def lookup(self, t: Any, rest: bool = True) -> tuple[TensorRecord, bool] | None:
        """(the record of the name the user knows ``t`` by, whether ``t`` is only a view of it).
        With ``rest`` False, only what is walked already is asked (no walk of the rest)."""
        name = self._tensor_first.get(id(t))
        if name is None and rest and self._rest and self._rest_may_name(t):
            self._finish()  # the tensor itself may sit in a list or dict, named before any view of it
            name = self._tensor_first.get(id(t))
        is_view = False
        if name is None:
            try:
                with tensor_getters.reading():
                    key = tensor_facts(t)[5]
            except Exception:
                key = None
            name = self._storage_first.get(key) if key is not None else None
            is_view = name is not None
        record = self._named(name) if name is not None else None
        return (record, is_view) if record is not None else None

    def other_names(self, name: str) -> list[str]:
        """The names by which the whole scan also reaches the tensor it first named ``name``."""
        self._finish()
        records = self._walker.records
        return [n for n, first in zip(records.column("name"), records.column("alias_of")) if first == name]

    def _named(self, name: str) -> TensorRecord | None:
        index = self._by_name.get(name)
        return None if index is None else self._walker.records[index]

    @staticmethod
    def source(record: TensorRecord) -> str:
        if record.kind == "parameter" and record.owner is None:
            return "namespace"  # a loose Parameter, held by a variable (and maybe an optimizer)
        return _KIND_SOURCE.get(record.kind, "namespace")


def tensor_names(namespace: Mapping[str, Any], tensors: list) -> list[tuple[str, str, bool] | None]:
    """``(name, source, is_view)`` for each tensor as the namespace reaches it, or None."""
    index = NameIndex(namespace)
    out: list[tuple[str, str, bool] | None] = []
    for t in tensors:
        found = index.lookup(t)
        out.append(None if found is None else (found[0].name, index.source(found[0]), found[1]))
    return out


def module_paths(namespace: Mapping[str, Any]) -> dict[int, str]:
    """``id(module) -> path`` (``model.encoder.layers[0]``) for modules the namespace reaches by name."""
    seen: set[int] = set()
    return {id(module): path for name, value in namespace_items(namespace)
            if not name.startswith("_") and issubclass(type(value), _Module)
            for module, path in module_tree_paths(value, name, seen)}
