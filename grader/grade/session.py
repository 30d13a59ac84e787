"""Grading a folder on this machine: the sandbox when there is one (required when official),
a fresh working folder, the local runner, the pipeline."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from grader.course import Course, Practical
from grader.grade import calibration
from grader.grade.pipeline import Execution, GradeOptions, execute, judge
from grader.results.model import GradingReport
from grader.run.local import LocalRunner, LocalRunnerOptions
from grader.run.sandbox import Limits, open_sandbox
from grader.run.telemetry import open_nvml
from grader.run.tree import remove_tree


@dataclass(frozen=True)
class Executed:
    execution: Execution | GradingReport  # a report when the grader could not run it
    warning: str | None = None  # for the person watching (e.g. no sandbox)
    kept: Path | None = None  # the working folder, when asked to keep it


@dataclass(frozen=True)
class Graded:
    report: GradingReport
    warning: str | None = None
    kept: Path | None = None


def with_course(options: GradeOptions, course: Course, practical: str) -> GradeOptions:
    """`options` plus what the course holds for speed checks: its reference solutions (absent
    from the students' repository) and the practical's calibrated baselines."""
    solutions = course.root / "solutions"
    return replace(options, solutions=solutions if solutions.is_dir() else None, calibration=calibration.load(course, practical))


def execute_folder(practical: Practical, folder: Path, options: GradeOptions, *, official: bool = False, keep_work: bool = False, contain: bool = True) -> Executed:
    """Run `folder`'s code for `practical`; official runs (or a spec saying `sandbox:
    required`) refuse to go without the sandbox. `contain=False` asks for none (the sandbox,
    the per-job cgroups): the code runs with the grader's rights, as on a laptop."""
    if not folder.is_dir():
        return Executed(GradingReport.failure(practical.id, f"the submission folder {folder} does not exist"))
    official = official or practical.assignment.sandbox == "required"
    limits = Limits(cpu_s=int((options.total_timeout_s or practical.assignment.total_timeout_s) + 60))
    sandbox = open_sandbox(limits) if contain else "switched off (--no-sandbox)"
    warning = None
    if isinstance(sandbox, str):
        if official:
            return Executed(GradingReport.failure(practical.id, f"official grading runs student code only in the sandbox, and there is none here: {sandbox}"))
        warning = f"no sandbox ({sandbox}); the code runs with your own rights — fine for a self-check, refused by official grading"
        sandbox = None
    work = sandbox.new_root(f"grader-{practical.id}-") if sandbox else Path(tempfile.mkdtemp(prefix=f"grader-{practical.id}-"))
    try:
        runner = LocalRunner(work, LocalRunnerOptions(keep_files=keep_work, cgroups=contain), sandbox=sandbox, gpus=open_nvml())
        execution = execute(practical, folder.absolute(), runner, options)  # not resolved: a link another user planted is refused when taken
    finally:
        if sandbox is not None:
            sandbox.release()
        if not keep_work:
            remove_tree(work)
    return Executed(execution, warning, work if keep_work else None)


def grade_folder(practical: Practical, folder: Path, options: GradeOptions, *, official: bool = False, keep_work: bool = False, contain: bool = True) -> Graded:
    """Grade `folder` (see execute_folder)."""
    executed = execute_folder(practical, folder, options, official=official, keep_work=keep_work, contain=contain)
    execution = executed.execution
    report = execution if isinstance(execution, GradingReport) else judge(practical, execution, options)
    return Graded(report, executed.warning, executed.kept)
