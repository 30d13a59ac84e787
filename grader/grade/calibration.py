"""Baselines measured by `python -m grader calibrate PRACTICAL` (grader.grade.session.calibrate):
the reference solution's step times on a given machine, which speed checks compare
submissions with. This module only reads and writes them.

They live in calibration/<practical>.yaml of the course, one entry per machine:

    machines:
      "Intel(R) Xeon(R) … ×16; 4 × NVIDIA H100 80GB HBM3":
        measured: 2026-11-22T09:15:00+00:00
        torch: 2.13.0
        runs:
          ws2: {median_step_s: 0.0051, min_step_s: 0.0047, steps: 2, wall_s: 0.31}
"""
from __future__ import annotations

import datetime
from pathlib import Path

import yaml

from grader.course import Course
from grader.files import write_atomically

FOLDER = "calibration"


def path_of(course: Course, practical: str) -> Path:
    return course.root / FOLDER / f"{practical}.yaml"


def load(course: Course, practical: str) -> dict:
    """Every machine's baselines of a practical ({} if none were measured)."""
    path = path_of(course, practical)
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return data.get("machines", {})


def baselines(course: Course, practical: str, key: str) -> dict | None:
    """The baselines measured on the machine `key`, if any."""
    return load(course, practical).get(key)


def record(course: Course, practical: str, key: str, runs: dict, torch_version: str) -> Path:
    """Store (replace) the baselines of machine `key`; written atomically."""
    machines = load(course, practical)
    machines[key] = {"measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "torch": str(torch_version), "runs": runs}
    path = path_of(course, practical)
    text = f"# Baselines of {practical}, measured by `python -m grader calibrate {practical}`; speed checks use them.\n"
    text += yaml.safe_dump({"machines": machines}, sort_keys=True, allow_unicode=True)
    write_atomically(path, text)
    return path
