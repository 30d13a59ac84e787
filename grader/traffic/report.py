"""The hub's report (grader.probe.transport.traffic) as the grader reads it: the reductions
whose data the hub kept, each member's contribution as one flat float64 vector, and a short
description of everything else the ranks exchanged."""
from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from grader.probe.transport.traffic import Carried, TrafficReport

if TYPE_CHECKING:  # torch is imported where the data is read: the grader's command line starts without it
    import torch

SUMMING = ("SUM", "AVG")


@dataclass(frozen=True)
class Reduction:
    """An all-reduce that summed (or averaged) floating-point tensors, with what each member sent."""

    position: int  # in the report's `carried`
    group: str
    average: bool  # ReduceOp.AVG: the members receive the mean of what they sent
    at: float  # the hub's clock when it delivered
    sent: dict[int, torch.Tensor]  # global rank -> its inputs, flattened and joined, in float64
    kept: bool  # the hub kept the data (else `sent` is empty: only its size is known)
    numel: int
    roundoff: float = 2.0**-24  # the unit roundoff of the coarsest type sent (float32's; float16's where a comm hook compresses)

    @property
    def delivered(self) -> torch.Tensor:
        """What every member received."""
        import torch

        total = torch.stack(list(self.sent.values())).sum(0)
        return total / len(self.sent) if self.average else total

    def summed(self, rank: int) -> torch.Tensor:
        """What `rank` sent, as a part of a sum: an average's share of it (sent / members)."""
        return self.sent[rank] / len(self.sent) if self.average else self.sent[rank]


def _flat(carried: Carried, index: int) -> torch.Tensor:
    import torch

    from grader.probe.transport.collectives import tensors_of

    part = carried.members[index]
    data = bytearray(base64.b64decode(part.data))
    return torch.cat([t.reshape(-1).to(torch.float64) for t in tensors_of(data, part.inputs)]) if part.inputs else torch.zeros(0, dtype=torch.float64)


def kept_tensors(carried: Carried, rank: int) -> torch.Tensor | None:
    """What `rank` sent in a carried operation, flattened and joined in float64, where the hub
    kept it and it is floating point; None otherwise."""
    index = next((i for i, part in enumerate(carried.members) if part.rank == rank), None)
    if index is None or not carried.members[index].data or not _floating(carried):
        return None
    return _flat(carried, index)


def delivered_tensor(carried: Carried) -> torch.Tensor | None:
    """What the hub delivered in place of a send (CarrierPlan.substitute), flattened in
    float64; None where it delivered what was sent (or the record does not hold one tensor)."""
    import torch

    from grader.probe.transport.collectives import tensors_of

    if not carried.delivered or len(carried.members) != 1 or len(carried.members[0].inputs) != 1 or not _floating(carried):
        return None
    try:
        (tensor,) = tensors_of(bytearray(base64.b64decode(carried.delivered)), carried.members[0].inputs)
    except (ValueError, RuntimeError):
        return None
    return tensor.reshape(-1).to(torch.float64)


ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}  # the floating-point types, each with its unit roundoff


def _floating(carried: Carried) -> bool:
    return bool(carried.members) and all(meta.dtype in ROUNDOFF for p in carried.members for meta in p.inputs)


def is_reduction(carried: Carried) -> bool:
    """Whether `carried` is a completed all-reduce of floating-point tensors by SUM or AVG."""
    return carried.kind == "all_reduce" and not carried.error and carried.reduce in SUMMING and _floating(carried)


def reductions(report: TrafficReport) -> list[Reduction]:
    """Every completed all-reduce of floating-point tensors by SUM or AVG (`is_reduction`), in
    the order the hub delivered them."""
    found = []
    for position, carried in enumerate(report.carried):
        if not is_reduction(carried):
            continue
        kept = all(part.data for part in carried.members)
        sent = {part.rank: _flat(carried, i) for i, part in enumerate(carried.members)} if kept else {}
        numel = sum(meta.numel for meta in carried.members[0].inputs)
        roundoff = max(ROUNDOFF[meta.dtype] for p in carried.members for meta in p.inputs)
        found.append(Reduction(position, carried.group, carried.reduce == "AVG", carried.done, sent, kept, numel, roundoff))
    return found


def describe(carried: Carried) -> str:
    """'all_reduce SUM of [1] float32', 'barrier', 'broadcast of [6, 4] float32 from rank 0'."""
    tensors = carried.members[0].inputs if carried.members else ()
    what = " of " + ", ".join(meta.describe() for meta in tensors[:3]) + (", …" if len(tensors) > 3 else "") if tensors else ""
    root = f" from rank {carried.root}" if carried.kind in ("broadcast", "scatter") and carried.root >= 0 else f" to rank {carried.root}" if carried.root >= 0 else ""
    op = f" {carried.reduce}" if carried.reduce else ""
    return f"{carried.kind}{op}{what}{root}"


def others(report: TrafficReport, used: Sequence[int]) -> tuple[str, ...]:
    """The operations not at `used` positions, each kind described once with its count:
    ('3 × all_reduce SUM of [] float32', '1 × barrier')."""
    skip = set(used)
    counts = Counter(describe(c) for i, c in enumerate(report.carried) if i not in skip and not c.error)
    return tuple(f"{count} × {text}" for text, count in counts.items())
