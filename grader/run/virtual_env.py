"""The environment that makes any command's Python processes see virtual GPUs
(`python -m grader run --virtual-gpus N -- CMD`): see grader/probe/boot/sitecustomize.py."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from grader.run.local import GRADER_ROOT

BOOT = Path(__file__).resolve().parents[1] / "probe" / "boot"


def virtual_gpu_environment(count: int, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`environ` plus what starts N virtual GPUs in every Python process started with it."""
    paths = [str(BOOT), str(GRADER_ROOT)] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**environ, "PYTHONPATH": os.pathsep.join(paths), "GRADER_VIRTUAL_GPUS": str(count)}
