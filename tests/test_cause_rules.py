"""Each cause rule of a failed call, asked on a context built by hand: a namespace, the operands
as the naming step would give them, the user's line, and what earlier causes cover."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path

import torch

from devinspect.collect.code import locations
from devinspect.collect.namespace.scan import NameIndex, module_paths
from devinspect.diagnose.causes import call_rules, cause_rules, rules
from devinspect.diagnose.causes.call_rules import (
    library_default_device,
    passed_alongside,
    passed_into_library,
    passed_to_moved_models,
    split_model,
)
from devinspect.diagnose.causes.context import CauseContext, Covered, FailedCall, Failure, NamedOperand
from devinspect.diagnose.causes.rules import (
    buffer_replaced_in_method,
    comprehension_item,
    dropped_move,
    local_of_user_function,
    made_by_factory,
    meta_device,
    model_parameter,
    namespace_variable,
    optimizer_state,
    traced_local,
    unregistered_attribute,
)
from devinspect.model.check_report import Operand
from devinspect.model.fixes import Cause, EditCell, MoveOptimizerState, RegisterBuffer
from devinspect.model.records import SourceLine

HERE = Path(__file__)
TARGET = "cuda:0"


def context(namespace, operand=None, *, frames=(), cell=None, line="", covered=None, others=()):
    """A context as the diagnosis builds it, with the failing ``line`` read from ``cell`` (a frame)."""
    source = (lambda f: SourceLine("<cell>", 1, "<module>", line, cell=1)) if line else locations.frame_line
    failure = Failure(namespace, cell, lambda f: f is cell, source)
    operands = tuple(o for o in (operand, *others) if o is not None)
    call = FailedCall(failure, "F.linear", TARGET, tuple(frames), frames[0] if frames else cell, cell,
                      "<cell>" if cell is not None else None, 1 if cell is not None else 1 << 30,
                      NameIndex(namespace), module_paths(namespace), operands)
    return CauseContext(call, operand, covered if covered is not None else Covered())


def named(index_namespace, name, value=None, source=None):
    record = NameIndex(index_namespace).record(name)
    return NamedOperand(Operand(name, source or NameIndex.source(record), record.device, record.dtype, None),
                        value, record=record)


def on(device, value=None, name=None, source="unknown", **kw):
    return NamedOperand(Operand(name, source, device, "float32", None), value, **kw)


# -- the table ------------------------------------------------------------------------------------


def test_every_rule_module_has_one_line_in_its_table():
    def modules(package):
        return [importlib.import_module(f"{package.__name__}.{m.name}") for m in pkgutil.iter_modules(package.__path__)]

    in_rules = {m.cause for m in modules(rules)}
    assert set(cause_rules.OPERAND_RULES) == in_rules and len(cause_rules.OPERAND_RULES) == len(in_rules)
    in_calls = {m.cause for m in modules(call_rules) if hasattr(m, "cause")}
    assert set(cause_rules.CALL_RULES) | {cause_rules.WHEN_NO_FIX} == in_calls


def test_the_first_rule_that_recognises_an_operand_answers():
    # Not a tensor of the namespace, not a local, nothing known of how it was made: the last rule.
    operand = on("cpu", torch.ones(2))
    found = cause_rules.first_cause(context({}, operand))
    assert found == Cause()
    assert dropped_move.cause(context({}, operand)) is None  # no frame: no dropped move to see


# -- one operand -----------------------------------------------------------------------------------


def test_an_optimizer_state_moves_each_tensor_to_its_parameter():
    operand = on("cpu", name="opt.state[model.weight]['exp_avg']", source="optimizer_state")
    found = optimizer_state.cause(context({}, operand))
    assert found.fix.action == MoveOptimizerState("opt") and found.fix.rerun
    assert optimizer_state.cause(context({}, on("cpu", name="x", source="namespace"))) is None


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)
        self.scale = torch.ones(2)


def test_a_plain_tensor_attribute_is_registered_as_a_buffer():
    namespace = {"m": Scaled()}
    found = unregistered_attribute.cause(context(namespace, named(namespace, "m.scale")))
    assert found.fix.action == RegisterBuffer("m", "scale", TARGET)
    # Recognised and not fixable: an attribute no module summary lists.
    assert unregistered_attribute.cause(context({}, on("cpu", name="n.scale", source="attribute"))) == Cause()


def test_a_model_on_meta_is_materialised_and_then_wholly_on_the_target():
    namespace = {"model": torch.nn.Linear(2, 2, device="meta")}
    found = meta_device.cause(context(namespace, named(namespace, "model.weight")))
    assert "model" in found.fix.summary and found.whole_moves == ("model",)
    assert meta_device.cause(context(namespace, on("cpu", name="model.weight", source="parameter"))) is None


def test_a_models_parameter_moves_the_model():
    namespace = {"model": torch.nn.Linear(2, 2)}
    found = model_parameter.cause(context(namespace, named(namespace, "model.weight")))
    assert found.fix.summary == f"move all of model to {TARGET}" and found.whole_moves == ("model",)


class ReplacesItsBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(2))

    def forward(self, x):
        self.scale = torch.ones(2)
        return x * self.scale


def test_a_buffer_a_method_replaces_is_made_on_the_target_on_that_line():
    namespace = {"m": ReplacesItsBuffer()}
    found = buffer_replaced_in_method.cause(context(namespace, named(namespace, "m.scale")))
    assert found.replaced == ("m.scale",) and found.made_by == "factory"
    (edit,) = found.fix.edits
    assert edit.where.file == str(HERE) and edit.new.strip() == f'self.scale = torch.ones(2, device="{TARGET}")'
    assert "replaces the buffer m.scale" in found.fix.note
    # A buffer no method replaces: the rule after it (the model moves) answers.
    plain = {"m": torch.nn.BatchNorm1d(2)}
    assert buffer_replaced_in_method.cause(context(plain, named(plain, "m.running_mean"))) is None


def test_a_namespace_tensor_moves_and_a_list_moves_whole():
    namespace = {"x": torch.ones(2), "xs": [torch.ones(2), torch.ones(2)]}
    found = namespace_variable.cause(context(namespace, named(namespace, "x", namespace["x"])))
    assert found.fix.code == f'x = x.to("{TARGET}")'
    listed = namespace_variable.cause(context(namespace, named(namespace, "xs[0]", namespace["xs"][0])))
    assert "xs" in listed.fix.summary and "keeping" not in listed.fix.summary.split("xs")[0]
    assert namespace_variable.cause(context(namespace, on("cpu", name="h", source="local"))) is None


def _made_here():
    h = torch.zeros(2, 4)
    return sys._getframe(), h


def test_a_local_of_the_users_function_is_made_on_the_target_where_it_is_made():
    frame, h = _made_here()
    operand = on("cpu", h, name="h", source="local", frame=frame, local="h")
    found = local_of_user_function.cause(context({}, operand, frames=(frame,)))
    (edit,) = found.fix.edits
    assert edit.new.strip() == "h = torch.zeros(2, 4, device=TARGET)"  # named as this module names it
    assert local_of_user_function.cause(context({}, on("cpu", name="h", source="local"))) is None  # no frame


def test_a_tensor_seen_made_by_a_factory_is_made_on_the_target_on_its_line(tmp_path):
    program = tmp_path / "maker.py"
    program.write_text("import torch\nt = torch.zeros(3)\n")
    where = SourceLine(str(program), 2, "<module>", "t = torch.zeros(3)")
    operand = on("cpu", torch.zeros(3), created=Cause(where, "factory", factory="zeros"))
    (edit,) = made_by_factory.cause(context({}, operand)).fix.edits
    assert edit.new == f't = torch.zeros(3, device="{TARGET}")'
    assert made_by_factory.cause(context({}, on("cpu"))) is None


def test_a_traced_local_without_a_readable_name_is_recognised_without_a_fix():
    class Traced:
        name, filename, function, lineno = "getattr_1", "<compiled>", "forward", 1

    assert traced_local.cause(context({}, on("cpu", Traced(), source="traced"))) == Cause()
    assert traced_local.cause(context({}, on("cpu"))) is None


def test_an_item_a_comprehension_walks_moves_its_list():
    xs = [torch.ones(2), torch.ones(2)]
    found = comprehension_item.cause(context({"xs": xs}, on("cpu", xs[0]), cell=sys._getframe(),
                                             line="ys = [model(t) for t in xs]"))
    assert "xs" in found.fix.summary


# -- the whole call ----------------------------------------------------------------------------------


def test_the_other_inputs_of_a_call_that_passed_a_moved_tensor_move_too():
    namespace = {"model": torch.nn.Linear(2, 2), "x": torch.ones(2), "y": torch.ones(2)}
    x = named(namespace, "x", namespace["x"])
    found = passed_alongside.cause(context(namespace, cell=sys._getframe(), line="loss = model(x, y)", others=(x,),
                                           covered=Covered(names=frozenset({"x"}))))
    assert [f.code for f in found.fixes] == [f'y = y.to("{TARGET}")'] and found.covers == ("y",)
    # Covered already: nothing more.
    assert passed_alongside.cause(context(namespace, cell=sys._getframe(), line="loss = model(x, y)", others=(x,),
                                          covered=Covered(names=frozenset({"x", "y"})))) is None


def test_inputs_of_a_model_moved_whole_and_of_a_library_call_follow():
    namespace = {"model": torch.nn.Linear(2, 2), "x": torch.ones(2)}
    line = "out = model(x)"
    moved = passed_to_moved_models.cause(context(namespace, cell=sys._getframe(), line=line,
                                                 covered=Covered(whole_moves=frozenset({"model"}))))
    assert [f.code for f in moved.fixes] == [f'x = x.to("{TARGET}")']
    assert passed_to_moved_models.cause(context(namespace, cell=sys._getframe(), line=line)) is None
    made_inside = on("cpu")  # an operand the library made from what it was passed
    inside = passed_into_library.cause(context(namespace, cell=sys._getframe(), line=line, others=(made_inside,)))
    assert [f.code for f in inside.fixes] == [f'x = x.to("{TARGET}")']


def test_a_tensor_made_right_in_the_call_is_fixed_on_that_line_once():
    namespace = {"model": torch.nn.Linear(2, 2)}
    line = "out = model(torch.ones(2, 2))"
    found = passed_to_moved_models.cause(context(namespace, cell=sys._getframe(), line=line,
                                                 covered=Covered(whole_moves=frozenset({"model"}))))
    assert len(found.lines) == 1 and found.fix.summary.startswith("make the tensor of")
    again = passed_to_moved_models.cause(context(namespace, cell=sys._getframe(), line=line,
                                                 covered=Covered(whole_moves=frozenset({"model"}),
                                                                 lines=frozenset(found.lines))))
    assert again is None


def test_a_model_split_between_host_and_accelerator_moves_whole(sim):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2))
    model[0].to(sim)
    namespace = {"model": model}
    operand = named(namespace, "model.1.weight" if NameIndex(namespace).record("model.1.weight") else "model[1].weight")
    found = split_model.cause(dataclasses_replace_target(context(namespace, others=(operand,)), "sim:0"))
    assert found.leading and found.whole_moves == ("model",) and "model" in found.fix.summary
    # The same model already moved whole by an operand's cause: nothing more.
    covered = Covered(whole_moves=frozenset({"model"}))
    assert split_model.cause(dataclasses_replace_target(context(namespace, others=(operand,), covered=covered),
                                                        "sim:0")) is None


def dataclasses_replace_target(ctx, target):
    import dataclasses

    return dataclasses.replace(ctx, call=dataclasses.replace(ctx.call, target=target))


def test_with_no_cause_found_the_library_is_named():
    found = library_default_device.cause(context({}, others=(on("cpu"),)))
    assert found.fix is not None and "cpu" in found.fix.summary + (found.fix.note or "")
    assert not isinstance(found.fix.action, EditCell)
