"""Grading one submission: choose the inputs, run the script, judge, report.

1. select the checks (public ones for a self-check); defer those that need more real GPUs
   than this machine has, and plan the runs the others need (the spec's, or the overrides);
2. choose the arguments, the seed among them, afresh for every grading;
3. prepare the submission when the practical needs it (its module's `prepare`, e.g. taking a
   notebook's graded cells and a driver that runs them), and read its answers file;
4. start the runner and, while it warms up, compute the practical's reference;
5. run each launch within the grading's time budget;
6. judge every check on its runs and build the report.

Nothing the submission does can make this raise; a failure of the grader's own code ends in
a report whose `error` says so.
"""
from __future__ import annotations

import platform
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from grader import __version__
from grader.checks import failures
from grader.checks.base import Answers, CheckContext, Verdict
from grader.course import Practical
from grader.grade.answers import load_answers, manual_texts
from grader.grade.prepared import Prepared
from grader.results.model import CheckResult, GradingReport, RunSummary, Status
from grader.run.job import JobResult, JobRunner, JobSpec, Layout
from grader.spec import Assignment, CheckSpec, RunDef

MIN_RUN_S = 1.0  # a run is skipped rather than started with less time than this


@dataclass(frozen=True)
class GradeOptions:
    """How to grade, beyond the spec."""

    world_size: int | None = None  # one run of this many ranks instead of the spec's runs
    virtual_gpus: int | None = None  # every run on this many virtual GPUs per node
    public_only: bool = False  # the student's self-check: visible checks only
    seed: int | None = None  # fix the seed (to reproduce a grading); chosen at random otherwise
    run_timeout_s: float | None = None  # one launch of the script
    total_timeout_s: float | None = None  # the whole grading, wall clock from its start


def merged_args(args: Mapping[str, Any], run: RunDef) -> dict[str, Any]:
    """The arguments a run is given: the common ones, then its own."""
    return {**args, **run.args}


def plan_runs(assignment: Assignment, checks: tuple[CheckSpec, ...], options: GradeOptions) -> tuple[RunDef, ...]:
    """The launches a grading performs: those the selected checks use, or the override."""
    if options.world_size is not None:
        runs: tuple[RunDef, ...] = (RunDef(name=f"ws{options.world_size}", layout=Layout(1, options.world_size)),)
    else:
        wanted = {name for check in checks for name in check.runs}
        runs = tuple(run for run in assignment.runs if run.name in wanted)
    if options.virtual_gpus is not None:
        runs = tuple(replace(run, virtual_gpus=options.virtual_gpus) for run in runs)
    return runs


def choose_args(assignment: Assignment, seed: int | None) -> dict:
    """The script's arguments: the spec's, plus a seed chosen now (never known in advance)."""
    args = dict(assignment.args)
    if assignment.seed_argument:
        args[assignment.seed_argument] = seed if seed is not None else secrets.randbelow(2**31 - 2) + 1
    return args


