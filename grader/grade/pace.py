"""What a run of the submission is held to besides the budget: its pace (grader/grade/options.py
`pace_limit_s`), computed from the reference solution's time for the same run as launched in
this grading and from the submission's own runs that ended by themselves; and whether a run
stopped at its pace was still training (`working_when_stopped`), which makes it slow, not hung."""
from __future__ import annotations

from dataclasses import dataclass, field

from grader.grade.options import pace_limit_s
from grader.probe.transport.traffic import TrafficReport
from grader.run.job import JobResult
from grader.spec import RunDef


@dataclass
class Paces:
    """What `pace_limit_s` (grader/grade/options.py) is computed from: the reference solution's
    time for each run as launched in this grading, and the submission's runs that ended by
    themselves. `enabled` is False where no reference can be launched (a self-check, a
    prepared submission) or where the options set the per-run limit."""

    enabled: bool
    gpus: int  # real CUDA GPUs of this machine
    reference_s: dict[tuple[str, int | None], float] = field(default_factory=dict)  # (run, steps asked) -> the reference's wall time
    own_s: list[float] = field(default_factory=list)
    launched: int = 0  # the submission's paced launches so far

    def holds(self, run: RunDef) -> bool:
        """Whether the submission's launches of `run` are held to a pace (a run of another
        practical's solution is a reference itself)."""
        return self.enabled and not run.solution

    def limit_s(self, run: RunDef, steps: int | None) -> float:
        real_gpus = bool(self.gpus) and not run.hide_gpus and not run.virtual_gpus
        return pace_limit_s(self.reference_s.get((run.name, steps)), self.own_s, first=not self.launched, real_gpus=real_gpus)


WORKING_KINDS = frozenset({"all_reduce", "reduce", "reduce_scatter", "all_to_all", "send", "recv"})  # what a training step sends (not setup's broadcasts and gathers)
WORKING_WINDOW_S = 2.0


def working_when_stopped(result: JobResult, window_s: float = WORKING_WINDOW_S) -> bool:
    """Whether the grader's hub delivered a training step's operation (an all-reduce, a send)
    in the last `window_s` before the launch was stopped: a program far slower than the
    reference, still training, is no hang, and its checks other than speed must not fail
    for its pace. (A program that spins before its loop, or in it, sends nothing more.)"""
    traffic = result.traffic
    if not isinstance(traffic, TrafficReport):
        return False
    delivered = [op.done for op in traffic.carried if op.error is None and op.kind in WORKING_KINDS]
    return bool(delivered) and result.wall_s - max(delivered) <= window_s
