"""The one place that turns a problem into a :class:`~devinspect.model.fixes.Fix`.

Findings (``%devices``) and mismatch diagnoses (``%%devcheck``) both call these
builders, so a problem gets the same fix whichever magic saw it. The rules:

* ``code`` runs exactly as printed in the user's namespace: only names the user has,
  literals for devices and keys, and nothing when no runnable form exists.
* Library code (site-packages, the standard library, torch) is never edited; a
  source edit rewrites one of the user's own lines, keeping their arguments.
* A split model has one target device: an accelerator the user moved to wins over
  the CPU (see :func:`target_device`); the same in every magic.
* Optimizer state goes to the device of its own parameter, except the 0-dim CPU
  scalars (Adam's ``step``) that optimizers keep on the host by design
  (:func:`stays_on_host`, the only place that rule lives).
* Moving keeps identities: a module keeps its Parameter objects (an optimizer that
  holds them stays valid) and a leaf that requires grad stays a leaf.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from typing import Iterable

from ..collect import is_getattr_call, is_identifier, is_path, literal, parse_path
from ..model import (
    Fix,
    ModuleSummary,
    Move,
    MoveContainer,
    MoveOptimizerState,
    OptimizerSummary,
    RebuildOptimizer,
    RebuildScheduler,
    RegisterBuffer,
    ReleaseGraphs,
    ReleaseHistory,
    SchedulerSummary,
    SourceEdit,
    SourceLine,
    Steps,
    Unregistered,
    device_is_accelerator,
)

#: Device types whose tensors PyTorch moves in place (``param.data = …``), keeping a
#: Parameter's identity even while an autograd graph holds it. Any other device
#: (a Python backend such as devinspect's ``sim``, DTensor) makes ``Module.to`` swap
#: tensors, which PyTorch refuses for a parameter a live autograd graph has saved.
DENSE_DEVICE_TYPES = frozenset({"cpu", "cuda", "xpu", "mps", "hip", "hpu", "mtia"})


# -- names and literals -----------------------------------------------------------


def assignment(name: str, value: str) -> str | None:
    """Code that stores ``value`` under ``name`` (``x = …``, ``d["k"] = …``, ``setattr(o, "a b", …)``).

    None when the name cannot be assigned (an item of a tuple or set, a
    ``list(s)[0]`` name): no runnable fix then.
    """
    node = parse_path(name)
    if node is None:
        return None
    if is_getattr_call(node):
        call = node  # getattr(parent, "odd name") -> setattr(parent, "odd name", value)
        parent = ast.unparse(call.args[0])  # type: ignore[attr-defined]
        return _compiles(f"setattr({parent}, {literal(call.args[1].value)}, {value})")  # type: ignore[attr-defined]
    return _compiles(f"{name} = {value}")


def _compiles(code: str) -> str | None:
    try:
        compile(code, "<fix>", "exec")
    except (SyntaxError, ValueError):
        return None
    return code


def device_literal(device: str) -> str:
    return literal(device)


# -- which device ---------------------------------------------------------------------


def target_device(devices: Iterable[str]) -> str | None:
    """The one device a split model (or a failed op's inputs) should end up on.

    ``devices`` come most bytes first. An accelerator wins over the CPU (forgetting to
    move something to the accelerator is the common bug; moving a model back to the
    CPU is never what the user meant); among accelerators, the one holding the most.
    ``meta`` and unknown devices never win: they hold no data to move.
    """
    devices = [d for d in devices if d not in ("meta", "?", "")]
    accelerators = [d for d in devices if device_is_accelerator(d)]
    if accelerators:
        return accelerators[0]
    return devices[0] if devices else None


def moves_in_place(source: str, target: str, swap_flag: bool = False) -> bool:
    """Whether ``Module.to`` keeps parameters by assigning ``.data`` (dense backends)
    rather than swapping tensors (Python backends, DTensor, or the swap flag set)."""
    if swap_flag:
        return False
    return source.split(":", 1)[0] in DENSE_DEVICE_TYPES and target.split(":", 1)[0] in DENSE_DEVICE_TYPES


def stays_on_host(shape: tuple | None, device: str) -> bool:
    """Optimizer state that stays on the CPU by design: a 0-dim scalar such as Adam's ``step``
    (non-capturable optimizers keep it there; moving it makes their step fail)."""
    return device == "cpu" and shape == ()


#: The same rule, as printed in runnable code (``v`` is a state tensor).
STAYS_ON_HOST_CODE = "v.dim() == 0 and v.device.type == \"cpu\""


#: ``torch.`` used as a name in fix code (not ``x.torch.``, not ``mytorch.``).
_USES_TORCH = re.compile(r"(?<![\w.])torch\.")


def importing_torch(fix: Fix | None, torch_bound: bool) -> Fix | None:
    """``fix`` with ``import torch`` first when its code uses the name ``torch`` and the user's
    namespace does not bind it to PyTorch (``import torch as th``): the fix then runs as printed."""
    if fix is None or torch_bound or not fix.code or not _USES_TORCH.search(fix.code):
        return fix
    return dataclasses.replace(fix, code="import torch\n" + fix.code)


# -- moving -----------------------------------------------------------------------------


def move_module(name: str | Iterable[str], device: str, *, optimizers: Iterable[str] = (),
                release: Iterable[str] = (), release_traceback: bool = False, why: str = "",
                part_of: str | None = None) -> Fix:
    """``model.to(device)`` (or each of several submodules ``name`` of ``part_of``), with the state
    of ``optimizers`` that hold their parameters following.

    ``release`` / ``release_traceback`` come first when an autograd graph saved some
    of the parameters and this move has to swap tensors (see :data:`DENSE_DEVICE_TYPES`).
    """
    names = [name] if isinstance(name, str) else list(name)
    optimizers = tuple(optimizers)
    lines = _release_lines(tuple(release), release_traceback)
    lines.extend(f"{n}.to({device_literal(device)})" for n in names)
    for opt in optimizers:
        lines.extend(optimizer_state_code(opt, comment="its optimizer's state follows"))
    shown = " and ".join(names)
    summary = (f"move {shown} to {device}, where the rest of {part_of} is" if part_of
               else f"move all of {shown} to {device}") + (f" ({why})" if why else "")
    if optimizers:
        summary += f", and the state of {', '.join(optimizers)} with it"
    typed = all(is_path(n) for n in names)
    moves = [Move(n, device, optimizers if i == len(names) - 1 else ()) for i, n in enumerate(names)]
    action = (moves[0] if len(moves) == 1 else Steps(tuple(moves))) if typed else None
    return Fix(summary=summary, code="\n".join(lines) if typed else None, action=action,
               note=_release_note(release, release_traceback))


def move_tensors(holder: str, names: list[str], device: str) -> Fix | None:
    """Every tensor ``holder`` (an object that is neither a tensor, a module nor a container: a
    cache, a config) keeps on another device, each moved where it is (None when one cannot be assigned)."""
    target = device_literal(device)
    lines = [assignment(name, f"{name}.to({target})") for name in names]
    if not lines or None in lines:
        return None
    return Fix(summary=f"move the {len(names)} tensors {holder} holds on another device to {device}",
               code="\n".join(lines), action=Steps(tuple(Move(name, device) for name in names)), rerun=True)


def move_tensor(name: str, device: str, *, source: str, requires_grad: bool = False, is_leaf: bool = True,
                is_parameter: bool = False, has_grad: bool = False, swap_flag: bool = False) -> Fix:
    """Move the tensor ``name`` to ``device``; a leaf that requires grad (or a Parameter)
    keeps its identity, so an optimizer holding it stays valid."""
    target = device_literal(device)
    keep_identity = is_parameter or (requires_grad and is_leaf)
    if not keep_identity:
        code = assignment(name, f"{name}.to({target})")
        summary = f"move {name} to {device}"
        return Fix(summary=summary, code=code, action=Move(name, device) if code else None,
                   note=None if code else f"{name} cannot be assigned as written; move it to {device} where it is created")
    if not is_path(name):
        return Fix(summary=f"move {name} to {device} where it is created",
                   note=f"{name} cannot be assigned as written")
    if moves_in_place(source, device, swap_flag):
        lines = ["with torch.no_grad():  # the same tensor object: an optimizer holding it stays valid",
                 f"    {name}.data = {name}.data.to({target})"]
        if has_grad:
            lines.append(f"    {name}.grad.data = {name}.grad.data.to({target})")
    else:
        new = (f"torch.nn.Parameter({name}.detach().to({target}), requires_grad={name}.requires_grad)"
               if is_parameter else f"{name}.detach().to({target}).requires_grad_()")
        swap = f"torch.utils.swap_tensors({name}, {new})"
        lines = [f"{swap}  # keeps the object: an optimizer holding it stays valid"]
        if has_grad:
            # The gradient goes over on its own (a tensor's gradient must be on its device); a
            # lambda's argument carries it, so the fix binds no name of the user's.
            lines = [f"(lambda grad: ({name}.__setattr__(\"grad\", None), {swap}, {name}.__setattr__(\"grad\", grad)))"
                     f"({name}.grad.to({target}))  # keeps the object and its gradient: an optimizer holding it stays valid"]
    what = "Parameter" if is_parameter else "leaf tensor"
    return Fix(summary=f"move {name} to {device}, keeping it the same {what}", code="\n".join(lines),
               action=Move(name, device))


def _release_lines(names: tuple[str, ...], traceback_too: bool) -> list[str]:
    lines = [f"{n} = {n}.detach()  # keeps its value, drops the autograd graph that holds the parameters"
             for n in names if assignment(n, f"{n}.detach()")]
    if traceback_too:
        lines.append("import devinspect")
        lines.append("devinspect.release_traceback()  # the last error's frames still use the parameters")
    return lines


def _release_note(names: Iterable[str], traceback_too: bool) -> str | None:
    holders = [f"the autograd graph of {n}" for n in names] + (["the last error's traceback"] if traceback_too else [])
    if not holders:
        return None
    keep = "keeps" if len(holders) == 1 else "keep"
    return ("On this device PyTorch moves parameters by swapping tensors, and refuses a parameter still in use "
            f"elsewhere: {' and '.join(holders)} {keep} some in use, so the fix releases "
            f"{'it' if len(holders) == 1 else 'them'} first (every value is kept).")


def release_graphs(names: Iterable[str], traceback_too: bool) -> Fix:
    names = tuple(names)
    lines = _release_lines(names, traceback_too)
    return Fix(summary="release the autograd graphs that hold the parameters", code="\n".join(lines) or None,
               action=ReleaseGraphs(names, traceback_too))


def combine(parts: list[Fix]) -> Fix:
    """Several fixes as one (two inputs of one failed op, say): code in order, every edit, the actions as steps."""
    from ..model import Steps

    if len(parts) == 1:
        return parts[0]
    # Each part's code runs on its own; together they run in order. An edit-only part adds
    # its edits (and its cell edit to the button's steps).
    codes = [p.code for p in parts if p.code]
    actions = tuple(p.action for p in parts if p.action is not None)
    return Fix(
        summary="; ".join(p.summary for p in parts),
        code="\n".join(codes) or None,
        edits=tuple(dict.fromkeys(e for p in parts for e in p.edits)),
        action=Steps(actions) if len(actions) > 1 else (actions[0] if actions else None),
        note=" ".join(p.note for p in parts if p.note) or None,
        rerun=all(p.rerun for p in parts) and bool(actions),
    )


# -- optimizers -------------------------------------------------------------------------


def optimizer_state_code(opt: str, comment: str = "") -> list[str]:
    """Each state tensor of ``opt`` to its own parameter's device, in one statement whose names
    live in comprehensions: pasted at a cell's top level it binds no variable (a loop would
    leave ``p``, ``k`` and ``v`` behind, over the user's own)."""
    return [
        f"{opt}.state.update({{" + (f"  # {comment}" if comment else ""),
        f"    p: {{k: v.to(p.device) if torch.is_tensor(v) and v.device != p.device and not ({STAYS_ON_HOST_CODE})",
        "        else v for k, v in state.items()}",
        f"    for p, state in {opt}.state.items()}})",
    ]


def optimizer_state(opt: str) -> Fix:
    """Each state tensor of ``opt`` to its own parameter's device (never all to one)."""
    code = "\n".join(optimizer_state_code(opt)) if is_path(opt) else None
    return Fix(summary=f"move each state tensor of {opt} to its own parameter's device", code=code,
               action=MoveOptimizerState(opt) if code else None)


def rebuild_optimizer(opt: OptimizerSummary, module: str, schedulers: Iterable[SchedulerSummary] = ()) -> Fix:
    """A new optimizer over ``module``'s parameters, with the old one's settings, and every
    learning-rate scheduler that drove the old one made again for the new one."""
    schedulers = tuple(schedulers)
    # A scheduler whose settings cannot be read back (CyclicLR's, say) is not made again here:
    # then nothing runs, as a new optimizer with the old schedulers left on the old one would
    # stop its schedule without a word.
    by_hand = [s for s in schedulers if s.class_path is None or s.rebuild_kwargs is None or not is_path(s.name)]
    note = (f"{opt.name} holds parameters of an earlier {module}: a new one starts with fresh state "
            "(its old state belongs to parameters that are no longer trained)")
    if schedulers and not by_hand:
        note += f"; {', '.join(s.name for s in schedulers)} then drive the new one, from their first step."
    else:
        note += "."
    summary = f"create {opt.name} again over {module}.parameters()" + (
        f", and {', '.join(s.name for s in schedulers)} with it" if schedulers else "")
    if opt.class_path is None or opt.rebuild_kwargs is None or opt.groups != 1 or not is_path(opt.name):
        return Fix(summary=summary, note=note + (" It had several parameter groups: rebuild it the way you built it."
                                                 if opt.groups != 1 else ""))
    kwargs = "".join(f", {k}={v}" for k, v in opt.rebuild_kwargs)
    lines = [f"{opt.name} = {opt.class_path}({module}.parameters(){kwargs})"]
    rebuilt = []
    for sched in schedulers:
        if sched in by_hand:
            continue
        args = "".join(f", {k}={v}" for k, v in sched.rebuild_kwargs)
        lines.append(f"{sched.name} = {sched.class_path}({opt.name}{args})")
        rebuilt.append(RebuildScheduler(sched.name, sched.class_path, sched.rebuild_kwargs))
    if by_hand:
        names = ", ".join(s.name for s in by_hand)
        return Fix(summary=summary, note=note + f" Run {'; '.join(lines)}; then make {names} again for the new "
                                                f"{opt.name} the way you made {'it' if len(by_hand) == 1 else 'them'} "
                                                "(their settings cannot be read back).")
    code = _compiles("\n".join(lines))
    action = RebuildOptimizer(opt.name, module, opt.class_path, opt.rebuild_kwargs, tuple(rebuilt)) if code else None
    return Fix(summary=summary, code=code, action=action, note=note, rerun=action is not None)


def replace_stale_parameters(opt: str, part: str, pairs: list[tuple[str, str]]) -> Fix:
    """The optimizer updates, in place of each old parameter (named by its place in a group),
    the new part's parameter: the rest of its state, its groups and its schedulers stay."""
    lines = []
    for place, new in pairs:
        lines += [f"{opt}.state.pop({place}, None)", f"{place} = {new}"]
    return Fix(summary=f"have {opt} update {part}'s parameters in place of the ones it replaced",
               code=_compiles("\n".join(lines)),
               note=(f"each new parameter takes the old one's place in its group (so its settings, such as weight "
                     f"decay) and starts with fresh state; the state of every other parameter, and the schedulers "
                     f"driving {opt}, stay as they are"))


# -- attributes, meta models, history ------------------------------------------------------


def register_buffer(u: Unregistered, device: str | None) -> Fix:
    """Register a plain tensor attribute as a (non-persistent) buffer, on the model's device.

    Non-persistent keeps ``state_dict()`` as it was, so existing checkpoints still
    load. Where the class also defines the attribute (``pe = None``),
    ``register_buffer`` refuses the name: the runnable part then only moves the
    tensor, and the edits change the class.
    """
    # The copy comes before the attribute leaves the module's __dict__ (register_buffer refuses a
    # name that is still there): when the copy fails, the attribute is still there.
    pop = f"{u.owner}.__dict__.pop({literal(u.attr)})"
    value = pop if device is None else f"({u.owner}.__dict__[{literal(u.attr)}].to({device_literal(device)}), {pop})[0]"
    edits = []
    if u.assigned_at is not None:
        new = _register_line(u.assigned_at.text, u.attr)
        if new is not None:
            edits.append(SourceEdit(u.assigned_at, u.assigned_at.text, new, u.class_name))
    if u.class_default:
        # register_buffer refuses a name the class defines: for this object, move the tensor;
        # in the class, drop the default and register a None buffer in __init__ (then the
        # existing `self.pe = ...` fills the buffer, and .to() moves it).
        moved = assignment(u.name, f"{u.name}.to({device_literal(device)})") if device else None
        class_edits = []
        if u.default_at is not None and u.init_at is not None:
            class_edits = [
                SourceEdit(u.default_at, u.default_at.text, "", u.class_name),
                SourceEdit(u.init_at, u.init_at.text,
                           f"{u.init_at.text}; self.register_buffer({literal(u.attr)}, None, persistent=False)",
                           f"{u.class_name}.__init__"),
            ]
        return Fix(
            summary=(f"move {u.name} to {device} now; in {u.class_name}, make {u.attr} a buffer" if device
                     else f"make {u.name} a buffer in {u.class_name}"),
            code=moved, action=Move(u.name, device) if moved and device else None, edits=tuple(class_edits),
            note=(f"{u.class_name} also defines {u.attr} as a class attribute, which register_buffer refuses"
                  + ("" if class_edits else
                     f": remove it from the class and call self.register_buffer({literal(u.attr)}, None, "
                     "persistent=False) in __init__")
                  + f"; assigning self.{u.attr} then fills the buffer, and .to() moves it."),
        )
    if not is_identifier(u.attr) or not is_path(u.owner):
        return Fix(summary=f"make {u.name} a buffer in {u.class_name}", edits=tuple(edits),
                   note=f"{u.attr!r} is not a name register_buffer accepts; rename the attribute")
    code = f"{u.owner}.register_buffer({literal(u.attr)}, {value}, persistent=False)"
    where = f" on {device}" if device else ""
    return Fix(summary=f"register {u.name} as a buffer{where}: .to() moves it from now on", code=code,
               edits=tuple(edits), action=RegisterBuffer(u.owner, u.attr, device or ""))


def register_buffers(found: Unregistered, all_of_model: Iterable[Unregistered], device: str | None) -> Fix:
    """:func:`register_buffer` for ``found`` and for the same attribute of every other module of its
    class in the model (each attention block keeps its own ``k_bias``): the next one fails otherwise."""
    same = [u for u in all_of_model if u.attr == found.attr and u.class_name == found.class_name]
    if len(same) < 2:
        return register_buffer(found, device)
    fix = combine([register_buffer(u, device) for u in same])
    where = f" on {device}" if device else ""
    return dataclasses.replace(fix, summary=f"register {found.attr} as a buffer{where} in each of the {len(same)} "
                                            f"{found.class_name} modules that keep it: .to() moves them from now on")


def _register_line(text: str, attr: str) -> str | None:
    """``self.pe = make(x)  # note`` -> ``self.register_buffer("pe", make(x), persistent=False)  # note``."""
    stripped = text.strip()
    try:
        tree = ast.parse(stripped)
    except SyntaxError:
        return None
    if len(tree.body) != 1:
        return None
    node = tree.body[0]
    target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
        node.target if isinstance(node, ast.AnnAssign) and node.value is not None else None
    if not (isinstance(target, ast.Attribute) and target.attr == attr and isinstance(target.value, ast.Name)
            and target.value.id == "self"):
        return None
    value = ast.get_source_segment(stripped, node.value)  # type: ignore[arg-type]
    if value is None:
        return None
    rest = stripped[node.end_col_offset:]  # a trailing comment stays a comment
    return f"self.register_buffer({literal(attr)}, {value}, persistent=False){rest}"


def materialise(name: str, device: str | None, meta_count: int, initialiser: str = "",
                release: Iterable[str] = (), release_traceback: bool = False, unsaved: tuple[str, ...] = (),
                real_device: str | None = None) -> Fix:
    """A model (partly) on ``meta``: its tensors hold no data, which ``.to()`` cannot copy. For a
    model wholly on meta the runnable part makes storage on ``device`` and initialises it as at
    construction; ``device`` None (a model partly on meta, whose real tensors ``to_empty`` would
    replace too) gives advice only. Loading a checkpoint is the usual cause to fix.

    ``unsaved`` are non-persistent buffers on meta: no checkpoint holds them and no
    ``reset_parameters`` sets them (the module computes them when it is made), so loading or
    ``to_empty`` cannot give them their values: the advice is to make the model on the device
    (``real_device``, where its other tensors are, when ``device`` is None). A model wholly on
    meta whose class has a whole-model ``initialiser`` (``init_weights``) is the exception: it
    computes them again."""
    if unsaved and not (initialiser and device is not None):  # the model's own initialiser sets them
        one = len(unsaved) == 1
        where = f"on {device or real_device}" if device or real_device else "on its device"
        return Fix(
            summary=f"make {name} {where} rather than on meta, then load its weights",
            note=(f"{', '.join(unsaved)} {'is a non-persistent buffer' if one else 'are non-persistent buffers'}: "
                  f"no state dict holds {'it' if one else 'them'}, so loading weights cannot give "
                  f"{'it' if one else 'them'} data, and {name}.to_empty(device=...) would leave "
                  f"{'it' if one else 'them'} uninitialised. The module computes {'it' if one else 'them'} when it is "
                  f"made: make {name} {where} (not under torch.device(\"meta\")), then load the weights; or set "
                  f"{'it' if one else 'them'} again as the class's __init__ computes {'it' if one else 'them'}."),
        )
    note = (f"{meta_count} parameter(s) of {name} are on the meta device: they have a shape but no data, so "
            f".to() cannot copy them. If you have its weights, load them instead: "
            f"{name}.load_state_dict(state_dict, assign=True).")
    if device is None or not is_path(name):
        note += (f" ({name}.to_empty(device=...) would make storage for every tensor, replacing the ones that have "
                 "data too: load the weights instead.)")
        return Fix(summary=f"give the {meta_count} parameter(s) of {name} data", note=note)
    # Storage for meta tensors comes by swapping them (meta has no data to move in place), which
    # PyTorch refuses while a graph or the failed call's traceback still uses them.
    lines = _release_lines(tuple(release), release_traceback)
    lines.append(f"{name}.to_empty(device={device_literal(device)})  # storage for every tensor; values not set yet")
    if initialiser:
        lines.append(f"{name}.{initialiser}()  # the model's own initialisation")
    else:
        # A comprehension, so that no loop variable is left over a name of the user's.
        lines += [f"[m.reset_parameters() for m in {name}.modules() if hasattr(m, \"reset_parameters\")];"
                  "  # initialise as at construction"]
    note = " ".join(filter(None, [_release_note(release, release_traceback), note]))
    return Fix(summary=f"make storage for {name} on {device} and initialise it", code="\n".join(lines), note=note)


def container_moved(name: str, device_expr: str, kind: str, all_tensors: bool = True, of_dicts: bool = False) -> str:
    """The expression of the list, tuple or dict ``name`` with its tensors on ``device_expr``;
    ``of_dicts``: a list or tuple of dicts of tensors (a detector's targets), each dict moved."""
    if of_dicts and kind != "dict":
        each = f"{{k: v.to({device_expr}) if torch.is_tensor(v) else v for k, v in t.items()}}"
        return f"tuple({each} for t in {name})" if kind == "tuple" else f"[{each} for t in {name}]"
    if kind == "dict":
        moved = f"v.to({device_expr})" if all_tensors else f"v.to({device_expr}) if torch.is_tensor(v) else v"
        return f"{{k: {moved} for k, v in {name}.items()}}"
    moved = f"t.to({device_expr})" if all_tensors else f"t.to({device_expr}) if torch.is_tensor(t) else t"
    return f"tuple({moved} for t in {name})" if kind == "tuple" else f"[{moved} for t in {name}]"


def move_container(name: str, device: str, kind: str, *, attribute_of: Unregistered | None = None,
                   all_tensors: bool = True, leaves: bool = False, of_dicts: bool = False) -> Fix:
    """The tensors of the list, tuple or dict ``name`` moved to ``device``, keeping its type; for a
    module attribute, the advice to make them buffers so that ``.to()`` moves them from now on.

    ``leaves``: tensors that are trained (leaves that require grad, as a ``functional_call``
    params dict holds): each is moved in place, keeping the object, so an optimizer that holds
    them goes on updating the very tensors the cell uses (a new dict of copies would leave it
    training tensors nothing uses)."""
    if leaves:
        items = f"{name}.values()" if kind == "dict" else name
        # A comprehension (no loop variable left over a name of the user's), its list not shown.
        code = (f"[torch.utils.swap_tensors(t, t.detach().to({device_literal(device)}).requires_grad_()) "
                f"for t in {items}];")
        return Fix(summary=f"move the tensors of {name} to {device} in place, keeping each tensor", code=code,
                   note=f"the tensors of {name} are trained (they require grad): each keeps its identity, so an "
                        "optimizer holding them stays valid")
    code = assignment(name, container_moved(name, device_literal(device), kind, all_tensors, of_dicts))
    note = None
    if attribute_of is not None:
        note = (f"{name} is a {kind} of tensors, which .to() and state_dict() skip: this moves them now, keeping "
                f"the {kind}; to have .to() move them from now on, register each as a buffer in "
                f"{attribute_of.class_name}.__init__ (self.register_buffer(...)).")
    return Fix(summary=f"move the tensors of {name} to {device}, keeping the {kind}", code=code,
               action=MoveContainer(name, device) if code else None, note=note)


def redispatch(name: str, off_map: Iterable[tuple[str, str, str]], *, offloaded: bool = False) -> Fix:
    """A dispatched model with parts off its ``device_map``: dispatched again with its own map,
    which puts each part where the map says and gives it accelerate's hook (one set after the
    first dispatch has none, so its inputs stay where the previous part left them). A model
    with offloaded parts is not dispatched again (their weights are not on the model to be read
    again): each stray part is moved where the map says and given the hook dispatch gives it."""
    off_map = tuple(off_map)
    parts = ", ".join(f"{part} ({device}, mapped to {mapped})" for part, device, mapped in off_map)
    note = f"{parts}: not where the device_map puts it, and without accelerate's hook"
    if offloaded:
        code = None
        if all(is_path(part) for part, _, _ in off_map):
            code = "\n".join(["from accelerate.hooks import AlignDevicesHook, add_hook_to_module"] + [
                f"add_hook_to_module({part}.to({device_literal(mapped)}), "
                f"AlignDevicesHook(execution_device={device_literal(mapped)}))" for part, _, mapped in off_map])
        where = ", ".join(part for part, _, _ in off_map)
        return Fix(summary=f"put {where} where {name}'s device_map says, with accelerate's hook", code=code,
                   note=f"{note}; {name} is not dispatched again, as its offloaded parts' weights are in their hooks")
    code = None
    if is_path(name):
        code = "\n".join(["from accelerate import dispatch_model",
                          f"{name} = dispatch_model({name}, device_map={name}.hf_device_map)"])
    return Fix(summary=f"dispatch {name} again with its own device_map", code=code, note=note)


#: Said when an optimizer's step failed part way: what it changed before the failure stays changed.
PARTIAL_STEP_NOTE = ("The error came inside the optimizer's step, which updates in place: the parameters it "
                     "reached before the failing one keep their update (and their step count), so running the "
                     "cell again applies one more step to those.")


def with_note(fix: Fix | None, note: str) -> Fix | None:
    """``fix`` with ``note`` after its own."""
    return None if fix is None else dataclasses.replace(fix, note=" ".join(filter(None, [fix.note, note])))


def made_inside_library(library: str, device: str, target: str) -> Fix:
    """A misplaced tensor no name in the user's code reaches, made inside ``library`` from none
    of the inputs the user's lines pass in: said so, with no code that would guess."""
    return Fix(summary=f"have {library} make its tensors on {target}",
               note=(f"the tensor on {device} is made inside {library}, from nothing your code names and not from "
                     f"the inputs your lines pass in: if {library} takes a device (an argument, a config), give it "
                     f"{target}"))


def release_history() -> Fix:
    return Fix(summary="release the output-history entries that hold it",
               code="import devinspect\ndevinspect.release_history()", action=ReleaseHistory(),
               note="%reset -f out misses the copies of _ that IPython keeps elsewhere")


def release_traceback() -> Fix:
    return Fix(summary="release the last error's traceback",
               code="import devinspect\ndevinspect.release_traceback()", action=ReleaseGraphs((), True),
               note="the traceback's frames keep their tensors alive; %debug and %tb no longer see that error")


# -- source edits ----------------------------------------------------------------------------------


def factory_device_edit(where: SourceLine, factory: str, device_expr: str) -> SourceEdit | None:
    """The user's line with ``device=`` added to their ``torch.<factory>(…)`` call, arguments kept.

    ``torch.ones(x.shape[0], x.shape[1])`` -> ``torch.ones(x.shape[0], x.shape[1], device=x.device)``.
    None when the call cannot be found on that line.
    """
    text = where.text
    if not text:
        return None
    try:
        tree = ast.parse(text.strip())
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == factory
                and not any(k.arg == "device" for k in node.keywords)):
            segment = ast.get_source_segment(text.strip(), node)
            if segment is None or not segment.endswith(")"):
                continue
            inner = segment[:-1].rstrip()
            sep = "" if inner.endswith("(") else ", "
            new_call = f"{inner}{sep}device={device_expr})"
            return SourceEdit(where, text, text.strip().replace(segment, new_call, 1), where.function)
    return None


