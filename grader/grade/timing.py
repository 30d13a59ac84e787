"""The launch policy of timed runs: which runs a speed check times, in which order their
launches go, how many rounds, and what the grader's hub saw of them against the grader's own
training (`carried_work`, `HubTiming`; the reference solution's DDP options, `adopted_options`).
The measurement over the launches is grader/speed/measure.py, the verdicts
grader/checks/speed.py.

A timed run is launched in rounds (the spec's `timing.repeats`): in each, the reference
solution's launch of the run (when a speed check compares with it) and then the submission's,
so both see the same machine load; a run the grader times by its own clock (not carried by its
hub: real GPUs) goes in pairs of two step counts (`round_order`); a run the hub carries goes with the run's steps in even rounds and
STRETCH × them in odd ones (`stretched_steps`), so that work a script does before its first
timed step, and that grows with the steps asked, shows (grader/speed/measure.py `charged`).
After the spec's rounds, up to
as many more for the runs a speed check would still fail (`doubts`), while the budget has room
(`room_for`): failing takes twice the evidence. A round in which other load disturbed a
launch (grader/run/load.py `LaunchLoad.disturbed`) does not count toward those twice the spec's
rounds, up to MAX_ROUNDS_FACTOR × them in all: beside bursts of load, the verdict waits for quiet
launches rather than being deferred for want of them. A run whose own launch failed is launched no
more (a failed launch leaves its side untimed: grader/speed/measure.py). The submission's
launches never take the time the reference's planned launches need (`TimedLaunches.reserve_s`,
grader/grade/options.py `reference_reserve_s`)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Callable, Iterable, Mapping, Sequence

from grader.checks import failures
from grader.checks.distributed import claims_of
from grader.course import Practical
from grader.grade.options import reference_reserve_s
from grader.grade.plan import carried, merged_args, runs_of
from grader.practicals.reference import DataParallelReference
from grader.probe.messages import DdpOptions
from grader.probe.recorder.events import DdpArgs
from grader.probe.transport.traffic import TrafficReport
from grader.run.job import JobResult
from grader.spec import Assignment, CheckSpec, RunDef
from grader.traffic.report import is_reduction
from grader.speed.measure import TimedRuns
from grader.traffic.training import TrainingSeen, sized_step_ends, step_ends

MAX_ROUNDS_FACTOR = 4  # rounds disturbed by other load do not count toward the twice the spec's rounds a doubted run gets, up to this many times them (docs/design.md)

Launch = Callable[[RunDef, str, int, "int | None"], JobResult]  # (run, "own" or "reference", repeat, steps asked or None) -> the launch, made or skipped


@dataclass(frozen=True)
class Schedule:
    """What the timed launches of a grading are to be."""

    timed: tuple[RunDef, ...]  # the runs a speed check times
    referenced: frozenset[str]  # of those, the ones launched alternately with the reference solution
    repeats: int  # the spec's rounds
    doubtful: Callable[[str, TimedRuns], bool]  # whether a speed check would fail the run on its launches so far
    clocked: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # timed by the grader's clock: name -> its short and long step counts
    stretched: Mapping[str, tuple[int, int]] = field(default_factory=dict)  # timed by the hub's clock: name -> the steps of its even and odd rounds

    @property
    def planned_reference_launches(self) -> int:
        return sum(self.repeats * len(self.order(run.name, 0)) // 2 for run in self.timed if run.name in self.referenced)

    def order(self, name: str, repeat: int) -> tuple[tuple[int | None, str], ...]:
        """The launches of round `repeat` of the named run (`round_order`)."""
        stretched = self.stretched.get(name)
        if stretched is not None:
            steps = stretched[repeat % 2]
            return ((steps, "reference"), (steps, "own"))
        return round_order(self.clocked.get(name))


@dataclass
class TimedLaunches:
    """Every timed launch so far, each side's in order (filled by `run_timed`)."""

    schedule: Schedule
    budget_s: float
    own: dict[str, list[JobResult]] = field(default_factory=dict)
    reference: dict[str, list[JobResult]] = field(default_factory=dict)

    def reserve_s(self) -> float:
        """The time kept for the reference's planned launches still to come."""
        seen = [launch.wall_s for launches in self.reference.values() for launch in launches]
        return reference_reserve_s(self.schedule.planned_reference_launches - len(seen), seen, self.budget_s)

    def of(self, name: str) -> TimedRuns:
        return TimedRuns(tuple(self.own.get(name, ())), tuple(self.reference.get(name, ())))

    def failed(self, name: str) -> bool:
        """Whether a launch of the submission's side of the run failed (its side is untimed)."""
        return any(launch.skipped or failures.explain(launch) for launch in self.own.get(name, ()))


