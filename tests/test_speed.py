"""Speed checks, the timing protocol, interleaved timed launches, and GPU telemetry — without
processes: synthetic launches whose step times the test chooses, the fake runner, and a fake
NVML source. (Real timed gradings are in test_p6_grading.py and test_p10_grading.py.)"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import MappingProxyType, ModuleType

import pytest

from grader.speed import measure as timing
from grader.checks import speed
from grader.checks.base import CheckContext
from grader.checks.dataparallel import gpu0_memory
from grader.course import Practical
from grader.grade.pipeline import GradeOptions, grade
from grader.grade.timing import carried_work
from grader.practicals.reference import DataParallelReference
from grader.probe.recorder.events import DdpArgs, Optimizer
from grader.probe.messages import DdpOptions
from grader.probe.transport.traffic import CarrierPlan, TrafficReport
from grader.results.gradescope import to_gradescope
from grader.results.model import Status
from grader.results.render import overview_text
from grader.run.fake import FakeRunner
from grader.run.job import JobResult, JobSpec, Layout, RankResult
from grader.run.load import LaunchLoad
from grader.run.telemetry import FakeGpus, Sampler, describe, open_nvml, summarise
from grader.spec import RunDef, load_assignment
from observations import FakeWorkload, contiguous, crashed, ddp_run, ddp_traffic, record_of, set_events


def launch(name: str, *per_rank_steps: list[float], virtual_gpus: int = 0, telemetry: dict | None = None) -> JobResult:
    """A launch whose rank r took per_rank_steps[r][i] seconds for step i + 1 (step 0 untimed)."""
    spec = JobSpec(name=name, submission=Path("/nowhere"), script="s.py", argv=(), layout=Layout(1, len(per_rank_steps)), timeout_s=60, virtual_gpus=virtual_gpus)
    ranks = []
    for rank, steps in enumerate(per_rank_steps):
        ends, t = [0.0], 0.0
        for seconds in steps:
            t += seconds
            ends.append(t)
        events = [Optimizer(t=end, seq=i + 1, step=i, dur=0.0, optimizer="SGD", names=(), values=None) for i, end in enumerate(ends)]
        ranks.append(RankResult(rank=rank, local_rank=rank, node=0, status="exit:0", record=record_of(events)))
    return JobResult(spec=spec, ranks=ranks, wall_s=sum(per_rank_steps[0]), telemetry=telemetry)


def answer(job: JobSpec, seconds: float, ranks: int = 2, telemetry: dict | None = None) -> JobResult:
    """The fake runner's answer to `job`: every step of every rank `seconds` long, the steps it
    was asked for (8 unless the grader times it by its clock), after a second of start-up."""
    steps = job.clock_steps or 8
    return replace(launch(job.name, *[[seconds] * steps] * ranks, telemetry=telemetry), spec=job, wall_s=1.0 + steps * seconds)


def steady(name: str, seconds: float, launches: int = 3, steps: int = 6) -> tuple[JobResult, ...]:
    return tuple(launch(name, [seconds] * steps, [seconds] * steps) for _ in range(launches))


def context(check_runs: list[str], timings: dict, options: dict, baselines: dict | None = None, warmup: int = 1) -> CheckContext:
    runs = tuple(timings[name].own[0] for name in check_runs)
    return CheckContext(runs=runs, options=options, args={}, timings=timings, warmup_steps=warmup, baselines=baselines)


# ---------------------------------------------------------------- the protocol
def test_warmup_steps_are_left_out_and_the_slowest_rank_counts_per_step() -> None:
    run = launch("t", [9.0, 1.0, 1.0, 2.0], [0.5, 3.0, 1.0, 1.0])
    assert timing.step_seconds(run, warmup=1) == pytest.approx([9.0, 3.0, 1.0, 2.0])  # steps 1..4, max over ranks
    assert timing.step_seconds(run, warmup=2) == pytest.approx([3.0, 1.0, 2.0])  # step 1 (the 9 s one) is warm-up
    assert timing.summary(run, warmup=2) == {"median_step_s": 2.0, "min_step_s": 1.0, "steps": 3, "wall_s": 13.0}


def test_a_side_is_its_median_launch_and_its_best_launch() -> None:
    measured = speed.measured([launch("t", [s] * 4) for s in (0.03, 0.01, 0.02)])
    assert measured.timed and measured.best_s == pytest.approx(0.01) and measured.typical_s == pytest.approx(0.02)
    assert measured.describe() == "20.00 ms per step (median of 3 launches; best 10.00 ms)"
    assert measured.steps_s == pytest.approx([0.03] * 4 + [0.01] * 4 + [0.02] * 4)
    assert measured.undisturbed_s == pytest.approx(0.01)  # the first decile of the 12 steps


def test_a_crashed_launch_makes_the_side_untimed_not_fast() -> None:
    broken = launch("t", [0.001] * 4)
    crashed(broken.ranks[0], "RuntimeError", "boom")
    broken.ranks[0].status = "exit:1"
    measured = speed.measured([launch("t", [0.01] * 4), broken])
    assert not measured.timed and "RuntimeError" in (measured.problem or "")
    assert not speed.measured([launch("t", [])]).timed  # one step: nothing marks its start


# ---------------------------------------------------------------- efficiency
def test_efficiency_passes_within_the_ratio_of_the_reference() -> None:
    timings = {"timed": timing.TimedRuns(own=steady("timed", 0.011), reference=steady("timed@reference", 0.010))}
    verdict = speed.efficiency(context(["timed"], timings, {"max_ratio": 1.2}))
    assert verdict.passed, verdict.summary
    assert "1.10× the reference's step time" in verdict.summary and "yours 11.00 ms per step" in verdict.summary
    assert verdict.data["speed"]["timed"]["reference"]["best_step_s"] == pytest.approx(0.01)


def test_efficiency_fails_a_submission_that_does_redundant_work() -> None:
    timings = {"timed": timing.TimedRuns(own=steady("timed", 0.031), reference=steady("timed@reference", 0.010))}
    verdict = speed.efficiency(context(["timed"], timings, {"max_ratio": 1.2}))
    assert not verdict.passed
    assert verdict.summary.startswith("timed (1 node × 2 ranks): 3.10× the reference's step time, above the 1.2× allowed")


def test_efficiency_takes_the_median_round_so_one_disturbed_launch_does_not_fail_it() -> None:
    own = (launch("timed", [0.050] * 6), launch("timed", [0.010] * 6), launch("timed", [0.011] * 6))  # a noisy neighbour hit launch 1
    timings = {"timed": timing.TimedRuns(own=own, reference=steady("timed@reference", 0.010))}
    assert speed.efficiency(context(["timed"], timings, {"max_ratio": 1.2})).passed


def disturbed(name: str, shares: tuple[float, ...], steps: int = 18) -> tuple[JobResult, ...]:
    """Launches of a 10 ms step that another process slows to 13.5 ms in each launch's share
    of steps (in a row, as it was measured on a shared CPU)."""
    return tuple(launch(name, [0.0135 if i < round(share * steps) else 0.010 for i in range(steps)]) for share in shares)


def test_steps_disturbed_in_changing_shares_do_not_decide_efficiency_but_every_slow_step_does() -> None:
    """The launch medians say 1.35× (most of the submission's steps were disturbed, few of the
    reference's); step by step, the median over the launches says 1.14× (the steps most
    launches had disturbed). A step slower by 35 % in every step fails, although the reference
    was disturbed as often."""
    reference = disturbed("timed@reference", (0.2, 0.3, 0.4))
    often_disturbed = timing.TimedRuns(own=disturbed("timed", (0.7, 0.6, 0.8)), reference=reference)
    assert speed.measured(often_disturbed.own).typical_s / speed.measured(reference).typical_s == pytest.approx(1.35)
    verdict = speed.efficiency(context(["timed"], {"timed": often_disturbed}, {"max_ratio": 1.2}))
    assert verdict.passed and "1.14× the reference's step time" in verdict.summary, verdict.summary
    assert "yours 12.53 ms per step (each of its 18 timed steps by its median over 3 launches; fastest tenth 10.00 ms)" in verdict.summary
    assert verdict.data["speed"]["timed"]["submission"]["cost_step_s"] == pytest.approx(0.012528, abs=1e-6)  # 13 of its 18 steps were disturbed in 2 of 3 launches
    slow = timing.TimedRuns(own=steady("timed", 0.0135, steps=18), reference=reference)
    verdict = speed.efficiency(context(["timed"], {"timed": slow}, {"max_ratio": 1.2}))
    assert not verdict.passed and "1.23× the reference's step time, above the 1.2× allowed" in verdict.summary  # against the reference's disturbed steps, round by round


def slowed(extra: dict[int, float], base: float = 0.010, steps: int = 18, burst: int | None = None) -> tuple[JobResult, ...]:
    """Three launches of `steps` timed steps of `base` seconds, the steps of `extra` (index ->
    seconds added) slower in every launch, and, in launch `burst`, every step doubled (another
    process took the core for the whole launch)."""
    def one(index: int) -> JobResult:
        return launch("timed", [(base + extra.get(i, 0.0)) * (2 if index == burst else 1) for i in range(steps)])
    return tuple(one(index) for index in range(3))


@pytest.mark.parametrize(
    "shape",
    [
        {i: 0.010 * 9 / 11 for i in range(2, 13)},  # 11 steps of 18 (it once passed at 1.00×: the first decile saw only the fast ones)
        {i: 0.010 * 9 / 3 for i in (4, 9, 14)},  # one step in five
        {10: 0.090},  # all of it in one step
        {0: 0.090},  # in the first timed step: work moved before the others
    ],
    ids=["most_steps", "every_fifth", "one_step", "first_step"],
)
def test_work_added_to_the_same_steps_in_every_launch_fails_whatever_its_share_of_the_steps(shape: dict[int, float]) -> None:
    """A planted 1.5× of the steps' total time, whatever steps carry it; the reference has a
    launch that a burst of load slowed whole."""
    reference = slowed({}, burst=1)
    timed = timing.TimedRuns(own=slowed(shape), reference=reference)
    verdict = speed.efficiency(context(["timed"], {"timed": timed}, {"max_ratio": 1.3}, warmup=0))
    assert not verdict.passed and "1.50× the reference's step time, above the 1.3× allowed" in verdict.summary, verdict.summary


def test_a_launch_slowed_whole_by_load_on_either_side_does_not_decide_efficiency() -> None:
    for own, reference in ((slowed({}, burst=0), slowed({})), (slowed({}), slowed({}, burst=2))):
        verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=own, reference=reference)}, {"max_ratio": 1.3}, warmup=0))
        assert verdict.passed and "1.00× the reference's step time" in verdict.summary, verdict.summary


def test_efficiency_is_deferred_when_the_reference_cannot_be_timed_and_failed_when_the_submission_cannot_either_way() -> None:
    dead = launch("timed@reference", [])
    timings = {"timed": timing.TimedRuns(own=steady("timed", 0.01), reference=(dead,))}
    verdict = speed.efficiency(context(["timed"], timings, {"max_ratio": 1.2}))
    assert verdict.deferred and verdict.deferred.startswith("the reference solution could not be timed here")
    timings = {"timed": timing.TimedRuns(own=(launch("timed", []),), reference=steady("timed@reference", 0.01))}
    verdict = speed.efficiency(context(["timed"], timings, {"max_ratio": 1.2}))
    assert not verdict.passed and not verdict.deferred and "your script could not be timed: no optimizer step after the first 1" in verdict.summary
    timings = {"timed": timing.TimedRuns(own=(launch("timed", []),), reference=(dead,))}  # neither: the submission's side decides
    verdict = speed.efficiency(context(["timed"], timings, {"max_ratio": 1.2}))
    assert not verdict.passed and not verdict.deferred and "your script could not be timed" in verdict.summary


def hub_timed(name: str, steps: int, lead_s: float, step_s: float = 0.02) -> JobResult:
    """A launch the hub timed, asked for `steps`: its first timed step (after 2 of warm-up)
    began `lead_s` after the ranks started, and every step took `step_s`."""
    ends = (lead_s - step_s, lead_s, *(lead_s + step_s * k for k in range(1, steps - 1)))
    base = launch(name, [step_s] * steps, [step_s] * steps)
    return replace(base, spec=replace(base.spec, carrier=CarrierPlan(wait_s=1.0, keep_bytes=0), clock_steps=steps), step_ends=ends)


@pytest.mark.parametrize(
    ("own_leads", "charged_ms"),
    [
        ({20: 0.2, 60: 0.21}, 0.0),  # the reference's start-up
        ({20: 3.2, 60: 3.25}, 0.0),  # a constant cost (torch.compile's compilation): what a long training pays once
        ({20: 0.4, 60: 1.0}, 15.0 - 2.0),  # 15 ms of each step's work done before the first timed step, less the slack (10 % of 20 ms)
    ],
    ids=["as_the_reference", "constant_start_up", "work_hoisted_before_the_steps"],
)
def test_work_before_the_first_timed_step_is_charged_where_it_grows_with_the_steps_asked(own_leads: dict[int, float], charged_ms: float) -> None:
    """By the hub's clock, a run's launches ask for its steps and 3 × them in turn: work done
    before the first timed step that grows with the steps asked (precompute, then replay) is
    charged to every step (the least time per count: load only delays); a start-up that does
    not grow is not."""
    reference = tuple(hub_timed("timed@reference", steps, lead) for steps, lead in ((20, 0.2), (60, 0.2), (20, 0.21)))
    own = tuple(hub_timed("timed", steps, own_leads[steps] + extra) for steps, extra in ((20, 0.0), (60, 0.0), (20, 0.05)))
    verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=own, reference=reference)}, {"max_ratio": 1.3}, warmup=2))
    data = verdict.data["speed"]["timed"]
    assert data["submission"]["lead_charged_step_s"] * 1000 == pytest.approx(charged_ms, abs=1e-6)
    assert data["ratio"] == pytest.approx((20 + charged_ms) / 20)
    if charged_ms:
        assert not verdict.passed
        assert "with 13.00 ms a step of work done before the first timed step that grows with the steps asked: that step began 0.40 s after the start in launches of 20 steps, 1.00 s in those of 60" in verdict.summary, verdict.summary
    else:
        assert verdict.passed and "before the first timed step" not in verdict.summary, verdict.summary


def hub_steps(name: str, seconds: list[float], busy: range = range(0), lead_s: float = 0.2, started: float = 100.0, busy_lead: bool = False) -> JobResult:
    """A launch the hub timed whose timed steps (after 2 of warm-up) took `seconds` and the
    first of them began `lead_s` after the hub's start, while the grader counted other load
    busy over the timed steps `busy` (grader/run/load.py), and before the first (`busy_lead`)."""
    ends = [lead_s - seconds[0], lead_s]
    for step_s in seconds:
        ends.append(ends[-1] + step_s)
    spans = ((started + 0.01, started + lead_s - 0.01),) if busy_lead else ()
    spans += tuple((started + ends[k + 1] + 1e-4, started + ends[k + 2] - 1e-4) for k in busy)
    base = launch(name, [0.01] * len(ends), [0.01] * len(ends))
    spec = replace(base.spec, carrier=CarrierPlan(wait_s=1.0, keep_bytes=0), clock_steps=len(seconds) + 2)
    load = LaunchLoad(wall_s=1.0, cpus=2, job_cpu_s=1.5, others_cpu_s=0.6 if spans else 0.0, waited_s=0.5, ran_s=1.5, busy_spans=spans)
    return replace(base, spec=spec, step_ends=tuple(ends), traffic=TrafficReport(2, (), (), (), 0, 0, started), load=load)


def slowed_where(busy: range, steps: int = 18, step_s: float = 0.02, factor: float = 2.0) -> list[float]:
    return [step_s * factor if k in busy else step_s for k in range(steps)]


def test_steps_other_load_disturbed_are_left_out_on_both_sides_and_the_rest_decides() -> None:
    """Bursts of other load over timed steps 0-2 of each of the reference's launches (twice as
    slow there) and over a different third of each of the submission's: judged on the steps
    left alone on both sides, each by its quiet launches, a correct program reads 1.00× (by each
    step's median over all launches the reference's slowed steps would count: 0.86×). A
    program 1.5× slower in every step fails on them."""
    reference = tuple(hub_steps("timed@reference", slowed_where(range(3)), range(3)) for _ in range(3))
    for own_step, passed, shown in ((0.02, True, "1.00×"), (0.03, False, "1.50×")):
        own = tuple(hub_steps("timed", slowed_where(busy, step_s=own_step), busy) for busy in (range(4, 10), range(10, 16), range(0, 4)))
        verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=own, reference=reference)}, {"max_ratio": 1.3}, warmup=2))
        assert verdict.passed is passed and not verdict.deferred and f"{shown} the reference's step time" in verdict.summary, verdict.summary
        assert "judged on the steps other load left alone (83% of a step count's steps or more)" in verdict.summary


def test_a_pass_that_a_slow_step_hidden_under_other_load_could_turn_is_deferred() -> None:
    """One step of the submission's takes 10× the others (a planted slowdown, 1.5× in all), and
    other load ran over that step in every launch of the submission: left out, the rest reads
    1.00×; counted at the least it took under the load, 1.50×. A pass could rest on the load:
    deferred, never passed. Where one launch ran it quiet, it fails."""
    reference = tuple(hub_steps("timed@reference", [0.02] * 18) for _ in range(3))
    planted = [0.02] * 18
    planted[7] = 0.2
    hidden = tuple(hub_steps("timed", planted, range(6, 9)) for _ in range(3))
    verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=hidden, reference=reference)}, {"max_ratio": 1.3}, warmup=2))
    assert verdict.deferred and not verdict.passed, verdict.summary
    assert "counted at the least they took under that load your steps could cost more than the 1.3× allowed, up to 1.50× the reference's. On those launches your steps read 1.00×" in verdict.deferred, verdict.deferred
    seen = (*hidden[:2], hub_steps("timed", planted, range(0)))
    assert not speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=seen, reference=reference)}, {"max_ratio": 1.3}, warmup=2)).passed


def test_a_fail_beside_disturbed_launches_that_the_fastest_steps_do_not_bear_out_is_deferred() -> None:
    """Bursts of other load beside every launch (30% of the machine) that no sample counted over
    any step (a burst beside ranks and a hub that keep both CPUs busy gets less than its share),
    and 12 of the submission's 18 steps 1.5× slower: 1.33× by the steps read quiet, but its
    fastest tenth runs at the reference's pace. Whether the slower steps are the program's or
    the load's cannot be told: deferred, never failed. The same launches on a quiet machine
    fail, and a program slower in every step fails beside the load too."""
    reference = tuple(hub_steps("timed@reference", [0.02] * 18) for _ in range(3))
    loaded = lambda run: replace(run, load=replace(run.load, others_cpu_s=0.6))  # noqa: E731 - a launch the load touched, no step of it counted busy
    own = tuple(hub_steps("timed", slowed_where(range(12), factor=1.5)) for _ in range(3))
    verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=tuple(map(loaded, own)), reference=tuple(map(loaded, reference)))}, {"max_ratio": 1.3}, warmup=2))
    assert verdict.deferred and not verdict.passed, verdict.summary
    assert "in 3 of 3 rounds of launches other processes used more than 10% of the machine's CPU time (up to 30%" in verdict.deferred
    assert "your fastest tenth of steps read 1.00× the reference's, within the 1.3× allowed: whether the slower rest is your program's or the load's cannot be told here. On those launches your steps read 1.33×" in verdict.deferred, verdict.deferred
    quiet = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=own, reference=reference)}, {"max_ratio": 1.3}, warmup=2))
    assert not quiet.passed and not quiet.deferred and "1.33× the reference's step time, above the 1.3× allowed" in quiet.summary
    slow = tuple(loaded(hub_steps("timed", [0.03] * 18)) for _ in range(3))
    verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=slow, reference=tuple(map(loaded, reference)))}, {"max_ratio": 1.3}, warmup=2))
    assert not verdict.passed and not verdict.deferred and "1.50× the reference's step time" in verdict.summary


def test_a_first_timed_step_that_began_later_only_where_other_load_ran_before_it_is_not_charged_for_good() -> None:
    """The submission's one launch of 60 steps began its first timed step 0.8 s after the
    start, where those of 20 began at 0.2 s: as work moved ahead of the loop, 15 ms a step. Where
    the grader counted other load before that step, it cannot tell work from load: the check
    is deferred, not failed; with the load counted in one launch of 60 of two, the quiet one's
    lead decides. Without load, it fails."""
    reference = tuple(hub_steps("timed@reference", [0.02] * steps) for steps in (18, 58, 18))
    for busy, status in (((True,), "deferred"), ((False,), "failed"), ((True, False), "passed")):
        counts = (18, 58, *(58 for _ in busy[1:]), 18)
        leads = {18: 0.2, 58: 0.8}
        own = []
        for index, steps in enumerate(counts):
            disturbed = steps == 58 and busy[min(index - 1, len(busy) - 1)]
            own.append(hub_steps("timed", [0.02] * steps, lead_s=leads[steps] if disturbed or len(busy) == 1 else 0.2, busy_lead=disturbed))
        verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=tuple(own), reference=reference + reference[1:2] * (len(busy) - 1))}, {"max_ratio": 1.3}, warmup=2))
        shown = "deferred" if verdict.deferred else "passed" if verdict.passed else "failed"
        assert shown == status, (busy, verdict.summary or verdict.deferred)
        if status == "deferred":
            assert "before your first timed step in every launch of one step count" in verdict.deferred


def test_a_slower_step_read_where_other_load_left_too_few_steps_alone_is_deferred() -> None:
    """Other load over timed steps 0-12 of each of the submission's launches: 5 of 18 left
    alone, too few to judge on; the steps read 1.6× by their medians, and the check is deferred
    saying why, never failed. The same launches without the load fail."""
    reference = tuple(hub_steps("timed@reference", [0.02] * 18) for _ in range(3))
    own = tuple(hub_steps("timed", slowed_where(range(13)), range(13)) for _ in range(3))
    verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=own, reference=reference)}, {"max_ratio": 1.3}, warmup=2))
    assert verdict.deferred == (
        "timed: the machine was busy: other processes took more than 25% of the CPUs during most of the timed steps: 28% of a step count's steps ran undisturbed in a "
        "launch of each side, and 50% are needed. On those launches your steps read 1.72× the reference's, and a speed verdict rests only on steps nothing else "
        "disturbed: a grading on a quiet machine (a regrade) decides it"
    ), verdict.deferred
    quiet = tuple(replace(run, load=None) for run in own)
    assert not speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=quiet, reference=reference)}, {"max_ratio": 1.3}, warmup=2)).passed


def test_a_script_that_does_its_steps_work_ahead_for_one_step_count_only_is_judged_by_the_other() -> None:
    """Slow steps (30 ms, the reference's 20 ms) done ahead of the loop when asked for 20 steps
    (fast steps, a late first timed step) and not when asked for 60: the launches of 60 steps
    decide (by each step's median over all launches it would pass at 0.25×)."""
    reference = tuple(hub_timed("timed@reference", steps, 0.2) for steps in (20, 60, 20))
    own = tuple(hub_timed("timed", steps, lead, step_s) for steps, lead, step_s in ((20, 0.75, 0.005), (60, 0.2, 0.03), (20, 0.75, 0.005)))
    verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=own, reference=reference)}, {"max_ratio": 1.3}, warmup=2))
    assert not verdict.passed and "1.50× the reference's step time" in verdict.summary, verdict.summary
    assert "5.00 ms a step in your launches of 20 steps (the reference's 20.00 ms), 30.00 ms a step in those of 60 (the reference's 20.00 ms): the dearer count decides" in verdict.summary, verdict.summary


