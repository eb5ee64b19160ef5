"""A DataLoader over device tensors: pinned, or loaded in worker processes; and its shuffling
under a device as the default device.

A tutorial pattern moves the whole dataset to the GPU in a Dataset's ``__init__``. Its batches
are then on the device already, and two of the DataLoader's options fail on them:

* ``pin_memory=True`` pins each batch, and only host memory can be pinned ("cannot pin
  'torch.cuda.FloatTensor' only dense CPU tensors can be pinned");
* ``num_workers > 0`` loads batches in processes forked from the notebook's, where the device
  cannot be used ("Cannot re-initialize CUDA in forked subprocess").

Both are read from the objects themselves: the DataLoader's iterator in the traceback's frames,
its dataset's tensors (walked as ``%devices`` walks, without running anything), the loop that
iterates it in the user's code, and the DataLoader's own line in the session's cells. The fix
keeps the dataset where the user put it and drops what cannot work on it, both in the live
loader and on the line that made it.

Under ``torch.set_default_device(dev)``, a DataLoader with ``shuffle=True`` draws its order with
a host generator on the device; the fix gives it a generator of the device.
"""

from __future__ import annotations

import ast
import re
import types
from typing import Any

import torch

from ...collect import (
    FUNCTION_CODE,
    MISSING,
    Entry,
    current_index,
    first_line,
    instance_dict,
    locations,
    message,
    namespace_items,
    object_at,
    running_expression,
    type_name,
    user_code,
    value_in_frame,
)
from ...model import DeviceError, Fix, Operand
from ...runtime import tensor_getters
from .. import fix_builders
from ..causes import generator_edits, line_edits
from .failed_frames import Failed

_Loader = torch.utils.data.DataLoader
_LoaderIterator = torch.utils.data.dataloader._BaseDataLoaderIter
_Sampler = torch.utils.data.RandomSampler
#: Where a DataLoader pins a batch (its pinning thread calls the same function).
_PIN_FILE = "/torch/utils/data/_utils/pin_memory.py"
#: What the loader's options for worker processes and pinning are called; left out, each is off.
_WORKER_OPTIONS = frozenset({"num_workers", "persistent_workers", "prefetch_factor", "multiprocessing_context"})
_PIN_OPTIONS = frozenset({"pin_memory", "pin_memory_device"})
#: Dataset tensors named in an explanation, at most.
_SHOWN = 4


def _is(value: Any, cls: type) -> bool:
    return issubclass(type(value), cls)


def _iterator(failed: Failed) -> Any:
    """The DataLoader iterator whose ``next`` failed, from its frames' ``self``."""
    for entry in reversed(failed.entries):
        owner = dict.get(locations.frame_locals(entry.frame), "self")
        if _is(owner, _LoaderIterator):
            return owner
    return None


def _reraised_from(failed: Failed) -> str | None:
    """Where a DataLoader's worker or pinning thread raised the error it hands back (``in
    DataLoader worker process 0``), from the wrapper that raises it again here."""
    for entry in reversed(failed.entries):
        owner = dict.get(locations.frame_locals(entry.frame), "self")
        if type(owner) is torch._utils.ExceptionWrapper:
            where = instance_dict(owner).get("where")
            return where if type(where) is str else ""
    return None


#: How a forked child refuses the device (CUDA's "Cannot re-initialize CUDA in forked subprocess").
#: When the dataset holds no device tensor, its items are made on the device in the worker, and
#: this message, re-raised from the worker, is all there is to read: its stable part is matched.
_REFUSED_IN_FORK = re.compile(r"Cannot re-initialize (\w+) in forked subprocess")


#: How pinning a device tensor is refused ("cannot pin 'torch.cuda.FloatTensor' only dense CPU
#: tensors can be pinned"): read only where the batch itself is not in the traceback (pinned by
#: the loader's pinning thread); its stable part is matched.
_REFUSED_PIN = re.compile(r"cannot pin 'torch\.(\w+)\.\w+'")


def _device_named(device_type: str) -> str:
    """The device a refusal names (``CUDA`` → ``cuda:0``), as devinspect writes it."""
    kind = device_type.lower()
    return f"{kind}:{current_index(kind)}"


