"""Speed checks: is the submission as fast as it should be, measured by the grader.

Every number here comes from grader/speed/measure.py's protocol over launches the grader
made, with inputs it chose; nothing a script prints is used. Each check compares with a
measurement taken on the same machine in the same grading (the reference solution's launches,
interleaved with the submission's), so a busy node slows both sides alike:

- `efficiency`: what a step of the submission costs (each timed step by its median over the
  launches, averaged: `cost_ratio`) is at most `max_ratio` × the reference's, per run (gradable
  anywhere, the CPU included); the reference's DDP takes the submission's options
  (grader/grade/pipeline.py, grader/grade/timing.py);
- `scaling`: the speedup of the parallel run over the single-device run is at least `fraction`
  of the reference's speedup — the one calibrated on this machine's GPU model and count
  (calibration/<practical>.yaml) when there is one, else the one measured in this grading;
- `faster_than`: the first run's step time is at most `max_ratio` × the second's (e.g. p6's
  DDP against p5's reference DataParallel on the same GPUs and batch).

A submission that would fail `efficiency` after the spec's k rounds of launches, or pass it
by less than DOUBT_MARGIN, or pass it on launches that load visibly disturbed, gets up to k
more rounds before the verdict (grader/grade/timing.py): failing takes twice the evidence,
while a slow submission stays slow in every round, and a verdict near the limit, or on
disturbed launches, rests on more of them. Steps (by the hub's clock) or rounds (by the
grader's) during which the kernel saw other load take the CPUs (grader/run/load.py) are set
aside where enough quiet ones remain; where too few do, or where a failing verdict beside
disturbed launches is not borne out by the submission's fastest steps, a verdict that would fail
is deferred with the evidence, never failed (`judged_rounds`, `shared_quiet`, `busy_reason`,
`unsure_fail`, `busy_machine`). A side that could not be timed fails the
check when it is the submission's own launches (a crash is not a fast run), and defers it
when it is the reference's (not the student's doing).
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any, Mapping, Sequence

from grader.checks import failures
from grader.checks.base import CheckContext, CheckDef, OptionDef, Verdict
from grader.results.model import Later
from grader.run.job import JobResult
from grader.speed.measure import QUIET_ROUNDS, Disturbance, Measurement, TimedRuns, busy_reason, charged, cost_ratio, describe_counts, judged_rounds, measure, shared_quiet, unsure_fail, unsure_pass


def measured(launches: Sequence[JobResult], warmup: int = 1) -> Measurement:
    """grader/speed/measure.py's protocol over one side's launches, a failed launch read as the
    checks read it (grader/checks/failures.py)."""
    return measure(launches, warmup, failures.explain)


NOT_TIMED = "this grading did not time it (speed is measured by the autograder, from the spec's runs)"


def _sides(ctx: CheckContext, name: str) -> "tuple[Measurement, Measurement, Disturbance] | None":
    """The submission's side and the reference's of a timed run, over the rounds a verdict
    rests on (`judged_rounds`: the quiet ones, where other load disturbed some); by the
    grader's clock, the submission's charged with its time outside its steps beyond the
    reference's (`charged`); and how other load touched the rounds."""
    timed: TimedRuns | None = ctx.timings.get(name)
    if timed is None:
        return None
    judged, disturbance = judged_rounds(timed)
    own, reference = measured(judged.own, ctx.warmup_steps), measured(judged.reference, ctx.warmup_steps)
    return charged(own, reference), reference, disturbance


def busy_machine(reason: str, ratio: float) -> str:
    """Why a verdict that other load may have decided is deferred, and what would grade it."""
    return (
        f"the machine was busy: {reason}. On those launches your steps read {ratio:.2f}× the reference's, and a speed verdict rests only on "
        "steps nothing else disturbed: a grading on a quiet machine (a regrade) decides it"
    )


def _set_aside(own: Measurement, reference: Measurement, rounds: str) -> str:
    """'; judged on the steps other load left alone (62% of a step count's steps or more)' (by
    the hub's clock), or `rounds` ('; 2 of 4 rounds set aside, disturbed by other load', by the
    grader's clock)."""
    keep = shared_quiet(own, reference)
    if keep is not None and keep.enough:
        return f"; judged on the steps other load left alone ({keep.coverage:.0%} of a step count's steps or more)"
    return rounds


def _pair(ctx: CheckContext, roles: str) -> tuple[list[str], list[tuple[Measurement, Measurement]]] | Verdict:
    """The two runs of a comparing check, each measured; or the verdict that defers it."""
    if len(ctx.runs) != 2:
        return Verdict(False, "", deferred=f"the spec must give this check two runs ({roles}), found {len(ctx.runs)}")
    names = [run.spec.name for run in ctx.runs]
    sides = [_sides(ctx, name) for name in names]
    if any(side is None for side in sides):
        return Verdict(False, "", deferred=NOT_TIMED, later=Later.AUTOGRADER)
    return names, [side[:2] for side in sides if side is not None]


