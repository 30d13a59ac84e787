"""p6: DistributedDataParallel under torchrun. Its reference is single-process training of
the template's model (grader/practicals/reference.py); the model is repeated here on purpose:
the verdict must not depend on student code."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import distributed, speed
from grader.checks.distributed import Trajectory
from grader.practicals.reference import data_parallel_references
from grader.spec.model import RunDef

__all__ = ["CHECKS", "references"]

CHECKS = MappingProxyType({**distributed.CHECKS, **speed.CHECKS})


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, tuple[Trajectory, ...]]:
    """The acceptable single-process trajectories of each run."""
    from torch import nn

    return data_parallel_references(args, runs, lambda dim, hidden: nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1)))
