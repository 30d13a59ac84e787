"""The timing protocol every speed check shares; pure functions over what the grader measured.

- A step's time is measured by a clock the submission cannot touch. In a run the grader's hub
  carries (grader/probe/transport) it is the time between the deliveries of two steps' last
  gradient all-reduces, by the hub's clock: a synchronous all-reduce is delivered when its
  slowest rank has sent. A timed run the hub does not carry (one process, or ranks on real GPUs) is timed
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
- A carried launch is timed only when its traffic shows the grader's own training on the
  launch's inputs, as far as the hub kept what the ranks sent (`carried_work`): a fast launch
  must also do the work.
- One launch is summarised by the median of its steps (a pair of launches: by its one step).
  A timed run is launched k times, interleaved with the reference solution's launches of the
  same run (so both see the same machine load), and a side is summarised by the minimum
  (`best_s`: its least disturbed launch) and the median (`typical_s`) of its launches'
  medians, by its fastest tenth (`undisturbed_s`: the first decile of its pooled steps), and
  by what a step costs (`cost_s`): step by step, the median of that step over the launches,
  averaged over the steps.
- `efficiency` judges what the steps cost (`cost_ratio`). Every step counts: work the program
  adds to the same steps in every launch — all of them, most, one in five, the first timed
  one — stays in their medians, while a step that another process slowed in one launch of
  three does not. (The first decile, judged before, let a step slowed by 80 ms in 11 of 18
  steps pass at 1.00×; the mean of each launch, tried on a node of 16 cores, spread from 0.80×
  to 1.44× for the reference against itself: one slow step in a launch moves a mean.
  Measured on this 2-core machine, 3 rounds of 20 p6 and 17 p10 gradings: the sd of the
  ratio's log was 0.113 and 0.137 with launch medians, 0.070 and 0.107 with first deciles;
  bench/RESULTS.md.)
- A submission that would fail gets more rounds of launches before the verdict
  (grader/grade/timing.py), so a burst of load cannot fail it. (Measured: the submission's
  best launch against the reference's median, the protocol before the witness, let a planted
  1.5× slowdown behind a forged clock pass 6 times in 20; bench/RESULTS.md.)
- Other load, as the kernel counted it (grader/run/load.py), is set aside: by the hub's clock
  the steps a busy span touched (`shared_quiet`), by the grader's the rounds with a disturbed
  launch (`judged_rounds`). A verdict that the set-aside steps could have decided — a fail on
  too few quiet steps, a pass that a step never seen quiet could turn (`bound_ratio`) — is
  deferred, never given (`busy_reason`, `unsure_pass`).
"""
from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

from grader.probe.messages import DdpOptions
from grader.probe.recorder.events import Optimizer
from grader.probe.transport.traffic import TrafficReport
from grader.run.job import JobResult, RankResult
from grader.run.load import DISTURBED_SHARE, SPAN_SHARE, LaunchLoad


def rank_step_seconds(rank: RankResult, warmup: int = 1) -> list[float]:
    """Duration of each optimizer step of one rank, the first `warmup` steps (at least one) left out."""
    ends = [e.end for e in sorted(rank.of_kind(Optimizer), key=lambda e: e.step)]
    durations = [later - earlier for earlier, later in zip(ends, ends[1:])]  # durations[i] is step i + 1
    return durations[max(warmup, 1) - 1 :]


def carried_problem(run: JobResult) -> str | None:
    """Why a run the grader's hub carried cannot be timed by the hub's clock (None: it can, or
    the hub did not carry it)."""
    if run.spec.carrier is None or isinstance(run.step_ends, tuple):
        return None
    return f"the grader's hub could not time it: {run.step_ends or 'its traffic was not read'}"


