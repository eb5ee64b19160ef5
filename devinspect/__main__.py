"""``python -m devinspect``: the environment report for bug reports (``--json`` for machines)."""

from __future__ import annotations

import json
import sys

from .collect import gather
from .render import render


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m devinspect",
                                     description="An environment report for devinspect bug reports.")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    report = gather()
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
