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
import re
from typing import Iterable

from ..collect.names import is_identifier, literal
from ..model.fixes import (
    Fix,
    Move,
    MoveOptimizerState,
    RebuildOptimizer,
    RegisterBuffer,
    ReleaseGraphs,
    ReleaseHistory,
    SourceEdit,
)
from ..model.records import OptimizerSummary, SourceLine, Unregistered, device_is_accelerator

#: Device types whose tensors PyTorch moves in place (``param.data = …``), keeping a
#: Parameter's identity even while an autograd graph holds it. Any other device
#: (a Python backend such as devinspect's ``sim``, DTensor) makes ``Module.to`` swap
#: tensors, which PyTorch refuses for a parameter a live autograd graph has saved.
DENSE_DEVICE_TYPES = frozenset({"cpu", "cuda", "xpu", "mps", "hip", "hpu", "mtia"})


# -- names and literals -----------------------------------------------------------


def _parse(name: str) -> ast.expr | None:
    try:
        node = ast.parse(name, mode="eval").body
    except (SyntaxError, ValueError):
        return None
    return node if _is_path(node) else None


def _is_path(node: ast.expr) -> bool:
    """A plain name, attribute or constant item path, or ``getattr(path, "odd name")``."""
    while True:
        if isinstance(node, ast.Name):
            return True
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            node = node.value
        elif _is_getattr(node):
            node = node.args[0]  # type: ignore[attr-defined]
        else:
            return False


def _is_getattr(node: ast.expr) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 2 and not node.keywords and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str))


def is_path(name: str) -> bool:
    """Whether ``name`` is an expression devinspect can read (and maybe assign) as printed."""
    return _parse(name) is not None


def assignment(name: str, value: str) -> str | None:
    """Code that stores ``value`` under ``name`` (``x = …``, ``d["k"] = …``, ``setattr(o, "a b", …)``).

    None when the name cannot be assigned (an item of a tuple or set, a
    ``list(s)[0]`` name): no runnable fix then.
    """
    node = _parse(name)
    if node is None:
        return None
    if _is_getattr(node):
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


def root_of(name: str) -> str:
    """The namespace variable a name starts from (``model`` for ``model.fc[0].weight``)."""
    return re.split(r"[.\[(]", name, maxsplit=1)[0] if not name.startswith("getattr(") else root_of(name[8:])


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


# -- moving -----------------------------------------------------------------------------


def move_module(name: str, device: str, *, optimizers: Iterable[str] = (), release: Iterable[str] = (),
                release_traceback: bool = False, why: str = "") -> Fix:
    """``model.to(device)``, with the state of ``optimizers`` that hold its parameters following.

    ``release`` / ``release_traceback`` come first when an autograd graph saved some
    of the parameters and this move has to swap tensors (see :data:`DENSE_DEVICE_TYPES`).
    """
    optimizers = tuple(optimizers)
    lines = _release_lines(tuple(release), release_traceback)
    lines.append(f"{name}.to({device_literal(device)})")
    for opt in optimizers:
        lines.extend(optimizer_state_code(opt, comment="its optimizer's state follows"))
    summary = f"move all of {name} to {device}" + (f" ({why})" if why else "")
    if optimizers:
        summary += f", and the state of {', '.join(optimizers)} with it"
    action = Move(name, device, optimizers) if is_path(name) else None
    code = "\n".join(lines) if is_path(name) else None
    return Fix(summary=summary, code=code, action=action, note=_release_note(release, release_traceback))


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
        lines = []
        if has_grad:
            lines.append(f"grad = {name}.grad.to({target}); {name}.grad = None")
        lines.append(f"torch.utils.swap_tensors({name}, {new})  # keeps the object: an optimizer holding it stays valid")
        if has_grad:
            lines.append(f"{name}.grad = grad")
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
    from ..model.fixes import Steps

    if len(parts) == 1:
        return parts[0]
    codes = [p.code for p in parts]
    actions = tuple(p.action for p in parts if p.action is not None)
    return Fix(
        summary="; ".join(p.summary for p in parts),
        code="\n".join(c for c in codes if c) if all(codes) else None,
        edits=tuple(e for p in parts for e in p.edits),
        action=Steps(actions) if len(actions) > 1 else (actions[0] if actions else None),
        note=" ".join(p.note for p in parts if p.note) or None,
    )


# -- optimizers -------------------------------------------------------------------------


def optimizer_state_code(opt: str, comment: str = "") -> list[str]:
    head = f"for p, state in {opt}.state.items():" + (f"  # {comment}" if comment else "")
    return [
        head,
        "    for k, v in state.items():",
        f"        if torch.is_tensor(v) and v.device != p.device and not ({STAYS_ON_HOST_CODE}):",
        "            state[k] = v.to(p.device)",
    ]


def optimizer_state(opt: str) -> Fix:
    """Each state tensor of ``opt`` to its own parameter's device (never all to one)."""
    code = "\n".join(optimizer_state_code(opt)) if is_path(opt) else None
    return Fix(summary=f"move each state tensor of {opt} to its own parameter's device", code=code,
               action=MoveOptimizerState(opt) if code else None)


def rebuild_optimizer(opt: OptimizerSummary, module: str) -> Fix:
    """A new optimizer over ``module``'s parameters, with the old one's settings."""
    note = (f"{opt.name} holds parameters of an earlier {module}: a new one starts with fresh state "
            "(its old state belongs to parameters that are no longer trained); rebuild any LR scheduler too.")
    if opt.class_path is None or opt.rebuild_kwargs is None or opt.groups != 1 or not is_path(opt.name):
        return Fix(summary=f"create {opt.name} again over {module}.parameters()",
                   note=note + (" It had several parameter groups: rebuild it the way you built it."
                                if opt.groups != 1 else ""))
    kwargs = "".join(f", {k}={v}" for k, v in opt.rebuild_kwargs)
    code = _compiles(f"{opt.name} = {opt.class_path}({module}.parameters(){kwargs})")
    action = RebuildOptimizer(opt.name, module, opt.class_path, opt.rebuild_kwargs) if code else None
    return Fix(summary=f"create {opt.name} again over {module}.parameters()", code=code, action=action, note=note)


# -- attributes, meta models, history ------------------------------------------------------


def register_buffer(u: Unregistered, device: str | None) -> Fix:
    """Register a plain tensor attribute as a (non-persistent) buffer, on the model's device.

    Non-persistent keeps ``state_dict()`` as it was, so existing checkpoints still
    load. Where the class also defines the attribute (``pe = None``),
    ``register_buffer`` refuses the name: the runnable part then only moves the
    tensor, and the edits change the class.
    """
    value = f"{u.owner}.__dict__.pop({literal(u.attr)})"
    if device is not None:
        value += f".to({device_literal(device)})"
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


def materialise(name: str, device: str | None, meta_count: int) -> Fix:
    """A model partly on ``meta``: ``.to()`` cannot copy out of meta tensors."""
    target = device or "the device"
    return Fix(
        summary=f"load the {meta_count} parameter(s) of {name} that have no data yet",
        note=(f"{meta_count} parameter(s) of {name} are on the meta device (no data); .to() cannot copy them. "
              f"Load them with {name}.load_state_dict(state_dict, assign=True), or create storage with "
              f"{name}.to_empty(device={device_literal(target)}) and then load or initialise the weights "
              "(to_empty leaves every parameter uninitialised)."),
    )


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
