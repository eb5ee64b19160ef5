"""Who keeps a tensor alive: the reference paths from the user's names to it.

``%devices --why NAME`` answers "why is this tensor (and its memory) still here?" with
every path that reaches it: a namespace name and what lies below it (``cache["k"][2]``),
``Out[7]``, a local of a frame in the last error's traceback, a closure's cell
(``f.__closure__[0].cell_contents``), an autograd graph that saved it for backward
(``loss.grad_fn.next_functions[0][0]._saved_self``), a view's base. Paths are written as
Python reaches them, so each can be typed to check it.

The search is breadth first from those roots, bounded in depth, objects and time, and
reads as the scan reads: instance dicts and slots through their C descriptors, container
contents through the built-in types' own methods, closure cells, frames' locals, and
autograd nodes' saved tensors through ``SavedTensor.data`` (never unpacking them, which
could run a saved-tensor hook). No property, ``__getattr__`` or hook of the user's runs.
A path ends at the tensor itself or at another tensor sharing its memory (a view, a copy
autograd saved of an output).
"""

from __future__ import annotations

import functools
import gc
import sys
import time
import types
from collections import deque
from typing import Any, Iterator, Mapping

import torch

from ...model import Holders, Reference
from ...runtime import tensor_getters
from .. import tensor_facts
from ..code import locations
from ..objects import (
    ATOM_IDS,
    PROXY_TYPES,
    class_dict,
    dict_items,
    instance_dict,
    is_opaque_package,
    made_instance_dict,
    mro,
    paused_frame,
    proxied_dict,
    script_object,
    script_tensors,
    sequence_items,
    slot_values,
    static_class_attr,
    type_is_one_of,
    type_module,
    type_name,
    user_class_attributes,
)
from .names import HISTORY_RE, PLUMBING, attr_name, binds_module, child_name, describe_error, key_text, namespace_items
from .path_lookup import object_at

_T = torch.Tensor
_Module = torch.nn.Module
_PYTHON_NODE = torch.autograd.function.BackwardCFunction

#: Bounds of one search.
MAX_DEPTH = 12
MAX_OBJECTS = 300_000
MAX_PATHS = 24
MAX_ITEMS = 10_000


def holders(namespace: Mapping[str, Any], name: str, *, exclude: Any = (), plumbing: Any = ()) -> Holders:
    """The references that keep the tensor ``%devices`` lists as ``name`` alive (LookupError if none).

    ``plumbing`` are the shell's own holders of output history (IPython's display hook and
    hidden namespace keep ``_``, ``__``, ``___``): references from them are not listed as
    unexplained, since the history names that show them are listed already."""
    from .scan import find_tensor

    start = time.perf_counter()
    with tensor_getters.reading():
        target = find_tensor(namespace, name, exclude=exclude)
        search = _Search(target)
        complete = search.run(_roots(namespace, set(exclude) | PLUMBING))
        try:
            device, dtype, shape, _, storage_bytes, _, _, _ = tensor_facts(target)
            unread = ""
        except Exception as exc:  # a tensor whose memory cannot be read still has holders
            device, dtype, shape, storage_bytes = "?", "?", None, 0
            unread = f"could not inspect: {describe_error(exc)}"
        found = {id(o) for o in search.reached}
        # A class holds its attributes in a dict behind its mappingproxy: that dict is the referrer.
        found |= {id(d) for o in search.reached if issubclass(type(o), type)
                  for d in gc.get_referents(type.__dict__["__dict__"].__get__(o)) if type(d) is dict}
        found |= {id(p) for p in plumbing if p is not None}
        typed = None
        if search.cut and object_at(namespace, name) is target:
            # The name asked for is itself a path to it, which a bounded search may not reach.
            typed = Reference(name, "namespace", "", "the name asked for")
            cut = max(name.rfind("."), name.rfind("["))
            found.add(id(object_at(namespace, name[:cut])) if cut > 0 else id(namespace))
        unreached = tuple(sorted({type_name(type(r)) for r in gc.get_referrers(target)
                                  if id(r) not in found and not _is_search_own(r, search)}))
        order = {"namespace": 0, "output history": 1, "last error's traceback": 2}
        references = list(search.references)
        if typed is not None and name not in {r.path for r in references}:
            references.append(typed)
        references = sorted(references, key=lambda r: (order.get(r.root, 3), r.via != "", len(r.path)))
        # A jagged dimension (nested tensors) is kept as its symbol: j1.
        shape = tuple(n if type(n) is int else str(n) for n in shape) if shape is not None else ()
        result = Holders(name, device, dtype, shape, storage_bytes or 0, tuple(references), complete, unreached,
                         time.perf_counter() - start, tuple(search.cut), search.too_deep, unread)
    del target, search
    return result