def wrap_name_edit(where: SourceLine, name: str, device_expr: str) -> SourceEdit | None:
    """The user's line with each use of the local ``name`` read as ``name.to(device)``."""
    text = where.text.strip()
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    spots = sorted(
        (n.col_offset for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name
         and isinstance(n.ctx, ast.Load)),
        reverse=True,
    )
    if not spots:
        return None
    new = text
    for col in spots:
        new = new[:col] + f"{name}.to({device_expr})" + new[col + len(name):]
    return SourceEdit(where, text, new, where.function)


def parts_off(model: ModuleSummary, target: str) -> list[str] | None:
    """The submodules of a model on other devices than ``target``, to move alone; None when the
    model moves whole (it is all elsewhere, or in many places). A deliberate split keeps its
    accelerators: only its parts on the host move."""
    if model.offloaded and model.placement:
        # Its parts on meta are offloaded (hooks bring their weights in): only a part on a real
        # device other than the target moves (a head assigned after the offload).
        paths = list(dict.fromkeys(path for path, device in model.placement if device not in (target, "meta")))
        return paths if paths and model.name not in paths else None
    if len([d for d in model.devices if d != "meta"]) < 2 or not model.placement:
        return None
    off = [(path, device) for path, device in model.placement if device != target]
    if model.deliberate_split or all(device_is_accelerator(d) for d in model.devices):
        off = [(path, device) for path, device in off if not device_is_accelerator(device)]
    paths = list(dict.fromkeys(path for path, _ in off))
    if not paths or model.name in paths or len(paths) > 3:
        return None if not model.deliberate_split else paths
    return paths