def _refused_device(failed: Failed) -> str | None:
    """The device a worker could not use, from its error re-raised here (nothing else of it is left)."""
    refused = _REFUSED_IN_FORK.search(message(failed.exc))
    return _device_named(refused.group(1)) if refused is not None else None


def _pinned_device(failed: Failed) -> str | None:
    """The device of the batch the loader tried to pin: the tensor in its pinning frame, else the
    one its error names."""
    for entry in reversed(failed.entries):
        if entry.frame.f_code.co_filename.replace("\\", "/").endswith(_PIN_FILE):
            data = dict.get(locations.frame_locals(entry.frame), "data")
            if issubclass(type(data), torch.Tensor) and tensor_getters.device(data).type not in ("cpu", "meta"):
                return str(tensor_getters.device(data))
    refused = _REFUSED_PIN.search(message(failed.exc))
    return _device_named(refused.group(1)) if refused is not None else None


def _names_of(namespace: Any, value: Any) -> list[str]:
    """The namespace's own names bound to ``value`` (by identity)."""
    return [n for n, v in namespace_items(namespace) if v is value and not n.startswith("_")]


def _device_tensors(dataset: Any, name: str) -> list[Any]:
    """The records of the dataset's tensors that are on a device (read as ``%devices`` reads them)."""
    from ...collect import scan

    result = scan({name: dataset})
    return [r for r in result.records if r.kind in ("tensor", "parameter", "buffer", "attribute")
            and r.alias_of is None and r.device.split(":")[0] not in ("cpu", "meta")]


def _user_loader(failed: Failed, dataset: Any) -> tuple[Entry, ast.AST, Any] | None:
    """The user's line iterating the DataLoader over ``dataset``, the expression naming the loader
    there, and the loader (None for a DataLoader made right in that expression)."""
    for entry in reversed(failed.users):
        node = running_expression(entry)
        for sub in ast.walk(node) if node is not None else ():
            if isinstance(sub, ast.Call):
                made = value_in_frame(sub.func, entry.frame)
                if isinstance(made, type) and issubclass(made, _Loader):
                    return entry, sub, None
            if not isinstance(sub, (ast.Name, ast.Attribute, ast.Subscript)):
                continue
            value = value_in_frame(sub, entry.frame)
            if _is(value, _Loader) and instance_dict(value).get("dataset") is dataset:
                return entry, sub, value
    return None


def _loader_calls(node: ast.AST, names: Any) -> list[ast.Call]:
    """The calls in ``node`` that make a DataLoader (the called name read in ``names``)."""
    out = []
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        made = object_at(names, ast.unparse(call.func)) if isinstance(call.func, (ast.Name, ast.Attribute)) else MISSING
        if isinstance(made, type) and issubclass(made, _Loader):
            out.append(call)
    return out


def _made_where(failed: Failed, entry: Entry, node: ast.AST, loader: Any) -> tuple[line_edits.Statement, ast.Call] | None:
    """The statement that makes the loader, and its DataLoader call: the iterating line itself, the
    latest cell binding the loader's name, or the user's function that cell calls to make it."""
    if loader is None:  # made right where it is iterated
        statement = failed.statement(entry)
        call = line_edits.find(statement.node, ast.unparse(node), (ast.Call,)) if statement is not None else None
        return (statement, call) if call is not None else None
    cell = failed.cell
    current = user_code.current_cell(cell.frame.f_code.co_filename) if cell is not None else None
    for name in _names_of(failed.namespace, loader):
        made = user_code.assignment_in_session(name, current, cell.lineno if cell is not None else 1 << 30)
        if made is None:
            continue
        statement = line_edits.statement_at(made.filename, made.line, made.function, made.node.end_lineno)
        if statement is None:
            continue
        calls = _loader_calls(statement.node, failed.namespace)
        if calls:
            return statement, calls[0]
        value = getattr(statement.node, "value", None)
        if isinstance(value, ast.Call):
            helper = object_at(failed.namespace, ast.unparse(value.func))
            if type(helper) is types.FunctionType:
                return _made_in_function(helper)
    return None