def test_load_over_one_counts_launches_is_averaged_not_decisive() -> None:
    """The reference solution against itself, a burst of load over its launches of 20 steps
    (48 ms a step, the reference's launches 32 ms) and none over those of 60 (25 ms, the
    reference's 30 ms): no first timed step began later, so the counts are averaged (as
    measured on p10, which the dearer count alone had failed at 1.49×)."""
    reference = tuple(hub_timed("timed@reference", steps, 0.2, step_s) for steps, step_s in ((20, 0.032), (60, 0.030), (20, 0.032)))
    own = tuple(hub_timed("timed", steps, 0.2, step_s) for steps, step_s in ((20, 0.048), (60, 0.025), (20, 0.048)))
    verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=own, reference=reference)}, {"max_ratio": 1.3}, warmup=2))
    assert verdict.passed and "1.17× the reference's step time" in verdict.summary and "dearer" not in verdict.summary, verdict.summary


def test_work_in_one_step_of_each_launch_counts_whole_whatever_the_step_counts() -> None:
    """Half the training's time again, spent in the middle step of every launch (20 and 60
    steps asked: step 10 of the one, step 30 of the other): 1.5×, judged count by count. Step
    by step across the counts the k-th steps were not the same step, and the work counted half
    (bench/RESULTS.md: a planted 1.5× in one step passed at 1.19×)."""

    def planted(name: str, steps: int) -> JobResult:
        base = hub_timed(name, steps, 0.2)
        ends = list(base.step_ends)
        middle = steps // 2
        extra = 0.5 * 0.02 * (steps - 2)
        ends = tuple(end + (extra if index > middle else 0.0) for index, end in enumerate(ends))
        return replace(base, step_ends=ends)

    reference = tuple(hub_timed("timed@reference", steps, 0.2) for steps in (20, 60, 20, 60))
    own = tuple(planted("timed", steps) for steps in (20, 60, 20, 60))
    verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=own, reference=reference)}, {"max_ratio": 1.3}, warmup=2))
    assert verdict.data["speed"]["timed"]["ratio"] == pytest.approx(1.5, rel=0.02) and not verdict.passed, verdict.summary


