"""Reading the session, never changing it: what the namespace reaches, what single objects
hold, what the user's code and tracebacks say, and what the machine and its memory are.

- :mod:`.namespace`: the walk over the user's names (tensors, modules, optimizers), names as
  the user types them, and who holds a tensor;
- :mod:`.objects`: one object read statically (types, class and instance dicts, a tensor's
  facts through C getters, containers, TorchScript modules, constructor arguments);
- :mod:`.code`: the user's code and the failing call, from cells, frames and tracebacks;
- :mod:`.machine`: devices, the environment, and memory readings.

Every reader here is static: no user ``__getattr__``, ``__len__``, ``__eq__`` or property runs.
"""

from ..lazy_exports import lazy_surface

_SURFACE = {
    "DeviceNameError": "machine.devices",
    "Dropped": "code.move_statements",
    "Entry": "code.failing_call",
    "FACTORIES": "code.failing_call",
    "FUNCTION_CODE": "objects.static_getters",
    "LIKE_FACTORIES": "code.failing_call",
    "MISSING": "namespace.path_lookup",
    "MemoryTracker": "machine.memory_tracker",
    "NameIndex": "namespace.scan",
    "Result": "code.failing_call",
    "SAME_DEVICE_METHODS": "code.failing_call",
    "ScanOptions": "namespace.walk",
    "Temporary": "code.failing_call",
    "Traced": "code.failing_call",
    "accelerator_call": "machine.memory_readings",
    "assignment_in_session": "code.user_code",
    "binds_module": "namespace.names",
    "build": "machine.memory_snapshot",
    "child_name": "namespace.names",
    "class_dict": "objects.static_getters",
    "compiled_call": "code.compiled_call",
    "container_of": "namespace.names",
    "current_index": "code.move_statements",
    "describe": "code.error_frames",
    "device_names": "objects.tensor_facts",
    "device_of": "code.move_statements",
    "dropped_before": "code.move_statements",
    "dropped_in_session": "code.move_statements",
    "dtensor_placements": "objects.dtensors",
    "dtype_names": "objects.tensor_facts",
    "error_of": "code.error_frames",
    "expression_root": "code.expressions",
    "failing_call": "code.failing_call",
    "finished_errors_no_name_reaches": "namespace.scan",
    "first_line": "code.failing_call",
    "frame_locals": "code.locations",
    "gather": "machine.environment",
    "holders": "namespace.referrers",
    "in_use": "machine.memory_snapshot",
    "inner_tensors": "objects.tensor_facts",
    "instance_dict": "objects.static_getters",
    "is_getattr_call": "namespace.names",
    "is_identifier": "namespace.names",
    "is_path": "namespace.names",
    "line_of": "code.move_statements",
    "literal": "namespace.names",
    "message": "code.failing_call",
    "module_paths": "namespace.scan",
    "mro": "objects.static_getters",
    "names_a_device": "code.failing_call",
    "namespace_items": "namespace.names",
    "object_at": "namespace.path_lookup",
    "op_name": "code.failing_call",
    "parse": "machine.devices",
    "parse_path": "namespace.names",
    "plain_class_dict": "objects.static_getters",
    "present": "machine.devices",
    "read": "machine.memory_readings",
    "read_process": "machine.memory_readings",
    "reset_process_peak": "machine.memory_readings",
    "root_of": "namespace.names",
    "running_expression": "code.failing_call",
    "says_mismatch": "code.failing_call",
    "scan": "namespace.scan",
    "script_calls": "objects.script_modules",
    "script_object": "objects.script_modules",
    "shape_of": "objects.tensor_facts",
    "shell_names": "namespace.names",
    "static_class_attr": "objects.static_getters",
    "table_holders": "objects.table_holders",
    "tallies_of": "machine.memory_snapshot",
    "tally_tensors": "machine.memory_snapshot",
    "tensor_facts": "objects.tensor_facts",
    "tensor_inputs": "code.failing_call",
    "traceback_entries": "code.failing_call",
    "type_is_one_of": "objects.static_getters",
    "type_module": "objects.static_getters",
    "type_name": "objects.static_getters",
    "value_in_frame": "code.failing_call",
}
_SUBMODULES = {
    "call_stack": "code.call_stack",
    "line_names": "code.line_names",
    "locations": "code.locations",
    "user_code": "code.user_code",
    "user_functions": "code.user_functions",
}
__getattr__ = lazy_surface(__name__, _SURFACE, _SUBMODULES)