def _made_in_function(function: types.FunctionType) -> tuple[line_edits.Statement, ast.Call] | None:
    """The DataLoader call in the user's function that returns the loader."""
    code = FUNCTION_CODE(function)
    node = user_code.function_node(code) if locations.is_user_code(code) else None
    if node is None:
        return None
    names = function.__globals__
    found = None
    for statement in user_code.statements(node.body):
        calls = _loader_calls(statement, names)
        if calls and not hasattr(statement, "body"):
            found = (statement, calls[0])
    if found is None:
        return None
    made = line_edits.statement_at(code.co_filename, found[0].lineno, code.co_name, found[0].end_lineno)
    call = line_edits.find(made.node, ast.unparse(found[1]), (ast.Call,)) if made is not None else None
    return (made, call) if call is not None else None


def loader_error(failed: Failed) -> DeviceError | None:
    iterator = _iterator(failed)
    if iterator is None:
        return None
    state = instance_dict(iterator)
    dataset = state.get("_dataset")
    reraised = _reraised_from(failed)
    pinning = any(e.frame.f_code.co_filename.replace("\\", "/").endswith(_PIN_FILE) for e in failed.entries) \
        or (reraised is not None and "pin memory" in reraised)
    in_worker = reraised is not None and "worker" in reraised and (state.get("_num_workers") or 0) > 0
    if not (pinning or in_worker):
        return None
    found = _user_loader(failed, dataset)
    loader = found[2] if found is not None else None
    loader_names = _names_of(failed.namespace, loader) if loader is not None else []
    dataset_name = next(iter(_names_of(failed.namespace, dataset)), None) or (
        f"{loader_names[0]}.dataset" if loader_names else "the dataset")
    held = _device_tensors(dataset, dataset_name)
    # Without device tensors held, the dataset makes its items on the device as it loads them.
    made_on = None if held else _pinned_device(failed) if pinning else _refused_device(failed) if in_worker else None
    if not held and made_on is None:
        return None
    device = held[0].device if held else made_on
    kind_of_device = device.split(":")[0]
    if in_worker and not pinning and kind_of_device.lower() not in message(failed.exc).lower():
        # A worker failed for a reason of its own: only one that names the dataset's device is this.
        return None
    loader_text = loader_names[0] if loader_names else (ast.unparse(found[1]) if found is not None else "the DataLoader")
    operands = [Operand(loader_text, "loader", "-", "?", None,
                        f"a {type_name(type(loader)) if loader is not None else 'DataLoader'}: "
                        f"num_workers={state.get('_num_workers')}, pin_memory={state.get('_pin_memory')}")]
    operands += [Operand(r.name, "dataset", r.device, r.dtype or "?", r.shape, "") for r in held[:_SHOWN]]
    more = f" (and {len(held) - _SHOWN} more)" if len(held) > _SHOWN else ""
    if pinning:
        kind = "pinned device tensor"
        what = f"{loader_text} pins its batches, but " + (f"{dataset_name} holds tensors on {device}{more}" if held
                                                          else f"{dataset_name} makes them on {device}")
        cause = ("only host memory can be pinned (pinning makes host-to-device copies faster); the batches of "
                 f"{dataset_name} are on {device} already")
    else:
        kind = "device tensor in a worker"
        workers = state.get("_num_workers")
        what = f"{loader_text} loads batches in {workers} worker process{'es' if workers != 1 else ''}, " + (
            f"but {dataset_name} holds tensors on {device}{more}" if held
            else f"where {dataset_name} uses {kind_of_device}")  # its items are made on the device there
        cause = (f"a worker process is forked from this one, and a forked process cannot use {kind_of_device} once "
                 "its parent has; " + ("the batches of the dataset are on the device already, so workers add nothing"
                                       if held else f"{dataset_name} makes its items on {kind_of_device} there"))
    fix = _options_fix(failed, found, loader, loader_names, state, device, pinning, bool(held))
    return DeviceError(kind, first_line(failed.exc), what, failed.line(failed.cell), failed.deeper_line(),
                       tuple(operands), cause, fix)


