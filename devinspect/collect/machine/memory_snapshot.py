"""Accelerator and process memory as a snapshot, reconciled with the tensors by name.

Reading happens in two steps so each can be checked on its own:

* :func:`~devinspect.collect.machine.memory_readings.read` collects raw readings as plain
  JSON-able dicts, without side effects.
* :func:`build` turns readings into a :class:`~devinspect.model.device_memory.MemorySnapshot`.
  It is a pure function: the tests feed it readings recorded on a real GPU.

:func:`snapshot` does both, and adds the tensors the scan finds per device so
the reconciliation can go from "your tensors" to "the device's total".
"""

from __future__ import annotations

import re
import sys
import time
from typing import Any, Iterable, Mapping

from ...model import DeviceMemory, MemorySnapshot, TensorTally, record_column
from .memory_readings import in_words, read, stat

__all__ = ["snapshot", "read", "build", "tally_tensors"]


NOT_INITIALISED = (
    "CUDA is not initialised in this process, so PyTorch holds nothing on this GPU. It starts with the "
    "first tensor put on a GPU (or torch.cuda.init()); devinspect never starts it."
)


def snapshot(
    namespace: Mapping[str, Any] | None = None,
    *,
    tensors: bool = True,
    exclude: Iterable[str] = (),
    nvml: bool = True,
) -> MemorySnapshot:
    """Memory of every accelerator and of this process, reconciled with the tensors in ``namespace``.

    ``namespace`` defaults to the caller's globals. With ``tensors=False`` no tensor
    walk is done (cheaper; the reconciliation then starts at the allocator's figures).
    ``nvml=False`` skips the driver's per-process figures. Reading changes nothing:
    no ``empty_cache``, ``gc.collect``, synchronisation or stat reset, and CUDA is not
    initialised when it was not already.
    """
    tallies = None
    if tensors:
        if namespace is None:
            namespace = sys._getframe(1).f_globals
        tallies = tally_tensors(namespace, exclude=exclude)
    return build(read(nvml=nvml), tallies)


def tally_tensors(namespace: Mapping[str, Any], exclude: Iterable[str] = ()) -> dict[str, TensorTally]:
    """Tensor storage per device: named, held by history, and alive but unnamed (gc walk)."""
    from .. import scan

    return tallies_of(scan(namespace, include_hidden=True, all_objects=True, exclude=exclude))


def tallies_of(result: Any) -> dict[str, TensorTally]:
    """:func:`tally_tensors` of a scan made with ``include_hidden=True, all_objects=True``."""
    counts: dict[str, list[int]] = {}
    records = result.records
    # Read as columns: a session's many tensors cost a pass over five columns, no record each.
    for device, alias, kind, hidden, storage_bytes in zip(
            record_column(records, "device"), record_column(records, "alias_of"), record_column(records, "kind"),
            record_column(records, "hidden"), record_column(records, "storage_bytes")):
        if alias is not None:
            continue
        slot = 2 if kind == "unnamed" else 1 if hidden else 0
        c = counts.setdefault(device, [0, 0, 0, 0, 0, 0])
        c[slot] += storage_bytes or 0
        c[slot + 3] += 1
    now = time.time()
    return {device: TensorTally(*c, counted_at=now) for device, c in counts.items()}


