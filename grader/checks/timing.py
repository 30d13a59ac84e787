"""The timing protocol every speed check shares; pure functions over what the grader measured.

- A step's time is measured by a clock the submission cannot touch. In a run with the
  grader's witness (grader/probe/witness.py) it is the time between two of the witness's
  optimizer steps, by its own clock: in a synchronous all-reduce the witness waits for the
  slowest rank. A timed run without the witness (one process, or ranks on real GPUs) is timed
  by the grader's clock around whole launches: each launch is a pair, one of the run's S steps
  and one of F × S (the spec's `timing.clock_factor`), and a step is the difference of their
  wall times over the (F - 1) × S steps between them. Start-up (imports, CUDA context, the
  process group) is in both and cancels. A script that takes fewer steps than asked, as its
  records show, is not timed; one that hides it from its records has long launches hardly
  longer than its short ones, which cannot be timed (`MIN_SPAN_S`). A script that pads its
  short launch (sleeps longer the fewer steps it is asked for) shrinks the difference, but
  not the time it spends outside its steps, which is charged to them beyond the reference's
  (`charged`). Its own records' step times explain a disagreement in the feedback and decide
  nothing. (The recorder's step times, the probe's clock inside the process, remain only for
  launches the grader did not pair: calibration and old results.)
- The first `warmup` steps of a launch are not timed (allocations, CUDA context, caches); the
  very first step never is: nothing marks its start.
- A step ends for everyone when its slowest rank ends it: per step, the maximum over ranks.
- A launch with a witness is timed only when the witness's parameters show the grader's own
  training on the launch's inputs (`checked_work`): a fast launch must also do the work.
- One launch is summarised by the median of its steps (a pair of launches: by its one step).
  A timed run is launched k times, interleaved with the reference solution's launches of the
  same run (so both see the same machine load), and a side is summarised by the minimum (`best_s`: its least disturbed
  launch) and the median (`typical_s`) of its launches' medians, and by its undisturbed step
  (`undisturbed_s`): the first decile of all its timed steps, pooled over its launches.
- `efficiency` compares undisturbed steps. On a shared CPU a step takes one of two times:
  its own, or about a third more when another process is given its core; the share of
  disturbed steps changes from launch to launch, and a launch's median jumps between the two.
  (Measured on the references against themselves, 3 rounds of 20 p6 and 17 p10 gradings: the
  sd of the ratio's log was 0.113 and 0.137 with launch medians, 0.070 and 0.107 with first
  deciles; bench/RESULTS.md.) Needless work in every step shows in every step, so in the
  first decile; work added to fewer than one step in ten does not.
- A submission that would fail gets more rounds of launches before the verdict
  (grader/grade/pipeline.py), so a burst of load cannot fail it. (Measured: the submission's
  best launch against the reference's median, the protocol before the witness, let a planted
  1.5× slowdown behind a forged clock pass 6 times in 20; bench/RESULTS.md.)
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Sequence

from grader.checks import failures
from grader.probe.events import Optimizer
from grader.probe.messages import DdpOptions, Digest, WitnessReport
from grader.run.job import JobResult, RankResult


def rank_step_seconds(rank: RankResult, warmup: int = 1) -> list[float]:
    """Duration of each optimizer step of one rank, the first `warmup` steps (at least one) left out."""
    ends = [e.end for e in sorted(rank.of_kind(Optimizer), key=lambda e: e.step)]
    durations = [later - earlier for earlier, later in zip(ends, ends[1:])]  # durations[i] is step i + 1
    return durations[max(warmup, 1) - 1 :]


def witness_step_seconds(report: WitnessReport, warmup: int = 1) -> list[float]:
    """Duration of each optimizer step by the witness's clock, the first `warmup` left out."""
    ends = report.step_ends
    return [later - earlier for earlier, later in zip(ends, ends[1:])][max(warmup, 1) - 1 :]


def witness_problem(run: JobResult) -> str | None:
    """Why a run with the grader's witness cannot be timed by it (None: it can, or the run had none)."""
    if run.spec.witness is None:
        return None
    if not isinstance(run.witness, WitnessReport):
        return f"the grader's witness could not time it: {run.witness or 'no report'}"
    if run.witness.error:
        return f"the grader's witness could not time it: {run.witness.error}"
    return None


DIGEST_RTOL = 1e-2  # of what training changed (measured: p6's launches agree with the grader's training to 1e-5, p10's micro-batches to 1e-4)