def step_seconds(run: JobResult, warmup: int = 1) -> list[float]:
    """Per timed step: by the hub's clock in a carried run (the deliveries of two steps' last
    all-reduces, which wait for the slowest rank), else the slowest rank's recorded duration."""
    if isinstance(run.step_ends, tuple):
        ends = run.step_ends
        return [later - earlier for earlier, later in zip(ends, ends[1:])][max(warmup, 1) - 1 :]
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
    outsides_s: tuple[float, ...] = ()  # by the grader's clock, pair by pair: the time its short launch spent outside its steps (start-up, end)
    charged_s: float = 0.0  # of that, beyond the reference's, spread over the long launch's steps (`charged`)
    launch_steps_s: tuple[tuple[float, ...], ...] = ()  # per launch that could be timed (by the hub's or the recorder's clock), its timed steps in order
    launch_asked: tuple[int | None, ...] = ()  # per launch of launch_steps_s: the steps it was asked for (None: the run's own)
    launch_quiet: tuple[tuple[bool, ...], ...] = ()  # per launch of launch_steps_s, per timed step: whether other load left it alone (`quiet_steps`; empty: every step)
    leads: tuple[tuple[int, float], ...] = ()  # by the hub's clock, per launch: the steps it was asked for, and when its first timed step began (from the ranks' start)
    busy_leads: frozenset[int] = frozenset()  # the indices in `leads` of launches that other load disturbed before their first timed step (`quiet_lead`)
    lead_charged_s: float = 0.0  # per step: the work before the first timed step that grows with the steps asked, beyond the reference's (`charged`)

    def lead_slope_s(self) -> tuple[float, int, float, int, float] | None:
        """How much later the first timed step begins per step asked (the least lead at the
        most steps asked against the least at the fewest, over the steps between them), with
        those: (slope, fewest steps, its lead, most steps, its lead); None where every launch
        asked for as many."""
        least = self.least_leads()
        if len(least) < 2:
            return None
        short, long = min(least), max(least)
        return (least[long] - least[short]) / (long - short), short, least[short], long, least[long]

    def quiet_leads(self) -> list[tuple[int, float]]:
        """`leads`, those of launches other load disturbed before their first timed step left
        out where a launch of the same count was left alone."""
        calm = {steps for index, (steps, _) in enumerate(self.leads) if index not in self.busy_leads}
        return [lead for index, lead in enumerate(self.leads) if index not in self.busy_leads or lead[0] not in calm]

    @property
    def leads_unsure(self) -> bool:
        """Whether some step count's least lead is of a launch other load disturbed before its
        first timed step (no launch of that count was left alone there)."""
        calm = {steps for index, (steps, _) in enumerate(self.leads) if index not in self.busy_leads}
        return any(steps not in calm for steps, _ in self.leads)

    def least_leads(self) -> dict[int, float]:
        """Per step count asked, the least time its launches took to begin their first timed
        step (by the hub's clock; load only delays it)."""
        least: dict[int, float] = {}
        for steps, lead in self.quiet_leads():
            least[steps] = min(lead, least.get(steps, lead))
        return least

    @property
    def timed(self) -> bool:
        return bool(self.medians_s) and self.problem is None

    @property
    def outside_s(self) -> float | None:
        """By the grader's clock: the least time a launch spent outside its steps, over the pairs."""
        return round(min(self.outsides_s), 4) if self.outsides_s else None

    @property
    def unsettled(self) -> bool:
        """Whether load may have decided what a step of the side costs: its launches' median
        steps are more than LOAD_SPREAD apart (a step costs what it costs whatever the count:
        load slowed some), and the launches of some step count (of the side, where they asked
        for none) are too few, under SETTLED_LAUNCHES, for their median to set a slow one aside."""
        if len(self.medians_s) < 2 or max(self.medians_s) <= LOAD_SPREAD * min(self.medians_s):
            return False
        counted = len(self.launch_asked) == len(self.medians_s) and None not in self.launch_asked
        return min(Counter(self.launch_asked).values()) < SETTLED_LAUNCHES if counted else len(self.medians_s) < SETTLED_LAUNCHES

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

    @property
    def cost_s(self) -> float:
        """What a step of the side costs: step by step, the median of that step over its
        launches, averaged over the steps (by the grader's clock: its median pair's step).
        Work the program does in some steps, the same ones in every launch (one step in five,
        most steps, the first timed one), stays in it; a step another process slowed in one
        launch does not. Launches of two step counts are costed count by count, and the
        counts' costs averaged (the k-th step of a launch of 20 is not the k-th of one of 60:
        `cost_ratio`)."""
        by_count = self.cost_by_count()
        if len(by_count) > 1:
            return statistics.fmean(by_count.values())
        return _step_cost(self.launch_steps_s) if self.launch_steps_s else self.typical_s

    def cost_by_count(self, keep: "QuietSteps | None" = None) -> dict[int, float]:
        """Per step count asked, what a step of its launches costs (empty where the launches
        asked for none); with `keep`, over the steps it keeps alone, each by its quiet runs."""
        if len(self.launch_asked) != len(self.launch_steps_s):
            return {}
        counts = sorted({asked for asked in self.launch_asked if asked is not None})
        if keep is None:
            return {count: _step_cost([steps for steps, asked in zip(self.launch_steps_s, self.launch_asked) if asked == count]) for count in counts}
        quiet = self._quiet()
        return {
            count: _step_cost([steps for steps, asked in zip(self.launch_steps_s, self.launch_asked) if asked == count], [flags for flags, asked in zip(quiet, self.launch_asked) if asked == count], keep.keep[count])
            for count in counts
            if keep.keep.get(count)
        }

    def _quiet(self) -> tuple[tuple[bool, ...], ...]:
        """Per launch of launch_steps_s, per timed step, whether it ran quiet."""
        return self.launch_quiet if len(self.launch_quiet) == len(self.launch_steps_s) else tuple((True,) * len(steps) for steps in self.launch_steps_s)

    def steps_by_count(self) -> dict[int | None, list[tuple[tuple[float, ...], tuple[bool, ...]]]]:
        """Per step count asked (None: the run's own), its launches' timed steps and which ran quiet."""
        found: dict[int | None, list[tuple[tuple[float, ...], tuple[bool, ...]]]] = {}
        asked = self.launch_asked if len(self.launch_asked) == len(self.launch_steps_s) else (None,) * len(self.launch_steps_s)
        for steps, flags, count in zip(self.launch_steps_s, self._quiet(), asked):
            found.setdefault(count, []).append((steps, flags))
        return found

    def quiet_cost_s(self, keep: "QuietSteps") -> float | None:
        """What a step of the side costs over the steps `keep` keeps, launches that asked for
        no count taken together (`cost_s` otherwise); None where it keeps none."""
        steps = keep.keep.get(None)
        if not steps or not self.launch_steps_s:
            return None
        return _step_cost(self.launch_steps_s, self._quiet(), steps)

    def describe_cost(self, records: bool = True) -> str:
        """'12.90 ms per step (each of its 18 timed steps by its median over 3 launches;
        fastest tenth 12.31 ms)'; by the grader's clock, `describe`."""
        if not self.launch_steps_s:
            return self.describe(records)
        by_count = self.cost_by_count()
        if len(by_count) > 1:
            launches = ", ".join(f"{self.launch_asked.count(asked)} of {asked} steps" for asked in by_count)
            how = f"each step by its median over the launches of its count ({launches}), the counts averaged"
        else:
            how = f"each of its {min(len(steps) for steps in self.launch_steps_s)} timed steps by its median over {len(self.launch_steps_s)} launches"
        return f"{self.cost_s * 1000:.2f} ms per step ({how}; fastest tenth {self.undisturbed_s * 1000:.2f} ms{self._lead()})"

    def _lead(self) -> str:
        slope = self.lead_slope_s()
        if not self.lead_charged_s or slope is None:
            return ""
        _, short, short_s, long, long_s = slope
        return (
            f"; with {self.lead_charged_s * 1000:.2f} ms a step of work done before the first timed step that grows with the steps asked: "
            f"that step began {short_s:.2f} s after the start in launches of {short} steps, {long_s:.2f} s in those of {long}"
        )

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
            "cost_step_s": round(self.cost_s, 6),
            **({"leads_s": [[steps, round(lead, 4)] for steps, lead in self.leads], "lead_charged_step_s": round(self.lead_charged_s, 6)} if self.leads else {}),
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