def build(readings: Mapping[str, Any], tallies: Mapping[str, TensorTally] | None = None) -> MemorySnapshot:
    """A :class:`MemorySnapshot` from :func:`read` output (live or recorded).

    ``tallies`` (from :func:`tally_tensors`) adds the tensor rows; a device it does
    not mention holds no tensors. Without it the reconciliation starts at the allocator.
    """
    if tallies is not None:
        counted_at = max((t.counted_at for t in tallies.values()), default=0.0) or time.time()
        tallies = _ZeroDefault(tallies, TensorTally(0, 0, 0, counted_at=counted_at))
    else:
        tallies = {}
    devices: list[DeviceMemory] = []
    notes: list[str] = []
    cuda = readings.get("cuda") or {}
    nvml = readings.get("nvml")
    if cuda.get("device_count"):
        nvml_entries = (nvml or {}).get("devices")
        nvml_error = (nvml or {}).get("error") if nvml is not None else "not read"
        if nvml_error:
            notes.append(f"NVML unavailable: {nvml_error}")
        torch_uuids = [d.get("uuid") for d in cuda.get("devices", [])] if cuda.get("initialized") else []
        matches = match_driver_devices(cuda["device_count"], torch_uuids, nvml_entries or [], readings.get("env") or {})
        for i in range(cuda["device_count"]):
            raw = cuda["devices"][i] if cuda.get("initialized") and i < len(cuda.get("devices", [])) else None
            entry, how = matches[i]
            devices.append(_cuda_device(i, raw, entry, how, nvml_error, readings, tallies.get(f"cuda:{i}")))
    else:
        accelerator = readings.get("accelerator")
        if accelerator:
            devices.extend(_accelerator_devices(accelerator, tallies))
        elif not cuda.get("compiled"):
            notes.append(f"No accelerator: this PyTorch build ({readings.get('torch', '?')}) has no CUDA; "
                         "showing this process's memory.")
        else:
            notes.append(cuda.get("error") or "PyTorch has CUDA, but no GPU is visible (check CUDA_VISIBLE_DEVICES).")
    devices.append(_cpu_device(readings.get("process") or {}, tallies.get("cpu")))
    return MemorySnapshot(devices=tuple(devices), notes=tuple(notes), taken_at=float(readings.get("taken_at", 0.0)))


def in_use(snapshot: MemorySnapshot) -> MemorySnapshot:
    """The snapshot without the accelerators nothing in this process uses (no tensors, nothing
    allocated or reserved, no context), counted in ``hidden``. When none is in use, all stay."""
    import dataclasses

    def used(d: DeviceMemory) -> bool:
        t = d.tensors
        counted = t is not None and (t.named_bytes or t.history_bytes or t.other_bytes)
        return bool(counted or d.allocated_bytes or d.reserved_bytes or d.process_bytes)

    accelerators = snapshot.accelerators
    if not any(used(d) for d in accelerators):
        return snapshot
    kept = tuple(d for d in snapshot.devices if d.kind == "cpu" or used(d))
    return dataclasses.replace(snapshot, devices=kept, hidden=len(snapshot.devices) - len(kept))


class _ZeroDefault(dict):
    """Tallies where an unmentioned device holds no tensors (it was counted, nothing was found)."""

    def __init__(self, tallies: Mapping[str, TensorTally], zero: TensorTally):
        super().__init__(tallies)
        self.zero = zero

    def get(self, key: str, default: Any = None) -> TensorTally:  # type: ignore[override]
        return super().get(key, self.zero)


def _allocator_fields(stats: Mapping[str, int]) -> dict[str, int | None]:
    return {
        "allocated_bytes": stat(stats, "allocated_bytes.all.current"),
        "requested_bytes": stat(stats, "requested_bytes.all.current"),
        "reserved_bytes": stat(stats, "reserved_bytes.all.current"),
        "active_bytes": stat(stats, "active_bytes.all.current"),
        "inactive_split_bytes": stat(stats, "inactive_split_bytes.all.current"),
        "peak_allocated_bytes": stat(stats, "allocated_bytes.all.peak"),
        "peak_reserved_bytes": stat(stats, "reserved_bytes.all.peak"),
        "segments": stat(stats, "segment.all.current"),
        "alloc_retries": stat(stats, "num_alloc_retries"),
        "ooms": stat(stats, "num_ooms"),
    }