def _is_search_own(o: Any, search: _Search) -> bool:
    return o is search or o is search.__dict__ or type(o) is types.FrameType or o is search.keep


def _roots(namespace: Mapping[str, Any], excluded: set[str]) -> Iterator[tuple[Any, str, str, str, Any]]:
    """(object, path, root kind, note, holder) for each root: the user's names, the output
    history, and the locals of the last error's traceback."""
    items = namespace_items(namespace)
    for key, value in items:
        if key not in excluded and not HISTORY_RE.match(key):
            yield value, key, "namespace", "", namespace
    for key, value in sorted(items, key=lambda kv: (kv[0] not in ("Out", "_oh"), kv[0])):  # Out[12], not _oh[12]
        if HISTORY_RE.match(key) and key not in excluded:
            yield value, key, "output history", "", namespace
    tb_ = sys.__dict__.get("last_traceback")
    depth = 0
    # Typed as printed: through the namespace's own sys, or one imported in the path itself.
    sys_name = "sys" if binds_module(namespace, "sys") else "__import__('sys')"
    while type(tb_) is types.TracebackType:
        frame = tb_.tb_frame
        code = frame.f_code
        if frame.f_locals is not frame.f_globals and not locations.is_tool_file(code.co_filename):
            where = locations.source_line(code.co_filename, tb_.tb_lineno, code.co_name).label
            local_vars = locations.frame_locals(frame)
            for key, value in dict_items(local_vars):
                if type(key) is str and key != "__tracebackhide__":
                    # A path the user can type: a bare local name would be a NameError.
                    path = f"{sys_name}.last_traceback{'.tb_next' * depth}.tb_frame.f_locals[{key!r}]"
                    yield value, path, "last error's traceback", f"a local of {code.co_name} ({where})", local_vars
        tb_ = tb_.tb_next
        depth += 1


def _class_attributes(cls: type, path: str) -> Iterator[tuple[Any, str, str, str]]:
    """A class the user wrote keeps its class attributes (``Cfg.table = t``); a library's
    class is plumbing."""
    for key, value in user_class_attributes(cls):
        yield value, attr_name(path, key), "", ""


