"""An error explained after the fact, from its traceback and the namespace: a device mismatch
(:mod:`.mismatch`: its operands named as the user types them, and the fix of the cause),
other device errors (:mod:`.device_errors`, :mod:`.loader_errors`), and out of device memory
(:mod:`.out_of_memory`); :mod:`.explainer` picks which.

Public surface: :func:`explain`, :func:`explanation_of`, :func:`diagnose`.
"""

from ...lazy_exports import lazy_surface

_SURFACE = {"explain": "explainer", "explanation_of": "explainer", "diagnose": "mismatch", "Failure": "mismatch"}
__all__ = sorted(_SURFACE)
__getattr__ = lazy_surface(__name__, _SURFACE)
