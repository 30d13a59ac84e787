"""p6: DistributedDataParallel under torchrun. Its reference is single-process training of
the template's model (grader/practicals/reference.py); the model is the grader's own
(grader/probe/witness.py), never the student's: the verdict must not depend on student code.
The runs marked `witness` have the grader's witness as their last rank."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import distributed, speed
from grader.checks.distributed import Trajectory
from grader.practicals.reference import data_parallel_references
from grader.probe.messages import WitnessPlan
from grader.probe.witness import template_mlp
from grader.spec.model import RunDef

__all__ = ["CHECKS", "references", "witness_plan"]

CHECKS = MappingProxyType({**distributed.CHECKS, **speed.CHECKS})


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, tuple[Trajectory, ...]]:
    """The acceptable single-process trajectories of each run."""
    from torch import nn

    return data_parallel_references(args, runs, template_mlp)


WITNESS_WAIT_S = 10.0  # the longest the witness waits for rank 0's DDP or in one collective (a step takes milliseconds)


def witness_plan(args: Mapping[str, Any], run: RunDef, timeout_s: float) -> WitnessPlan:
    """The witness of a run: the last rank, training on the last shard of every global batch;
    gradients and parameters reported for models of at most 65536 first-layer weights (the
    correctness runs), only step times for the larger timed workload."""
    world, batch = run.layout.world_size, int(args["batch_size"])
    shard = batch // world
    return WitnessPlan(
        seed=int(args["seed"]),
        batch_size=batch,
        dim=int(args["dim"]),
        hidden=int(args["hidden"]),
        steps=int(args["steps"]),
        lr=float(args["lr"]),
        first_row=(world - 1) * shard,
        rows=shard,
        values=int(args["dim"]) * int(args["hidden"]) <= 1 << 16,
        peer_records="",
        wait_s=min(timeout_s / 3, WITNESS_WAIT_S),
    )