def test_a_reference_launch_slowed_by_load_at_one_step_count_does_not_make_the_reference_dearer() -> None:
    """The reference's launches of 12 steps slowed by a burst of load (24 ms a step, 19 ms at
    36) and the submission's alike: each count's launches are compared with the reference's of
    the same count, made just before them, and the plain cost decides (in CI, taking the
    reference's dearer count let a script that moved its work pass at 0.75×)."""
    reference = tuple(hub_timed("timed@reference", steps, 0.2, step_s) for steps, step_s in ((12, 0.024), (36, 0.019)))
    own = tuple(hub_timed("timed", steps, 0.2, step_s) for steps, step_s in ((12, 0.028), (36, 0.022)))
    verdict = speed.efficiency(context(["timed"], {"timed": timing.TimedRuns(own=own, reference=reference)}, {"max_ratio": 1.3}, warmup=2))
    assert verdict.data["speed"]["timed"]["ratio"] == pytest.approx(0.025 / 0.0215, rel=0.02) and verdict.passed, verdict.summary
    assert "dearer" not in verdict.summary


# ---------------------------------------------------------------- the grader's clock
def pair(seconds_per_step: float, start_s: float = 2.0, steps: tuple[int, int] = (10, 90), recorded: float | None = None, taken: tuple[int, int] | None = None, name: str = "t") -> tuple[JobResult, JobResult]:
    """A pair of launches the grader times by its clock: `steps` asked, each launch's wall time
    `start_s` plus its steps; the records show `taken` steps of `recorded` seconds each."""
    made = []
    for asked, took in zip(steps, taken or steps):
        spec = JobSpec(name=name, submission=Path("/nowhere"), script="s.py", argv=(f"--steps={asked}",), layout=Layout(1, 1), timeout_s=60, clock_steps=asked)
        made.append(replace(launch(name, [recorded or seconds_per_step] * (took - 1)), spec=spec, wall_s=start_s + took * seconds_per_step))
    return made[0], made[1]