def _digest_matches(seen: Sequence[Sequence[float]], expected: Digest) -> bool:
    if len(seen) != len(expected) or any(len(pair) != 2 for pair in seen):
        return False
    return all(
        abs(s - es) <= DIGEST_RTOL * (abs(es) + math.sqrt(eq)) and abs(q - eq) <= DIGEST_RTOL * eq
        for (s, q), (es, eq) in zip(seen, expected)
    )


def checked_work(launch: JobResult, expected: Sequence[Digest], adopted: DdpOptions | None = None) -> JobResult:
    """`launch` as timed: when the grader's witness saw training that differs from every one the
    grader computed on the same inputs (`expected`: the change of each parameter, as
    grader/probe/witness.py training_digest gives it), or a DDP built with other costly options
    than `adopted` (those the reference's launches took on, from the checked runs), its report
    is given that error, so the launch cannot be timed. The gradients must arrive: the timed
    inputs differ from the checked runs', and a script could do less when it sees them. (The
    digest cannot tell when they were computed: a script could compute every step's before
    its first, where no step is timed.)"""
    report = launch.witness
    if not isinstance(report, WitnessReport) or report.error is not None:
        return launch
    if adopted is not None and report.ddp_options is not None and report.ddp_options.costly_part() != adopted:
        used, checked = (options.describe() or "DDP's defaults" for options in (report.ddp_options.costly_part(), adopted))
        error = f"your timed launch built its DDP with {used}, your checked runs with {checked}: the reference is timed with the options of your checked runs"
        return replace(launch, witness=replace(report, error=error))
    if not expected or any(_digest_matches(report.digest, e) for e in expected):
        return launch
    first = expected[0]
    # the first parameter that differs; when every common one agrees, the first one only one side has
    where = next((i for i, (pair, e) in enumerate(zip(report.digest, first)) if not _digest_matches((pair,), (e,))), min(len(report.digest), len(first)))
    name = report.names[where] if where < len(report.names) else f"parameter {where}"
    seen = f"{report.digest[where][1]:.4g}" if where < len(report.digest) and len(report.digest[where]) == 2 else "nothing"
    wanted = f"{first[where][1]:.4g}" if where < len(first) else "nothing"
    error = (
        "what your ranks' all-reduces delivered in this launch is not the average of their shards' gradients: "
        f"the witness's `{name}` changed by {seen} (sum of squares) over the launch's steps, by {wanted} in the grader's own training on these inputs"
    )
    return replace(launch, witness=replace(report, error=error))


def step_seconds(run: JobResult, warmup: int = 1) -> list[float]:
    """Per timed step: by the grader's witness's clock in a run with one (in a synchronous
    all-reduce it waits for the slowest rank), else the slowest rank's recorded duration."""
    if isinstance(run.witness, WitnessReport):
        return witness_step_seconds(run.witness, warmup)
    per_rank = [rank_step_seconds(rank, warmup) for rank in run.ranks]
    steps = min((len(d) for d in per_rank), default=0)
    return [max(d[i] for d in per_rank) for i in range(steps)]


def summary(run: JobResult, warmup: int = 1) -> dict | None:
    """Median and minimum step time of one launch, or None when no step could be timed."""
    seconds = step_seconds(run, warmup)
    if not seconds:
        return None
    return {"median_step_s": statistics.median(seconds), "min_step_s": min(seconds), "steps": len(seconds), "wall_s": round(run.wall_s, 4)}


