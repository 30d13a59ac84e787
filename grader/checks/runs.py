"""Judging a check run by run: a check passes when it passes on every run it grades."""
from __future__ import annotations

from typing import Callable

from grader.checks import failures
from grader.checks.base import CheckContext, Verdict
from grader.run.job import JobResult

RunJudge = Callable[[JobResult], tuple[bool, str]]


def run_label(run: JobResult) -> str:
    return f"{run.spec.name} ({run.spec.describe()})"


def per_run(ctx: CheckContext, judge: RunJudge, passed_summary: str) -> Verdict:
    """Judge every run; the check passes when every run does."""
    if not ctx.runs:
        return Verdict(False, "no run of the submission was available to this check")
    lines, failed = [], []
    for run in ctx.runs:
        ok, line = judge(run) if run.ranks else (False, failures.explain(run) or "the run produced no ranks")
        lines.append(f"{'✓' if ok else '✗'} {run_label(run)}: {line}")
        if not ok:
            failed.append(f"{run_label(run)}: {line}")
    if failed:
        reasons = {line.split(": ", 1)[1] for line in failed}
        if len(failed) == len(ctx.runs) > 1 and len(reasons) == 1:
            return Verdict(False, f"{reasons.pop()} — in every run", ())
        return Verdict(False, failed[0], tuple(lines))
    return Verdict(True, passed_summary, tuple(lines))


def missing(run: JobResult, what: str) -> tuple[bool, str]:
    """The line for a run where the observations a check needs are absent."""
    return False, failures.explain(run) or f"{what} was not observed"