def test_the_graders_clock_times_the_steps_between_two_launches_and_start_up_cancels() -> None:
    side = speed.measured([*pair(0.05, start_s=2.0), *pair(0.06, start_s=3.5), *pair(0.05, start_s=1.0)])
    assert side.timed and side.medians_s == pytest.approx((0.05, 0.06, 0.05)) and side.pair_steps == (10, 90)
    assert side.describe() == "50.00 ms per step by the grader's clock (median of 3 pairs of launches of 10 and 90 steps; best 50.00 ms)"
    assert side.as_data()["clock"] == "grader" and side.as_data()["records_median_step_s"] == pytest.approx(0.05)


def test_a_replaced_clock_inside_the_process_changes_nothing_and_is_named() -> None:
    """The records say 10 ms a step (time.monotonic replaced inside the process); the grader's
    clock saw 50 ms: the verdict rests on the 50, the feedback names the 10."""
    side = speed.measured([*pair(0.05, recorded=0.01), *pair(0.05, recorded=0.01)])
    assert side.undisturbed_s == pytest.approx(0.05)
    assert side.describe_cost().endswith("(median of 2 pairs of launches of 10 and 90 steps; best 50.00 ms; your script's own records say 10.00 ms per step)")
    assert "records say" not in side.describe_cost(records=False)  # the reference's side
    assert "records say" not in speed.measured(pair(0.05, recorded=0.04)).describe()  # within the slack: nothing to say


def test_steps_not_taken_are_not_timed_whether_the_records_show_them_or_not() -> None:
    """A script that ignores --steps: its records show it (not timed, and why), or they are
    forged to hide it, and then its long launches take no longer than its short ones. A pair
    disturbed by start-up's noise is left out; spans too short to time are named."""
    shown = speed.measured(pair(0.05, taken=(10, 10)))
    assert not shown.timed and shown.problem == "your script's records show 10 optimizer steps in the launch asked for 90: the grader times launches of two step counts by its own clock, so a script must take the steps it is given"
    short, long = pair(0.05, taken=(10, 10))
    forged = replace(long, ranks=pair(0.05)[1].ranks)  # records of 90 steps, the time of 10
    hidden = speed.measured([short, forged, short, forged])
    assert not hidden.timed and hidden.problem == (
        "by the grader's clock, the launches of 90 steps took 0.00 s longer than those of 10 (the median of 2 pairs of launches): "
        "too little to time steps by (at least 1 s); the script took fewer steps than asked, or the spec asks for too few on this machine"
    )
    disturbed = speed.measured([*pair(0.05), *pair(0.05, start_s=9.0)[:1], pair(0.05)[1], *pair(0.05)])  # the second pair's short launch waited 7 s
    assert disturbed.timed and disturbed.medians_s == pytest.approx((0.05, 0.05))
    crashed_long = replace(long, ranks=[replace(long.ranks[0], status="exit:1")])
    assert not speed.measured([short, crashed_long]).timed


def test_a_short_launch_padded_to_hide_slow_steps_is_charged_what_it_spends_outside_its_steps() -> None:
    """A script 1.5× slow in every step (60 ms against the reference's 40) that sleeps longer
    the fewer steps it is asked for (30 ms × (90 - steps)): the difference of its launches says
    30 ms a step. The 2.7 s its launches spend outside their steps beyond the reference's, spread
    over the long launch's 90 steps, put back what it hid. A start-up 0.1 s longer than the
    reference's costs about a millisecond a step."""

    def padded(step_s: float, extra_start_s: float = 0.0, pad_s: float = 0.0) -> tuple[JobResult, ...]:
        short, long = pair(step_s, name="timed")
        return (replace(short, wall_s=short.wall_s + extra_start_s + pad_s * 80), replace(long, wall_s=long.wall_s + extra_start_s))

    reference = padded(0.04) * 2
    timings = {"timed": speed.TimedRuns(padded(0.06, pad_s=0.03) * 2, reference)}
    verdict = speed.efficiency(context(["timed"], timings, {"max_ratio": 1.3}))
    assert not verdict.passed and "1.50× the reference's step time, above the 1.3× allowed" in verdict.summary
    assert "with the 2.70 s your launches spend outside their steps beyond the reference's, spread over 90 steps" in verdict.summary
    slow_start = speed.efficiency(context(["timed"], {"timed": speed.TimedRuns(padded(0.04, extra_start_s=0.1) * 2, reference)}, {"max_ratio": 1.3}))
    assert slow_start.passed and "1.03× the reference's step time" in slow_start.summary


def test_gpu_step_times_are_the_graders_clocks() -> None:
    from grader.checks.dataparallel import gpu_step_times

    timings = {"scale_single": speed.TimedRuns(pair(0.03) + pair(0.031)), "scale_dp": speed.TimedRuns(pair(0.02, recorded=0.001) + pair(0.02, recorded=0.001))}
    runs = (timings["scale_single"].own[0], timings["scale_dp"].own[0])
    runs = tuple(replace(run, spec=replace(run.spec, name=name)) for run, name in zip(runs, timings))
    verdict = gpu_step_times(CheckContext(runs=runs, options={}, args={}, timings=timings, gpus=2))
    assert verdict.passed and verdict.summary == (
        "scale_single: 30.50 ms per step by the grader's clock (median of 2 pairs of launches of 10 and 90 steps; best 30.00 ms), "
        "scale_dp: 20.00 ms per step by the grader's clock (median of 2 pairs of launches of 10 and 90 steps; best 20.00 ms; your script's own records say 1.00 ms per step); speedup 1.53×"
    )
    timings["scale_dp"] = speed.TimedRuns(pair(0.02, taken=(10, 10)))
    verdict = gpu_step_times(CheckContext(runs=runs, options={}, args={}, timings=timings, gpus=2))
    assert not verdict.passed and verdict.summary.startswith("scale_dp: your script could not be timed: your script's records show 10 optimizer steps")
    assert gpu_step_times(CheckContext(runs=runs, options={}, args={}, timings={}, gpus=2)).deferred


# ---------------------------------------------------------------- scaling and faster_than
def scaling_timings(single: float, parallel: float, ref_single: float, ref_parallel: float) -> dict:
    return {
        "one": timing.TimedRuns(own=steady("one", single), reference=steady("one@reference", ref_single)),
        "two": timing.TimedRuns(own=steady("two", parallel), reference=steady("two@reference", ref_parallel)),
    }


def test_scaling_uses_the_calibrated_speedup_of_this_gpu_model_and_count() -> None:
    baselines = {"runs": {"one": {"median_step_s": 0.020}, "two": {"median_step_s": 0.010}}}  # 2.0× calibrated
    ok = speed.scaling(context(["one", "two"], scaling_timings(0.020, 0.0115, 0.02, 0.02), {"fraction": 0.8}, baselines))
    assert ok.passed and "speedup 1.74×" in ok.summary and "0.8 × the reference's 2.00×, calibrated on this GPU model and count" in ok.summary
    slow = speed.scaling(context(["one", "two"], scaling_timings(0.020, 0.015, 0.02, 0.02), {"fraction": 0.8}, baselines))
    assert not slow.passed and "speedup 1.33×" in slow.summary and "below the 1.60× required" in slow.summary


def test_scaling_without_calibration_uses_the_reference_measured_in_the_same_grading() -> None:
    verdict = speed.scaling(context(["one", "two"], scaling_timings(0.020, 0.020, 0.020, 0.0125), {"fraction": 0.8}))
    assert not verdict.passed and "0.8 × the reference's 1.60×, measured in this grading" in verdict.summary


