"""`grader doctor` on this machine: every finding from trying the real thing, a fix for each
problem, and without a GPU the GPU findings say so instead of failing."""
from __future__ import annotations

import re

import torch

from helpers import run_cli, sandbox_problem


def test_the_doctor_reports_each_part_and_fails_only_on_a_problem() -> None:
    done = run_cli("doctor")
    found = (re.match(r"(ok|problem|not here) +(\S+) ", line) for line in done.stdout.splitlines())
    lines = {match[2]: match[0] + match.string[match.end():] for match in found if match}
    assert set(lines) >= {"driver", "NVML", "CUDA", "NCCL", "sandbox", "cgroups", "fidelity"}, done.stdout
    if not torch.cuda.is_available():
        assert all(lines[name].startswith("not here") for name in ("NCCL", "fidelity")), done.stdout
        assert "no GPU" in lines["CUDA"]
    assert lines["sandbox"].startswith("ok" if sandbox_problem() is None else "problem")
    problems = sum(line.startswith("problem") for line in lines.values())
    assert done.returncode == (1 if problems else 0)
    assert done.stdout.count("fix: ") >= problems
