"""Rules over a whole scan: what is probably wrong, in one line each, with the fix.

Each rule is a plain function of a :class:`~devinspect.model.scan_result.ScanResult`; none looks
at live objects, so every rule can be tested from hand-made records. Findings are
computed once per scan, on the whole result; a filtered view chooses which to show
through each finding's ``names`` (the records it is about). Fixes come from
:mod:`devinspect.diagnose.fix_builders`, the one place that writes them.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import sys
from collections import Counter, defaultdict
from typing import Any, Callable, Iterable, Iterator, Mapping

from ..collect import ScanOptions
from ..collect import scan as collect_scan
from ..model import (
    SEVERITY_ORDER,
    Finding,
    ModuleSummary,
    ScanResult,
    TensorRecord,
    device_is_accelerator,
    is_under,
    record_column,
)
from . import edit_checks, fix_builders
from .causes import creation_sites, dropped_moves_standing, made_in_code, standing_targets
from .object_findings import host_tables_of_plain_objects
from .overlaps import outermost, said_once
from .session_findings import could_not_inspect, history_holds, truncated_walk, unpinned_loaders

#: Names that usually hold a model's inputs or targets. At rest, before any call, a name is all
#: that says a tensor is an input (no rule exists then): it gives a hint, never an error.
INPUT_NAMES = frozenset({
    "x", "y", "X", "Y", "xb", "yb", "x_batch", "y_batch", "batch", "inputs", "input", "input_ids",
    "labels", "label", "targets", "target", "mask", "attention_mask", "images", "imgs", "image",
    "features", "data", "sample", "samples", "tokens", "ids", "src", "tgt", "y_true", "y_pred"})

Rule = Callable[[ScanResult], Iterator[Finding]]


def find(result: ScanResult) -> list[Finding]:
    """All findings for ``result``, most severe first."""
    found: list[Finding] = []
    for rule in RULES:
        found.extend(rule(result))
    found = [dataclasses.replace(f, fix=edit_checks.with_edits_that_run(f.fix)) if f.fix is not None else f
             for f in said_once(result, found)]
    found.sort(key=lambda f: SEVERITY_ORDER.get(f.severity, 9))
    if result.options.get("torch_bound", True) is False:
        found = [dataclasses.replace(f, fix=fix_builders.importing_torch(f.fix, False)) for f in found]
    return found


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
) -> ScanResult:
    """List every tensor reachable from ``namespace`` (default: the caller's globals), with
    devinspect's findings (computed on first use of ``.findings``).

    ``namespace`` may be any Mapping of names to values. ``roots`` restricts the walk
    to those names (a dotted name such as ``model.encoder`` walks ``model`` and keeps
    what lies below ``model.encoder``). ``exclude`` names are never walked (IPython's
    own variables, say). The walk runs no user code and changes nothing
    (:func:`devinspect.collect.namespace.scan.scan`).

    Its ``storage_bytes`` count memory held by PyTorch's caching allocator for these
    tensors, which is less than ``nvidia-smi`` shows (the allocator's free cache, the
    CUDA context and other processes are not tensors).
    """
    if namespace is None:
        namespace = sys._getframe(1).f_globals
    from .causes import device_names as device_naming

    result = collect_scan(namespace, roots, include_hidden=include_hidden, all_objects=all_objects, exclude=exclude,
                          max_depth=max_depth, max_items=max_items, max_objects=max_objects, rules=find)
    result.options["device_names"] = device_naming.device_names(namespace)  # how an edit of a cell names each device
    return result


# -- helpers shared by the rules ------------------------------------------------------------


def root_module(result: ScanResult, name: str) -> ModuleSummary | None:
    """The top-level module (as the namespace names it) that ``name`` lies under."""
    best = None
    for m in result.modules:
        if is_under(name, m.name) and (best is None or len(m.name) < len(best.name)):
            best = m
    return best


def enclosing_module(result: ScanResult, module: ModuleSummary | None) -> ModuleSummary | None:
    """The largest module of the namespace that holds all of ``module``'s parameters too: ``model``
    for ``backbone`` after ``model = Net(backbone, head)``. Moving it moves ``module`` and the parts
    the same call meets next (``head``); a split that is deliberate (``device_map``) is left alone."""
    if module is None:
        return None
    own = {r.alias_of or r.name for r in result.of_kind("parameter") if is_under(r.name, module.name)}
    if not own:
        return module
    held: dict[str, set[str]] = defaultdict(set)
    for r in result.of_kind("parameter"):
        if (r.alias_of or r.name) in own:
            held[r.name.split(".", 1)[0].split("[", 1)[0]].add(r.alias_of or r.name)
    best = module
    for m in result.modules:
        if m.name in held and held[m.name] >= own and m.parameters > best.parameters and not m.deliberate_split:
            best = m
    return best


def model_device(module: ModuleSummary) -> str | None:
    """The one device a model belongs on (:func:`devinspect.diagnose.fix_builders.target_device`)."""
    return fix_builders.target_device(module.devices)


def optimizers_with_state_under(result: ScanResult, module: str) -> tuple[str, ...]:
    """Optimizers holding state for parameters of ``module`` (their state must follow a move),
    whichever name the parameters go by (``net[0].weight`` is ``cmodel._orig_mod[0].weight``)."""
    mine = {r.alias_of or r.name for r in result.of_kind("parameter") if is_under(r.name, module)}
    names = []
    for r in result.of_kind("optimizer_state"):
        if r.param and (is_under(r.param, module) or r.param in mine) and not r.hidden:
            opt = r.name.split(".state[", 1)[0]
            if opt not in names:
                names.append(opt)
    return tuple(names)


def graph_holder_names(result: ScanResult) -> tuple[str, ...]:
    """The namespace names of tensors with a grad_fn, each of which a fix can detach (every
    name of one: a name left holding it keeps the graph)."""
    return tuple(r.name for r in result.of_kind("tensor")
                 if r.requires_grad and not r.is_leaf and not r.hidden
                 and fix_builders.assignment(r.name, f"{r.name}.detach()"))


def _graph_holders(result: ScanResult) -> tuple[tuple[str, ...], bool]:
    """What may keep autograd graphs alive: namespace tensors with a grad_fn, and the last traceback."""
    return graph_holder_names(result), bool(result.options.get("has_traceback"))


def move_fix(result: ScanResult, module: ModuleSummary, device: str, why: str = "", part: str | None = None) -> fix_builders.Fix:
    """Move a whole model (or its submodule ``part``) to ``device``, with its optimizers' state,
    releasing the graphs a swap needs."""
    name = part or module.name
    release: tuple[str, ...] = ()
    traceback_too = False
    swap_flag = bool(result.options.get("swap_flag"))
    needs_swap = any(not fix_builders.moves_in_place(d, device, swap_flag) for d in module.devices if d != device)
    held = [p for p in module.held_parameters if is_under(p, name)]
    if needs_swap and held:
        release, traceback_too = _graph_holders(result)
    return fix_builders.move_module(name, device, optimizers=optimizers_with_state_under(result, name),
                             release=release, release_traceback=traceback_too, why=why,
                             part_of=module.name if part else None)


def _passed(result: ScanResult, call: Any, kinds: tuple[str, ...] = ("tensor",)) -> list[TensorRecord]:
    """The namespace tensors a cell's call passes: its argument, or the items of it, each memory once."""
    return [r for r in result.of_kind(*kinds) if r.owner is None and not r.hidden and r.alias_of is None
            and (r.name == call.argument or r.name.startswith(call.argument + "["))]


def _meta_call(result: ScanResult, module: ModuleSummary, call: Any, reported: set[str]) -> Iterator[Finding]:
    """A model wholly on ``meta`` (no data) that a cell calls with tensors on a device."""
    args = [r for r in _passed(result, call) if r.device != "meta"]
    if not args:
        return
    target = fix_builders.target_device([r.device for r in args])
    release, traceback_too = _graph_holders(result)
    reported.add(module.name)
    yield Finding(
        code="partly-materialised-module",
        severity="error",
        subject=module.name,
        message=(f"{module.name} ({module.type_name}) is on the meta device: its parameters have shapes but no "
                 f"data, and {call.where.where} passes it {call.argument} on {target}: that call fails, or gives "
                 "outputs on meta whose values cannot be read"),
        fix=fix_builders.materialise(module.name, target, max(1, module.unmaterialised),
                              initialiser=module.initialiser, release=release,
                              release_traceback=traceback_too, unsaved=unsaved_meta_buffers(result, module.name)),
        names=_module_records(result, module.name),
    )


def _functions_elsewhere(result: ScanResult, reported: set[str]) -> Iterator[Finding]:
    """A recent cell calls a function with namespace tensors on different devices (``F.linear(x, w, b)``)."""
    if not result.function_calls:
        return
    records = {r.name: r for r in result.of_kind("tensor", "parameter") if not r.hidden}
    for call in result.function_calls:
        args = [records[a] for a in call.arguments if a in records]
        devices = [r.device for r in args if not (r.device == "cpu" and r.shape == ())]
        if len(set(devices)) < 2 or "meta" in devices:
            continue
        target = fix_builders.target_device(devices)
        wrong = [r for r in args if r.device != target and not (r.device == "cpu" and r.shape == ())
                 and r.name not in reported]
        if not wrong or any(r.owner is not None for r in wrong):
            continue
        reported.update(r.name for r in wrong)
        yield Finding(
            code="input-on-other-device",
            severity="warning",
            subject=wrong[0].name,
            message=(f"{call.where.where} calls {call.callee} with {', '.join(r.name for r in wrong)} on "
                     f"{', '.join(sorted({r.device for r in wrong}))} and the rest on {target}: that call fails "
                     "when it runs again"),
            fix=fix_builders.combine([_move_record(result, r, target) for r in wrong]),
            names=tuple(r.name for r in wrong),
        )


def _module_records(result: ScanResult, module: str) -> tuple[str, ...]:
    return tuple(r.name for r in result.of_kind("parameter", "buffer") if is_under(r.name, module))


# -- rules -----------------------------------------------------------------------------------------


def mixed_device_modules(result: ScanResult) -> Iterator[Finding]:
    """A model whose parameters and buffers span devices: one target for all of it."""
    for module in result.modules:
        real = tuple(d for d in module.devices if d != "meta")
        if len(real) < 2 or module.unmaterialised:
            continue
        where = ", ".join(f"{name} on {device}" for name, device in module.placement[:6])
        if len(module.placement) > 6:
            where += f", … ({len(module.placement) - 6} more)"
        target = model_device(module)
        accelerators = [d for d in real if device_is_accelerator(d)]
        if module.deliberate_split and module.off_map:
            parts = ", ".join(f"{part} is on {device}" for part, device, _ in module.off_map)
            yield Finding(
                code="mixed-device-module",
                severity="error",
                subject=module.name,
                message=(f"{module.name} ({module.type_name}) is dispatched by a device_map, but {parts}, not where "
                         "the map puts it: a forward pass raises a device mismatch there"),
                fix=fix_builders.redispatch(module.name, module.off_map, offloaded=module.offloaded > 0),
                names=_module_records(result, module.name),
            )
            continue
        if module.deliberate_split:
            severity, why = "hint", "its device_map puts parts on different devices on purpose"
        elif len(accelerators) == len(real):
            # Parts put on accelerators one by one are model parallel, not a slip: moving it all to one
            # device is no fix. Where the parts meet, the activations move (what a mismatch there names).
            severity, why = "hint", ("model parallel: where one part's output goes into the next, it moves to that "
                                     "part's device (.to())")
        else:
            severity, why = "error", "a forward pass raises a device mismatch where the parts meet"
        yield Finding(
            code="mixed-device-module",
            severity=severity,
            subject=module.name,
            message=f"{module.name} ({module.type_name}) has parameters/buffers on {' and '.join(real)}: {where}; {why}",
            fix=_with_its_inputs(result, module, target,
                                 made_on(result, move_fix(result, module, target), module.name, target, module=True))
            if target and severity != "hint" else None,
            names=_module_records(result, module.name),
        )


def modules_left_on_the_host(result: ScanResult) -> Iterator[Finding]:
    """A model, or a loss that holds tensors (class weights), wholly on the host while the session's
    other models are on one accelerator, or while the notebook names one accelerator as its device
    (``device = torch.device("cuda")``) and no model is there yet: found before anything runs. An
    error where the cells move its inputs to an accelerator before they call it (that call fails)."""
    placed = [m for m in result.modules if m.devices and all(device_is_accelerator(d) for d in m.devices)]
    accelerators = {d for m in placed for d in m.devices}
    named = {d for d in dict.keys(result.options.get("device_names", {})) if device_is_accelerator(d)}
    fed = {c.module: c for c in result.calls if device_is_accelerator(c.moved_to)}
    left = [m for m in result.modules
            if m.devices == ("cpu",) and not (m.unmaterialised or m.offloaded or m.moves_inputs)]
    for module in outermost(result, left):
        call = fed.get(module.name)
        if call is not None:
            yield Finding(code="module-on-other-device", severity="error", subject=module.name,
                          message=(f"{call.where.where} moves {call.argument} to {call.moved_to} and passes it to "
                                   f"{module.name}, but {module.name} is on cpu: that call fails when it runs again"),
                          fix=made_on(result, move_fix(result, module, call.moved_to), module.name, call.moved_to,
                                      module=True),
                          names=_module_records(result, module.name))
    if len(accelerators) > 1 or not (accelerators or len(named) == 1):
        return
    target = next(iter(accelerators or named))
    names = dict.get(result.options.get("device_names", {}), target)
    shown = ", ".join(m.name for m in placed[:3]) + (" …" if len(placed) > 3 else "")
    why = (f"{shown} {'is' if len(placed) == 1 else 'are'} on {target}: tensors passed between them fail; move it "
           "there if they meet") if placed else (f"your device is {target} ({names}): device tensors passed to it "
                                                 "fail; move it there if it gets them")
    for module in outermost(result, [m for m in left if m.name not in fed]):
        yield Finding(
            code="module-on-other-device",
            severity="hint",
            subject=module.name,
            message=f"{module.name} ({module.type_name}) is on cpu while {why}",
            fix=made_on(result, move_fix(result, module, target), module.name, target, module=True),
            names=_module_records(result, module.name),
        )


def _with_its_inputs(result: ScanResult, module: ModuleSummary, target: str, fix: fix_builders.Fix) -> fix_builders.Fix:
    """``fix`` (the model moved to ``target``) and the tensors the cells pass to the model that are
    off ``target``: once the model is whole there, they would fail at its first layer."""
    moves = []
    for call in result.calls:
        if call.module != module.name or call.container is not None or call.moved_to:
            continue
        moves += [_move_record(result, r, target) for r in _passed(result, call) if r.device not in (target, "meta")]
    return fix_builders.combine([fix, *moves]) if moves else fix


def partly_materialised_modules(result: ScanResult) -> Iterator[Finding]:
    """A model with some parameters on ``meta`` (no data) and others real: ``.to()`` raises."""
    for module in result.modules:
        real = [d for d in module.devices if d != "meta"]
        if not module.unmaterialised or not real:
            continue
        yield Finding(
            code="partly-materialised-module",
            severity="error",
            subject=module.name,
            message=(f"{module.name} ({module.type_name}) has {module.unmaterialised} parameter(s)/buffer(s) with no data "
                     f"(meta) next to ones on {', '.join(real)}: a forward pass fails and .to() cannot copy them"),
            # to_empty would lose the real ones
            fix=fix_builders.materialise(module.name, None, module.unmaterialised,
                                  unsaved=unsaved_meta_buffers(result, module.name),
                                  real_device=real[0] if len(real) == 1 else None),
            names=_module_records(result, module.name),
        )


def unsaved_meta_buffers(result: ScanResult, module: str) -> tuple[str, ...]:
    """The non-persistent buffers on meta under ``module``: what no checkpoint can give data."""
    return tuple(r.name for r in result.of_kind("buffer") if r.device == "meta" and r.note == "non-persistent"
                 and is_under(r.name, module))


def unregistered_tensor_attributes(result: ScanResult) -> Iterator[Finding]:
    """Tensors stored as plain module attributes: ``model.to()`` leaves them behind."""
    by_name = {r.name: r for r in result.of_kind("attribute") if not r.hidden}
    for module in result.modules:
        target = model_device(module)
        for u in module.unregistered:
            records = [r for n, r in by_name.items() if is_under(n, u.name) and r.owner == u.owner]
            if not records:
                continue
            first = records[0]
            elsewhere = target is not None and any(r.device != target for r in records)
            direct = first.name == u.name
            where = f" It is on {first.device} while {module.name} is on {target}." if elsewhere else ""
            # Moved wherever its class reads it (self.pos.to(x.device)): no op meets it where it is.
            followed = elsewhere and u.moved_where_read and not u.container
            if followed:
                where += f" {u.class_name} moves it to its inputs' device wherever it reads it."
            # State its own methods make as it runs (a mask, a recurrent state) follows their inputs: a hint.
            running = (not elsewhere and (u.made_while_running or u.moved_as_used)) or followed
            where = where or (f" {u.class_name} makes it as it runs, on its inputs' device." if u.made_while_running
                              else f" {u.class_name} moves what it makes from it to its inputs' device." if running
                              else "")
            # Made as it runs on the notebook's accelerator while the model sits on the host: its inputs
            # were there, and the model is what was left behind.
            follows = (u.made_while_running and target == "cpu" and device_is_accelerator(first.device)
                       and first.device in dict.keys(result.options.get("device_names", {})))
            if follows:
                where += f" {u.class_name} made it there from its inputs: the model is what sits on the host."
                fix = made_on(result, move_fix(result, module, first.device), module.name, first.device, module=True)
            elif direct:
                fix = fix_builders.register_buffer(u, target)
            elif u.container in ("list", "tuple", "dict") and target and elsewhere:
                # Records say nothing of items that are not tensors: the code keeps any such item.
                fix = fix_builders.move_container(u.name, target, u.container, attribute_of=u, all_tensors=False)
            else:
                fix = fix_builders.Fix(
                    summary=f"keep the tensors of {u.name} as buffers",
                    note=f"{u.name} holds tensors that .to() and state_dict() skip; register each as a buffer in "
                         f"{u.class_name}.__init__ (self.register_buffer(...))",
                )
            yield Finding(
                code="unregistered-tensor-attribute",
                severity="error" if elsewhere and not followed else "hint" if running else "warning",
                subject=u.name,
                message=(f"{u.name} is a {u.container} of tensors in a plain attribute: .to() and state_dict() skip "
                         f"them.{where}" if u.container else
                         f"{u.name} is a plain tensor attribute, not a buffer: .to() and state_dict() skip it.{where}"),
                fix=fix,
                storage_bytes=sum(r.counted_bytes for r in records),
                names=tuple(r.name for r in records),
            )


def optimizer_state_elsewhere(result: ScanResult) -> Iterator[Finding]:
    """Optimizer state on another device than its own parameter (typical after loading a checkpoint)."""
    device_of = {r.name: r.device for r in result.of_kind("parameter")}
    by_opt: dict[str, list[TensorRecord]] = defaultdict(list)
    for r in result.of_kind("optimizer_state"):
        if r.param is None or r.hidden:
            continue
        pdevice = device_of.get(r.param)
        if pdevice is None or pdevice == r.device or fix_builders.stays_on_host(r.shape, r.device):
            continue
        by_opt[r.name.split(".state[", 1)[0]].append(r)
    for opt, records in by_opt.items():
        devices = sorted({r.device for r in records})
        targets = sorted({device_of[r.param] for r in records if r.param in device_of})
        keys = sorted({r.name.rsplit("[", 1)[-1].rstrip("]") for r in records})
        yield Finding(
            code="optimizer-state-device",
            severity="error",
            subject=opt,
            message=(
                f"{len(records)} state tensors of {opt} ({', '.join(keys)}) are on {', '.join(devices)} "
                f"but their parameters are on {', '.join(targets)} (as after loading a checkpoint, or moving part "
                "of a model)"
            ),
            fix=fix_builders.optimizer_state(opt),
            storage_bytes=sum(r.counted_bytes for r in records),
            names=tuple(r.name for r in records),
        )


def stale_optimizers(result: ScanResult) -> Iterator[Finding]:
    """An optimizer whose parameters belong to no module in the namespace (the model's cell ran again)."""
    for opt in result.optimizers:
        if not opt.orphans:
            continue
        wanted = Counter(opt.orphan_shapes)
        candidates = [m for m in result.modules
                      if Counter(tuple(r.shape or ()) for r in result.of_kind("parameter")
                                 if r.owner is not None and is_under(r.name, m.name) and r.alias_of is None) == wanted]
        module = candidates[0].name if len(candidates) == 1 else None
        replaced = _replaced_part(result, opt) if module is None else None
        if replaced is not None:
            part, pairs = replaced
            yield Finding(
                code="stale-optimizer",
                severity="error",
                subject=opt.name,
                message=(f"{opt.orphans} of the {opt.parameters} parameters {opt.name} ({opt.type_name}) updates belong "
                         f"to no module or variable, and {part} has as many that it does not update: {part} was "
                         f"replaced after {opt.name} was made, so its steps train the old one"),
                fix=fix_builders.replace_stale_parameters(opt.name, part, pairs),
                names=tuple(new for _, new in pairs),
            )
            continue
        likely = f"; it looks like the parameters of an earlier {module}" if module else ""
        bound = [s for s in result.schedulers if s.optimizer == opt.name]
        fix = fix_builders.rebuild_optimizer(opt, module, bound) if module else fix_builders.Fix(
            summary=f"create {opt.name} again over the parameters of the model you train",
            note=f"{opt.name} trains tensors that nothing else in the namespace holds")
        if module is None:
            # No model of the same shapes in the namespace: the parameters may well live where the
            # walk does not look (a closure, an object it does not open): said, not asserted.
            yield Finding(
                code="stale-optimizer",
                severity="hint",
                subject=opt.name,
                message=(f"{opt.orphans} of the {opt.parameters} parameters {opt.name} ({opt.type_name}) updates are "
                         "held by nothing devinspect names (a function's closure, an object it does not look into); "
                         "if the model's cell ran again after the optimizer was made, its steps change nothing you use"),
                fix=fix,
                names=tuple(n for n in record_column(result.records, "name") if n.startswith(opt.name + ".")),
            )
            continue
        yield Finding(
            code="stale-optimizer",
            severity="error",
            subject=opt.name,
            message=(f"{opt.orphans} of the {opt.parameters} parameters {opt.name} ({opt.type_name}) updates belong to "
                     f"no module or variable in the namespace{likely}: training steps change nothing you use "
                     "(the model's cell ran again after the optimizer was made)"),
            fix=fix,
            names=tuple(n for n in record_column(result.records, "name") if n.startswith(opt.name + ".")),
        )


#: A replaced part is a head or a block: more orphans than this is not one part.
_REPLACED_AT_MOST = 8


def _replaced_part(result: ScanResult, opt: Any) -> tuple[str, list[tuple[str, str]]] | None:
    """(the part, [(old parameter's place, new parameter)]) when the optimizer's other parameters
    all belong to one model, which has exactly as many trainable parameters it does not update,
    all in one submodule, each of the same rank as the orphan it pairs with in order."""
    places = [n for n in opt.held if n.startswith(f"{opt.name}.param_groups[")]
    named = set(opt.held) - set(places)
    if not places or not named or len(places) > _REPLACED_AT_MOST or len(places) != len(opt.orphan_shapes):
        return None
    models = [m for m in result.modules if all(is_under(n, m.name) for n in named)]
    if not models:
        return None
    model = min(models, key=lambda m: len(m.name))
    missing = [r for r in result.of_kind("parameter") if r.owner is not None and r.alias_of is None
               and r.requires_grad and is_under(r.name, model.name) and r.name not in named]
    owners = {r.owner for r in missing}
    if len(missing) != len(places) or len(owners) != 1 or any(
            len(r.shape or ()) != len(shape) for r, shape in zip(missing, opt.orphan_shapes)):
        return None
    return owners.pop(), [(place, r.name) for place, r in zip(places, missing)]


def inputs_elsewhere(result: ScanResult) -> Iterator[Finding]:
    """Tensors the user's cells pass to a model on another device (the call fails when it runs
    again), then tensors named like inputs on another device than a model on an accelerator."""
    reported: set[str] = standing_targets(result)  # a dropped move is their cause, said by its own finding
    yield from _calls_elsewhere(result, reported)
    yield from _functions_elsewhere(result, reported)
    # A model whose hooks move its inputs (accelerate's) takes them from anywhere.
    placed = [m for m in result.modules if len(m.devices) == 1 and device_is_accelerator(m.devices[0])
              and not m.moves_inputs]
    if not placed:
        return
    model_devices = {m.devices[0] for m in result.modules if m.devices}
    accelerated = sorted({m.devices[0] for m in placed})
    for r in result.of_kind("tensor"):
        if r.alias_of is not None or r.hidden or r.device in model_devices or r.name in reported:
            continue
        base = re.split(r"[.\[]", r.name, maxsplit=1)[0]
        if base not in INPUT_NAMES or any(is_under(_as_unparsed(r.name), moved) for moved in result.moved_in_cells):
            continue  # not named like an input, or the cells move it where they use it
        target = accelerated[0]
        models = [m for m in placed if m.devices[0] == target]
        # Some models move some inputs themselves (many transformers losses move labels):
        # the hint says where the tensor is, never that a call will fail. No static rule says
        # which: the move happens in a loss function chosen at run time, so the words name the
        # library where it is common.
        itself = " (unless the model moves it itself, as many transformers models do with labels)" \
            if base in ("labels", "label") and any(m.library == "transformers" for m in models) else ""
        yield Finding(
            code="input-on-other-device",
            severity="hint",
            subject=r.name,
            message=(f"{r.name} is on {r.device} while {', '.join(m.name for m in models)} "
                     f"{'is' if len(models) == 1 else 'are'} on {target}: "
                     f"move it there before passing it in{itself}"),
            fix=_move_record(result, r, target),
            names=(r.name,),
        )


def _as_unparsed(name: str) -> str:
    """A name as ``ast.unparse`` writes it (``batch['x']``), to compare with code read from cells."""
    try:
        return ast.unparse(ast.parse(name, mode="eval"))
    except SyntaxError:
        return name


def _move_record(result: ScanResult, r: TensorRecord, target: str) -> fix_builders.Fix:
    grads = {x.param for x in result.of_kind("gradient")}
    return made_on(result, fix_builders.move_tensor(r.name, target, source=r.device, requires_grad=r.requires_grad,
                                             is_leaf=r.is_leaf, is_parameter=r.kind == "parameter",
                                             has_grad=r.name in grads, swap_flag=bool(result.options.get("swap_flag"))),
                   r.name, target)


def made_on(result: ScanResult, fix: fix_builders.Fix, name: str, target: str, module: bool = False,
            factories_only: bool = False) -> fix_builders.Fix:
    """``fix`` (a move now) with the edit of the cell line that made the variable ``name``, so that
    the cells make it on ``target`` when they run again (``.to()`` on a model's line, ``device=`` on
    a factory's, the loop's first line for a batch); ``factories_only`` for a list or dict, whose
    line takes ``device=`` on the factories in it but never ``.to()``."""
    if not name.isidentifier():
        return fix
    device_expr = dict.get(result.options.get("device_names", {}), target) or fix_builders.device_literal(target)
    made = next((m.type_name for m in result.modules if m.name == name), None) if module else None
    origin = creation_sites.assigned_in_session(name, None, 1 << 30, [name], device_expr, wrap=module, made=made) or \
        _unpacked_origin(result, name, target, device_expr)
    if origin is None or not origin.edits or (factories_only and origin.made_by != "factory"):
        return fix
    # What the same line made (x, adj = load()) or the user's same helper did (val_data = batchify(…)) fails next.
    alike = made_in_code.made_alike(name)
    records = [r for r in result.of_kind("tensor") if r.name in (*origin.together, *alike) and r.name != name
               and r.device != target and r.alias_of is None]
    also = [e for r in records if r.name in alike for e in getattr(creation_sites.assigned_in_session(
        r.name, None, 1 << 30, [r.name], device_expr), "edits", ())]
    fix = fix_builders.combine([fix, *(fix_builders.move_tensor(r.name, target, source=r.device) for r in records)])
    return dataclasses.replace(fix, edits=tuple(dict.fromkeys(fix.edits + origin.edits + tuple(also))), note=" ".join(
        filter(None, [fix.note, f"With the edit, {origin.where.where} makes it on {target} from now on."])))


def _unpacked_origin(result: ScanResult, name: str, target: str, device_expr: str) -> Any:
    """``x, adj = load()``: a line after it moves each of the tensors it unpacks that sit elsewhere."""
    from ..collect import assignment_in_session
    from ..model import Cause
    from .causes import unpacking_edit

    statement = assignment_in_session(name, None, 1 << 30)
    node = statement.node if statement is not None else None
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Tuple)):
        return None
    names = tuple(e.id for e in node.targets[0].elts if isinstance(e, ast.Name))
    host = {r.name for r in result.of_kind("tensor") if r.name in names and r.device != target and r.alias_of is None}
    edit = unpacking_edit(statement, [(n, f"{n}.to({device_expr})") for n in names if n in host])
    return Cause(edit.where, "value", edit, False, together=names) if edit is not None else None


