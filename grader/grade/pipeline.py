"""Grading one submission: choose the inputs, run the script, judge, report.

1. select the checks (public ones for a self-check); defer those that need more real GPUs
   than this machine has, and plan the runs the others need (the spec's, or the overrides);
2. choose the arguments, the seed among them, afresh for every grading;
3. take the submission once, into the grader's own folder (`take`: what is graded cannot
   change under the grader), prepare it when the practical needs it (its module's `prepare`,
   e.g. taking a notebook's graded cells and a driver that runs them), read its answers file;
4. start the runner and, while it warms up, compute the practical's reference;
5. run each launch within the grading's time budget; a run that a speed check times is
   launched k times (the spec's `timing.repeats`), each launch after one of the reference
   solution's launches of the same run (so both see the same machine load; see
   grader/speed/measure.py for the protocol), and up to k times more while a speed check
   would fail it on the launches so far;
6. judge every check on its runs and build the report.

Nothing the submission does can make this raise; a failure of the grader's own code ends in
a report whose `error` says so.
"""
from __future__ import annotations

import platform
import tempfile
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from grader import __version__
from grader.checks import failures
from grader.checks.base import Answers, CheckContext, Verdict
from grader.checks.runs import unfinished
from grader.course import Practical
from grader.grade.answers import load_answers, manual_texts
from grader.grade.intake import take, unrunnable
from grader.grade.machine import machine_key
from grader.grade.options import MIN_RUN_S, RELAUNCH_GAIN, WORKING_RELAUNCH_FACTOR, GradeOptions, run_share_s, time_limits
from grader.grade.pace import Paces, baseline_times
from grader.grade.plan import JobMaker, carried, choose_args, deferred_checks, drawn_note, plan_runs, reference_at_hand, runs_of, untimed_workloads
from grader.grade.prepared import Prepared
from grader.probe.messages import DdpOptions
from grader.results.model import CheckResult, GradingReport, Later, Pending, RunSummary, Status
from grader.run.job import JobResult, JobRunner
from grader.run.tree import remove_tree
from grader.spec import CheckSpec, RunDef, load_answer_key
from grader.speed.measure import TimedRuns
from grader.grade.timing import HubTiming, Schedule, TimedLaunches, adopted_options, clocked_steps, doubts, reference_launched, run_timed, stretched_steps, timed_runs


