"""{{id}}: {{title}} (made by `python -m grader new`).

CHECKS: the checks the spec may use. references: what each run must produce, computed by the
grader itself from the arguments it chose (the seed among them)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import distributed, generic
from grader.spec.model import RunDef

CHECKS = MappingProxyType({**generic.CHECKS, "clean_exit": distributed.CHECKS["clean_exit"]})


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, dict[str, Any]]:
    """The mean of the samples the shards hold, for each run's world size."""
    import torch

    batch = int(args["batch_size"])
    data = torch.randn(batch, generator=torch.Generator().manual_seed(int(args["seed"])))
    result = {}
    for run in runs:
        world = run.layout.world_size
        used = world * (batch // world)
        result[run.name] = {"result": data[:used].double().mean().item()}
    return result
