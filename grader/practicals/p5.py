"""p5: nn.DataParallel. Its checks need no reference run: the right split is torch.chunk's,
worked out by the checks themselves (grader/checks/dataparallel.py, answers.py)."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import answers, dataparallel
from grader.spec.model import RunDef
from grader.checks import speed

CHECKS = MappingProxyType({**dataparallel.CHECKS, **answers.CHECKS, "scaling": speed.CHECKS["scaling"]})


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, Any]:
    """None needed."""
    return {}