def test_faster_than_compares_the_first_run_with_the_second() -> None:
    timings = {"ddp": timing.TimedRuns(own=steady("ddp", 0.008)), "dp": timing.TimedRuns(own=steady("dp", 0.010))}
    assert speed.faster_than(context(["ddp", "dp"], timings, {"max_ratio": 1.0})).passed
    timings["ddp"] = timing.TimedRuns(own=steady("ddp", 0.013))
    verdict = speed.faster_than(context(["ddp", "dp"], timings, {"max_ratio": 1.0}))
    assert not verdict.passed and verdict.summary.startswith("ddp 13.00 ms per step") and "is 1.30× dp's" in verdict.summary


# ---------------------------------------------------------------- the pipeline's timed launches
SPEC = """
id: p6
title: DDP
script: p6_ddp.py
seed_argument: seed
args: {batch_size: 64, steps: 3}
timing: {repeats: 2, warmup_steps: 1}
runs:
  - {name: ws2, ranks_per_node: 2}
  - {name: timed, ranks_per_node: 2, args: {steps: 80}}
checks:
  - {id: clean_exit, title: Exit, points: 1, runs: [ws2, timed]}
  - {id: efficiency, title: Speed, points: 2, runs: [timed], options: {max_ratio: 1.2}}
"""


ROUND = ("timed@reference", "timed", "timed+long", "timed@reference+long")  # one round of a run the grader times by its clock


@pytest.fixture
def timed_practical(tmp_path: Path) -> tuple[Practical, Path, Path]:
    from grader.checks.distributed import CHECKS as DISTRIBUTED

    module = ModuleType("p6_timed")
    module.CHECKS = MappingProxyType({"clean_exit": DISTRIBUTED["clean_exit"], "efficiency": speed.CHECKS["efficiency"]})
    module.references = lambda args, runs: {}
    (tmp_path / "assignment.yaml").write_text(SPEC)
    submission, solutions = tmp_path / "work", tmp_path / "solutions"
    for folder in (submission, solutions / "p6"):
        folder.mkdir(parents=True)
        (folder / "p6_ddp.py").write_text("pass\n")
    return Practical(load_assignment(tmp_path / "assignment.yaml", module.CHECKS), module), submission, solutions


def test_timed_runs_alternate_reference_and_submission_launches(timed_practical) -> None:
    practical, submission, solutions = timed_practical
    runner = FakeRunner(lambda job: answer(job, 0.01))
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
    assert [job.name for job in runner.jobs] == ["ws2", *ROUND, *(f"{name}#2" for name in ROUND)]
    references = [job for job in runner.jobs if "@reference" in job.name]
    assert all(job.submission == solutions / "p6" and job.private for job in references)
    assert all(job.submission.name == "taken" and job.submission != submission and not job.private for job in runner.jobs if job not in references)  # the grader's copy
    assert references[0].argv == runner.jobs[2].argv and "--steps=80" in references[0].argv  # the same inputs, the seed included
    assert [job.clock_steps for job in runner.jobs[1:5]] == [80, 80, 240, 240] and "--steps=240" in runner.jobs[4].argv  # the grader's clock: pairs of 80 and 3 × 80 steps, each side's long after a long one
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.PASSED and "1.00× the reference's step time" in efficiency.summary and "by the grader's clock (median of 2 pairs of launches of 80 and 240 steps" in efficiency.summary


def test_a_failing_speed_verdict_waits_for_more_rounds_so_a_burst_of_load_cannot_decide_it(timed_practical) -> None:
    """The spec's 2 rounds say 1.5× and 1.02× (another grading loaded the machine during the
    submission's first launch): 1.26×, the median of the two; a third round passes it, and no
    fourth is made."""
    practical, submission, solutions = timed_practical
    own_steps = {"": 0.015, "#2": 0.0102, "#3": 0.0102}  # per round
    runner = FakeRunner(lambda job: answer(job, 0.01 if "@reference" in job.name or job.name == "ws2" else own_steps[job.name.partition("#")[1] + job.name.partition("#")[2]]))
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
    assert [job.name for job in runner.jobs] == ["ws2", *ROUND, *(f"{name}#2" for name in ROUND), *(f"{name}#3" for name in ROUND)]
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.PASSED and "1.02× the reference's step time" in efficiency.summary and "3 pairs of launches" in efficiency.summary  # the median of the rounds' 1.5, 1.02 and 1.02


def test_a_slow_submission_stays_slow_in_the_extra_rounds_and_a_fast_one_gets_none(timed_practical) -> None:
    practical, submission, solutions = timed_practical
    slow = FakeRunner(lambda job: answer(job, 0.01 if "@reference" in job.name or job.name == "ws2" else 0.015))
    report = grade(practical, submission, slow, GradeOptions(solutions=solutions, seed=5))
    assert len(slow.jobs) == 1 + 4 * 4  # 2 rounds of the spec and 2 more, no further; 4 launches a round
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.FAILED and "1.50× the reference's step time, above the 1.2× allowed" in efficiency.summary and "4 pairs of launches" in efficiency.summary
    fast = FakeRunner(lambda job: answer(job, 0.01))
    grade(practical, submission, fast, GradeOptions(solutions=solutions, seed=5))
    assert len(fast.jobs) == 1 + 2 * 4
    crashing = FakeRunner(lambda job: answer(job, 0.01) if "@reference" in job.name or job.name == "ws2" else JobResult(spec=job, ranks=[], skipped="boom"))
    grade(practical, submission, crashing, GradeOptions(solutions=solutions, seed=5))
    assert [job.name for job in crashing.jobs] == ["ws2", "timed@reference", "timed"]  # its failed launch leaves its side untimed: no more launches of the run, and no matter of doubt



def test_a_verdict_just_under_the_limit_waits_for_more_rounds_and_one_well_under_it_does_not(timed_practical) -> None:
    """1.15× against the spec's 1.2×: within DOUBT_MARGIN of the limit, so the spec's 2 rounds
    and 2 more, and it passes on all of them; 1.05× gets the spec's 2 rounds alone."""
    practical, submission, solutions = timed_practical
    for own_step, rounds, shown in ((0.0115, 4, "1.15×"), (0.0105, 2, "1.05×")):
        runner = FakeRunner(lambda job, own_step=own_step: answer(job, 0.01 if "@reference" in job.name or job.name == "ws2" else own_step))
        report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
        assert len(runner.jobs) == 1 + rounds * 4, [job.name for job in runner.jobs]
        efficiency = next(c for c in report.checks if c.id == "efficiency")
        assert efficiency.status is Status.PASSED and f"{shown} the reference's step time" in efficiency.summary and f"{rounds} pairs of launches" in efficiency.summary


@pytest.mark.parametrize("disturbed", [("timed@reference", "timed@reference+long"), ("timed@reference+long",)], ids=["round", "long-launch"])
def test_a_pass_on_launches_that_load_disturbed_waits_for_more_rounds(timed_practical, disturbed) -> None:
    """The reference's launches of the first round ran at half their pace (a burst of load):
    its pairs say 20 ms and 10 ms a step, and the submission's 10 ms passes at 0.67×. Launches
    of one side that far apart, too few for their median to set the slow one aside, are a
    matter of doubt: a third round, and the verdict rests on the median of 3 pairs, 1.00×.
    Where the burst slowed the long launch alone, the reference's first pair says 25 ms a step
    and -0.2 s outside its steps: the submission's 1 s outside its steps is charged beyond the
    reference's median over its pairs, not beyond that pair's."""
    practical, submission, solutions = timed_practical
    runner = FakeRunner(lambda job: answer(job, 0.02 if job.name in disturbed else 0.01))
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
    assert len(runner.jobs) == 1 + 3 * 4, [job.name for job in runner.jobs]
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.PASSED and "1.00× the reference's step time" in efficiency.summary and "3 pairs of launches" in efficiency.summary, efficiency.summary


def busy(result: JobResult, share: float) -> JobResult:
    """`result` as a launch during which other processes took `share` of the machine's CPU time
    (what the kernel would have counted: grader/run/load.py)."""
    return replace(result, load=LaunchLoad(wall_s=1.0, cpus=2, job_cpu_s=1.5, others_cpu_s=2 * share, waited_s=0.6, ran_s=1.4))


def round_of(job: JobSpec) -> int:
    return int(job.name.partition("#")[2] or 1)


def test_a_slower_step_read_on_launches_other_load_disturbed_is_deferred_not_failed(timed_practical) -> None:
    """Other processes took 40 % of the machine in every round, and the submission's steps read
    1.5× the reference's: the spec's 2 rounds and more while the load lasts (a disturbed round
    does not count toward the 2 more), 8 in all, none quiet, and the verdict is deferred with
    the evidence; the same launches on a quiet machine fail it after the spec's 2 and 2 more."""
    practical, submission, solutions = timed_practical
    for share, status, rounds in ((0.4, Status.DEFERRED, 8), (0.0, Status.FAILED, 4)):
        runner = FakeRunner(lambda job, share=share: busy(answer(job, 0.01 if "@reference" in job.name or job.name == "ws2" else 0.015), share))
        report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
        assert len(runner.jobs) == 1 + rounds * 4
        efficiency = next(c for c in report.checks if c.id == "efficiency")
        assert efficiency.status is status, efficiency.summary
    assert efficiency.summary.startswith("timed (1 node × 2 ranks): 1.50× the reference's step time, above the 1.2× allowed")
    deferred = FakeRunner(lambda job: busy(answer(job, 0.01 if "@reference" in job.name or job.name == "ws2" else 0.015), 0.4))
    efficiency = next(c for c in grade(practical, submission, deferred, GradeOptions(solutions=solutions, seed=5)).checks if c.id == "efficiency")
    assert efficiency.status is Status.DEFERRED and efficiency.summary.endswith(
        "timed: the machine was busy: in 8 of 8 rounds of launches other processes used more than 10% of the machine's CPU time (up to 40%, when the launch's "
        "processes waited for a CPU 30% of the time they wanted one); 0 were left alone, and 2 are needed. On those launches your steps read 1.50× the reference's, "
        "and a speed verdict rests only on steps nothing else disturbed: a grading on a quiet machine (a regrade) decides it"
    )


