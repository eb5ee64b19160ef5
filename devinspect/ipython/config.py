"""``%config DevInspect``: the extension's settings, shared by every magic family."""

from __future__ import annotations

from traitlets import Bool, CaselessStrEnum, Int
from traitlets.config import Configurable

from ..model import DEFAULT_MAX_ROWS, SORTS


class DevInspect(Configurable):
    """Device inspection magics for PyTorch (``%devices``, ``%%devcheck``, ``%gpumem``).

    Configure with ``%config DevInspect``.
    """

    max_rows = Int(DEFAULT_MAX_ROWS, min=0, help="Rows a %devices table shows before '… N more' (0: all).").tag(config=True)
    sort = CaselessStrEnum(SORTS, default_value="walk", help="Default row order of %devices.").tag(config=True)
    include_hidden = Bool(False, help="List IPython's history names (_, _12, Out) and other _ names by default.").tag(
        config=True
    )
    max_depth = Int(8, min=0, help="How deep %devices follows containers and plain objects below a name.").tag(config=True)
    max_items = Int(200_000, min=0, help="Items %devices looks at in one container.").tag(config=True)
    explain_errors = Bool(True, help="After a cell fails with a device mismatch or runs out of device memory, "
                                     "explain it under the traceback (names, memory, the fix).").tag(config=True)