@dataclass(frozen=True)
class Measurement:
    """One side (a submission's or the reference's launches of a run) under the protocol."""

    medians_s: tuple[float, ...]  # per launch (pair of launches, by the grader's clock) that could be timed: its median step time
    launches: int  # launches made
    problem: str | None = None  # why some launch could not be timed (the first reason)
    steps_s: tuple[float, ...] = ()  # every timed step of those launches, in order
    pair_steps: tuple[int, int] | None = None  # timed by the grader's clock: the step counts of each pair's launches
    recorded_s: float | None = None  # by the grader's clock: the median step the submission's own records claim
    outside_s: float | None = None  # by the grader's clock: the least time a launch spent outside its steps (start-up, end), over the pairs
    charged_s: float = 0.0  # of that, beyond the reference's, spread over the long launch's steps (`charged`)

    @property
    def timed(self) -> bool:
        return bool(self.medians_s) and self.problem is None

    @property
    def best_s(self) -> float:
        return min(self.medians_s)

    @property
    def typical_s(self) -> float:
        return statistics.median(self.medians_s)

    @property
    def undisturbed_s(self) -> float:
        """The first decile of every timed step of the side's launches (see the module's docstring)."""
        steps = self.steps_s or self.medians_s
        return statistics.quantiles(steps, n=10, method="inclusive")[0] if len(steps) > 1 else steps[0]

    def _pairs(self) -> str:
        assert self.pair_steps is not None
        short, long = self.pair_steps
        return f"{len(self.medians_s)} pair{'s' if len(self.medians_s) != 1 else ''} of launches of {short} and {long} steps"

    def records_disagree(self) -> str:
        """'; your script's own records say 4.10 ms per step' where they claim steps well
        faster than the grader's clock saw in the side's least disturbed pair (a replaced
        clock, or work outside the steps)."""
        if self.recorded_s is None or not self.medians_s or self.recorded_s * RECORDS_SLACK >= self.best_s:
            return ""
        return f"; your script's own records say {self.recorded_s * 1000:.2f} ms per step"

    def _charged(self) -> str:
        if not self.charged_s or self.pair_steps is None:
            return ""
        return f"; with the {self.charged_s:.2f} s your launches spend outside their steps beyond the reference's, spread over {self.pair_steps[1]} steps"

    def describe(self, records: bool = True) -> str:
        """'12.90 ms per step (median of 3 launches; best 12.31 ms)'; by the grader's clock:
        '12.90 ms per step by the grader's clock (median of 3 pairs of launches of 30 and 90 steps; best 12.31 ms)',
        with what the script's records claim when they disagree (and `records`: the side is the student's)."""
        if self.pair_steps is not None:
            return f"{self.typical_s * 1000:.2f} ms per step by the grader's clock (median of {self._pairs()}; best {self.best_s * 1000:.2f} ms{self._charged()}{self.records_disagree() if records else ''})"
        return f"{self.typical_s * 1000:.2f} ms per step (median of {len(self.medians_s)} launches; best {self.best_s * 1000:.2f} ms)"

    def describe_undisturbed(self, records: bool = True) -> str:
        """'12.31 ms per step undisturbed (the first decile of 54 steps in 3 launches; median launch 12.90 ms)'."""
        if self.pair_steps is not None:
            return f"{self.undisturbed_s * 1000:.2f} ms per step undisturbed by the grader's clock (the first decile of {self._pairs()}; median {self.typical_s * 1000:.2f} ms{self._charged()}{self.records_disagree() if records else ''})"
        return f"{self.undisturbed_s * 1000:.2f} ms per step undisturbed (the first decile of {len(self.steps_s)} steps in {len(self.medians_s)} launches; median launch {self.typical_s * 1000:.2f} ms)"

    def as_data(self) -> dict:
        clock = (
            {"clock": "grader", "pair_steps": list(self.pair_steps), "records_median_step_s": None if self.recorded_s is None else round(self.recorded_s, 6), "outside_steps_s": self.outside_s, "charged_s": round(self.charged_s, 4)}
            if self.pair_steps is not None
            else {}
        )
        return {
            "best_step_s": round(self.best_s, 6),
            "median_step_s": round(self.typical_s, 6),
            "undisturbed_step_s": round(self.undisturbed_s, 6),
            "timed_steps": len(self.steps_s),
            "launch_medians_s": [round(m, 6) for m in self.medians_s],
            **clock,
        }


@dataclass(frozen=True)
class TimedRuns:
    """The launches of one timed run: `own` (the submission's, or the solution's when the run
    names one) and `reference` (the reference solution's, interleaved with them)."""

    own: tuple[JobResult, ...]
    reference: tuple[JobResult, ...] = ()

    @property
    def adopted_options(self) -> DdpOptions | None:
        """The submission's DDP options the reference's launches took on (None: they built
        DDP as the reference solution does)."""
        return next((launch.spec.ddp_options for launch in self.reference if launch.spec.ddp_options is not None), None)


RECORDS_SLACK = 1.5  # records that claim steps this many times faster than the grader's clock saw are named in the feedback


def _steps_not_taken(launch: JobResult) -> str | None:
    """Why a launch the grader times by its clock did not take the steps it asked for, as the
    script's complete records show (records cut short say nothing)."""
    asked = launch.spec.clock_steps
    complete = [rank for rank in launch.ranks if not rank.record.cut_short and rank.record.damaged is None]
    taken = min((len(rank.of_kind(Optimizer)) for rank in complete), default=None)
    if asked is None or taken is None or taken >= asked:
        return None
    return f"your script's records show {taken} optimizer steps in the launch asked for {asked}: the grader times launches of two step counts by its own clock, so a script must take the steps it is given"


