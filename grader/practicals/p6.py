"""p6: DistributedDataParallel under torchrun. Its reference is single-process training of
the template's model (grader/practicals/reference.py); the model is repeated here on purpose:
the verdict must not depend on student code."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from grader.checks.distributed import CHECKS, Trajectory
from grader.practicals.reference import data_parallel_references
from grader.spec.model import RunDef

__all__ = ["CHECKS", "references"]


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, tuple[Trajectory, ...]]:
    """The acceptable single-process trajectories of each run."""
    from torch import nn

    dim, hidden = int(args["dim"]), int(args["hidden"])
    return data_parallel_references(args, runs, lambda: nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1)))
