"""p10: hybrid parallelism. Checks from grader/checks/hybrid.py and, for the gradients,
parameters and exit, grader/checks/distributed.py; the reference is single-process training
of the template's two-stage model (its stages on the CPU), with which the grader reads what
the ranks' all-reduces carried (grader/traffic/training.py)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import distributed, hybrid
from grader.practicals.reference import DataParallelReference, data_parallel_references, template_two_stage
from grader.spec.model import RunDef
from grader.checks import speed

CHECKS = MappingProxyType({**hybrid.CHECKS, **{k: distributed.CHECKS[k] for k in ("grad_sync", "params_sync", "clean_exit")}, "efficiency": speed.CHECKS["efficiency"]})


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, DataParallelReference]:
    """Each run's reference: the template's two-stage model on the run's settings."""
    return data_parallel_references(args, runs, template_two_stage)