QUIET_ROUNDS = 2  # rounds of launches no other load disturbed that a speed verdict may rest on alone (`judged_rounds`)


def _round_size(launches: Sequence[JobResult]) -> int:
    """Launches a side makes in one round: a pair where the grader's clock times them, else one
    (grader/grade/timing.py round_order)."""
    return 2 if launches and launches[0].spec.carrier is None and launches[0].spec.clock_steps is not None else 1


def _disturbed(launch: JobResult) -> bool:
    return launch.load is not None and launch.load.disturbed


@dataclass(frozen=True)
class Disturbance:
    """How other load touched a timed run's rounds of launches (grader/run/load.py)."""

    rounds: int  # rounds of launches made
    disturbed: int  # of those, rounds with a launch (of either side) that other load disturbed
    worst: LaunchLoad | None = None  # the launch that other load disturbed most

    @property
    def quiet(self) -> int:
        return self.rounds - self.disturbed

    def describe(self) -> str:
        """'in 4 of 6 rounds of launches other processes used more than 10% of the machine's CPU time (up to 43%, when the launch's processes waited for a CPU 56% of the time they wanted one)'."""
        worst = f" (up to {self.worst.others_share:.0%}, when the launch's processes waited for a CPU {self.worst.wait_share:.0%} of the time they wanted one)" if self.worst else ""
        return f"in {self.disturbed} of {self.rounds} rounds of launches other processes used more than {DISTURBED_SHARE:.0%} of the machine's CPU time{worst}"

    def as_data(self) -> dict:
        return {"rounds": self.rounds, "disturbed_rounds": self.disturbed, "bound_share": DISTURBED_SHARE, **({"worst": self.worst.as_data()} if self.worst else {})}


