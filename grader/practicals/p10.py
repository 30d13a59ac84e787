"""p10: hybrid parallelism. Checks from grader/checks/hybrid.py and, for the gradients,
parameters and exit, grader/checks/distributed.py; the reference is single-process training
of the template's two-stage model (its stages on the CPU)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import distributed, hybrid, speed
from grader.checks.distributed import Trajectory
from grader.practicals.reference import data_parallel_references
from grader.spec.model import RunDef

CHECKS = MappingProxyType({**hybrid.CHECKS, **{k: distributed.CHECKS[k] for k in ("grad_sync", "params_sync", "clean_exit")}, "efficiency": speed.CHECKS["efficiency"]})


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, tuple[Trajectory, ...]]:
    """The acceptable single-process trajectories of each run."""
    from torch import nn

    class TwoStageModel(nn.Module):  # the template's model, parameter names included
        def __init__(self, dim: int, hidden: int) -> None:
            super().__init__()
            self.stage1 = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU())
            self.stage2 = nn.Linear(hidden, 1)

        def forward(self, x):
            return self.stage2(self.stage1(x))

    return data_parallel_references(args, runs, TwoStageModel)
