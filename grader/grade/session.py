"""Grading a folder on this machine: the sandbox when there is one (required when official),
a fresh working folder, the local runner, the pipeline; and calibrating a practical (grading
its reference solution here to record baselines).

What the course holds for speed checks — its reference solutions (absent from the students'
repository) and the practical's calibrated baselines — is added here, from the practical's
course, so no caller can forget it.
"""
from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

from grader.speed import measure
from grader.course import Course, Practical
from grader.grade import calibration
from grader.grade.options import GradeOptions, time_limits
from grader.results.leaderboard import ranked
from grader.grade.pipeline import Execution, execute, judge
from grader.results.model import GradingReport
from grader.run.local import DDP_WARM_MODULE, GRADER_ROOT, LocalRunner, LocalRunnerOptions
from grader.run.sandbox import UID_TIER, Limits, Sandbox, hide_from_others, open_sandbox
from grader.run.telemetry import open_nvml
from grader.run.tree import remove_tree


@dataclass(frozen=True)
class Executed:
    execution: Execution  # its `error` says when the grader could not run it
    options: GradeOptions  # as completed from the course
    warning: str | None = None  # for the person watching (e.g. no sandbox)
    kept: Path | None = None  # the working folder, when asked to keep it


@dataclass(frozen=True)
class Graded:
    report: GradingReport
    warning: str | None = None
    kept: Path | None = None


def course_options(options: GradeOptions, practical: Practical) -> GradeOptions:
    """`options` with what the practical's course holds for speed checks, where the options do
    not give it already."""
    course = practical.course
    if course is None:
        return options
    solutions = course.root / "solutions"
    return replace(
        options,
        solutions=options.solutions or (solutions if solutions.is_dir() else None),
        calibration=options.calibration if options.calibration is not None else calibration.load(course, practical.id),
    )


def runner_options(practical: Practical, keep_work: bool, contain: bool) -> LocalRunnerOptions:
    """The local runner's options for grading `practical`: its launcher warms up what DDP
    imports only where the grader's hub carries runs (the DDP practicals): a launcher that
    imports nothing it will not use is ready sooner (p4's and p5's gradings wait for it)."""
    defaults = LocalRunnerOptions()
    carries = any(run.carried for run in practical.assignment.runs)
    warm = defaults.warm_modules if carries else tuple(m for m in defaults.warm_modules if m != DDP_WARM_MODULE)
    return replace(defaults, keep_files=keep_work, cgroups=contain, warm_modules=warm)


def not_run(error: str) -> Execution:
    """An execution that stopped before any run, for `error` (it took no time)."""
    return Execution(time.monotonic(), error=error)


def execute_folder(
    practical: Practical, folder: Path, options: GradeOptions, *, official: bool = False, keep_work: bool = False, contain: bool = True, refused: str | None = None
) -> Executed:
    """Run `folder`'s code for `practical`; official runs (or a spec saying `sandbox:
    required`) refuse to go without the sandbox. `contain=False` asks for none (the sandbox,
    the per-job cgroups): the code runs with the grader's rights, as on a laptop. `refused`:
    why the submission cannot be run at all (found while taking it out of git): it is graded
    as not run. Where bubblewrap cannot run, a grading that is not official gets the
    unprivileged-uid tier (with the course's files closed to others: `shield_course`); a
    grading as root that gets no tier at all is refused, but for the student's self-check."""
    options = course_options(options, practical)
    if not folder.is_dir():
        return Executed(not_run(f"the submission folder {folder} does not exist"), options)
    official = official or practical.assignment.sandbox == "required"
    sandbox = open_sandbox(Limits(cpu_s=time_limits(practical.assignment, options).cpu_s), fallback=not official) if contain else "switched off (--no-sandbox)"
    warning = None
    if isinstance(sandbox, str):
        if official:
            return Executed(not_run(f"official grading runs student code only in the sandbox, and there is none here: {sandbox}"), options)
        if contain and os.geteuid() == 0 and not options.public_only:
            # a grading as root (run_autograder on Gradescope) where even the uid tier failed:
            # the submission would run with root's rights, beside the solutions
            return Executed(not_run(f"the grader runs as root and no isolation tier can start here ({sandbox}); a submission is not run with root's rights (--no-sandbox would, knowingly)"), options)
        warning = f"no sandbox ({sandbox}); the code runs with your own rights — fine for a self-check, refused by official grading"
        sandbox = None
    elif sandbox.tier == UID_TIER:
        closed = shield_course(practical, options, sandbox)
        warning = f"no bubblewrap ({sandbox.no_bubblewrap}): the code runs as the unprivileged uid {sandbox.uid}, without namespaces; {closed} — refused by official grading"
    work = sandbox.new_root(f"grader-{practical.id}-") if sandbox else Path(tempfile.mkdtemp(prefix=f"grader-{practical.id}-"))
    try:
        runner = LocalRunner(work, runner_options(practical, keep_work, contain), sandbox=sandbox, gpus=open_nvml())
        execution = execute(practical, folder.absolute(), runner, options, refused)  # not resolved: a link another user planted is refused when taken
    finally:
        if sandbox is not None:
            sandbox.release()
        if not keep_work:
            remove_tree(work)
    return Executed(execution, options, warning, work if keep_work else None)