def environment(seed: int | None) -> dict:
    """Where this grading ran: host, Python, torch, devices, grader version."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    devices = f"{gpus} × {torch.cuda.get_device_name(0)}" if gpus else "CPU only (no CUDA GPU)"
    return {
        "host": platform.node(),
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda_gpus": gpus,
        "devices": devices,
        "grader": __version__,
        "seed": seed,
    }


def deferred_checks(practical: Practical, checks: tuple[CheckSpec, ...], gpus: int) -> dict[str, str]:
    """Check id -> why it is not graded here, for checks that need more real GPUs."""
    reasons = {}
    for check in checks:
        needed = practical.module.CHECKS[check.check].real_gpus
        if needed > gpus:
            reasons[check.id] = f"needs ≥ {needed} CUDA GPUs (this machine has {gpus}); its points are left to a grading on a GPU node"
    return reasons


def _missing_scripts(runs: tuple[RunDef, ...], assignment: Assignment, submission: Path) -> str | None:
    for script in sorted({run.script or assignment.script for run in runs}):
        if not (submission / script).is_file():
            present = sorted(p.name for p in submission.iterdir() if p.is_file())[:8] if submission.is_dir() else []
            found = f" (it holds: {', '.join(present)})" if present else ""
            return f"{script} is not in the submission{found}"
    return None


def _run_all(runs: tuple[RunDef, ...], job_for: Callable[[RunDef, float], JobSpec], runner: JobRunner, deadline: float, budget_s: float, problem: str | None) -> dict[str, JobResult]:
    results: dict[str, JobResult] = {}
    for run in runs:
        left = deadline - time.monotonic()
        job = job_for(run, max(left, 0.0))
        if problem:
            results[run.name] = JobResult(spec=job, ranks=[], skipped=problem)
        elif left < MIN_RUN_S:
            results[run.name] = JobResult(spec=job, ranks=[], skipped=f"the grading's time budget ({budget_s:g} s) was used up by earlier runs")
        else:
            results[run.name] = runner.run(job)
    return results


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
        summaries.append(RunSummary(name=name, layout=run.spec.describe(), wall_s=run.wall_s, outcome=outcome or "ok", output=output))
    return tuple(summaries)


def _result(spec: CheckSpec, number: int, verdict: Verdict) -> CheckResult:
    status = Status.DEFERRED if verdict.deferred else Status.PASSED if verdict.passed else Status.FAILED
    summary = f"not graded here: {verdict.deferred}" if verdict.deferred else verdict.summary
    score = 0.0 if verdict.deferred else round(spec.points * verdict.earned, 4)
    return CheckResult(spec.id, spec.title, number, score, spec.points, status, summary, verdict.details, spec.visibility, dict(verdict.data))


def _judge_all(practical: Practical, checks: tuple[CheckSpec, ...], deferred: Mapping[str, str], results: dict[str, JobResult], base: CheckContext, everything: bool) -> tuple[list[CheckResult], list[str]]:
    graded, errors = [], []
    for number, spec in enumerate(checks, 1):
        if spec.id in deferred:
            graded.append(_result(spec, number, Verdict(False, "", deferred=deferred[spec.id])))
            continue
        chosen = tuple(results.values()) if everything else tuple(results[name] for name in spec.runs if name in results)
        context = replace(base, runs=chosen, options=spec.options)
        try:
            verdict = practical.module.CHECKS[spec.check].function(context)
        except Exception as exc:  # noqa: BLE001 - a bug in a check must not lose the other checks
            errors.append(f"check {spec.id} failed: {type(exc).__name__}: {exc}")
            graded.append(CheckResult(spec.id, spec.title, number, 0.0, spec.points, Status.ERROR, "the grader failed while judging this check (not your fault)", visibility=spec.visibility))
            continue
        graded.append(_result(spec, number, verdict))
    return graded, errors


@dataclass
class Execution:
    """Everything a grading ran and observed, before any check judged it."""

    checks: tuple[CheckSpec, ...]
    args: dict
    runs: tuple[RunDef, ...]
    results: dict[str, JobResult]
    references: Any
    environment: dict
    deferred: dict[str, str]
    answers: Answers | None
    prepared: Prepared
    started: float


def execute(practical: Practical, submission: Path, runner: JobRunner, options: GradeOptions = GradeOptions()) -> Execution | GradingReport:
    """Steps 1 to 5 of the module docstring: the runs and their observations (or, when the
    grader itself fails, the report that says so)."""
    started = time.monotonic()
    assignment = practical.assignment
    checks = tuple(c for c in assignment.checks if c.public or not options.public_only)
    args = choose_args(assignment, options.seed)
    run_timeout = options.run_timeout_s or assignment.run_timeout_s
    budget = options.total_timeout_s or assignment.total_timeout_s
    env: dict = {}
    staging = Path(tempfile.mkdtemp(prefix="grader-prepared-"))
    try:
        runner.start()  # warms up while this process imports torch and computes the reference
        env = {**environment(args.get(assignment.seed_argument) if assignment.seed_argument else None), "isolation": runner.isolation}
        deferred = deferred_checks(practical, checks, env["cuda_gpus"])
        runs = plan_runs(assignment, tuple(c for c in checks if c.id not in deferred), options)
        answers = load_answers(submission, assignment.answers) if assignment.answers else None
        folder, prepared = submission, Prepared(problem=_missing_scripts(runs, assignment, submission))
        prepare = getattr(practical.module, "prepare", None)
        if prepare is not None and prepared.problem is None:
            folder, prepared = staging, prepare(submission, staging, assignment)
        references = practical.module.references(args, runs)

        def job_for(run: RunDef, left: float) -> JobSpec:
            return JobSpec(
                name=run.name,
                submission=folder,
                script=prepared.script or run.script or assignment.script,
                argv=tuple(f"--{key}={value}" for key, value in merged_args(args, run).items()),
                layout=run.layout,
                timeout_s=min(run_timeout, left) if left > 0 else run_timeout,
                watch_globals=assignment.variables,
                virtual_gpus=run.virtual_gpus,
                driver=prepared.driver,
            )

        results = _run_all(runs, job_for, runner, started + budget, budget, prepared.problem)
    except Exception as exc:  # noqa: BLE001 - the grader's own failure becomes an autograder error
        return GradingReport.failure(assignment.id, f"{type(exc).__name__}: {exc}", execution_time_s=time.monotonic() - started, environment=env)
    finally:
        runner.close()
        shutil.rmtree(staging, ignore_errors=True)
    return Execution(checks, args, runs, results, references, env, deferred, answers, prepared, started)


def judge(practical: Practical, execution: Execution, options: GradeOptions = GradeOptions()) -> GradingReport:
    """Step 6: every check on its runs, and the report."""
    base = CheckContext(
        runs=(),
        options={},
        args=execution.args,
        references=execution.references,
        gpus=execution.environment["cuda_gpus"],
        run_args={r.name: r.args for r in execution.runs},
        answers=execution.answers,
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
        notes=execution.prepared.notes,
    )


def grade(practical: Practical, submission: Path, runner: JobRunner, options: GradeOptions = GradeOptions()) -> GradingReport:
    """Grade `submission` (a folder) for `practical` with `runner`; see the module docstring."""
    execution = execute(practical, submission, runner, options)
    return execution if isinstance(execution, GradingReport) else judge(practical, execution, options)