def busy_reason(own: Measurement, reference: Measurement, disturbance: Disturbance) -> str | None:
    """Why a verdict on these sides might rest on other load, not the program (None: it does
    not): by the grader's clock, too few rounds left alone (`judged_rounds`); by the hub's,
    too few of a step count's steps left alone on both sides (`shared_quiet`), or the work
    before the first timed step, charged, read only from launches disturbed there
    (`Measurement.leads_unsure`)."""
    if own.pair_steps is not None or reference.pair_steps is not None:
        if disturbance.disturbed and disturbance.quiet < QUIET_ROUNDS:
            return f"{disturbance.describe()}; {disturbance.quiet} were left alone, and {QUIET_ROUNDS} are needed"
        return None
    keep = shared_quiet(own, reference)
    if keep is not None and not keep.enough:
        return f"other processes took more than {SPAN_SHARE:.0%} of the CPUs during most of the timed steps: {keep.coverage:.0%} of a step count's steps ran undisturbed in a launch of each side, and {MIN_COVERAGE:.0%} are needed"
    if own.lead_charged_s and own.leads_unsure:
        return f"other processes took more than {SPAN_SHARE:.0%} of the CPUs before your first timed step in every launch of one step count, so how much later it began cannot be told from the load"
    return None


def unsure_pass(own: Measurement, reference: Measurement, limit: float) -> str | None:
    """Why a pass on these sides might rest on other load (None: it does not), by the hub's
    clock: counted at the least it took under load, a step that ran quiet in no launch of the
    submission could cost more than `limit` allows (`bound_ratio`), or every launch of one step
    count was disturbed before its first timed step, so work moved ahead of the loop cannot be
    told from the load (`Measurement.leads_unsure`)."""
    if own.pair_steps is not None:
        return None
    bound = bound_ratio(own, reference)
    keep = shared_quiet(own, reference)
    if keep is not None and (bound is None or bound > limit):
        shown = "" if bound is None else f", up to {bound:.2f}× the reference's"
        return f"other processes took more than {SPAN_SHARE:.0%} of the CPUs during some of the timed steps, and counted at the least they took under that load your steps could cost more than the {limit:g}× allowed{shown}"
    if own.leads_unsure:
        return f"other processes took more than {SPAN_SHARE:.0%} of the CPUs before your first timed step in every launch of one step count, so work done ahead of the loop cannot be told from the load"
    return None


def unsure_fail(own: Measurement, reference: Measurement, disturbance: Disturbance, limit: float) -> str | None:
    """Why a fail on these sides might rest on other load (None: it does not), by the hub's
    clock: other load disturbed launches of the grading (`Disturbance`), and the submission's
    fastest tenth of steps is within `limit` of the reference's. The steps the load meter left
    quiet are those no sample counted it over; a burst beside a job whose ranks and hub keep
    both CPUs busy gets less than its share of the CPUs and can stay under SPAN_SHARE while it
    slows each collective's round trip: a correct variant with one all-reduce more per step
    (1.11× by its fastest tenth) read 1.30× on its "quiet" steps beside bursts of load. Load
    only slows, so a fastest tenth within the limit says the program can run its steps at the
    reference's pace; whether its slower rest is its own or the load's is then a question for a
    quiet machine (a regrade)."""
    if own.pair_steps is not None or not disturbance.disturbed:
        return None
    fastest = own.undisturbed_s / reference.undisturbed_s if reference.undisturbed_s > 0 else None
    if fastest is None or fastest > limit:
        return None
    return f"{disturbance.describe()}, and your fastest tenth of steps read {fastest:.2f}× the reference's, within the {limit:g}× allowed: whether the slower rest is your program's or the load's cannot be told here"


