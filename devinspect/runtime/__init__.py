"""The running interpreter and PyTorch, read at their lowest: devinspect's own frames
(:mod:`.own_code`), tracebacks without them (:mod:`.tracebacks`), warnings placed where a
plain run places them (:mod:`.warning_places`), and a tensor's facts through
``torch._C.TensorBase``'s own C getters (:mod:`.tensor_getters`), and where an edit of a
notebook cell is shown at once (:mod:`.edit_sinks`).

It imports nothing else of devinspect, so every other part, the simulated device included,
can stand on it.
"""

from ..lazy_exports import lazy_surface

_SURFACE = {
    "PACKAGE_ROOT": "own_code",
    "beneath_user_modes": "user_modes",
    "error_holders": "tracebacks",
    "is_own_file": "own_code",
    "tidy_traceback": "tracebacks",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
