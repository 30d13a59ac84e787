"""What a run of the submission is held to besides the budget: its pace (grader/grade/options.py
`pace_limit_s`), computed from the reference solution's time for the same run as launched in
this grading and from the submission's own runs that ended by themselves.

Where the reference solution is not at hand (the student's self-check in their own repository),
the course's baselines stand in for it: each run's time as `grader calibrate` measured the
reference's on the course's machines (calibration/<practical>.yaml, which the student export
carries), BASELINE_MARGIN × the longest (a student's laptop may be slower); a never-ending loop
is then stopped at the pace it would be in the course's grading, not at its share of the budget.

A timed run's launch of a submission whose runs ended by themselves (it works; a hang would
have hung there too) is given TIMED_PACE_FACTOR × the reference's: the timed workload is where
needless work per step shows (p6's weight norms in every step: 6.5× the reference's launch),
the speed checks judge how slow it is, and the run's other checks (p6's `clean_exit` reads it)
must not fail for it. (The hub's report of a launch stopped at its limit does not come, so
whether it was still training cannot be read from its traffic.)

The submission's own runs set the pace of its later ones by their time per share of the CPU:
a run of r ranks on c cores does its ranks' work max(1, r / c) times as slowly as one rank
alone (`crowding`), so a run of more ranks than cores is given its share more. (Measured on a
2-core machine under load, a p6 with `torch.compile`: ws2 5.5 s, ws4 15.5 s.)"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from grader.grade.machine import usable_cpus
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
    own_s: list[tuple[float, int]] = field(default_factory=list)  # the submission's runs that ended by themselves: (wall time, ranks)
    launched: int = 0  # the submission's paced launches so far
    cores: int = field(default_factory=usable_cpus)  # the CPU cores the grading may use
    reference_at_hand: bool = True  # the reference's run can be launched to measure it (else the baselines stand in)

    def holds(self, run: RunDef) -> bool:
        """Whether the submission's launches of `run` are held to a pace (a run of another
        practical's solution is a reference itself)."""
        return self.enabled and not run.solution

    def limit_s(self, run: RunDef, steps: int | None, timed: bool = False) -> float:
        """The pace of the submission's next launch of `run` (`timed`: a launch a speed check times)."""
        real_gpus = bool(self.gpus) and not run.hide_gpus and not run.virtual_gpus
        factor = TIMED_PACE_FACTOR if timed and self.own_s else PACE_FACTOR
        ranks = run.layout.world_size
        own = [wall_s * crowding(ranks, self.cores) / crowding(their, self.cores) for wall_s, their in self.own_s]
        return pace_limit_s(self.reference_s.get((run.name, steps)), own, first=not self.launched, real_gpus=real_gpus, factor=factor)

    def ended(self, run: RunDef, wall_s: float) -> None:
        """A launch of the submission's `run` ended by itself after `wall_s`."""
        self.own_s.append((wall_s, run.layout.world_size))


BASELINE_MARGIN = 2.0  # × the longest time the course's machines measured for the reference's run, where it stands in for the reference


def baseline_times(machines: Mapping[str, Any] | None) -> dict[tuple[str, int | None], float]:
    """(run, None) -> BASELINE_MARGIN × the longest wall time any machine of the course's
    baselines (grader/grade/calibration.py) measured for the reference solution's run."""
    found: dict[tuple[str, int | None], float] = {}
    for baselines in (machines or {}).values():
        runs = baselines.get("runs") if isinstance(baselines, Mapping) else None
        for name, measured in (runs or {}).items():
            wall_s = measured.get("wall_s") if isinstance(measured, Mapping) else None
            if isinstance(wall_s, (int, float)) and not isinstance(wall_s, bool) and wall_s > 0:
                found[(str(name), None)] = max(found.get((str(name), None), 0.0), BASELINE_MARGIN * float(wall_s))
    return found


def crowding(ranks: int, cores: int) -> float:
    """How many times as slowly each of `ranks` processes runs CPU-bound work on `cores` cores
    as one process alone."""
    return max(1.0, ranks / max(cores, 1))