def _calls_elsewhere(result: ScanResult, reported: set[str]) -> Iterator[Finding]:
    """A cell passes a tensor (or a list of them) to a model that sits on another device."""
    modules = {m.name: m for m in result.modules}
    for call in result.calls:
        if call.moved_to:
            continue  # a local the function moves: its model's placement is modules_left_on_the_host's
        module = modules.get(call.module)
        real = [d for d in module.devices if d != "meta"] if module is not None else []
        # Wholly on meta: it holds tensors, all without data (a loss or activation holds none).
        if module is not None and module.devices and not real and call.module not in reported:
            yield from _meta_call(result, module, call, reported)
            continue
        if module is None or len(real) != 1 or module.unmaterialised or module.moves_inputs:
            continue  # a module whose hooks move its inputs takes them from anywhere
        here = real[0]
        args = _passed(result, call, ("tensor", "parameter"))
        wrong = [r for r in args if r.device not in (here, "meta") and r.name not in reported
                 and not (call.with_output_in and r.shape == ())]  # a 0-dim host tensor mixes with any device
        if not wrong:
            continue
        target = fix_builders.target_device([here, *(r.device for r in wrong)])
        if target == here:
            if call.container is not None:
                fix = fix_builders.move_container(call.argument, target, call.container, all_tensors=False)
            else:
                fix = fix_builders.combine([_move_record(result, r, target) for r in wrong])
                if call.argument.isidentifier() and all(r.name != call.argument for r in wrong):
                    fix = made_on(result, fix, call.argument, target, factories_only=True)  # images = [...]
            what = f"{call.argument} is on {', '.join(sorted({r.device for r in wrong}))}"
            names = tuple(r.name for r in wrong)
        else:
            fix = made_on(result, move_fix(result, module, target), module.name, target, module=True)
            what = f"{module.name} is on {here} while {call.argument} is on {target}"
            names = tuple(r.name for r in wrong) + _module_records(result, module.name)
        reported.update(r.name for r in wrong)
        yield Finding(
            code="input-on-other-device",
            severity="error",  # the model's layers raise on it: that call fails, for certain
            subject=call.argument,
            message=(f"{call.where.where} computes {call.with_output_in} with the output of {module.name}, but {what}: "
                     "that line fails when it runs again" if call.with_output_in else
                     f"{call.where.where} passes {call.argument} to "
                     f"{f'{call.with_output_to} with the output of {module.name}' if call.with_output_to else module.name}"
                     f", but {what}: that call fails when it runs again"),
            fix=fix,
            names=names,
        )


RULES: tuple[Rule, ...] = (
    mixed_device_modules,
    modules_left_on_the_host,
    partly_materialised_modules,
    unregistered_tensor_attributes,
    host_tables_of_plain_objects,
    optimizer_state_elsewhere,
    stale_optimizers,
    inputs_elsewhere,
    dropped_moves_standing,
    history_holds,
    unpinned_loaders,
    truncated_walk,
    could_not_inspect,
)
