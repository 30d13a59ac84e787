"""p6: DistributedDataParallel under torchrun. Its reference is single-process training of
the template's model (grader/practicals/reference.py); the model is the grader's own
(grader/probe/witness.py), never the student's: the verdict must not depend on student code.
The runs marked `witness` have the grader's witness as their last rank."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import distributed, speed
from grader.checks.distributed import Trajectory
from grader.practicals.reference import data_parallel_digests, data_parallel_references, data_parallel_witness
from grader.probe.messages import Digest, WitnessPlan
from grader.probe.witness import template_mlp
from grader.spec.model import RunDef

__all__ = ["CHECKS", "digests", "references", "witness_plan"]

CHECKS = MappingProxyType({**distributed.CHECKS, **speed.CHECKS})


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, tuple[Trajectory, ...]]:
    """The acceptable single-process trajectories of each run."""
    return data_parallel_references(args, runs, template_mlp)


def digests(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, tuple[Digest, ...]]:
    """What training must change in the witness's parameters in each (timed) run."""
    return data_parallel_digests(args, runs, template_mlp)


def witness_plan(args: Mapping[str, Any], run: RunDef, timeout_s: float) -> WitnessPlan:
    """The witness of a run: the template's MLP (grader/practicals/reference.py)."""
    return data_parallel_witness(args, run, timeout_s, "mlp")