class _Search:
    def __init__(self, target: Any):
        self.target = target
        self.storage = _storage_key(target)
        self.references: list[Reference] = []
        self.reached: list[Any] = []  # objects that refer to the target directly, on a found path
        self.visited: set[int] = set()
        self.keep: list[Any] = []  # objects made while reading (SavedTensor wrappers): their ids stay theirs
        self.frame_owners: dict[int, Any] = {}  # id(a paused frame's locals) -> its generator or coroutine
        self.too_deep = False  # an object at the depth bound was not followed
        self.cut: list[str] = []  # "looked at the first N of M" for each container cut short

    def run(self, roots: Iterator[tuple[Any, str, str, str, Any]]) -> bool:
        queue: deque[tuple[Any, str, str, str, int]] = deque()
        for value, path, root, note, holder in roots:
            if self._is_target(value, path, root, "", note, holder):
                continue
            queue.append((value, path, root, note, 0))
        while queue:
            # Bounded in objects, never in time: the same answer on a busy machine.
            if len(self.visited) >= MAX_OBJECTS or len(self.references) >= MAX_PATHS:
                return False
            value, path, root, note, depth = queue.popleft()
            if id(value) in self.visited or id(type(value)) in ATOM_IDS:
                continue
            self.visited.add(id(value))
            if depth >= MAX_DEPTH:
                self.too_deep = True
                continue
            try:
                children = list(self._children(value, path))
            except Exception:  # an object that cannot be read is not followed
                continue
            for child, child_path, via, child_note in children:
                if not self._is_target(child, child_path, root, via, child_note or note, value):
                    queue.append((child, child_path, root, child_note or note, depth + 1))
        return not self.too_deep and not self.cut

    def _is_target(self, value: Any, path: str, root: str, via: str, note: str, holder: Any) -> bool:
        if value is self.target:
            self._found(path, root, via, note, holder)
            return True
        if issubclass(type(value), _T) and self.storage is not None and _storage_key(value) == self.storage:
            self._found(path, root, via or "view", "shares its memory" + (f"; {note}" if note else ""), holder)
            return True
        return False

    def _found(self, path: str, root: str, via: str, note: str, holder: Any) -> None:
        self.references.append(Reference(path, root, via, note))
        if holder is not None:
            self.reached.append(holder)
            owner = self.frame_owners.get(id(holder))
            if owner is not None:  # the generator keeps its paused frame's locals itself as well
                self.reached.append(owner)

    # -- what an object refers to, read without running its code ---------------------------

    def _children(self, o: Any, path: str) -> Iterator[tuple[Any, str, str, str]]:
        vt = type(o)
        if issubclass(vt, _T):
            yield from self._tensor_children(o, path)
            return
        if issubclass(vt, type):
            yield from _class_attributes(o, path)
            return
        if issubclass(vt, types.ModuleType) or vt is PROXY_TYPES[0] or vt is PROXY_TYPES[1] \
                or is_opaque_package(vt):
            return  # a proxy holds nothing; a module is plumbing
        if vt is types.MappingProxyType:  # the dict it shows is the holder (its items are typed proxy["key"])
            inner = proxied_dict(o)
            if inner is not None:
                yield inner, path, "", ""
            return
        # Each container is read from one copy: the search yields as it goes, and a thread may
        # change the container between two of its items.
        if issubclass(vt, dict):
            self._note_cut(path, dict.__len__(o))
            for key, value in dict_items(o, MAX_ITEMS):
                text = key_text(key)
                if issubclass(type(key), _T):
                    yield key, f"{path} (a key)", "", ""
                yield value, f"{path}[{text if text is not None else '…'}]", "", ""
        elif issubclass(vt, (list, tuple)):
            self._note_cut(path, list.__len__(o) if issubclass(vt, list) else tuple.__len__(o))
            for i, item in enumerate(sequence_items(o, vt, MAX_ITEMS)):
                yield item, f"{path}[{i}]", "", ""
        elif issubclass(vt, (set, frozenset)):
            self._note_cut(path, set.__len__(o) if issubclass(vt, set) else frozenset.__len__(o))
            for item in sequence_items(o, vt, MAX_ITEMS):
                yield item, f"{path} (an element)", "", ""
        elif vt is types.FunctionType:
            yield from _function_children(o, path)
            return
        elif vt is types.MethodType:
            yield o.__self__, f"{path}.__self__", "", ""
            yield o.__func__, f"{path}.__func__", "", ""
            return
        elif vt is types.CellType:
            try:
                yield o.cell_contents, f"{path}.cell_contents", "closure", ""
            except ValueError:  # an empty cell
                pass
            return
        elif vt is types.GeneratorType or vt is types.CoroutineType or vt is types.AsyncGeneratorType:
            paused = paused_frame(o, vt)  # its locals dict holds them, typed gen.gi_frame.f_locals["t"]
            if paused is not None:
                local_vars = locations.frame_locals(paused[1])
                self.keep.append(local_vars)
                self.frame_owners[id(local_vars)] = o
                yield local_vars, f"{path}.{paused[0]}.f_locals", "", f"a local of the paused {vt.__name__}"
            return
        elif vt is functools.partial:
            yield o.func, f"{path}.func", "", ""
            yield o.args, f"{path}.args", "", ""
            yield o.keywords, f"{path}.keywords", "", ""
            return
        if issubclass(vt, _Module):
            yield from self._module_children(o, path)
            return
        if _is_autograd_node(o):
            yield from self._node_children(o, path)
        for attr, value in (made_instance_dict(o) if issubclass(vt, dict) else instance_dict(o)).items():
            yield value, attr_name(path, attr), "", ""
        for attr, value in slot_values(o):
            yield value, attr_name(path, attr), "", ""

    def _note_cut(self, path: str, size: int) -> None:
        if size > MAX_ITEMS:
            self.cut.append(f"{path}: looked at the first {MAX_ITEMS:,} of {size:,}")

    def _module_children(self, m: Any, path: str) -> Iterator[tuple[Any, str, str, str]]:
        d = instance_dict(m)
        script = script_object(d)
        if script is not None:
            c, indexable = script
            yield from ((t, full, "", "") for full, t in script_tensors(c, path, indexable))
        for group in ("_parameters", "_buffers", "_modules"):
            members = d.get(group)
            if type(members) is dict:
                for key, value in dict_items(members):
                    if value is not None and type(key) is str:
                        yield value, child_name(path, key, type(m)), "", ""
        for attr, value in d.items():
            if attr not in ("_parameters", "_buffers", "_modules"):
                yield value, attr_name(path, attr), "", ""  # hooks' dicts (closures), plain attributes

    def _tensor_children(self, t: Any, path: str) -> Iterator[tuple[Any, str, str, str]]:
        base = tensor_getters.base(t)
        if base is not None:
            yield base, f"{path}._base", "view", "the view's base"
        grad = tensor_getters.grad(t) if tensor_getters.is_leaf(t) else None
        if grad is not None:
            yield grad, f"{path}.grad", "", ""
        node = tensor_getters.grad_fn(t)
        if node is not None:
            yield node, f"{path}.grad_fn", "autograd graph", f"saved for the backward pass of {path}"
        for attr, value in made_instance_dict(t).items():  # a subclass's own attributes
            yield value, attr_name(path, attr), "", ""

    def _node_children(self, node: Any, path: str) -> Iterator[tuple[Any, str, str, str]]:
        note = ""
        for i, (child, _index) in enumerate(_getset(node, "next_functions") or ()):
            if child is not None:
                yield child, f"{path}.next_functions[{i}][0]", "autograd graph", note
        variable = _getset(node, "variable")  # AccumulateGrad: the leaf it accumulates into
        if variable is not None:
            yield variable, f"{path}.variable", "autograd graph", note
        for attr in dir(type(node)):
            if not attr.startswith("_raw_saved_"):
                continue
            raw = _getset(node, attr)
            self.keep.append(raw)
            several = type_is_one_of(raw, (list, tuple))
            for j, saved in enumerate(raw if several else [raw]):
                self.keep.append(saved)
                data = _saved_data(saved)
                if data is None:
                    continue
                self.keep.append(data)
                public = "_saved_" + attr.removeprefix("_raw_saved_")
                suffix = f"[{j}]" if several else ""
                if issubclass(type(data), _T):
                    yield data, f"{path}.{public}{suffix}", "autograd graph", f"saved by {type(node).__name__}"
                else:  # packed by a saved-tensor hook: what the hook returned
                    yield data, f"{path}.{attr}{suffix}.data", "autograd graph", "packed by a saved-tensor hook"