def run_timed(launches: TimedLaunches, launch: Launch, deadline: float) -> dict[str, TimedRuns]:
    """Every timed launch, round by round (the module's docstring), into `launches`; each
    timed run's launches."""
    schedule = launches.schedule
    for run in schedule.timed:
        launches.own.setdefault(run.name, [])
        launches.reference.setdefault(run.name, [])
    pending = schedule.timed
    counted = {run.name: 0 for run in schedule.timed}  # each run's rounds that other load left alone
    for repeat in range(MAX_ROUNDS_FACTOR * schedule.repeats if schedule.timed else 0):
        if repeat >= schedule.repeats:  # the spec's rounds are done: more only for runs a check still doubts, while the budget has room for them
            pending = tuple(
                run for run in pending
                if counted[run.name] < 2 * schedule.repeats and schedule.doubtful(run.name, launches.of(run.name)) and room_for(run.name, launches.own, launches.reference, deadline)
            )
        for run in pending:
            made = []
            for steps, role in schedule.order(run.name, repeat):
                if launches.failed(run.name):
                    break  # more would only spend the budget
                if role == "own" or run.name in schedule.referenced:
                    made.append(launch(run, role, repeat, steps))
                    (launches.own if role == "own" else launches.reference)[run.name].append(made[-1])
            counted[run.name] += not any(result.load is not None and result.load.disturbed for result in made)
    return {run.name: launches.of(run.name) for run in schedule.timed}


def timed_runs(practical: Practical, checks: tuple[CheckSpec, ...], runs: tuple[RunDef, ...]) -> tuple[RunDef, ...]:
    """The planned runs that a speed check among `checks` times."""
    wanted = runs_of(practical, checks, lambda definition: definition.timed)
    return tuple(run for run in runs if run.name in wanted)


def reference_launched(practical: Practical, checks: tuple[CheckSpec, ...], runs: tuple[RunDef, ...]) -> frozenset[str]:
    """The timed runs whose launches alternate with the reference solution's: those of a speed
    check that compares with it (a run of a solution is its own reference)."""
    wanted = runs_of(practical, checks, lambda definition: definition.timed and definition.against_reference)
    return frozenset(run.name for run in runs if run.name in wanted and not run.solution)


def doubts(practical: Practical, checks: tuple[CheckSpec, ...], warmup: int, timing: Callable[[str, TimedRuns], TimedRuns] = lambda name, timed: timed) -> Callable[[str, TimedRuns], bool]:
    """Whether a speed check among `checks` would fail the named timed run on its launches so
    far, each timed as the check will time it (`timing`: HubTiming where the hub carried them)."""

    def doubtful(name: str, timed: TimedRuns) -> bool:
        wanted = [check for check in checks if name in check.runs and practical.module.CHECKS[check.check].doubtful is not None]
        if not wanted:
            return False
        checked = timing(name, timed)
        return any(practical.module.CHECKS[check.check].doubtful(checked, warmup, check.options) for check in wanted)

    return doubtful


def clocked_steps(assignment: Assignment, args: Mapping[str, Any], timed: tuple[RunDef, ...], gpus: int) -> dict[str, tuple[int, int]]:
    """The timed runs the grader times by its own clock (those its hub does not carry here), each
    with the step counts of its pair of launches: the run's own, and `clock_factor` times it
    (the spec loader made sure every timed run gives one)."""
    clocked = {}
    for run in timed:
        if not carried(run, gpus):
            steps = int((run.args if run.solution else merged_args(args, run))[assignment.timing.steps_argument])
            clocked[run.name] = (steps, steps * assignment.timing.clock_factor)
    return clocked


STRETCH = 3  # a carried timed run's odd rounds ask for this many times its steps; measured on p6's timed run (2 ranks, a 2-core machine, quiet): the time before its first timed step varies by 0.07 s between launches, 1.6 ms a step over the 40 steps between 20 and 60


def stretched_steps(assignment: Assignment, args: Mapping[str, Any], timed: tuple[RunDef, ...], gpus: int) -> dict[str, tuple[int, int]]:
    """The timed runs the grader's hub carries here, each with the steps of its even rounds
    (the run's own) and of its odd ones (STRETCH times as many)."""
    stretched = {}
    for run in timed:
        if carried(run, gpus):
            steps = int((run.args if run.solution else merged_args(args, run))[assignment.timing.steps_argument])
            stretched[run.name] = (steps, steps * STRETCH)
    return stretched


