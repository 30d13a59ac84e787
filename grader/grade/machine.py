"""What a machine is called in calibration files: its CPU model and count, and its GPUs."""
from __future__ import annotations

import os
import platform


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
