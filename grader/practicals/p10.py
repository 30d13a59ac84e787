"""p10: hybrid parallelism. Checks from grader/checks/hybrid.py and, for the gradients,
parameters and exit, grader/checks/distributed.py; the reference is single-process training
of the template's two-stage model (its stages on the CPU). The runs marked `witness` have the
grader's witness as their last rank (grader/probe/witness.py)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import distributed, hybrid, speed
from grader.checks.distributed import Trajectory
from grader.practicals.reference import data_parallel_digests, data_parallel_references, data_parallel_witness
from grader.probe.messages import Digest, WitnessPlan
from grader.probe.witness import template_two_stage
from grader.spec.model import RunDef

CHECKS = MappingProxyType({**hybrid.CHECKS, **{k: distributed.CHECKS[k] for k in ("grad_sync", "params_sync", "clean_exit")}, "efficiency": speed.CHECKS["efficiency"]})


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, tuple[Trajectory, ...]]:
    """The acceptable single-process trajectories of each run."""
    return data_parallel_references(args, runs, template_two_stage)


def digests(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, tuple[Digest, ...]]:
    """What training must change in the witness's parameters in each (timed) run."""
    return data_parallel_digests(args, runs, template_two_stage)


def witness_plan(args: Mapping[str, Any], run: RunDef, timeout_s: float) -> WitnessPlan:
    """The witness of a run: the template's two-stage model, both stages on the CPU."""
    return data_parallel_witness(args, run, timeout_s, "two_stage")