@dataclass
class HubTiming:
    """The launches of a timed run the grader's hub carried, each timed by the hub's clock and
    checked against the grader's own training on its inputs (grader/speed/measure.py
    carried_work), the submission's also against the DDP options the reference's launches
    took on; the grader's training of the carried timed runs is computed once, when first
    needed. A run it did not carry is left as it is."""

    practical: Practical
    args: Mapping[str, Any]
    runs: tuple[RunDef, ...]  # the carried timed runs

    timed_launches: dict[tuple[int, DdpOptions | None], tuple[JobResult, JobResult]] = field(default_factory=dict, compare=False, repr=False)  # by launch, what carried_work made of it (the doubt after each extra round and the verdict read the same launches)

    @cached_property
    def references(self) -> Mapping[str, Any]:
        return self.practical.module.references(self.args, self.runs) if self.runs else {}

    def __call__(self, name: str, timed: TimedRuns) -> TimedRuns:
        reference = self.references.get(name) if any(run.name == name for run in self.runs) else None
        if reference is None:
            return timed
        references = tuple(self._timed(launch, reference, None) for launch in timed.reference)
        own = unpaid_buckets(tuple(self._timed(launch, reference, timed.adopted_options) for launch in timed.own), references, timed.adopted_options)
        return TimedRuns(own, references)

    def _timed(self, launch: JobResult, reference: Any, adopted: DdpOptions | None) -> JobResult:
        key = (id(launch), adopted)
        if key not in self.timed_launches:  # the launch is kept beside its result, so its id is not reused
            self.timed_launches[key] = (launch, carried_work(launch, reference, adopted))
        return self.timed_launches[key][1]


def round_order(steps: tuple[int, int] | None) -> tuple[tuple[int | None, str], ...]:
    """The launches of one round of a timed run: (steps asked, role). A run the grader times by
    its clock goes reference short, own short, own long, reference long: each side's two
    launches then follow launches of the same size, so what a launch leaves to the next (a
    long one more) weighs alike on both of a side's launches and cancels in their difference.
    (Measured on p6's reference against itself under a busy core, with the order reference
    short, own short, reference long, own long: 1.02-1.27×, every one of 16 gradings above 1.)"""
    if steps is None:
        return ((None, "reference"), (None, "own"))
    short, long = steps
    return ((short, "reference"), (short, "own"), (long, "own"), (long, "reference"))


def room_for(name: str, own: dict[str, list[JobResult]], reference: dict[str, list[JobResult]], deadline: float, margin: float = 2.0) -> bool:
    """Whether the time left holds another round of the run's launches (`margin` × its longest
    round so far): an extra round never ends in a launch skipped for want of time."""
    round_s = sum(max((launch.wall_s for launch in side[name]), default=0.0) for side in (own, reference))
    return time.monotonic() + margin * round_s < deadline


# ---------------------------------------------------------------- the launches against the grader's own training
def confirmed_options(run: JobResult) -> DdpOptions:
    """The costly DDP options rank 0's records say its DDP took: find_unused_parameters as far
    as the traffic shows it (an all-reduce of the map of the parameters used, in whole numbers,
    every step); bucket_cap_mb as claimed. How many buckets a cap makes depends on the model:
    the checked runs' small model fits one bucket whatever the cap, so a cap is taken on as
    claimed and judged by its effect on the timed launches (`unpaid_buckets`)."""
    claimed = next((event for event in run.ranks[0].of_kind(DdpArgs)), None) if run.ranks else None
    if claimed is None or not isinstance(run.traffic, TrafficReport):
        return DdpOptions()
    used_map = any(c.kind == "all_reduce" and not c.error and c.members and all(m.dtype.startswith("int") for m in c.members[0].inputs) for c in run.traffic.carried)
    return DdpOptions(find_unused_parameters=claimed.find_unused_parameters and used_map, bucket_cap_mb=claimed.bucket_cap_mb)


def adopted_options(results: Iterable[JobResult], references: Mapping[str, Any]) -> DdpOptions | None:
    """The submission's costly DDP options (DdpOptions.costly_part) as the first checked run
    whose traffic shows its training confirms them (`confirmed_options`); None: DDP's defaults,
    or no run shows them. The reference's timed launches build their DDP with them, so that an
    option DDP offers is not the student's slowness; a find_unused_parameters the traffic does
    not show is not taken on, a bucket_cap_mb the submission's timed launches do not pay for
    fails them (`unpaid_buckets`). A run whose reference is no data-parallel training (p7's
    pipeline) has no DDP options to show."""
    for run in results:
        reference = references.get(run.spec.name)
        if not isinstance(reference, DataParallelReference) or not isinstance(run.traffic, TrafficReport) or not run.ranks:
            continue
        seen = reference.seen(run, lambda run=run, reference=reference: claims_of(run, reference.workload))
        if isinstance(seen, TrainingSeen) and seen.steps and not seen.problem:
            options = confirmed_options(run)
            return None if options == DdpOptions() else options
    return None