def test_rounds_other_load_disturbed_are_set_aside_where_enough_quiet_ones_remain(timed_practical) -> None:
    """A burst over the first 2 rounds slowed the submission's launches to 1.5× (5 % of the
    machine taken by others is no disturbance): 2 more rounds, both quiet, and the verdict rests
    on them alone: 1.00×."""
    practical, submission, solutions = timed_practical
    runner = FakeRunner(lambda job: busy(answer(job, 0.015 if "@reference" not in job.name and job.name != "ws2" and round_of(job) <= 2 else 0.01), 0.3 if round_of(job) <= 2 else 0.05))
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
    assert len(runner.jobs) == 1 + 4 * 4
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.PASSED and "1.00× the reference's step time" in efficiency.summary and "2 pairs of launches" in efficiency.summary, efficiency.summary
    assert efficiency.summary.endswith("; 2 of 4 rounds set aside, disturbed by other load")
    assert report.checks[-1].data["speed"]["timed"]["load"]["disturbed_rounds"] == 2


def test_rounds_other_load_disturbed_do_not_count_toward_the_extra_rounds(timed_practical) -> None:
    """The submission's launches read 1.5× in the first 3 rounds, each disturbed by a burst, and
    1.00× in the quiet ones after. The spec's 2 rounds and 2 more would hold one quiet round,
    too few to set the others aside (the verdict deferred); a disturbed round does not count
    toward the 2 more, so a fifth is made, and the 2 quiet rounds decide it."""
    practical, submission, solutions = timed_practical
    runner = FakeRunner(lambda job: busy(answer(job, 0.015 if "@reference" not in job.name and job.name != "ws2" and round_of(job) <= 3 else 0.01), 0.3 if round_of(job) <= 3 else 0.0))
    efficiency = next(c for c in grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5)).checks if c.id == "efficiency")
    assert len(runner.jobs) == 1 + 5 * 4, [job.name for job in runner.jobs]  # a fifth round: of the first 4, one was quiet
    assert efficiency.status is Status.PASSED and "1.00× the reference's step time" in efficiency.summary and efficiency.summary.endswith("; 3 of 5 rounds set aside, disturbed by other load"), efficiency.summary


CARRIED = SPEC.replace("ranks_per_node: 2}", "ranks_per_node: 2, carried: true}").replace("ranks_per_node: 2, args: {steps: 80}}", "ranks_per_node: 2, carried: true, args: {steps: 8}}")


@pytest.fixture
def carried_practical(tmp_path: Path) -> tuple[Practical, Path, Path]:
    """timed_practical with every run carried by the grader's hub: its references the fake
    workload of tests/observations.py, whose traffic the fake runner answers with."""
    from grader.checks.distributed import CHECKS as DISTRIBUTED

    module = ModuleType("p6_carried")
    module.CHECKS = MappingProxyType({"clean_exit": DISTRIBUTED["clean_exit"], "efficiency": speed.CHECKS["efficiency"]})
    module.references = lambda args, runs: {run.name: DataParallelReference(FakeWorkload(run.layout.world_size, steps=int({**args, **run.args}["steps"]))) for run in runs}
    (tmp_path / "assignment.yaml").write_text(CARRIED)
    submission, solutions = tmp_path / "work", tmp_path / "solutions"
    for folder in (submission, solutions / "p6"):
        folder.mkdir(parents=True)
        (folder / "p6_ddp.py").write_text("pass\n")
    return Practical(load_assignment(tmp_path / "assignment.yaml", module.CHECKS), module), submission, solutions


def carried(job: JobSpec, claimed: DdpOptions | None = None, **traffic) -> JobResult:
    """A carried launch of a correct script: its records (rank 0 claiming DDP options `claimed`)
    and the traffic the hub carried (ddp_traffic's options: `used_map`, `buckets`)."""
    steps = int(next(arg for arg in job.argv if arg.startswith("--steps=")).split("=")[1])
    run = ddp_run(job.name, job.layout, steps=steps, traffic=ddp_traffic(FakeWorkload(2, steps=steps), contiguous(2), **traffic))
    if claimed is not None:
        options = DdpArgs(t=0.0, seq=0, step=0, find_unused_parameters=claimed.find_unused_parameters, static_graph=claimed.static_graph, gradient_as_bucket_view=claimed.gradient_as_bucket_view, bucket_cap_mb=claimed.bucket_cap_mb)
        set_events(run.ranks[0], [options, *run.ranks[0].events])
    return replace(run, spec=job)


def test_the_reference_is_timed_with_the_ddp_options_the_traffic_confirms(carried_practical) -> None:
    """find_unused_parameters and small buckets cost time in every DDP: the reference's timed
    launches take them on too (the submission's own launches are left as they are), where the
    traffic of a checked run shows them (an all-reduce of the map of used parameters in every
    step); options that only save time are not (static_graph with no_sync trips an assert of
    torch's reducer); a find_unused_parameters the traffic does not show is not."""
    practical, submission, solutions = carried_practical
    chosen = DdpOptions(find_unused_parameters=True, bucket_cap_mb=1.0)
    seen = replace(chosen, static_graph=True, gradient_as_bucket_view=True)
    shown = {"used_map": True, "buckets": 2}
    runner = FakeRunner(lambda job: carried(job, None if "@reference" in job.name else seen, **shown))
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
    assert [(job.name, job.ddp_options) for job in runner.jobs] == [("ws2", None), *((name + repeat, chosen if "@reference" in name else None) for repeat in ("", "+long#2") for name in ("timed@reference", "timed"))]
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.PASSED and efficiency.summary.endswith("built with your DDP options (find_unused_parameters=True, bucket_cap_mb=1)"), efficiency.summary
    claimed_only = FakeRunner(lambda job: carried(job, None if "@reference" in job.name else replace(seen, bucket_cap_mb=None)))
    report = grade(practical, submission, claimed_only, GradeOptions(solutions=solutions, seed=5))
    assert all(job.ddp_options is None for job in claimed_only.jobs)
    assert "DDP options" not in next(c for c in report.checks if c.id == "efficiency").summary
    faster_when_timed = FakeRunner(lambda job: carried(job, None if "@reference" in job.name else seen, **(shown if job.name == "ws2" or "@reference" in job.name else {})))
    report = grade(practical, submission, faster_when_timed, GradeOptions(solutions=solutions, seed=5))
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.FAILED and "your timed launch built its DDP with bucket_cap_mb=1, your checked runs with find_unused_parameters=True, bucket_cap_mb=1" in efficiency.summary


def test_a_bucket_cap_is_taken_on_as_claimed_and_judged_by_the_all_reduces_the_timed_launches_made(carried_practical) -> None:
    """The checked runs' small model fits one bucket whatever the cap, so their traffic cannot
    show a bucket_cap_mb: the reference's launches take the claimed cap on. A p10 variant with
    bucket_cap_mb=1 could not be timed while the cap had to show in the checked runs (its
    timed launches showed two buckets a step, its checked runs one). A cap claimed and not
    used (the reference's launches then make more all-reduces than the submission's) fails."""
    practical, submission, solutions = carried_practical
    small_buckets = DdpOptions(bucket_cap_mb=1.0)
    honest = FakeRunner(lambda job: carried(job, None if "@reference" in job.name else small_buckets, buckets=2 if "timed" in job.name else 1))
    report = grade(practical, submission, honest, GradeOptions(solutions=solutions, seed=5))
    assert [job.ddp_options for job in honest.jobs if "@reference" in job.name] == [small_buckets, small_buckets]
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.PASSED and efficiency.summary.endswith("built with your DDP options (bucket_cap_mb=1)"), efficiency.summary
    forged = FakeRunner(lambda job: carried(job, None if "@reference" in job.name else small_buckets, buckets=2 if "@reference" in job.name and job.ddp_options else 1))
    report = grade(practical, submission, forged, GradeOptions(solutions=solutions, seed=5))
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.FAILED and "your records say your DDP was built with bucket_cap_mb=1, but your ranks made 1 all-reduces of floating-point values a step, the reference's launches built so 2" in efficiency.summary, efficiency.summary