def judged_rounds(timed: TimedRuns) -> tuple[TimedRuns, Disturbance]:
    """The launches a speed verdict rests on, and how other load touched the rounds. Timed by
    the grader's clock (pairs of whole launches): where a launch of a round (the submission's
    or the reference's, made one after the other) was disturbed (`LaunchLoad.disturbed`) and
    at least QUIET_ROUNDS rounds were not, the quiet rounds alone; else every round (a verdict
    on disturbed rounds never fails: `efficiency` defers it). Timed by the hub's clock: every
    round, whose steps other load left alone are told apart step by step (`shared_quiet`). Rounds are read by position: the k-th round's launches are the k-th of each
    side (grader/grade/timing.py run_timed)."""
    own_size, reference_size = _round_size(timed.own), _round_size(timed.reference)
    rounds = max(-(-len(timed.own) // own_size), -(-len(timed.reference) // reference_size) if timed.reference else 0)
    launches = [(timed.own[k * own_size : (k + 1) * own_size], timed.reference[k * reference_size : (k + 1) * reference_size]) for k in range(rounds)]
    quiet = [not any(_disturbed(launch) for launch in (*own, *reference)) for own, reference in launches]
    loads = [launch.load for launch in (*timed.own, *timed.reference) if launch.load is not None and launch.load.disturbed]
    disturbance = Disturbance(rounds, quiet.count(False), max(loads, key=lambda load: load.others_share, default=None))
    if not disturbance.disturbed or disturbance.quiet < QUIET_ROUNDS or own_size == 1:  # a launch the hub timed keeps its quiet steps (`shared_quiet`)
        return timed, disturbance
    kept = [pair for pair, calm in zip(launches, quiet) if calm]
    return TimedRuns(tuple(launch for own, _ in kept for launch in own), tuple(launch for _, reference in kept for launch in reference)), disturbance


COUNT_SPREAD = 1.25  # launches of two step counts whose ratios to the reference's are more than this many times apart are judged by the dearer (`cost_ratio`); a burst of load that moves one count alone makes a failing verdict wait for more rounds, each count's launches then more than one


LOAD_SPREAD = 1.5  # launch medians of one side more than this many times apart were slowed by load (`Measurement.unsettled`); measured on p10's reference solution graded 6 times on this 2-core machine, quiet: up to 1.29x over a side's first 3 launches; a burst in CI: 2.26x (52 ms against 23 ms)
SETTLED_LAUNCHES = 3  # launches whose median sets one slowed by load aside (`Measurement.unsettled`)


def _step_cost(launches: Sequence[Sequence[float]], quiet: Sequence[Sequence[bool]] | None = None, keep: frozenset[int] | None = None) -> float:
    """Step by step, the median of that step over `launches`, averaged over the steps all have;
    with `keep`, over those steps alone, each by its median over the launches that ran it quiet
    (`quiet`, per launch and step)."""
    count = min(len(steps) for steps in launches)
    if keep is None or quiet is None:
        return statistics.fmean(statistics.median(steps[i] for steps in launches) for i in range(count))
    return statistics.fmean(statistics.median(steps[i] for steps, calm in zip(launches, quiet) if calm[i]) for i in sorted(keep) if i < count)


MIN_COVERAGE = 0.5  # of a step count's timed steps: the least share that must have run quiet on both sides for a verdict on them alone (`quiet_steps`)


def quiet_lead(launch: JobResult, warmup: int = 1) -> bool:
    """Whether other load left a launch the hub timed alone before its first timed step (from
    the hub's start: a burst there delays the step, and the work before it would read as
    work that grows with the steps asked: `charged`)."""
    load, traffic, ends = launch.load, launch.traffic, launch.step_ends
    if not isinstance(ends, tuple) or load is None or not isinstance(traffic, TrafficReport) or not traffic.started:
        return True
    first = traffic.started + ends[max(warmup, 1) - 1]
    return not any(start < first and traffic.started < end for start, end in load.busy_spans)


def quiet_steps(launch: JobResult, warmup: int = 1) -> tuple[bool, ...] | None:
    """Per timed step of a launch the hub timed (as `step_seconds` gives them), whether other
    load left it alone: no busy span the grader counted during the launch
    (`LaunchLoad.busy_spans`, CLOCK_MONOTONIC) overlaps it, placed by the hub's start
    (`TrafficReport.started`). None where that cannot be told."""
    load, traffic, ends = launch.load, launch.traffic, launch.step_ends
    if not isinstance(ends, tuple) or load is None or not isinstance(traffic, TrafficReport) or not traffic.started:
        return None
    first = max(warmup, 1) - 1
    spans = load.busy_spans
    return tuple(not any(start < traffic.started + later and traffic.started + earlier < end for start, end in spans) for earlier, later in zip(ends[first:], ends[first + 1 :]))


@dataclass(frozen=True)
class QuietSteps:
    """Which timed steps a verdict on the steps other load left alone rests on, per step count."""

    keep: Mapping[int | None, frozenset[int]]  # per step count (None: the run's own), the indices of the steps that ran quiet in a launch of each side
    coverage: float  # the least share, over the counts, of a count's timed steps kept

    @property
    def enough(self) -> bool:
        return self.coverage >= MIN_COVERAGE


def shared_quiet(own: Measurement, reference: Measurement) -> QuietSteps | None:
    """The steps of each step count that ran quiet in at least one launch of each side (the
    same steps on both: what a step costs differs from step to step); None where other load
    left every timed step alone."""
    if not own.launch_quiet and not reference.launch_quiet:
        return None
    if all(all(flags) for flags in (*own.launch_quiet, *reference.launch_quiet)):
        return None
    mine, theirs = own.steps_by_count(), reference.steps_by_count()
    keep: dict[int | None, frozenset[int]] = {}
    coverage = 1.0
    for count in mine.keys() & theirs.keys():
        steps = min(len(flags) for _, flags in (*mine[count], *theirs[count]))
        kept = frozenset(i for i in range(steps) if any(flags[i] for _, flags in mine[count]) and any(flags[i] for _, flags in theirs[count]))
        keep[count] = kept
        coverage = min(coverage, len(kept) / steps if steps else 0.0)
    return QuietSteps(keep, coverage if keep else 0.0)


def bound_ratio(own: Measurement, reference: Measurement) -> float | None:
    """The most the submission's steps could cost against the reference's where other load
    kept some steps from running quiet on a side (None where no step was disturbed, or a step
    count has no quiet reference step): per step count, each step by its median over the
    launches that ran it quiet, or, where none of the submission's did, the least it took
    under load (load only slows: a bound from above), and where none of the reference's did,
    the median of the reference's quiet steps of the count (the grader's own program takes
    alike steps). A pass must hold at this bound: a slow step that other load covered in
    every launch would otherwise go unseen."""
    if shared_quiet(own, reference) is None:
        return None
    mine, theirs = own.steps_by_count(), reference.steps_by_count()
    ratios = []
    for count in mine.keys() & theirs.keys():
        steps = min(len(seconds) for seconds, _ in (*mine[count], *theirs[count]))
        calm = [seconds[i] for seconds, flags in theirs[count] for i in range(steps) if flags[i]]
        if not calm:
            return None
        typical = statistics.median(calm)
        cost = []
        for i in range(steps):
            quiet_own = [seconds[i] for seconds, flags in mine[count] if flags[i]]
            quiet_reference = [seconds[i] for seconds, flags in theirs[count] if flags[i]]
            cost.append((statistics.median(quiet_own) if quiet_own else min(seconds[i] for seconds, _ in mine[count]), statistics.median(quiet_reference) if quiet_reference else typical))
        ratios.append(sum(c[0] for c in cost) / sum(c[1] for c in cost))
    return statistics.fmean(ratios) if ratios else None


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


Explain = Callable[[JobResult], "str | None"]  # why a launch failed, in the student's words (grader/checks/failures.py explain), or None


def _clocked(launches: Sequence[JobResult], warmup: int, explain: Explain) -> Measurement:
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
        outcome = explain(short) or explain(long) or _steps_not_taken(short) or _steps_not_taken(long)
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
    return Measurement(tuple(per_step), len(launches), problem, tuple(per_step), steps, statistics.median(recorded) if recorded else None, tuple(outside))


def charged(own: Measurement, reference: Measurement) -> Measurement:
    """`own` with what its steps cost that the steps alone do not show, beyond the reference's.

    By the grader's clock (pairs of launches): the time its launches spend outside their steps
    (the least over its pairs) beyond the reference's (the median over its pairs), spread over
    the steps of its long launch. Not the reference's least: load that slows a long launch
    makes its steps look dearer and its time outside them cheaper, below zero even, and the
    least over all rounds kept one such pair for good (one disturbed reference launch failed a
    correct script at 1.5x, however many rounds followed). The difference of two launches
    cannot tell a script that is slow in every step and sleeps longer the fewer steps it is asked for (padding its short launch) from one
    with fast steps and a long start-up; what it spends in all, it cannot hide: charged to its
    steps, the padding costs them at least what it hid.

    By the hub's clock (launches asked for the run's steps and STRETCH times them:
    grader/grade/timing.py): the work it does before its first timed step that grows with
    the steps asked (`Measurement.lead_slope_s`, the least time per count: load only delays),
    beyond LEAD_SLACK of a reference step, is charged to every step. Neither the reference's
    growth nor the spread of its launches is subtracted: its programs do no step's work
    before their loop, so both are start-up's noise, and subtracted, one reference launch
    slowed by load let three forward passes a step moved ahead of p6's loop pass (twice in
    CI). Noise in the submission's launches that would fail it makes more rounds (each count's
    least time then over more launches: grader/grade/timing.py). A
    script that does each step's work ahead of the loop (precompute, then replay) pays it per
    step; a cost that does not grow with the steps (imports, `torch.compile`'s compilation)
    is what a long training pays once, and is not charged.

    A start-up as long as the reference's costs nothing."""
    per_step, extra = 0.0, 0.0
    reference_outside_s = statistics.median(reference.outsides_s) if reference.outsides_s else None
    if own.outside_s is not None and reference_outside_s is not None and own.pair_steps is not None and own.outside_s > reference_outside_s:
        extra = own.outside_s - reference_outside_s
        per_step = extra / own.pair_steps[1]
    slope = own.lead_slope_s()
    lead = 0.0
    if slope is not None and reference.timed and reference.launch_steps_s:
        lead = max(slope[0] - LEAD_SLACK * reference.cost_s, 0.0)
    if not per_step and not lead:
        return own
    added = per_step + lead
    return replace(
        own,
        medians_s=tuple(m + added for m in own.medians_s),
        steps_s=tuple(m + added for m in own.steps_s),
        launch_steps_s=tuple(tuple(m + added for m in steps) for steps in own.launch_steps_s),
        charged_s=extra,
        lead_charged_s=lead,
    )


LEAD_SLACK = 0.1  # of a reference step: how much the first timed step may begin later per step asked before it is charged (`charged`)


def count_ratios(own: Measurement, reference: Measurement) -> dict[int, float]:
    """Per step count both sides' launches asked for, what the submission's steps cost against
    the reference's in launches of that count (empty where the launches asked for none); where
    other load disturbed some steps and enough ran quiet on both sides (`shared_quiet`), over
    those steps alone."""
    keep = shared_quiet(own, reference)
    keep = keep if keep is not None and keep.enough else None
    mine, theirs = own.cost_by_count(keep), reference.cost_by_count(keep)
    return {count: mine[count] / theirs[count] for count in mine if count in theirs and theirs[count] > 0}


def deciding_counts(own: Measurement, reference: Measurement) -> dict[int, float]:
    """`count_ratios` where they are more than COUNT_SPREAD apart and the cheaper count's
    launches show where its steps' work went (the dearer then decides: `cost_ratio`); empty
    otherwise. A script that does its steps' work ahead of the loop for one count only begins
    that count's first timed step later: by at least MOVED_SHARE of what its steps saved
    against the dearer count's ratio. Load that slowed one count's launches moves no lead so:
    the counts' ratios are then averaged (a burst of load over the submission's launches of
    20 steps had failed p10's reference solution at 1.49×, its launches of 60 at 0.81×)."""
    ratios = count_ratios(own, reference)
    if len(ratios) < 2 or max(ratios.values()) <= COUNT_SPREAD * min(ratios.values()):
        return {}
    cheap, dear = min(ratios, key=ratios.__getitem__), max(ratios, key=ratios.__getitem__)
    leads = own.least_leads()
    if cheap not in leads or dear not in leads:
        return {}
    saved_s = reference.cost_by_count()[cheap] * (ratios[dear] - ratios[cheap]) * cheap
    return ratios if leads[cheap] - leads[dear] >= MOVED_SHARE * saved_s else {}


MOVED_SHARE = 0.5  # of the work a count's steps saved against the dearer count's: how much later its first timed step must begin for the dearer count to decide (`deciding_counts`)


def cost_ratio(own: Measurement, reference: Measurement) -> float:
    """What the submission's steps cost against the reference's (`Measurement.cost_s`), both
    sides launched alternately under the same load. Launches that asked for different step
    counts are compared count by count, never step by step across counts: the k-th step of a
    launch of 20 steps is not the k-th of one of 60 (work in the middle step of each, the same
    share of either training, lay at different places and counted half: a planted 1.5× in one
    step passed at 1.19×); the counts' ratios are averaged. Where they are more than
    COUNT_SPREAD apart and the cheaper count's work went ahead of its loop, the dearer count's
    decides (`deciding_counts`): a step costs what it costs whatever the count, and a script
    that does less work per step when asked for one count than for the other (its steps' work
    done ahead of the loop for one count only) is judged by the other. Each count's ratio pairs launches made one after the other, under the
    same load; the reference's launches are never judged by a dearer count alone (one
    disturbed reference launch let a script that moved its work pass at 0.75×)."""
    if deciding := deciding_counts(own, reference):
        return max(deciding.values())
    ratios = count_ratios(own, reference)
    if ratios:
        return statistics.fmean(ratios.values())
    keep = shared_quiet(own, reference)
    if keep is not None and keep.enough:
        mine, theirs = own.quiet_cost_s(keep), reference.quiet_cost_s(keep)
        if mine is not None and theirs:
            return mine / theirs
    return own.cost_s / reference.cost_s


def describe_counts(own: Measurement, reference: Measurement) -> str:
    """'; 5.00 ms a step in your launches of 20 steps (the reference's 20.00 ms), 30.00 ms in
    those of 60 (20.00 ms): the dearer count decides' where it does (`cost_ratio`)."""
    ratios = deciding_counts(own, reference)
    if not ratios:
        return ""
    mine, theirs = own.cost_by_count(), reference.cost_by_count()
    shown = [f"{mine[count] * 1000:.2f} ms a step in {'your launches' if index == 0 else 'those'} of {count}{' steps' if index == 0 else ''} (the reference's {theirs[count] * 1000:.2f} ms)" for index, count in enumerate(ratios)]
    return f"; {', '.join(shown)}: the dearer count decides"


def measure(launches: Sequence[JobResult], warmup: int, explain: Explain) -> Measurement:
    """The protocol over the launches of one side. A launch that failed (`explain` says why:
    the checks' reading of a failed run, passed in so that the measurement imports no check),
    or that timed no step, makes the whole side untimed: a crash must not pass as a fast run.
    Launches the grader paired to time by its own clock (`JobSpec.clock_steps`) are measured so."""
    if launches and launches[0].spec.carrier is None and launches[0].spec.clock_steps is not None:
        return _clocked(launches, warmup, explain)
    medians: list[float] = []
    per_launch: list[tuple[float, ...]] = []
    steps: list[float] = []
    leads: list[tuple[int, float]] = []
    asked: list[int | None] = []
    quiet: list[tuple[bool, ...]] = []
    busy_leads: set[int] = set()
    problem = None if launches else "it was not launched"
    for launch in launches:
        if launch.skipped:
            problem = problem or f"a launch was not run: {launch.skipped}"
            continue
        outcome = explain(launch) or carried_problem(launch)
        seconds = step_seconds(launch, warmup) if launch.ranks else []
        if outcome or not seconds:
            problem = problem or outcome or f"no optimizer step after the first {max(warmup, 1)} could be timed"
            continue
        medians.append(statistics.median(seconds))
        per_launch.append(tuple(seconds))
        asked.append(launch.spec.clock_steps)
        flags = quiet_steps(launch, warmup)
        quiet.append(flags if flags is not None and len(flags) == len(seconds) else (True,) * len(seconds))
        steps.extend(seconds)
        if isinstance(launch.step_ends, tuple) and launch.spec.clock_steps is not None:
            if not quiet_lead(launch, warmup):
                busy_leads.add(len(leads))
            leads.append((launch.spec.clock_steps, launch.step_ends[max(warmup, 1) - 1]))
    return Measurement(tuple(medians), len(launches), problem, tuple(steps), launch_steps_s=tuple(per_launch), launch_asked=tuple(asked), launch_quiet=tuple(quiet) if not all(all(flags) for flags in quiet) else (), leads=tuple(leads), busy_leads=frozenset(busy_leads))
