"""What a run of the submission is held to besides the budget: its pace (grader/grade/options.py
`pace_limit_s`), computed from the reference solution's time for the same run as launched in
this grading and from the submission's own runs that ended by themselves.

A timed run's launch of a submission whose runs ended by themselves (it works; a hang would
have hung there too) is given TIMED_PACE_FACTOR × the reference's: the timed workload is where
needless work per step shows (p6's weight norms in every step: 6.5× the reference's launch),
the speed checks judge how slow it is, and the run's other checks (p6's `clean_exit` reads it)
must not fail for it. (The hub's report of a launch stopped at its limit does not come, so
whether it was still training cannot be read from its traffic.)"""
from __future__ import annotations

from dataclasses import dataclass, field

from grader.grade.options import PACE_FACTOR, TIMED_PACE_FACTOR, pace_limit_s
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

    def limit_s(self, run: RunDef, steps: int | None, timed: bool = False) -> float:
        """The pace of the submission's next launch of `run` (`timed`: a launch a speed check times)."""
        real_gpus = bool(self.gpus) and not run.hide_gpus and not run.virtual_gpus
        factor = TIMED_PACE_FACTOR if timed and self.own_s else PACE_FACTOR
        return pace_limit_s(self.reference_s.get((run.name, steps)), self.own_s, first=not self.launched, real_gpus=real_gpus, factor=factor)