def test_a_carried_launch_is_timed_by_the_hubs_clock_and_only_when_it_does_the_work() -> None:
    """A step ends when the hub delivered its last gradient all-reduce; a launch whose traffic
    shows other training than the grader's own on its inputs cannot be timed."""
    reference = DataParallelReference(FakeWorkload(2, steps=8))
    job = JobSpec(name="timed", submission=Path("/nowhere"), script="s.py", argv=("--steps=8",), layout=Layout(1, 2), timeout_s=60, carrier=CarrierPlan(60.0, 1 << 20))
    timed = carried_work(carried(job), reference)
    assert timed.step_ends == pytest.approx([0.11 + 0.1 * step for step in range(8)])
    assert timing.step_seconds(timed, warmup=2) == pytest.approx([0.1] * 6)
    lazy = carried_work(replace(carried(job), traffic=ddp_traffic(FakeWorkload(2, steps=8), lambda rank, step: [rank])), reference)  # a row each, not a shard
    assert lazy.step_ends.startswith("what your ranks' all-reduces carried in this launch is not the grader's own training on its inputs: step 0:")
    assert speed.measured([lazy]).problem.startswith("the grader's hub could not time it: what your ranks' all-reduces carried")
    # the reference solution's launches (the grader's own code) keep no data: steps by their all-reduces' sizes
    own = replace(job, private=True, carrier=CarrierPlan(60.0, 0))
    assert carried_work(carried(own), reference).step_ends == pytest.approx(timed.step_ends)
    short = replace(carried(own), traffic=ddp_traffic(FakeWorkload(2, steps=5), contiguous(2)))
    assert carried_work(short, reference).step_ends == "step 5: your ranks made no more all-reduces of the size of a step's gradients (5 of 8 steps found)"


def test_without_the_reference_solution_speed_checks_are_deferred_and_nothing_is_timed(timed_practical) -> None:
    practical, submission, _ = timed_practical
    runner = FakeRunner(lambda job: launch(job.name, [0.01] * 8, [0.01] * 8))
    report = grade(practical, submission, runner, GradeOptions(seed=5))
    assert [job.name for job in runner.jobs] == ["ws2", "timed"]  # clean_exit still wants it, once
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.DEFERRED and "the reference solution, which is not available here" in efficiency.summary
    runner = FakeRunner(lambda job: launch(job.name, [0.01] * 8, [0.01] * 8))
    report = grade(practical, submission, runner, GradeOptions(seed=5, timing=False, solutions=submission.parent / "solutions"))
    assert "--no-timing" in next(c for c in report.checks if c.id == "efficiency").summary


def test_only_checks_that_compare_with_the_reference_launch_it(tmp_path: Path) -> None:
    from grader.checks.distributed import CHECKS as DISTRIBUTED
    from grader.grade.timing import reference_launched

    module = ModuleType("p6_pairs")
    module.CHECKS = MappingProxyType({"clean_exit": DISTRIBUTED["clean_exit"], **speed.CHECKS})
    module.references = lambda args, runs: {}
    spec = SPEC.replace("  - {name: timed, ranks_per_node: 2, args: {steps: 80}}\n", "  - {name: timed, ranks_per_node: 2, args: {steps: 80}}\n  - {name: ddp, ranks_per_node: 2}\n  - {name: dp, solution: p5, script: p5_dp.py, args: {steps: 8}}\n")
    spec += "  - {id: ddp_vs_dp, check: faster_than, title: DDP vs DP, points: 1, runs: [ddp, dp]}\n"
    (tmp_path / "assignment.yaml").write_text(spec)
    practical = Practical(load_assignment(tmp_path / "assignment.yaml", module.CHECKS), module)
    runs, checks = practical.assignment.runs, practical.assignment.checks
    assert reference_launched(practical, checks, runs) == {"timed"}  # not ddp (faster_than) nor dp (a solution)


# ---------------------------------------------------------------- GPU telemetry
GIB = 2**30


def test_the_sampler_summarises_memory_added_and_utilisation_per_gpu() -> None:
    readings = [[(1 * GIB, 0), (1 * GIB, 0)], [(5 * GIB, 90), (2 * GIB, 40)], [(6 * GIB, 100), (2 * GIB, 60)], [(1 * GIB, 0), (1 * GIB, 0)]]
    source = FakeGpus(["H100", "H100"], [80 * GIB, 80 * GIB], readings)
    sampler = Sampler(source, interval_s=0.01)
    sampler.start()
    import time

    time.sleep(0.1)
    telemetry = sampler.stop()
    assert telemetry is not None and telemetry["source"] == "NVML" and telemetry["samples"] >= 4
    gpu0, gpu1 = telemetry["gpus"]
    assert (gpu0["memory_before_mib"], gpu0["memory_peak_mib"], gpu0["memory_added_peak_mib"]) == (1024.0, 6144.0, 5120.0)
    assert gpu1["memory_added_peak_mib"] == 1024.0 and gpu1["utilization_max_pct"] == 60
    assert describe(telemetry).splitlines()[0] == "GPU 0 (H100): peak memory 6144 MiB (+5120 MiB during the run), utilisation " + f"{gpu0['utilization_mean_pct']:.0f}% mean, 100% max"


def test_without_nvml_telemetry_is_off_with_a_reason() -> None:
    source = open_nvml()
    if not isinstance(source, str):
        source.close()
        pytest.skip("this machine has NVML: the reason is only given without it")
    assert source.startswith("GPU telemetry off: ")


def telemetry_of(*added_mib: float) -> dict:
    return summarise([f"GPU{i}" for i in range(len(added_mib))], [80 * GIB] * len(added_mib), [[(0, 0)] * len(added_mib), [(int(m * 2**20), 50) for m in added_mib]], 0.05)


def test_gpu0_imbalance_is_judged_on_the_graders_own_nvml_readings() -> None:
    loaded = launch("dp_gpus", [0.01] * 3, telemetry=telemetry_of(3000, 1200))
    verdict = gpu0_memory(CheckContext(runs=(loaded,), options={}, args={}, gpus=2))
    assert verdict.passed and "GPU 0: +3000 MiB, GPU 1: +1200 MiB (NVML, measured by the grader)" in verdict.details[0]
    even = launch("dp_gpus", [0.01] * 3, telemetry=telemetry_of(1200, 1300))
    verdict = gpu0_memory(CheckContext(runs=(even,), options={}, args={}, gpus=2))
    assert not verdict.passed and "GPU 0 is not the most loaded: GPU 0: +1200 MiB, GPU 1: +1300 MiB" in verdict.details[0]


def test_telemetry_reaches_the_results_and_the_feedback(timed_practical) -> None:
    practical, submission, _ = timed_practical
    runner = FakeRunner(lambda job: launch(job.name, [0.01] * 8, [0.01] * 8, telemetry=telemetry_of(500, 400)))
    report = grade(practical, submission, runner, GradeOptions(seed=5))
    document = to_gradescope(report)
    assert document["extra_data"]["runs"][0]["gpu_telemetry"]["gpus"][0]["memory_added_peak_mib"] == 500.0
    assert "GPU 1 (GPU1): peak memory 400 MiB (+400 MiB during the run)" in overview_text(report)


def test_a_submission_that_uses_up_the_budget_fails_efficiency_and_the_reference_keeps_its_time(carried_practical) -> None:
    """The submission's launches never take the time the reference's planned launches need,
    and a checked run takes at most its share of the time left: a submission whose checked run
    and timed launch run to their limits leaves the reference timed and fails `efficiency` (it
    was once deferred, full marks kept); its failed timed launch is its last."""
    import time

    practical, submission, solutions = carried_practical

    def hanging(job: JobSpec) -> JobResult:
        if job.name in ("ws2", "timed"):
            time.sleep(job.timeout_s)  # runs to the time it was given
            return replace(carried(job), wall_s=job.timeout_s, timed_out=True)
        return replace(carried(job), wall_s=0.6)

    runner = FakeRunner(hanging)
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5, total_timeout_s=6.0))
    assert runner.jobs[0].timeout_s == pytest.approx(2.0, abs=0.1)  # 4 s of 6 s (2 kept for two reference launches), shared with the timed run
    assert [job.name for job in runner.jobs] == ["ws2", "timed@reference", "timed"]
    assert 2.5 < runner.jobs[2].timeout_s < 6.0 - 2.0 - 0.9  # what is left but the 0.9 s kept for the reference's second launch (1.5 × 0.6 s)
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.FAILED, efficiency.summary
    assert "timed: your script could not be timed: did not finish within" in efficiency.summary, efficiency.summary