MIN_SPAN_S = 1.0  # the least a side's long launches may take beyond its short ones (median over pairs); measured: two launches of p6's timed run (2 ranks) on this 2-core machine differ by up to 0.25 s in start-up and end


def _clocked(launches: Sequence[JobResult], warmup: int) -> Measurement:
    """The protocol over one side's pairs of launches timed by the grader's clock: per pair,
    the difference of the two launches' wall times (the span) over the difference of their
    steps. A pair whose long launch took no longer than its short one was disturbed and is
    left out; a side whose spans are too short to tell its steps from start-up's noise
    (median below MIN_SPAN_S) cannot be timed: the steps it was asked for were not taken, or
    the spec asks for too few."""
    per_step: list[float] = []
    spans: list[float] = []
    recorded: list[float] = []
    outside: list[float] = []
    problem = None if launches else "it was not launched"
    pairs = list(zip(launches[::2], launches[1::2]))
    steps = (pairs[0][0].spec.clock_steps or 0, pairs[0][1].spec.clock_steps or 0) if pairs else (0, 0)
    for short, long in pairs:
        if short.skipped or long.skipped:
            problem = problem or f"a launch was not run: {short.skipped or long.skipped}"
            continue
        outcome = failures.explain(short) or failures.explain(long) or _steps_not_taken(short) or _steps_not_taken(long)
        if outcome:
            problem = problem or outcome
            continue
        spans.append(long.wall_s - short.wall_s)
        if spans[-1] > 0:
            per_step.append(spans[-1] / (steps[1] - steps[0]))
            outside.append(short.wall_s - steps[0] * per_step[-1])
            claimed = step_seconds(long, warmup)
            if claimed:
                recorded.append(statistics.median(claimed))
    if problem is None and spans and statistics.median(spans) < MIN_SPAN_S:
        problem = (
            f"by the grader's clock, the launches of {steps[1]} steps took {statistics.median(spans):.2f} s longer than those of {steps[0]} "
            f"(the median of {len(spans)} pair{'s' if len(spans) != 1 else ''} of launches): too little to time steps by (at least {MIN_SPAN_S:g} s); "
            "the script took fewer steps than asked, or the spec asks for too few on this machine"
        )
    return Measurement(tuple(per_step), len(launches), problem, tuple(per_step), steps, statistics.median(recorded) if recorded else None, round(min(outside), 4) if outside else None)


def charged(own: Measurement, reference: Measurement) -> Measurement:
    """`own` with the time its launches spend outside their steps beyond the reference's (the
    least over each side's pairs), spread over the steps of its long launch. The difference of
    two launches cannot tell a script that is slow in every step and sleeps longer the fewer
    steps it is asked for (padding its short launch) from one with fast steps and a long
    start-up; what it spends in all, it cannot hide: charged to its steps, the padding costs
    them at least what it hid. A start-up as long as the reference's costs nothing; one longer
    by a second costs a second spread over the long launch. Sides not timed by the grader's
    clock are left as they are."""
    if own.outside_s is None or reference.outside_s is None or own.pair_steps is None or own.outside_s <= reference.outside_s:
        return own
    extra = own.outside_s - reference.outside_s
    per_step = extra / own.pair_steps[1]
    return replace(own, medians_s=tuple(m + per_step for m in own.medians_s), steps_s=tuple(m + per_step for m in own.steps_s), charged_s=extra)


def measure(launches: Sequence[JobResult], warmup: int = 1) -> Measurement:
    """The protocol over the launches of one side. A launch that failed, or that timed no step,
    makes the whole side untimed: a crash must not pass as a fast run. Launches the grader
    paired to time by its own clock (`JobSpec.clock_steps`) are measured so."""
    if launches and launches[0].spec.clock_steps is not None:
        return _clocked(launches, warmup)
    medians: list[float] = []
    steps: list[float] = []
    problem = None if launches else "it was not launched"
    for launch in launches:
        if launch.skipped:
            problem = problem or f"a launch was not run: {launch.skipped}"
            continue
        outcome = failures.explain(launch) or witness_problem(launch)
        seconds = step_seconds(launch, warmup) if launch.ranks else []
        if outcome or not seconds:
            problem = problem or outcome or f"no optimizer step after the first {max(warmup, 1)} could be timed"
            continue
        medians.append(statistics.median(seconds))
        steps.extend(seconds)
    return Measurement(tuple(medians), len(launches), problem, tuple(steps))