def reductions_per_step(launches: Sequence[JobResult]) -> float | None:
    """How many all-reduces of floating-point values a step adds in `launches` (one side of a
    timed run): the difference between its launches of two step counts (the fewest each count
    made) over the steps between them, so that the first steps cancel (DDP with static_graph
    reduces every gradient at once in its first two steps, then bucket by bucket); None
    without launches of two counts."""
    made: dict[int, int] = {}
    for launch in launches:
        if isinstance(launch.traffic, TrafficReport) and launch.spec.clock_steps:
            count = sum(1 for carried in launch.traffic.carried if is_reduction(carried))  # counted, not decoded: asked again after every extra round
            made[launch.spec.clock_steps] = min(count, made.get(launch.spec.clock_steps, count))
    if len(made) < 2:
        return None
    short, long = min(made), max(made)
    return (made[long] - made[short]) / (long - short)


def unpaid_buckets(own: tuple[JobResult, ...], references: Sequence[JobResult], adopted: DdpOptions | None) -> tuple[JobResult, ...]:
    """The submission's launches of a timed run, or why they cannot be timed: the reference's
    launches, built with the bucket_cap_mb the submission's records claim (`adopted`), made
    more all-reduces a step than they did (`reductions_per_step`). A cap claimed and not used
    would have the reference pay for buckets the submission never made; a loss all-reduced
    for the log makes more, not fewer."""
    if adopted is None or adopted.bucket_cap_mb is None:
        return own
    mine, theirs = reductions_per_step([launch for launch in own if isinstance(launch.step_ends, tuple)]), reductions_per_step(references)
    if mine is None or theirs is None or mine >= theirs:
        return own
    why = f"your records say your DDP was built with bucket_cap_mb={adopted.bucket_cap_mb:g}, but your ranks made {mine:g} all-reduces of floating-point values a step, the reference's launches built so {theirs:g}: the reference cannot be timed with options your launches did not use"
    return tuple(replace(launch, step_ends=why) if isinstance(launch.step_ends, tuple) else launch for launch in own)


def carried_work(launch: JobResult, reference: Any, adopted: DdpOptions | None = None) -> JobResult:
    """`launch` with the end of each of its steps by the hub's clock (`step_ends`), or why its
    traffic cannot be timed: the steps whose data the hub kept must be the grader's own training
    on the launch's inputs (grader/traffic/training.py), and the steps after them the same
    all-reduces again; a launch of the submission whose DDP shows other costly options than
    `adopted` (those the reference's launches took on, from the checked runs) is not timed
    either. The timed inputs differ from the checked runs', and a script could do less when it
    sees them. (Beyond the data the hub keeps, a step is timed by its all-reduces' sizes alone;
    so is every step of the reference solution's launches, the grader's own code, of which the
    hub keeps nothing: grader/grade/plan.py carrier_plan.) A launch whose reference is no
    data-parallel training (p7's pipeline) is left as it is: its check reads its traffic."""
    if launch.spec.carrier is None or launch.traffic is None or not isinstance(reference, DataParallelReference):
        return launch
    if not isinstance(launch.traffic, TrafficReport):
        return replace(launch, step_ends=f"no report: {launch.traffic}")
    if launch.spec.private:
        return replace(launch, step_ends=sized_step_ends(launch.traffic, reference.workload, launch.spec.clock_steps))
    seen = reference.seen(launch, lambda: claims_of(launch, reference.workload))
    if isinstance(seen, str):
        return replace(launch, step_ends=seen)
    if seen.problem:
        return replace(launch, step_ends=f"what your ranks' all-reduces carried in this launch is not the grader's own training on its inputs: {seen.problem}")
    if launch.spec.ddp_options is None:  # the submission's launch (the reference's take `adopted` on)
        used = confirmed_options(launch)
        if used != (adopted or DdpOptions()):
            shown = [options.describe() or "DDP's defaults" for options in (used, adopted or DdpOptions())]
            return replace(launch, step_ends=f"your timed launch built its DDP with {shown[0]}, your checked runs with {shown[1]}: the reference is timed with the options of your checked runs")
    return replace(launch, step_ends=step_ends(launch.traffic, seen, launch.spec.clock_steps or reference.workload.steps))