def _cuda_device(i: int, raw: Mapping[str, Any] | None, entry: Mapping[str, Any] | None, how: str | None,
                 nvml_error: str | None, readings: Mapping[str, Any], tally: TensorTally | None) -> DeviceMemory:
    fields: dict[str, Any] = {"device": f"cuda:{i}", "kind": "cuda", "torch_index": i, "tensors": tally}
    if entry is not None:
        fields.update(name=entry.get("name"), driver_index=entry.get("index"), driver_match=how, uuid=entry.get("uuid"))
    if raw is None:
        fields.update(state="not initialised", status=NOT_INITIALISED)
    elif raw.get("error"):
        fields.update(state="unavailable", status=f"allocator figures not available: {in_words(raw['error'])}")
    else:
        fields.update(state="ready", status="initialised")
        fields["name"] = raw.get("name") or fields.get("name")
        fields["uuid"] = fields.get("uuid") or raw.get("uuid")
        fields.update(_allocator_fields(raw.get("memory_stats") or {}))
        cuda_total = (raw.get("mem_get_info") or (None, None))[1] or raw.get("total_memory")
        fields["capacity_bytes"] = cuda_total if type(cuda_total) is int else None
    initialised = raw is not None
    if entry is not None and entry.get("total") is not None:
        fields.update(driver_total_bytes=entry["total"], driver_free_bytes=entry.get("free"),
                      driver_used_bytes=entry.get("used"), driver_reserved_bytes=entry.get("reserved"))
        fields.update(_process_fields(entry, (readings.get("process") or {}).get("pid"), initialised))
    elif raw is not None and raw.get("mem_get_info"):
        free, total = raw["mem_get_info"]
        fields.update(driver_total_bytes=total, driver_free_bytes=free,
                      driver_status=f"per-process use unavailable: {nvml_error}" if nvml_error else None)
    else:
        why = nvml_error or "NVML lists no matching device"
        if raw is not None and not raw.get("has_context"):
            why += "; reading cudaMemGetInfo would create a CUDA context on this device"
        fields["driver_status"] = f"unavailable: {why}"
    return DeviceMemory(**fields)


def _process_fields(entry: Mapping[str, Any], pid: int | None, initialised: bool) -> dict[str, Any]:
    processes = entry.get("processes")
    if processes is None:
        return {"driver_status": "per-process use unavailable: NVML did not list processes"}
    ours = [p for p in processes if p.get("pid") == pid]
    others = [p for p in processes if p.get("pid") != pid]
    out: dict[str, Any] = {"other_processes": len(others)}
    if ours:
        out["process_bytes"] = ours[0].get("used")
    elif not initialised:
        out["process_bytes"] = 0  # no CUDA in this process means no context on this GPU
    else:
        out["driver_status"] = ("this process is not among NVML's processes (in a container NVML reports the "
                                "host's process ids)")
        return out
    if any(p.get("used") is None for p in others):
        out["driver_status"] = "NVML does not report other processes' use here (permissions)"
    else:
        out["other_processes_bytes"] = sum(int(p["used"]) for p in others)
    if out.get("process_bytes") is None and ours:
        out["driver_status"] = "NVML does not report this process's use here (permissions)"
    return out


def _accelerator_devices(accelerator: Mapping[str, Any], tallies: Mapping[str, TensorTally]) -> list[DeviceMemory]:
    kind = accelerator["type"]
    out = []
    if accelerator.get("error"):
        return [DeviceMemory(device=kind, kind=kind, state="unavailable", status=f"unavailable: {accelerator['error']}")]
    for raw in accelerator.get("devices", []):
        i = raw["index"]
        name = f"{kind}:{i}"
        fields: dict[str, Any] = {"device": name, "kind": kind, "torch_index": i, "name": raw.get("name"),
                                  "tensors": tallies.get(name)}
        if accelerator.get("initialized") is False:
            fields.update(state="not initialised",
                          status=f"{kind} is not initialised in this process: PyTorch holds nothing on it")
        elif raw.get("error"):
            fields.update(state="unavailable", status=f"allocator figures not available: {in_words(raw['error'])}")
        else:
            fields.update(state="ready", status="initialised", **_allocator_fields(raw.get("memory_stats") or {}))
        if raw.get("mem_get_info"):
            fields["driver_free_bytes"], fields["driver_total_bytes"] = raw["mem_get_info"]
        elif raw.get("mem_get_info_error") and "Allocator for" not in raw["mem_get_info_error"]:
            fields["driver_status"] = f"unavailable: {in_words(raw['mem_get_info_error'])}"
        else:
            fields["driver_status"] = "unavailable: the backend reports no device memory information"
        out.append(DeviceMemory(**fields))
    return out