@pytest.mark.parametrize("reference_s", [0.6, 3.0])
def test_a_run_that_keeps_the_cpu_busy_is_stopped_at_a_pace_set_by_the_reference_measured_then(carried_practical, reference_s: float) -> None:
    """A run that never ends by itself is stopped at its pace (grader/grade/options.py
    pace_limit_s), not at its share of the budget: the submission's first launch gets 1.5 × the
    4 s floor; stopped there, the reference's same run is launched once, and the submission's is
    launched again only where 5 × the reference's time gives it markedly more (a loaded machine,
    a heavy run). The feedback names the reference's time."""
    practical, submission, solutions = carried_practical

    def busy(job: JobSpec) -> JobResult:
        if job.name == "ws2":
            return replace(carried(job), wall_s=job.timeout_s, timed_out=True)
        return replace(carried(job), wall_s=reference_s if "@reference" in job.name else 0.6)

    runner = FakeRunner(busy)
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
    names = [job.name for job in runner.jobs]
    assert runner.jobs[0].timeout_s == 6.0 and names[1] == "ws2@reference"
    if reference_s > 1.2:  # 5 × 3.0 s = 15 s, more than 1.5 × the 6 s it had
        assert names[2] == "ws2" and runner.jobs[2].timeout_s == 15.0 and names.count("ws2@reference") == 1
        limit = "15"
    else:
        assert names[2] == "timed@reference"
        limit = "6"
    clean_exit = next(c for c in report.checks if c.id == "clean_exit")
    assert clean_exit.status is Status.FAILED
    assert f"ws2 (1 node × 2 ranks): did not finish within {limit} s, where the reference solution's same run takes {reference_s:g} s on this machine, {float(limit) / reference_s:.0f}× its whole run (a hang, or far too slow?)" in clean_exit.summary, clean_exit.summary


def test_a_run_stopped_at_its_pace_is_launched_again_with_twice_the_time_where_the_runs_before_it_ended(carried_practical) -> None:
    """A program whose runs so far ended by themselves works: a launch of it stopped at its
    pace (a burst of load: in CI, p6's timed run stopped at 4 s where the reference's took
    0.7 s just after) is launched again with twice the time it had, and its check keeps its
    points. A program with no run ended (`test_a_run_that_keeps_the_cpu_busy...`) is not."""
    practical, submission, solutions = carried_practical
    stopped = []

    def stalled_once(job: JobSpec) -> JobResult:
        if job.name.startswith("timed") and "@reference" not in job.name and not stopped:
            stopped.append(job.timeout_s)
            return replace(carried(job), wall_s=job.timeout_s, timed_out=True)
        return replace(carried(job), wall_s=0.6)

    runner = FakeRunner(stalled_once)
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
    own = [job for job in runner.jobs if job.name.startswith("timed") and "@reference" not in job.name]
    assert [job.timeout_s for job in own[:2]] == [pytest.approx(12.0), pytest.approx(24.0)], [(job.name, job.timeout_s) for job in runner.jobs]  # 20 × the reference's 0.6 s, then twice that
    assert own[0].name == own[1].name == "timed"
    assert next(c for c in report.checks if c.id == "clean_exit").status is Status.PASSED


def test_without_timing_the_timing_workload_is_not_launched_where_its_checks_read_other_runs(carried_practical) -> None:
    """--no-timing: the timed run, which clean_exit reads beside ws2, is not launched (a
    quicker self-check or test), and the report says so."""
    practical, submission, solutions = carried_practical
    runner = FakeRunner(lambda job: replace(carried(job), wall_s=0.6))
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5, timing=False))
    assert [job.name for job in runner.jobs] == ["ws2"]
    assert next(c for c in report.checks if c.id == "clean_exit").status is Status.PASSED
    assert "--no-timing: the speed checks were left out, and their timing workload (timed) not launched" in report.notes


def test_a_program_slow_in_every_run_keeps_its_own_pace_and_a_limit_given_is_kept(carried_practical) -> None:
    """A submission whose runs all take long by a cost of their own (torch.compile) is given
    3 × its longest finished run, per share of the CPU (a run of more ranks than cores, that
    many times more); a per-run limit given in the options replaces the pace (and no reference
    is launched to set one); real GPUs get 4 × the floor."""
    from grader.grade.pace import Paces
    from grader.grade.options import pace_limit_s

    practical, submission, solutions = carried_practical
    runner = FakeRunner(lambda job: replace(carried(job), wall_s=0.5 if "@reference" in job.name else 5.0))
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
    assert [(job.name, job.timeout_s) for job in runner.jobs[:3]] == [("ws2", 6.0), ("timed@reference", pytest.approx(runner.jobs[1].timeout_s)), ("timed", 15.0)]
    assert next(c for c in report.checks if c.id == "clean_exit").status is Status.PASSED
    paces = Paces(True, 0, cores=2)
    paces.launched = 1
    paces.ended(RunDef("ws2", Layout(1, 2)), 5.5)  # torch.compile's p6 on 2 loaded cores: ws2 5.5 s, ws4 15.5 s
    assert [paces.limit_s(RunDef(name, Layout(1, ranks)), None) for name, ranks in (("ws1", 1), ("ws3", 3), ("ws4", 4))] == pytest.approx([16.5, 24.75, 33.0])
    given = FakeRunner(lambda job: replace(carried(job), wall_s=job.timeout_s, timed_out=True) if job.name == "ws2" else replace(carried(job), wall_s=0.5))
    grade(practical, submission, given, GradeOptions(solutions=solutions, seed=5, run_timeout_s=30.0))
    assert [(job.name, job.timeout_s) for job in given.jobs[:2]] == [("ws2", 30.0), ("timed@reference", pytest.approx(given.jobs[1].timeout_s))]
    assert pace_limit_s(None, [], first=False, real_gpus=True) == 16.0 and pace_limit_s(2.0, [1.0], first=True) == 10.0


def test_a_timed_launch_of_a_program_that_works_is_given_twenty_times_the_reference(carried_practical) -> None:
    """Needless work in every step shows in the timed run: where the submission's checked runs
    ended by themselves, its timed launch is given 20 × the reference's launch (the speed
    check judges the slowness; clean_exit, which reads the timed run, keeps its verdict); where
    they hung, 5 × as any run."""
    practical, submission, solutions = carried_practical

    def slow_when_timed(job: JobSpec) -> JobResult:
        seconds = {"ws2": 0.5, "timed@reference": 1.0}.get(job.name.split("#")[0], 6.5)
        return replace(carried(job), wall_s=seconds)

    runner = FakeRunner(slow_when_timed)
    report = grade(practical, submission, runner, GradeOptions(solutions=solutions, seed=5))
    assert [(job.name, job.timeout_s) for job in runner.jobs[:3]] == [("ws2", 6.0), ("timed@reference", pytest.approx(runner.jobs[1].timeout_s)), ("timed", 20.0)]
    assert next(c for c in report.checks if c.id == "clean_exit").status is Status.PASSED
    hung = FakeRunner(lambda job: replace(carried(job), wall_s=job.timeout_s, timed_out=True) if "@reference" not in job.name else replace(carried(job), wall_s=1.0))
    grade(practical, submission, hung, GradeOptions(solutions=solutions, seed=5))
    assert [(job.name, job.timeout_s) for job in hung.jobs[:4]] == [("ws2", 6.0), ("ws2@reference", pytest.approx(hung.jobs[1].timeout_s)), ("timed@reference", pytest.approx(hung.jobs[2].timeout_s)), ("timed", 5.0)]


@pytest.mark.parametrize("wall_s", [0.5, 3.0])
def test_without_the_reference_the_courses_baselines_set_the_pace_of_a_run_that_never_ends(carried_practical, wall_s: float) -> None:
    """The student's self-check in their own repository has no reference solution to launch:
    the course's baselines (calibration/<practical>.yaml, carried by the export) stand in for
    it, BASELINE_MARGIN × the longest time measured, so a run that never ends is stopped at
    the pace the course's grading would set (1.5 × the 4 s floor, or 5 × 2 × 3 s), once, with
    no reference launched; without baselines it runs to its share of the budget."""
    practical, submission, _ = carried_practical
    machines = {"laptop": {"runs": {"ws2": {"wall_s": wall_s / 2}}}, "cluster": {"runs": {"ws2": {"wall_s": wall_s, "median_step_s": 0.01}}}}
    spinning = FakeRunner(lambda job: replace(carried(job), wall_s=job.timeout_s, timed_out=True))
    report = grade(practical, submission, spinning, GradeOptions(solutions=None, calibration=machines, seed=5))
    assert [job.name for job in spinning.jobs] == ["ws2", "timed"]  # no reference to launch, no second try: its runs never ended by themselves
    assert spinning.jobs[0].timeout_s == pytest.approx(max(6.0, 5 * 2 * wall_s)) and spinning.jobs[1].timeout_s == pytest.approx(4.0)  # the timed run, not measured: the floor
    clean_exit = next(c for c in report.checks if c.id == "clean_exit")
    assert f"where the reference solution's same run takes {2 * wall_s:g} s on the course's machines (twice the longest they measured)" in clean_exit.summary, clean_exit.summary
    unpaced = FakeRunner(lambda job: replace(carried(job), wall_s=job.timeout_s, timed_out=True))
    grade(practical, submission, unpaced, GradeOptions(solutions=None, seed=5))
    assert unpaced.jobs[0].timeout_s > 30  # its share of the spec's budget