def _function_children(f: Any, path: str) -> Iterator[tuple[Any, str, str, str]]:
    code = f.__code__
    for i, cell in enumerate(f.__closure__ or ()):
        name = code.co_freevars[i] if i < len(code.co_freevars) else "?"
        yield cell, f"{path}.__closure__[{i}]", "closure", f"the variable {name!r} that {f.__qualname__} closes over"
    for i, value in enumerate(f.__defaults__ or ()):
        yield value, f"{path}.__defaults__[{i}]", "", "a default argument"
    for key, value in dict_items(f.__kwdefaults__ or {}):
        yield value, f"{path}.__kwdefaults__[{key!r}]", "", "a default argument"
    for attr, value in instance_dict(f).items():
        yield value, attr_name(path, attr), "", ""


def _is_autograd_node(o: Any) -> bool:
    vt = type(o)
    # Read from the class dicts: autograd's C++ node types are registered with the Node ABC,
    # and an ABC's subclass check would hash (and cache) a user's class.
    if type(static_class_attr(vt, "next_functions")) is types.GetSetDescriptorType:
        return True
    return any(k is _PYTHON_NODE for k in mro(vt)) or type_module(vt) == "torch.autograd.function"


def _getset(o: Any, attr: str) -> Any:
    """An attribute defined by the C type itself (a getset descriptor), else None."""
    for klass in mro(type(o)):
        descriptor = class_dict(klass).get(attr)
        if descriptor is not None:
            if type(descriptor) is types.GetSetDescriptorType or type_name(type(descriptor)) == "instancemethod":
                try:
                    return descriptor.__get__(o, type(o))
                except Exception:  # freed by a backward pass, say
                    return None
            return None
    return None


def _saved_data(saved: Any) -> Any:
    """What a ``SavedTensor`` holds, without unpacking it (no saved-tensor hook runs); None once freed."""
    if type_name(type(saved)) != "SavedTensor":
        return None
    try:
        return saved.data
    except Exception:  # freed after backward
        return None


def _storage_key(t: Any) -> tuple[str, int] | None:
    """The memory ``t`` lives in, as the scan identifies it (views share it); None where
    there is none to share (meta, fake, empty)."""
    try:
        device, _, _, _, storage_bytes, key, _, _ = tensor_facts(t)
    except Exception:  # a tensor whose memory cannot be read: identity only
        return None
    return (device, key) if key is not None and storage_bytes else None