def shield_course(practical: Practical, options: GradeOptions, sandbox: Sandbox) -> str:
    """The unprivileged-uid tier's protection of what the submission must not read: the
    course's folder (solutions, answer keys, the grader, its history), the solutions named in
    `options` and the grader's own folder are closed to other users, the Python environment
    left open. Says what was done, for the person watching."""
    roots = {GRADER_ROOT, *(path.resolve() for path in (practical.course.root if practical.course else None, options.solutions) if path is not None)}
    closed = [entry for root in sorted(roots) for entry in hide_from_others(root, sandbox.read_only)]
    return f"{len(closed)} of the course's files and folders were closed to other users" if closed else "the course's files were closed to other users already"


def grade_folder(
    practical: Practical, folder: Path, options: GradeOptions, *, official: bool = False, keep_work: bool = False, contain: bool = True, refused: str | None = None
) -> Graded:
    """Grade `folder` (see execute_folder)."""
    executed = execute_folder(practical, folder, options, official=official, keep_work=keep_work, contain=contain, refused=refused)
    on_board = practical.course is not None and practical.id in practical.course.leaderboard and not options.public_only
    return Graded(ranked(judge(practical, executed.execution, executed.options), on_board), executed.warning, executed.kept)


class CalibrationError(Exception):
    """The reference solution could not be measured."""


def calibrate(course: Course, practical: Practical, repeat: int) -> tuple[str, dict, Path]:
    """Grade the reference solution `repeat` times here; record each run's fastest median step
    time (grader.grade.calibration). Returns the machine key, the measurements and the file
    they went to."""
    if not any(practical.module.CHECKS[check.check].timed for check in practical.assignment.checks):
        raise CalibrationError(f"{practical.id} has no speed checks: there is nothing to calibrate")
    best: dict[str, dict] = {}
    environment: dict = {}
    warmup = practical.assignment.timing.warmup_steps
    for _ in range(repeat):
        execution = execute_folder(practical, course.solution_dir(practical.id), GradeOptions()).execution
        if execution.error is not None:
            raise CalibrationError(execution.error)
        environment = execution.environment
        launches = {name: (run,) for name, run in execution.results.items()}
        launches.update({name: timed.own for name, timed in execution.timings.items()})
        for name, runs in launches.items():
            runs = tuple(run for run in runs if run.spec.clock_steps == runs[0].spec.clock_steps)  # the run as its first launch asked it (not the rounds of another step count)
            measured = min((m for m in (measure.summary(run, warmup) for run in runs) if m), key=lambda m: m["median_step_s"], default=None)
            if measured and (name not in best or measured["median_step_s"] < best[name]["median_step_s"]):
                best[name] = {k: round(v, 6) if isinstance(v, float) else v for k, v in measured.items()}
    key = environment["machine"]  # pipeline.environment(): the key speed checks look baselines up under
    return key, best, calibration.record(course, practical.id, key, best, environment.get("torch", ""))