def _options_fix(failed: Failed, found: Any, loader: Any, names: list[str], state: dict, device: str,
                 pinning: bool, held: bool = True) -> Fix:
    """Drop pinning and workers from the loader (the live one, and the line that makes it)."""
    dropped = set(_PIN_OPTIONS) if state.get("_pin_memory") else set()
    if (state.get("_num_workers") or 0) > 0:
        dropped |= _WORKER_OPTIONS
    code_lines = []
    if names:
        if state.get("_pin_memory"):
            code_lines.append(fix_builders.assignment(f"{names[0]}.pin_memory", "False"))
        if (state.get("_num_workers") or 0) > 0:
            code_lines.append(fix_builders.assignment(f"{names[0]}.num_workers", "0"))
    code = "\n".join(c for c in code_lines if c) or None
    made = _made_where(failed, found[0], found[1], loader) if found is not None else None
    edits = line_edits.Changes(made[0]).without_keywords(made[1], dropped).edits() if made is not None else None
    what = " and ".join(filter(None, ["pin_memory" if state.get("_pin_memory") else "",
                                      "the worker processes" if (state.get("_num_workers") or 0) > 0 else ""]))
    workers = (state.get("_num_workers") or 0) > 0
    summary = (f"drop {what} of {names[0] if names else 'the DataLoader'}: "
               + (f"its batches are on {device} already" if held else f"its dataset makes its items on {device}"
                  + (" (in this process, once without workers)" if workers else "")))
    keep = ("make its tensors without device= or .to()" if held else f"its items made without {device}")
    note = (f"Or keep the dataset on the host ({keep}) and move each batch to "
            f"{device} on the loop's first line: pinning and workers then speed up the copies"
            + ("" if pinning else "; or pass multiprocessing_context=\"spawn\" (each worker starts a new interpreter, "
                                  "and a dataset class defined in the notebook cannot be loaded there)") + ".")
    if edits:
        return failed.edit_fix(summary, edits, code=code, note=note)
    return Fix(summary=summary, code=code, note=note, rerun=code is not None)


def loader_generator(failed: Failed, operand: Operand, target: str, device_expr: str, scoped: str) -> DeviceError | None:
    """A DataLoader's shuffling under a device as the default device: it draws its order with a host
    generator there. The loader gets a generator of the device."""
    iterator = _iterator(failed)
    if iterator is None:
        return None
    dataset = instance_dict(iterator).get("_dataset")
    found = _user_loader(failed, dataset)
    if found is None:
        return None
    loader = found[2]
    names = _names_of(failed.namespace, loader) if loader is not None else []
    loader_text = names[0] if names else ast.unparse(found[1])
    made = _made_where(failed, found[0], found[1], loader)
    value = f"torch.Generator(device={device_expr})"
    edits, given = None, None
    if made is not None:
        statement, call = made
        sampler = next((c for c in ast.walk(call) if isinstance(c, ast.Call) and c is not call
                        and ast.unparse(c.func).endswith("RandomSampler")), None)
        given = generator_edits.given_generator(sampler or call)
        frame = found[0].frame if loader is None else None  # made on the line that iterates it, else in a cell
        edits = generator_edits.on_device(statement, sampler or call, frame, failed.namespace, device_expr)
    sampler = instance_dict(loader).get("sampler") if loader is not None else None
    code = (fix_builders.assignment(f"{names[0]}.sampler.generator", value)
            if names and type(sampler) is _Sampler and instance_dict(sampler).get("generator") is None else None)
    own = ast.unparse(given) if given is not None else None
    what = (f"{loader_text} shuffles with {f'its generator {own}, a host one' if own else 'a host generator'}, on "
            f"{target} (the default device)")
    cause = (f"with {target} as the default device, the sampler's torch.randperm makes its tensor there, while "
             + (f"{own} is a host generator" if own else "the generator it makes for itself is a host one"))
    summary = (f"make the generator {own} of {loader_text} on {target}: torch.Generator(device={device_expr})" if own
               else f"give {loader_text} a generator on {target}: generator={value}")
    note = " ".join(filter(None, [scoped and scoped[0].upper() + scoped[1:] + "."]))
    fix = failed.edit_fix(summary, edits, code=code, note=note or None) if edits else Fix(
        summary=summary, code=code, note=note or None, rerun=code is not None)
    return DeviceError("generator device", first_line(failed.exc), what, failed.line(failed.cell),
                       failed.deeper_line(), (operand,), cause, fix)
