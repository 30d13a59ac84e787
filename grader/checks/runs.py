"""Judging a check run by run: a check passes when it passes on every run it grades; a run
whose records are damaged fails it, with that explanation."""
from __future__ import annotations

from typing import Callable

from grader.checks import failures
from grader.checks.base import CheckContext, Verdict
from grader.run.job import JobResult

RunJudge = Callable[[JobResult], "tuple[bool, str] | tuple[bool, str, float]"]


def run_label(run: JobResult) -> str:
    return f"{run.spec.name} ({run.spec.describe()})"


def per_run(ctx: CheckContext, judge: RunJudge, passed_summary: str, data: dict | None = None) -> Verdict:
    """Judge every run; the check passes when every run does. A judge may return a third
    value, the share of the points a failed run still earns; the check earns the smallest."""
    if not ctx.runs:
        return Verdict(False, "no run of the submission was available to this check")
    lines, failed, fraction = [], [], 1.0
    for run in ctx.runs:
        if not run.ranks:
            outcome = (False, failures.explain(run) or "the run produced no ranks")
        elif failures.damaged(run):
            outcome = (False, failures.explain(run) or "")
        else:
            outcome = judge(run)
        ok, line = outcome[0], outcome[1]
        fraction = min(fraction, 1.0 if ok else (outcome[2] if len(outcome) > 2 else 0.0))
        lines.append(f"{'✓' if ok else '✗'} {run_label(run)}: {line}")
        if not ok:
            failed.append(f"{run_label(run)}: {line}")
    data = data or {}
    if failed:
        reasons = {line.split(": ", 1)[1] for line in failed}
        if len(failed) == len(ctx.runs) > 1 and len(reasons) == 1:
            return Verdict(False, f"{reasons.pop()} — in every run", (), fraction=fraction, data=data)
        return Verdict(False, failed[0], tuple(lines), fraction=fraction, data=data)
    return Verdict(True, passed_summary, tuple(lines), data=data)


def unfinished(runs: tuple[JobResult, ...]) -> Verdict | None:
    """The verdict of a check that judges a whole training (CheckDef.whole_run) where one of its
    runs never ended by itself (the grader stopped it at its time limit): what it did until then
    is not the training the check asks about, and earns nothing."""
    stopped = [run for run in runs if run.timed_out and run.ranks]
    if not stopped:
        return None
    run = stopped[0]
    return Verdict(False, f"{run_label(run)}: {failures.explain(run) or 'stopped at its time limit'} — this check judges the whole training, which never ended")


def missing(run: JobResult, what: str) -> tuple[bool, str]:
    """The line for a run where the observations a check needs are absent."""
    reason = failures.explain(run)
    if reason:
        return False, reason
    if run.ranks and all(r.exit_code == 0 for r in run.ranks):
        return False, f"every rank exited with status 0 before doing the work: {what} was never seen"
    return False, f"{what} was not observed"
