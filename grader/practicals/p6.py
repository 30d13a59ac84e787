"""p6: DistributedDataParallel under torchrun. Its reference is single-process training of
the template's model (grader/practicals/reference.py), with which the grader reads what the
ranks' all-reduces carried (grader/traffic/training.py); the model is the grader's own, never
the student's: the verdict must not depend on student code."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import distributed
from grader.practicals.reference import DataParallelReference, data_parallel_references, template_mlp
from grader.spec.model import RunDef
from grader.checks import speed

__all__ = ["CHECKS", "references"]

CHECKS = MappingProxyType({**distributed.CHECKS, **speed.CHECKS})


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, DataParallelReference]:
    """Each run's reference: the template's MLP on the run's settings."""
    return data_parallel_references(args, runs, template_mlp)
