"""How a grading is asked for (`GradeOptions`) and every time limit it runs under, resolved in
one place: the spec's limits or the options' (`time_limits`), each checked run's share of the
time left (`run_share_s`), the pace a run of the submission is held to (`pace_limit_s`: from
the reference solution's measured time for the same run), the least a launch is started with
(`MIN_RUN_S`), and the time kept for the reference solution's timed launches
(`reference_reserve_s`). The runner's own limit, a job that stops using the CPU
(grader/run/local.py `IdleWatch`), is the runner's."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from grader.spec import Assignment

MIN_RUN_S = 1.0  # a run is skipped rather than started with less time than this
REFERENCE_LAUNCH_S = 10.0  # the budget kept for each of the reference's timed launches still to come, until one has been seen
RESERVE_MARGIN = 1.5  # × the longest reference launch seen
MAX_RESERVE_SHARE = 1 / 3  # of the budget, at most, kept for the reference's launches
PACE_FLOOR_S = 4.0  # a paced run is given at least this long (×REAL_GPU_PACE_FACTOR on real GPUs)
FIRST_PACE_FACTOR = 1.5  # × PACE_FLOOR_S for the submission's first launch, before any of its runs has shown its pace
PACE_FACTOR = 5.0  # × the reference solution's time for the same run, measured on this machine in this grading
TIMED_PACE_FACTOR = 20.0  # the same for a timed launch of a submission whose runs ended by themselves (grader/grade/pace.py)
OWN_PACE_FACTOR = 3.0  # × the longest of the submission's own runs that ended by themselves (per share of the CPU: grader/grade/pace.py)
REAL_GPU_PACE_FACTOR = 4.0  # a process's first CUDA call alone takes seconds
RELAUNCH_GAIN = 1.5  # a run stopped at its pace is launched again only for at least this much more time
WORKING_RELAUNCH_FACTOR = 2.0  # a run stopped at its pace, of a submission whose runs so far ended by themselves, is launched again with this many times the time it had


@dataclass(frozen=True)
class GradeOptions:
    """How to grade, beyond the spec."""

    world_size: int | None = None  # one run of this many ranks instead of the spec's runs
    virtual_gpus: int | None = None  # every run on this many virtual GPUs per node
    public_only: bool = False  # the student's self-check: visible checks only
    seed: int | None = None  # fix the seed (to reproduce a grading); chosen at random otherwise
    run_timeout_s: float | None = None  # one launch of the script
    total_timeout_s: float | None = None  # the whole grading, wall clock from its start
    solutions: Path | None = None  # the reference solutions (solutions/<id>/): speed checks compare with them
    calibration: Mapping[str, Any] | None = None  # every machine's baselines of the practical (calibration.load)
    timing: bool = True  # False: speed checks are deferred (no timed launches)
    progress: Callable[[str], None] | None = None  # told one line as each launch starts ("run ws2 (1 node × 2 ranks)")
    checks: tuple[str, ...] = ()  # only these checks (a follow-up of deferred ones: grader/submit/followup.py); (): every one


@dataclass(frozen=True)
class TimeLimits:
    """How long a grading may take, resolved in one place (`time_limits`)."""

    run_s: float  # one launch of the script
    total_s: float  # the whole grading, wall clock from its start

    @property
    def cpu_s(self) -> int:
        """CPU seconds one process of the submission may use: the whole budget and a minute."""
        return int(self.total_s + 60)

    @property
    def job_minutes(self) -> int:
        """A grading job's limit on a cluster: the budget and 5 minutes to start and store it."""
        return int(self.total_s // 60 + 5)


def time_limits(assignment: Assignment, options: GradeOptions = GradeOptions()) -> TimeLimits:
    """The spec's time limits, or the options' where they give one."""
    return TimeLimits(run_s=options.run_timeout_s or assignment.run_timeout_s, total_s=options.total_timeout_s or assignment.total_timeout_s)


def run_share_s(left_s: float, shares: int) -> float:
    """One checked run's limit: its share of the time left, where `shares` counts it, the
    checked runs after it and the timed runs as one more. A run that hangs while it keeps the
    CPU busy leaves every later run its time: no check is relabelled "not run"."""
    return max(left_s / max(shares, 1), 0.0)


def pace_limit_s(reference_s: float | None, own_s: Sequence[float], first: bool, real_gpus: bool = False, factor: float = PACE_FACTOR) -> float:
    """How long a run of the submission may take before it is stopped as hung or far too slow,
    when the budget leaves it more: `factor` (PACE_FACTOR) × the reference solution's time for the same
    run measured here (`reference_s`, None until measured), at least OWN_PACE_FACTOR × the
    longest of the submission's runs that ended by themselves (`own_s`: a program slow in every
    run by a cost of its own, say one that compiles, keeps its own pace) and at least
    PACE_FLOOR_S (FIRST_PACE_FACTOR × that for the submission's `first` launch, which shows its
    pace). A run that keeps the CPU busy forever is then stopped in seconds, not at its share of
    the budget; the time a run is given grows with the machine's load, since the reference is
    measured under it. (p6's reference takes 0.3-1 s a run on a 2-core machine; with
    `torch.compile` (inductor) a correct p6 takes 2.5-5 s.)"""
    floor = PACE_FLOOR_S * (REAL_GPU_PACE_FACTOR if real_gpus else 1.0) * (FIRST_PACE_FACTOR if first else 1.0)
    return max(floor, factor * (reference_s or 0.0), OWN_PACE_FACTOR * max(own_s, default=0.0))


def reference_reserve_s(waiting: int, seen_s: Sequence[float], budget_s: float) -> float:
    """The time kept for the reference solution's `waiting` timed launches still to come, when
    its launches so far took `seen_s`: the submission's launches never take it, so a
    submission cannot use up the budget to leave its speed check without a reference."""
    each = RESERVE_MARGIN * max(seen_s) if seen_s else REFERENCE_LAUNCH_S
    return min(max(waiting, 0) * each, MAX_RESERVE_SHARE * budget_s)