def _cpu_device(process: Mapping[str, Any], tally: TensorTally | None) -> DeviceMemory:
    return DeviceMemory(
        device="cpu", kind="cpu", state="process", status=process.get("error") or "this process",
        process_bytes=process.get("rss"), peak_process_bytes=process.get("peak_rss"),
        driver_total_bytes=process.get("total"), driver_free_bytes=process.get("available"), tensors=tally,
    )


def _bare_uuid(uuid: str | None) -> str:
    text = (uuid or "").lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text


def match_driver_devices(count: int, torch_uuids: list[str | None], nvml_devices: list[Mapping[str, Any]],
                         env: Mapping[str, str | None]) -> list[tuple[Mapping[str, Any] | None, str | None]]:
    """For each torch index, its NVML entry and how it was found.

    Exact by UUID once CUDA is initialised; before that through ``CUDA_VISIBLE_DEVICES``
    (ordinals, ``GPU-`` UUID prefixes, ``MIG-`` UUIDs or the older
    ``MIG-GPU-<uuid>/<gi>/<ci>`` form). Ordinals follow CUDA's order, which is NVML's
    (PCI bus) order only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; otherwise the match is
    marked approximate.
    """
    by_uuid = {_bare_uuid(d.get("uuid")): d for d in nvml_devices if d.get("uuid")}
    # What CUDA enumerates: whole GPUs, or the MIG instances of a GPU in MIG mode.
    enumerable = [d for d in nvml_devices if not d.get("mig_enabled")]
    pci_order = (env.get("CUDA_DEVICE_ORDER") or "").upper() == "PCI_BUS_ID"
    ordinal_how = "CUDA_VISIBLE_DEVICES" if pci_order else "CUDA_VISIBLE_DEVICES (approximate: CUDA_DEVICE_ORDER is not PCI_BUS_ID)"
    order_how = "order" if pci_order else "order (approximate: CUDA_DEVICE_ORDER is not PCI_BUS_ID)"
    visible = _parse_visible(env.get("CUDA_VISIBLE_DEVICES"))
    out: list[tuple[Mapping[str, Any] | None, str | None]] = []
    for i in range(count):
        uuid = torch_uuids[i] if i < len(torch_uuids) else None
        if uuid and _bare_uuid(uuid) in by_uuid:
            out.append((by_uuid[_bare_uuid(uuid)], "uuid"))
            continue
        if visible is None:
            single = len({d.get("name") for d in enumerable}) <= 1
            out.append((enumerable[i], "order" if single else order_how) if i < len(enumerable) else (None, None))
            continue
        token = visible[i] if i < len(visible) else None
        out.append(_match_token(token, enumerable, nvml_devices, ordinal_how))
    return out


def _match_token(token: str | int | None, enumerable: list[Mapping[str, Any]], nvml_devices: list[Mapping[str, Any]],
                 ordinal_how: str) -> tuple[Mapping[str, Any] | None, str | None]:
    if token is None:
        return None, None
    if isinstance(token, int):
        return (enumerable[token], ordinal_how) if token < len(enumerable) else (None, None)
    legacy = re.fullmatch(r"MIG-(GPU-[0-9a-fA-F-]+)/(\d+)/(\d+)", token)
    for d in nvml_devices:
        if legacy:
            if (_bare_uuid(d.get("parent_uuid")) == _bare_uuid(legacy.group(1))
                    and d.get("gi") == int(legacy.group(2)) and d.get("ci") == int(legacy.group(3))):
                return d, "CUDA_VISIBLE_DEVICES"
        elif d.get("uuid") and _bare_uuid(d["uuid"]).startswith(_bare_uuid(token)) and \
                d["uuid"].lower().startswith(token[:4].lower()):
            return d, "CUDA_VISIBLE_DEVICES"
    return None, None


def _parse_visible(value: str | None) -> list[str | int] | None:
    """``CUDA_VISIBLE_DEVICES`` as CUDA reads it: stops at the first invalid entry; a repeat hides all."""
    if value is None:
        return None
    out: list[str | int] = []
    for raw in value.split(","):
        item = raw.strip()
        if item.upper().startswith(("GPU-", "MIG-")):
            entry: str | int = item
        else:
            m = re.match(r"[+]?\d+", item)
            if not m:
                break
            entry = int(m.group(0))
        if entry in out:
            return []
        out.append(entry)
    return out
