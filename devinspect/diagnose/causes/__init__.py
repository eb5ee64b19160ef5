"""Where the user's own code gives a tensor its device, and the edit of that line: the line
that made it (:mod:`.creation_sites`), a value received from the user's function or class
(:mod:`.made_in_code`), a value computed from another that sits on the same device, followed back
to where that one was made (:mod:`.value_flow`), a move whose result was dropped, a generator of
another device; edits made on the text as written (:mod:`.line_edits`), naming the device in the
user's own words (:mod:`.device_names`).
"""

from ...lazy_exports import lazy_surface

_SURFACE = {
    "CauseContext": "context",
    "FailedCall": "context",
    "Failure": "context",
    "NamedOperand": "context",
    "WHEN_NO_FIX": "cause_rules",
    "causes": "cause_rules",
    "dropped_move_fix": "dropped_moves",
    "dropped_moves_standing": "dropped_moves",
    "library": "fix_writing",
    "model_of": "fix_writing",
    "standing_targets": "dropped_moves",
    "unpacking_edit": "creation_sites",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
