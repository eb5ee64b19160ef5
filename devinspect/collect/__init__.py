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