def _adopted_options(ctx: CheckContext, name: str) -> str:
    """', built with your DDP options (…)' when the reference's launches took the submission's
    options that are not DDP's defaults."""
    chosen = ctx.timings[name].adopted_options
    return f", built with your DDP options ({chosen.describe()})" if chosen is not None and chosen.describe() else ""


def efficiency(ctx: CheckContext) -> Verdict:
    """Per timed run, what a step of yours costs is at most max_ratio × the reference
    solution's, both measured in this grading over launches made alternately: step by step,
    the median of that step over your launches, averaged over the steps (every step counts:
    work added to one step in five costs what it costs; a step that another process slowed
    in one launch does not count). The reference's DDP takes your DDP options (as the traffic
    shows them; grader/grade/timing.py adopted_options): a choice DDP offers costs you
    nothing here. Steps that other load disturbed are set aside, and a slower step read only
    where too few were left alone is deferred, not failed (`busy_reason`)."""
    limit = float(ctx.options["max_ratio"])
    lines, data, passed = [], {}, True
    for run in ctx.runs:
        sides = _sides(ctx, run.spec.name)
        if sides is None:
            return Verdict(False, "", deferred=NOT_TIMED, later=Later.AUTOGRADER)
        own, reference, disturbance = sides
        if not own.timed:  # first: a submission that used up the budget, the reference's launches unmade, fails
            return Verdict(False, f"{run.spec.name}: your script could not be timed: {own.problem}")
        if not reference.timed:
            return Verdict(False, "", deferred=f"the reference solution could not be timed here ({reference.problem})")
        ratio = cost_ratio(own, reference)
        ok = ratio <= limit
        busy = busy_reason(own, reference, disturbance) or unsure_fail(own, reference, disturbance, limit) if not ok else unsure_pass(own, reference, limit)
        if busy:
            return Verdict(False, "", deferred=f"{run.spec.name}: {busy_machine(busy, ratio)}", later=Later.QUIET_MACHINE, data={"speed": {run.spec.name: {"ratio": round(ratio, 4), "max_ratio": limit, "load": disturbance.as_data(), **_launch_loads(ctx.timings[run.spec.name])}}})
        passed &= ok
        adopted = _adopted_options(ctx, run.spec.name)
        aside = _set_aside(own, reference, f"; {disturbance.disturbed} of {disturbance.rounds} rounds set aside, disturbed by other load" if disturbance.disturbed and disturbance.quiet >= QUIET_ROUNDS and own.pair_steps is not None else "")
        lines.append(f"{run.spec.name} ({run.spec.describe()}): {ratio:.2f}× the reference's step time{'' if ok else f', above the {limit:g}× allowed'} — yours {own.describe_cost()}, the reference {reference.describe_cost(records=False)}{describe_counts(own, reference)}{adopted}{aside}")
        data[run.spec.name] = {"ratio": round(ratio, 4), "max_ratio": limit, "submission": own.as_data(), "reference": reference.as_data(), "load": disturbance.as_data(), **_launch_loads(ctx.timings[run.spec.name])}
    summary = "; ".join(lines) if passed else next(line for line in lines if "allowed" in line)
    return Verdict(passed, summary, tuple(lines), data={"speed": data})


def _launch_loads(timed: TimedRuns) -> dict:
    """Each launch's share of the machine other processes took, side by side, in launch order."""
    return {"others_share": {side: [None if launch.load is None else round(launch.load.others_share, 3) for launch in launches] for side, launches in (("submission", timed.own), ("reference", timed.reference))}}


DOUBT_MARGIN = 0.1  # a ratio less than this below max_ratio is in doubt too: work moved ahead of the loop, 1.5x in all, read 1.22-1.48x where the launches of one step count were one each (bench/RESULTS.md)


