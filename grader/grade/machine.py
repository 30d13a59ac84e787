"""What a machine is called in calibration files: its CPU model and count, and its GPUs."""
from __future__ import annotations

import os
import platform
from pathlib import Path


def machine_key(gpus: int = 0, gpu_name: str = "") -> str:
    """'Intel(R) Xeon(R) … ×16; 4 × NVIDIA H100 80GB HBM3' (or '…; no GPU')."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    devices = f"{gpus} × {gpu_name}" if gpus else "no GPU"
    return f"{model} ×{os.cpu_count()}; {devices}"


def usable_cpus() -> int:
    """The CPU cores this process may run on at once: those it may be scheduled on, fewer where
    its cgroup's quota (cpu.max, as `docker --cpus` sets it) allows less time than that."""
    cores = len(os.sched_getaffinity(0))
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    if quota == "max" or not quota.isdigit() or not period.isdigit() or not int(period):
        return cores
    return max(1, min(cores, int(quota) // int(period)))
