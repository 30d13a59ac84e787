"""Deferred checks graded where they can be.

A grading defers the checks its machine cannot grade fairly: they need GPUs it lacks, more CPU
cores, or a quieter machine (grader/grade/plan.py). Where course.yaml names a place for them
(`deferred:`, grader/course.py `FollowUpPlace`), the worker queues a follow-up once the grade is
stored: a job of those checks alone, for the same commit and seed, at that place. Its verdicts
are merged into the stored grade, the earlier one kept in the commit's history, and the
student's feedback is delivered again. A follow-up never asks for another: what its place could
not grade either stays deferred, says so, and is reported to staff (a place without the GPUs it
is for is theirs to fix); `grader regrade --deferred` asks again. Without a place, the points
stay pending in every channel (`collect`, the class report), never 0.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from grader.course import Course
from grader.results.gradescope import merged_document, read_report
from grader.results.model import CheckResult, GradingReport, Later, Status
from grader.store import Entry, ResultsStore
from grader.submit.queue import Queue, Submission, now

FOLLOWED_UP = frozenset({Later.GPU_NODE, Later.LARGER_MACHINE, Later.QUIET_MACHINE})  # what a machine lacked, not the submission


def deferred_here(report: GradingReport) -> tuple[str, ...]:
    """The checks `report` deferred for the machine it was graded on (what a follow-up grades)."""
    return tuple(c.id for c in report.checks if c.status is Status.DEFERRED and c.later in FOLLOWED_UP)


def follow_up_of(submission: Submission, report: GradingReport, course: Course) -> Submission | None:
    """The follow-up record of a stored grading (`report` of `submission`): None where nothing
    is deferred for its machine, no place is configured, or `submission` is a follow-up itself."""
    checks = deferred_here(report)
    place = course.follow_up
    if not checks or place is None or submission.checks or report.error:
        return None
    seed = report.environment.get("seed")
    follow = Submission(
        student=submission.student,
        practical=submission.practical,
        commit=submission.commit,
        source=submission.source,
        submitted_at=submission.submitted_at,  # deadlines count the push, not the follow-up
        backend=place.backend,
        options={**({"world_size": submission.options["world_size"]} if submission.options.get("world_size") else {}), **place.job_options()},
        checks=list(checks),
        seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
        requested_at=now(),
    )
    follow.note(f"follow-up of {len(checks)} deferred check(s) ({', '.join(checks)}) at {place.describe()}")
    return follow


def request(store: ResultsStore, course: Course, submission: Submission, report: GradingReport) -> str:
    """Queue the follow-up of a stored grading, where it has one; what was done, as a clause of
    the worker's line ("" when nothing)."""
    follow = follow_up_of(submission, report, course)
    if follow is None or course.follow_up is None:
        return ""
    what = Queue(store).add(follow)
    return f"; {len(follow.checks)} deferred check(s) {what} for {course.follow_up.describe()}" if what in ("queued", "already queued") else ""


def request_again(store: ResultsStore, course: Course, entry: Entry) -> str:
    """`regrade --deferred` of one stored grade: its follow-up queued (or why not)."""
    if course.follow_up is None:
        return "not queued: course.yaml names no place for deferred checks (deferred: backend, partition, gpus)"
    report = read_report(entry.document)
    provenance = entry.provenance
    source = provenance.get("source")
    if not isinstance(source, dict) or source.get("kind") not in ("git", "folder"):
        return "not queued: graded before results recorded their source"
    if source["kind"] == "folder" and not Path(str(source.get("path", ""))).is_dir():
        return "not queued: its files were a folder submission, which is not kept: submit it again"
    options = provenance.get("options") if isinstance(provenance.get("options"), dict) else {}
    submitted = provenance.get("submitted_at") if isinstance(provenance.get("submitted_at"), str) else now()
    stored = Submission(student=entry.student, practical=entry.practical, commit=entry.commit, source=source, submitted_at=submitted, options={"world_size": options.get("world_size")} if options.get("world_size") else {})
    follow = follow_up_of(stored, report, course)
    if follow is None:
        return "nothing deferred for its machine"
    return Queue(store).add(follow)


def where_graded(environ: dict[str, str], node: str) -> str:
    """Where a follow-up job ran, for its verdicts: "partition gpu (job 42, node n1)"."""
    partition, job = environ.get("SLURM_JOB_PARTITION"), environ.get("SLURM_JOB_ID")
    at = ", ".join(part for part in (f"job {job}" if job else "", f"node {node}") if part)
    return f"partition {partition} ({at})" if partition else at


def graded_there(asked: Sequence[str], later: GradingReport, where: str) -> dict[str, CheckResult]:
    """The follow-up's results to put in place of the stored deferred ones, by check id: each
    graded check with where it was graded; each check deferred again saying that the follow-up
    could not grade it either, and why. A follow-up the grader itself failed puts nothing in place."""
    if later.error:
        return {}
    found = {c.id: c for c in later.checks if c.id in asked}
    results = {}
    for check_id, check in found.items():
        if check.status is Status.DEFERRED:
            results[check_id] = CheckResult(check.id, check.title, check.number, 0.0, check.max_score, Status.DEFERRED, f"still deferred: the follow-up on {where} could not grade it either: {check.summary}", check.details, check.visibility, check.data, check.later)
        else:
            results[check_id] = CheckResult(check.id, check.title, check.number, check.score, check.max_score, check.status, check.summary, (*check.details, f"(graded by the follow-up on {where})"), check.visibility, check.data)
    return results


def outcome_note(asked: Sequence[str], graded: dict[str, CheckResult], later: GradingReport, where: str) -> str:
    """The note the merged grade carries: which deferred checks the follow-up graded, and where."""
    done = [check_id for check_id in asked if check_id in graded and graded[check_id].status is not Status.DEFERRED]
    still = [check_id for check_id in asked if check_id not in done]
    parts = [f"{len(done)} deferred check(s) graded by a follow-up on {where} ({now()}): {', '.join(done)}"] if done else [f"a follow-up on {where} ({now()}) graded none of the deferred checks"]
    if still:
        parts.append(f"still deferred: {', '.join(still)}" + (f" (the follow-up failed: {later.error[:300]})" if later.error else ""))
    return "; ".join(parts)


def merge(store: ResultsStore, submission: Submission, later: GradingReport, where: str) -> GradingReport | None:
    """Merge a follow-up's report into the stored grade of its commit (the earlier grade kept in
    history); the merged report, or None where there is nothing to merge into: the stored grade
    is gone, or is another grading's (a regrade meanwhile: it asks for its own follow-up)."""
    entry = store.entry(submission.student, submission.practical, submission.commit)
    if entry is None:
        return None
    stored = read_report(entry.document)
    if submission.seed is not None and stored.environment.get("seed") != submission.seed:
        return None
    asked = [check_id for check_id in submission.checks if check_id in deferred_here(stored)]
    if not asked:
        return None
    graded = graded_there(asked, later, where)
    note = outcome_note(asked, graded, later, where)
    document = merged_document(entry.document, graded, note, later.runs)
    record = {
        "requested_at": submission.requested_at,
        "graded_at": now(),
        "where": where,
        "checks": asked,
        "graded": [check_id for check_id in asked if check_id in graded and graded[check_id].status is not Status.DEFERRED],
        "error": later.error,
    }
    earlier = entry.provenance.get("follow_ups")
    store.replace(document, {**entry.provenance, "follow_ups": [*(earlier if isinstance(earlier, list) else []), record]})
    return read_report(document)
