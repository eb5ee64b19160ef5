"""python -m devinspect: the environment report, as text and JSON, never initialising CUDA."""

from __future__ import annotations

import json
import subprocess
import sys

import torch

from devinspect.collect.machine import environment
from devinspect.render.environment_text import render


def test_the_report_runs_as_a_module_as_text_and_json():
    text = subprocess.run([sys.executable, "-m", "devinspect"], capture_output=True, text=True, timeout=120)
    assert text.returncode == 0, text.stderr
    # The build is whatever torch says it is: CPU here, CUDA on a laptop's CUDA wheel with no GPU.
    build = "CPU" if torch.version.cuda is None and torch.version.hip is None else "CUDA" if torch.version.cuda else "ROCm"
    assert text.stdout.startswith("devinspect") and f"torch build {build}" in text.stdout
    assert "CUDA initialised in this process: no" in text.stdout
    assert "\nNVML" in text.stdout  # the driver's view, or why there is none, on every machine
    raw = subprocess.run([sys.executable, "-m", "devinspect", "--json"], capture_output=True, text=True, timeout=120)
    report = json.loads(raw.stdout)
    assert report["torch"]["build"].startswith(build) and report["torch"]["cuda_initialised"] is False
    assert {"torch", "IPython", "ipywidgets"} <= set(report["packages"])


def test_gpus_are_matched_to_torch_indices_through_cuda_visible_devices(monkeypatch):
    nvml = {"driver_version": "580.1", "devices": [
        {"index": "0", "name": "NVIDIA H100", "uuid": "GPU-aaaa1111", "total": 80 << 30, "used": 1 << 30, "free": 79 << 30},
        {"index": "1", "name": "NVIDIA H100", "uuid": "GPU-bbbb2222", "total": 80 << 30, "used": 2 << 30, "free": 78 << 30,
         "mig_enabled": True},
        {"index": "1:0", "name": "MIG 1g.10gb", "uuid": "MIG-cccc3333", "total": 10 << 30, "used": 0, "free": 10 << 30,
         "parent_uuid": "GPU-bbbb2222", "gi": 1, "ci": 0},
    ]}
    monkeypatch.setattr("torch.cuda._is_compiled", lambda: True)
    monkeypatch.setattr("torch.cuda.device_count", lambda: 2)
    monkeypatch.setattr("torch.cuda.is_initialized", lambda: False)
    monkeypatch.setattr("devinspect.collect.machine.memory_readings.read_nvml", lambda: nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-cccc3333,GPU-aaaa")
    report = environment.gather()
    mapping = {m["torch"]: (m["driver"], m["how"]) for m in report["nvml"]["torch_to_driver"]}
    assert mapping == {"cuda:0": ("1:0", "CUDA_VISIBLE_DEVICES"), "cuda:1": ("0", "CUDA_VISIBLE_DEVICES")}
    text = render(report)
    assert "CUDA_VISIBLE_DEVICES=MIG-cccc3333,GPU-aaaa" in text and "GPU 1: NVIDIA H100 GPU-bbbb2222" in text
    assert "(MIG enabled)" in text and "torch cuda:0 -> driver 1:0" in text and "1.0 GiB used of 80.0 GiB" in text
