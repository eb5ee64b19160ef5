"""Findings about objects that are neither modules nor tensors: what ``model.to()`` never reaches.

Rules of :data:`devinspect.diagnose.findings.RULES`, each a plain function of a scan result.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

from ..model import Finding, ScanResult, SourceEdit, device_is_accelerator
from . import fix_builders


def host_tables_of_plain_objects(result: ScanResult) -> Iterator[Finding]:
    """An object of the user's own class (a sampler, a scheduler) keeps some of its tables on the host
    while its others and a model sit on one accelerator: its methods read them together with the
    model's tensors, and ``model.to()`` never reaches it. Tables its class moves or makes again as
    it runs are kept where they are on purpose."""
    placed = {m.devices[0] for m in result.modules if len(m.devices) == 1 and device_is_accelerator(m.devices[0])}
    for holder in result.holders:
        prefix = holder.name + "."
        tables = {r.name[len(prefix):]: r for r in result.of_kind("tensor")
                  if r.name.startswith(prefix) and r.name[len(prefix):].isidentifier() and r.alias_of is None
                  and not r.hidden}
        devices = {r.device for r in tables.values() if device_is_accelerator(r.device)}
        if len(devices) != 1 or not devices <= placed:
            continue
        target = next(iter(devices))
        host = [a for a, r in tables.items() if r.device == "cpu" and a not in holder.self_placed]
        fix = fix_builders.move_tensors(holder.name, [prefix + a for a in host], target) if host else None
        if fix is None:
            continue
        edits = tuple(SourceEdit(line, line.text.strip(), new, holder.class_name)
                      for a, line, new in holder.made_at if a in host)
        where = f" {edits[0].where.where} makes it without the device the other tables get." if edits else ""
        yield Finding(
            code="host-table-in-object",
            severity="warning",
            subject=prefix + host[0],
            message=(f"{', '.join(prefix + a for a in host)} {'is' if len(host) == 1 else 'are'} on cpu while the "
                     f"other tensors of {holder.name} ({holder.class_name}) and the model are on {target}: its "
                     f"methods read them together, and .to() of the model does not reach them.{where}"),
            fix=dataclasses.replace(fix, edits=edits),
            names=tuple(prefix + a for a in host),
        )