def environment(seed: int | None) -> dict:
    """Where this grading ran: host, Python, torch, devices, grader version."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    name = torch.cuda.get_device_name(0) if gpus else ""
    return {
        "host": platform.node(),
        "machine": machine_key(gpus, name),
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda_gpus": gpus,
        "devices": f"{gpus} × {name}" if gpus else "CPU only (no CUDA GPU)",
        "grader": __version__,
        "seed": seed,
    }


@dataclass
class _Launcher:
    """Makes one launch within the grading's time limits (grader/grade/options.py): the
    submission's launches leave the time the reference's planned timed launches need
    (`TimedLaunches.reserve_s`), a checked run takes at most its share of the time left, and
    a launch that would start with less than MIN_RUN_S is skipped, saying why. A run of the
    submission is held to its pace (`Paces`): stopped there, the reference solution's same run
    is launched (once) to measure it, and the submission's launched again where that leaves
    it markedly more time, or, with WORKING_RELAUNCH_FACTOR × the time it had, where its runs
    so far ended by themselves (a program that works, stopped by a burst of load: in CI, p6's
    timed run stopped at 4 s where the reference's took 0.7 s just after). On a terminal,
    each launch is told as it starts and as it ends, with its time."""

    runner: JobRunner
    job_for: JobMaker
    deadline: float
    budget_s: float
    problem: str | None  # why no launch can be made (the submission cannot be run)
    progress: Callable[[str], None] | None
    timed: TimedLaunches
    paces: Paces
    ddp_options: DdpOptions | None = None  # the submission's costly DDP options, for the reference's timed launches (set once the checked runs are done)

    def __call__(self, run: RunDef, role: str, repeat: int, steps: int | None = None, shares: int = 1) -> JobResult:
        if role == "reference" or not self.paces.holds(run):
            result, _ = self._launch(run, role, repeat, steps, shares)
            if role == "reference" and not result.skipped and failures.explain(result) is None:
                self.paces.reference_s[(run.name, steps)] = result.wall_s
            return result
        timed = run in self.timed.schedule.timed
        result, at_pace = self._launch(run, role, repeat, steps, shares, self.paces.limit_s(run, steps, timed))
        self.paces.launched += 1
        if not (at_pace and result.timed_out and result.stalled_s is None):
            if not (result.timed_out or result.skipped or result.error):
                self.paces.ended(run, result.wall_s)
            return result
        if (run.name, steps) not in self.paces.reference_s and self.paces.reference_at_hand:
            self(run, "reference", 0, steps)
        reference_s = self.paces.reference_s.get((run.name, steps))
        pace = self.paces.limit_s(run, steps, timed) if reference_s is not None or not self.paces.reference_at_hand else None
        if pace is None or pace > RELAUNCH_GAIN * result.spec.timeout_s:
            result, _ = self._launch(run, role, repeat, steps, shares, pace)
        elif self.paces.own_s:  # its runs so far ended by themselves: a stop at its pace is likelier the machine's load than a hang
            result, _ = self._launch(run, role, repeat, steps, shares, WORKING_RELAUNCH_FACTOR * result.spec.timeout_s)
        return replace(result, reference_s=reference_s, reference_measured="on this machine" if self.paces.reference_at_hand else "on the course's machines (twice the longest they measured)")

    def _launch(self, run: RunDef, role: str, repeat: int, steps: int | None, shares: int, pace: float | None = None) -> tuple[JobResult, bool]:
        """One launch, and whether `pace` (rather than the budget) set its limit."""
        kept = 0.0 if role == "reference" else self.timed.reserve_s()
        left = self.deadline - time.monotonic() - kept
        share = run_share_s(left, shares)
        job = self.job_for(run, share if pace is None else min(share, pace), role, repeat, steps)
        at_pace = pace is not None and pace < share and job.timeout_s <= pace
        if role == "reference":
            job = replace(job, ddp_options=self.ddp_options)
        if self.problem:
            return JobResult(spec=job, ranks=[], skipped=self.problem), False
        if left < MIN_RUN_S:
            kept_note = f" ({kept:.0f} s of it are kept for the reference solution's timed launches)" if kept else ""
            return JobResult(spec=job, ranks=[], skipped=f"the grading's time budget ({self.budget_s:g} s) was used up by earlier runs{kept_note}"), False
        if self.progress is None:
            return self.runner.run(job), at_pace
        self.progress(f"run {job.name} ({job.describe()})")
        result = self.runner.run(job)
        self.progress(f"{job.name}: {_ended(result)} in {result.wall_s:.1f} s")
        return result, at_pace


def _run_all(runs: tuple[RunDef, ...], launch: _Launcher, adopt: Callable[[Iterable[JobResult]], DdpOptions | None]) -> tuple[dict[str, JobResult], dict[str, TimedRuns]]:
    """Every planned launch in order: each checked run once, with its share of the time left
    (that time over the checked runs still to come, and the timed runs as one more); then the
    timed runs' launches (grader/grade/timing.py), the reference's building their DDP with
    the submission's costly options as `adopt` finds them in the checked runs."""
    timed = launch.timed.schedule.timed
    checked = [run for run in runs if run not in timed]
    results = {run.name: launch(run, "own", 0, shares=len(checked) - index + bool(timed)) for index, run in enumerate(checked)}
    launch.ddp_options = adopt(results.values())
    timings = run_timed(launch.timed, launch, launch.deadline)
    results.update({name: side.own[0] for name, side in timings.items()})
    return {run.name: results[run.name] for run in runs}, timings


def _ended(result: JobResult) -> str:
    """How a launch ended, in a word or two, for the terminal ("ok", "hung", "failed")."""
    if result.stalled_s is not None:
        return f"hung (no CPU for {result.stalled_s:g} s), stopped"
    if result.timed_out:
        return "stopped at its time limit"
    return "failed" if result.error or failures.explain(result) else "ok"


def _summaries(results: dict[str, JobResult]) -> tuple[RunSummary, ...]:
    summaries, shown = [], set()
    for name, run in results.items():
        outcome = failures.explain(run)
        output = ""
        if outcome and run.ranks and outcome not in shown:
            shown.add(outcome)
            culprits = [r for r in run.ranks if failures.rank_end(r) and not (failures.exception_of(r) and failures.is_consequence(failures.exception_of(r)))]
            for rank in culprits[:1] or [r for r in run.ranks if r.stderr_tail.strip()][:1]:
                tail = rank.stderr_tail.strip().splitlines()[-15:]
                output = "\n".join([f"rank {rank.rank} stderr (last lines):", *tail]) if tail else ""
        summaries.append(RunSummary(name=name, layout=run.spec.describe(), wall_s=run.wall_s, outcome=outcome or "ok", output=output, telemetry=run.telemetry, records=tuple(rank.record for rank in run.ranks)))
    return tuple(summaries)


def _result(spec: CheckSpec, number: int, verdict: Verdict) -> CheckResult:
    status = Status.DEFERRED if verdict.deferred else Status.PASSED if verdict.passed else Status.FAILED
    later = (verdict.later or Later.REGRADE) if verdict.deferred else None
    summary = f"not graded here: {verdict.deferred}" if verdict.deferred else verdict.summary
    score = 0.0 if verdict.deferred else round(spec.points * verdict.earned, 4)
    return CheckResult(spec.id, spec.title, number, score, spec.points, status, summary, verdict.details, spec.visibility, dict(verdict.data), later)


def _judge_all(practical: Practical, checks: tuple[CheckSpec, ...], deferred: Mapping[str, Verdict], results: dict[str, JobResult], base: CheckContext, everything: bool) -> tuple[list[CheckResult], list[str]]:
    graded, errors = [], []
    for number, spec in enumerate(checks, 1):
        if spec.id in deferred:
            graded.append(_result(spec, number, deferred[spec.id]))
            continue
        chosen = tuple(results.values()) if everything else tuple(results[name] for name in spec.runs if name in results)
        context = replace(base, runs=chosen, options=spec.options)
        definition = practical.module.CHECKS[spec.check]
        try:
            verdict = (definition.whole_run and unfinished(chosen)) or definition.function(context)
        except Exception as exc:  # noqa: BLE001 - a bug in a check must not lose the other checks
            errors.append(f"check {spec.id} failed: {type(exc).__name__}: {exc}")
            graded.append(CheckResult(spec.id, spec.title, number, 0.0, spec.points, Status.ERROR, "the grader failed while judging this check (not your fault)", visibility=spec.visibility))
            continue
        graded.append(_result(spec, number, verdict))
    return graded, errors


@dataclass
class Execution:
    """Everything a grading ran and observed, before any check judged it; or, with `error`, why
    the grader itself could not run it (the one thing `execute` returns either way)."""

    started: float
    environment: dict = field(default_factory=dict)
    error: str | None = None  # the grader's own failure: judged as an autograder error
    checks: tuple[CheckSpec, ...] = ()
    args: dict = field(default_factory=dict)
    runs: tuple[RunDef, ...] = ()
    results: dict[str, JobResult] = field(default_factory=dict)
    references: Any = None
    timings: dict[str, TimedRuns] = field(default_factory=dict)
    deferred: dict[str, Verdict] = field(default_factory=dict)
    answers: Answers | None = None
    prepared: Prepared = field(default_factory=Prepared)


def execute(practical: Practical, submission: Path, runner: JobRunner, options: GradeOptions = GradeOptions(), refused: str | None = None) -> Execution:
    """Steps 1 to 5 of the module docstring: the runs and their observations (or, when the
    grader itself fails, an Execution whose `error` says so). `refused`: why the submission
    cannot be run at all, known before (every run is then reported as not run, with it)."""
    started = time.monotonic()
    assignment = practical.assignment
    checks = tuple(c for c in assignment.checks if (c.public or not options.public_only) and (not options.checks or c.id in options.checks))
    args = choose_args(assignment, options.seed)
    limits = time_limits(assignment, options)
    env: dict = {}
    staging = Path(tempfile.mkdtemp(prefix="grader-prepared-"))
    try:
        runner.start(trusted=options.solutions is not None)  # warms up while this process imports torch and computes the reference
        env = {**environment(args.get(assignment.seed_argument) if assignment.seed_argument else None), "isolation": runner.isolation, "gpu_telemetry": runner.telemetry}
        deferred = deferred_checks(practical, checks, env["cuda_gpus"], options)
        graded = tuple(c for c in checks if c.id not in deferred)
        workloads = runs_of(practical, assignment.checks, lambda definition: definition.timed)
        runs = plan_runs(assignment, graded, options, env["cuda_gpus"], workloads)
        timed = timed_runs(practical, graded, runs)
        submission, taken = take(submission, staging / "taken")
        taken = replace(taken, problem=refused or taken.problem)
        answers = load_answers(submission, assignment.answers) if assignment.answers else None
        folder, prepared = submission, Prepared(problem=taken.problem or unrunnable(tuple(r for r in runs if not r.solution), assignment, submission))
        prepare = getattr(practical.module, "prepare", None)
        if prepare is not None and prepared.problem is None:
            folder = staging / "prepared"
            folder.mkdir()
            prepared = prepare(submission, folder, assignment)
        prepared = replace(prepared, notes=taken.notes + prepared.notes)
        judged = runs_of(practical, graded, lambda definition: not definition.timed)
        checked = tuple(r for r in runs if not r.solution and (r.name in judged or options.world_size is not None))
        references = practical.module.references(args, checked)  # the expected values; speed-only runs need none
        gpus = env["cuda_gpus"]
        job_for = JobMaker(practical, options, args, folder, prepared, limits.run_s, timed, workloads, gpus)
        hub_timing = HubTiming(practical, args, tuple(r for r in timed if carried(r, gpus)))
        schedule = Schedule(timed, reference_launched(practical, graded, runs), assignment.timing.repeats, doubts(practical, graded, assignment.timing.warmup_steps, hub_timing), clocked_steps(assignment, args, timed, gpus), stretched_steps(assignment, args, timed, gpus))
        at_hand = reference_at_hand(practical, options)
        baselines = {} if at_hand else baseline_times(options.calibration)  # a self-check in the student's repository: the course's measured times stand in
        paces = Paces(options.run_timeout_s is None and (at_hand or bool(baselines)), gpus, reference_s=baselines, reference_at_hand=at_hand)
        launcher = _Launcher(runner, job_for, started + limits.total_s, limits.total_s, prepared.problem, options.progress, TimedLaunches(schedule, limits.total_s), paces)
        results, timings = _run_all(runs, launcher, partial(adopted_options, references=references))
        timings = {name: hub_timing(name, launches) for name, launches in timings.items()}
    except Exception as exc:  # noqa: BLE001 - the grader's own failure becomes an autograder error
        return Execution(started, env, error=f"{type(exc).__name__}: {exc}")
    finally:
        runner.close()
        remove_tree(staging)
    return Execution(started, env, None, checks, args, runs, results, references, timings, deferred, answers, prepared)


def judge(practical: Practical, execution: Execution, options: GradeOptions = GradeOptions()) -> GradingReport:
    """Step 6: every check on its runs, and the report (an autograder error's report when the
    execution failed, or when building the report itself fails)."""
    if execution.error is None:
        try:
            return _report(practical, execution, options)
        except Exception as exc:  # noqa: BLE001 - e.g. an answer no renderer foresaw: the results are written anyway
            execution = replace(execution, error=f"{type(exc).__name__}: {exc}")
    return GradingReport.failure(practical.assignment.id, execution.error or "", execution_time_s=time.monotonic() - execution.started, environment=execution.environment, total_points=practical.assignment.max_score)


def _report(practical: Practical, execution: Execution, options: GradeOptions) -> GradingReport:
    base = CheckContext(
        runs=(),
        options={},
        args=execution.args,
        references=execution.references,
        gpus=execution.environment["cuda_gpus"],
        run_args={r.name: r.args for r in execution.runs},
        answers=execution.answers,
        timings=execution.timings,
        warmup_steps=practical.assignment.timing.warmup_steps,
        baselines=(options.calibration or {}).get(execution.environment.get("machine", "")),
        answer_key=load_answer_key(options.solutions, practical.id),
    )
    graded, errors = _judge_all(practical, execution.checks, execution.deferred, execution.results, base, everything=options.world_size is not None)
    return GradingReport(
        practical=practical.assignment.id,
        title=practical.assignment.title,
        checks=tuple(graded),
        runs=_summaries(execution.results),
        execution_time_s=time.monotonic() - execution.started,
        environment=execution.environment,
        error="; ".join(errors) or None,
        manual=manual_texts(execution.answers or Answers(None), practical.assignment.manual_answers),
        notes=drawn_note(practical.assignment, execution.args) + execution.prepared.notes + tuple(dict.fromkeys(note for run in execution.results.values() for note in run.notes)) + left_out(practical, execution.checks, options),
        total_points=practical.assignment.max_score,
        unseen=tuple(Pending(check.points, Later.AUTOGRADER) for check in practical.assignment.checks if check not in execution.checks),  # the self-check's: the autograder grades them
    )


def left_out(practical: Practical, checks: tuple[CheckSpec, ...], options: GradeOptions) -> tuple[str, ...]:
    """What a quicker grading (`--world-size`, `--no-timing`) did not do, said in the report: a
    score from it is not the autograder's."""
    notes = []
    judged = tuple(c for c in checks if not practical.module.CHECKS[c.check].timed)
    if options.world_size is not None:
        replaced = [run.name for run in plan_runs(practical.assignment, judged, replace(options, world_size=None))]
        notes.append(
            f"quick mode: one run of {options.world_size} rank{'s' if options.world_size > 1 else ''} on one node replaced the runs "
            f"{', '.join(replaced)}; mistakes that show only there (several nodes, where LOCAL_RANK is not RANK; other world sizes; "
            "the uneven splits) are not looked for — the autograder runs them all"
        )
    if not options.timing:
        workloads = runs_of(practical, practical.assignment.checks, lambda definition: definition.timed)
        unlaunched = sorted(untimed_workloads(judged, workloads) & {name for c in judged for name in c.runs}) if options.world_size is None else []
        notes.append("--no-timing: the speed checks were left out" + (f", and their timing workload{'s' if len(unlaunched) > 1 else ''} ({', '.join(unlaunched)}) not launched" if unlaunched else ""))
    return tuple(notes)


def grade(practical: Practical, submission: Path, runner: JobRunner, options: GradeOptions = GradeOptions()) -> GradingReport:
    """Grade `submission` (a folder) for `practical` with `runner`; see the module docstring."""
    return judge(practical, execute(practical, submission, runner, options), options)