def efficiency_doubtful(timed: TimedRuns, warmup: int, options: Mapping[str, Any]) -> bool:
    """Whether `efficiency` would fail on the launches it judges (`judged_rounds`), or pass them by less than
    DOUBT_MARGIN, or pass them on launches of one side that load visibly disturbed
    (`Measurement.unsettled`), though both sides were timed: more launches of both may still
    pass it, or fail it (a crash or an untimed side is not a matter of doubt). Each round adds
    a launch of every step count to each side, and the least time before the first timed step,
    which `charged` reads per count, is the least over more of them. (A burst of load over
    one round of p6's, its reference's launches 52 ms a step against 23 ms in the other, and
    its submission's first timed step late, let each step's work moved ahead of the loop pass
    at 0.94× in CI.) Launches with steps or rounds other load disturbed are a matter of doubt
    too: more rounds bring more quiet ones."""
    judged, disturbance = judged_rounds(timed)
    mine = measured(judged.own, warmup)
    reference = measured(judged.reference, warmup)
    own = charged(mine, reference)
    if not (own.timed and reference.timed):
        return False
    keep = shared_quiet(own, reference)
    busy = busy_reason(own, reference, disturbance) is not None or unsure_pass(own, reference, float(options["max_ratio"])) is not None or (keep is not None and keep.coverage < 1.0)
    return busy or cost_ratio(own, reference) > float(options["max_ratio"]) - DOUBT_MARGIN or reference.unsettled or mine.unsettled


def _calibrated_speedup(ctx: CheckContext, baseline: str, parallel: str) -> float | None:
    runs = (ctx.baselines or {}).get("runs", {})
    try:
        return float(runs[baseline]["median_step_s"]) / float(runs[parallel]["median_step_s"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None


def scaling(ctx: CheckContext) -> Verdict:
    """The speedup of the second run (parallel) over the first (single device) reaches
    `fraction` of the reference solution's speedup on this GPU model and count."""
    pair = _pair(ctx, "single device, parallel")
    if isinstance(pair, Verdict):
        return pair
    names, ((single, single_ref), (parallel, parallel_ref)) = pair
    for name, side in zip(names, (single, parallel)):
        if not side.timed:
            return Verdict(False, f"{name}: your script could not be timed: {side.problem}")
    speedup = single.best_s / parallel.best_s
    reference = _calibrated_speedup(ctx, *names)
    source = "calibrated on this GPU model and count"
    if reference is None and single_ref.timed and parallel_ref.timed:
        reference, source = single_ref.typical_s / parallel_ref.typical_s, "measured in this grading"
    if reference is None:
        return Verdict(False, "", deferred="no reference speedup on this machine: neither calibrated (`grader calibrate`) nor measurable in this grading")
    threshold = float(ctx.options["fraction"]) * reference
    passed = speedup >= threshold
    summary = (
        f"speedup {speedup:.2f}× ({names[0]} {single.describe()}; {names[1]} {parallel.describe()}); "
        f"{'at least' if passed else 'below'} the {threshold:.2f}× required ({ctx.options['fraction']:g} × the reference's {reference:.2f}×, {source})"
    )
    data = {"speedup": round(speedup, 4), "threshold": round(threshold, 4), "reference_speedup": round(reference, 4), "threshold_source": source, "submission": {names[0]: single.as_data(), names[1]: parallel.as_data()}}
    return Verdict(passed, summary, data={"speed": data})


def faster_than(ctx: CheckContext) -> Verdict:
    """The first run's step time (its best launch) is at most max_ratio × the second run's
    (its median launch)."""
    pair = _pair(ctx, "yours, the one to compare with")
    if isinstance(pair, Verdict):
        return pair
    names, ((first, _), (second, _)) = pair
    if not first.timed:
        return Verdict(False, f"{names[0]}: your script could not be timed: {first.problem}")
    if not second.timed:
        return Verdict(False, "", deferred=f"{names[1]} could not be timed here ({second.problem})")
    limit = float(ctx.options["max_ratio"])
    ratio = first.best_s / second.typical_s
    passed = ratio <= limit
    summary = f"{names[0]} {first.describe()} is {ratio:.2f}× {names[1]}'s {second.describe(records=False)}; at most {limit:g}× passes"
    return Verdict(passed, summary, data={"speed": {"ratio": round(ratio, 4), "max_ratio": limit, names[0]: first.as_data(), names[1]: second.as_data()}})


CHECKS = MappingProxyType(
    {
        check.id: check
        for check in (
            CheckDef("efficiency", efficiency, efficiency.__doc__ or "", {"max_ratio": OptionDef(float, 1.2, minimum=1.0, help="the slowest step-time ratio to the reference that passes")}, timed=True, doubtful=efficiency_doubtful),
            CheckDef("scaling", scaling, scaling.__doc__ or "", {"fraction": OptionDef(float, 0.8, minimum=0.0, maximum=1.0, help="the share of the reference's speedup required")}, real_gpus=2, timed=True),
            CheckDef("faster_than", faster_than, faster_than.__doc__ or "", {"max_ratio": OptionDef(float, 1.0, minimum=0.1, help="the slowest ratio of the first run's step time to the second's that passes")}, real_gpus=2, timed=True, against_reference=False),
        )
    }
)
