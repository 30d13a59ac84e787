"""What a grading job runs (`python -m grader work --results-dir DIR KEY`), on the node:
take the submission out of git (or the inbox), grade it officially (sandbox required), and
store the results with their provenance. A failure of the grader itself leaves the record
queued for a retry, up to MAX_ATTEMPTS; after that an autograder-error result is stored, so
no accepted submission ends without a result. A failure that no retry can mend (this node has
no sandbox, the practical does not load) is not retried: the autograder error is stored at
once and the problem is reported to staff once (grader/submit/problems.py)."""
from __future__ import annotations

import datetime
import hashlib
import os
import platform
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from grader import __version__
from grader.course import Course, CourseError, Practical, load_practical
from grader.grade.pipeline import GradeOptions
from grader.grade.session import grade_folder
from grader.observe.views import write_views
from grader.results.gradescope import to_gradescope
from grader.results.model import CheckResult, GradingReport, Status
from grader.run.sandbox import SandboxMissing, open_sandbox
from grader.run.tree import TreeLimits, TreeRefused, copy_tree, open_folder, remove_tree
from grader.spec import SpecError
from grader.store import ResultsStore
from grader.submit.backends import LOG_MODE
from grader.submit import gittree
from grader.submit.gitenv import git_free_environment, refused_config
from grader.results.channels import Problem, Route, deliver_all
from grader.results.channels.git_branch import CHANNEL as GIT_BRANCH, Branch
from grader.submit.feedback import deadline_passed, lateness_note, mark_revealed, with_lateness
from grader.submit import followup
from grader.submit.problems import report_problem
from grader.submit.queue import MAX_ATTEMPTS, Queue, Submission, now

GIT_READ_S = 120  # taking a commit's files out of git
STAND_IN = "GRADER_BENCH_STAND_IN_S"  # bench/bench_burst.py's stand-in grading (seconds); see stand_in_seconds


class MaterialiseError(Exception):
    """The submission's files cannot be had (the commit or the folder is gone)."""


@dataclass(frozen=True)
class Materialised:
    """A submission's folder, taken out of git or the inbox; `refused` says why its content
    cannot be graded (too large, too many files): then it is graded as not run, with that."""

    folder: Path
    refused: str | None = None


def materialise(submission: Submission, into: Path, limits: TreeLimits = TreeLimits()) -> Materialised:
    """The submission's folder for its practical, made under `into`."""
    folder = into / "submission"
    source = submission.source
    if source["kind"] == "folder":
        try:
            handle = open_folder(Path(source["path"]))  # the inbox entry may not have become another user's link
            try:
                copy_tree(handle, folder, limits=limits)  # links stay links; hard links and FIFOs are left out
            finally:
                os.close(handle)
        except TreeRefused as exc:
            remove_tree(folder)
            folder.mkdir()
            return Materialised(folder, str(exc))
        except OSError as exc:
            raise MaterialiseError(f"the submitted folder cannot be taken: {exc}") from None
        return Materialised(folder)
    folder.mkdir()
    refused = refused_config(source["repo"])
    if refused:
        return Materialised(folder, f"your repository cannot be graded: {refused}")
    return _from_git(source["repo"], submission.commit, f"assignments/{submission.practical}", folder, limits)


def _from_git(repo: str, commit: str, prefix: str, folder: Path, limits: TreeLimits) -> Materialised:
    """`prefix` of `commit`, its committed bytes (grader/submit/gittree.py), stopped at `limits`
    before any file is read (a 3 GiB blob must cost neither the grader's memory nor the host's
    disk). A commit without the practical's folder is graded as a missing script."""
    try:
        refused = gittree.take(repo, commit, prefix, folder, limits, GIT_READ_S)
    except gittree.GitReadError as exc:
        raise MaterialiseError(str(exc)) from None
    if refused:
        remove_tree(folder)
        folder.mkdir()
        return Materialised(folder, refused)
    return Materialised(folder)


def template_version(course: Course, practical: str) -> str:
    """The course repository's last commit of the practical's template, when it is a git repo."""
    done = subprocess.run(["git", "-C", str(course.root), "log", "-1", "--format=%h", "--", f"assignments/{practical}"], capture_output=True, text=True, env=git_free_environment())
    return done.stdout.strip() or "unknown"


def spec_digest(course: Course, practical: str) -> str:
    """sha256 of the spec a grading of `practical` reads now ("" when it cannot be read)."""
    try:
        return hashlib.sha256(course.spec_path(practical).read_bytes()).hexdigest()
    except OSError:
        return ""


def provenance(submission: Submission, course: Course, report: GradingReport) -> dict:
    env = report.environment
    return {
        "student": submission.student,
        "practical": submission.practical,
        "commit": submission.commit,
        "submitted_at": submission.submitted_at,
        "graded_at": now(),
        "grader": __version__,
        "spec_digest": spec_digest(course, submission.practical),
        "source": submission.source,
        "options": submission.options,
        "template_version": template_version(course, submission.practical),
        "node": platform.node(),
        "gpus": {"requested": submission.options.get("gpus", 0), "visible": os.environ.get("CUDA_VISIBLE_DEVICES", ""), "cuda": env.get("cuda_gpus", 0), "devices": env.get("devices", "")},
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
        "backend": submission.backend,
        "attempt": submission.attempts + 1,
        "isolation": env.get("isolation", ""),
    }


def store_failure(store: ResultsStore, submission: Submission, course: Course, message: str) -> Path:
    """Store an autograder-error result: the submission is not lost, staff can regrade."""
    report = GradingReport.failure(submission.practical, message)
    return store.save(to_gradescope(report), provenance(submission, course, report))


def ready_to_grade(course: Course, practical: str) -> Practical | str:
    """The practical, loaded; or why no submission of it can be graded on this node until staff
    act: the practical does not load, or the node has no sandbox at all."""
    try:
        loaded = load_practical(course, practical)
    except (CourseError, SpecError) as exc:
        return f"the practical cannot be loaded: {exc}"
    sandbox = open_sandbox()
    if isinstance(sandbox, SandboxMissing):
        return f"official grading needs the sandbox, and this node has none: {sandbox}"
    if not isinstance(sandbox, str):
        sandbox.release()
    return loaded


def stand_in_seconds() -> float | None:
    """The benchmark's stand-in grading: seconds to sleep instead of grading, from the job's
    environment ($GRADER_BENCH_STAND_IN_S, set by bench/bench_burst.py in the environment the
    pushes, the hook, the dispatcher and sbatch pass on), or None (a real grading). A student
    sets no variable of the grader's processes, and a stand-in result gives no points."""
    value = os.environ.get(STAND_IN, "")
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds <= 3600 else None


def stand_in_report(practical: Practical, seconds: float) -> GradingReport:
    """What a stand-in grading leaves: after `seconds` of sleep (a real grading's wall time, on
    no CPU), every check of the spec failed with zero points and a message that says why, so
    that everything after the grading (the store, the feedback branch) is the real code's."""
    started = time.monotonic()
    time.sleep(seconds)
    spec = practical.assignment
    message = "not graded: a stand-in grading of the burst benchmark (bench/bench_burst.py) ran instead"
    checks = tuple(CheckResult(c.id, c.title, n, 0.0, c.points, Status.FAILED, message, visibility=c.visibility) for n, c in enumerate(spec.checks, 1))
    return GradingReport(practical.id, spec.title, checks, execution_time_s=time.monotonic() - started, environment={"isolation": "none: a stand-in grading (bench/bench_burst.py), nothing was run"})


def work(store: ResultsStore, course: Course, key: str) -> str:
    """Grade the queued submission `key`; return what happened, in a few words."""
    queue = Queue(store)
    log = store.root / "logs" / f"{key}.log"
    if log.is_file() and not log.is_symlink():
        os.chmod(log, LOG_MODE)  # made by the scheduler (sbatch --output) with its own mode: the staff's only
    submission = queue.load(key)
    if queue.settled(submission):
        queue.remove(key)
        return "graded already"
    practical = ready_to_grade(course, submission.practical)
    if isinstance(practical, str):
        problem = practical
        report = GradingReport.failure(submission.practical, f"{problem} (the course staff are told and will regrade it)")
        if submission.checks:  # the stored grade stands; its deferred checks stay so
            return merge_follow_up(store, course, submission, report, followup.where_graded(dict(os.environ), platform.node()))
        store.save(to_gradescope(report), provenance(submission, course, report))
        queue.remove(key)
        new = report_problem(store, problem, platform.node(), key, now())
        return f"not graded: {problem}; an autograder error is recorded (not retried: no retry can mend it) and the problem is {'reported to staff' if new else 'known to staff already'}{deliver(store, course, submission, report)}"
    scratch = Path(tempfile.mkdtemp(prefix="grader-work-"))
    try:
        taken = materialise(submission, scratch)
        options = GradeOptions(world_size=submission.options.get("world_size"), seed=submission.seed, checks=tuple(submission.checks))
        stand_in = stand_in_seconds()
        report = stand_in_report(practical, stand_in) if stand_in is not None else grade_folder(practical, taken.folder, options, official=True, refused=taken.refused).report
    except MaterialiseError as exc:
        report = GradingReport.failure(submission.practical, str(exc), total_points=practical.assignment.max_score)
    except Exception as exc:  # noqa: BLE001 - the worker's own failure: retried, never lost
        report = GradingReport.failure(submission.practical, f"the grading job failed: {type(exc).__name__}: {exc}", total_points=practical.assignment.max_score)
    finally:
        remove_tree(scratch)
    if report.error and submission.attempts + 1 < MAX_ATTEMPTS:
        submission.attempts += 1
        submission.state = "queued"
        submission.note(f"the grader failed ({report.error[:200]}); to be retried")
        queue.save(submission)
        return f"grader failure, retry {submission.attempts} of {MAX_ATTEMPTS - 1}"
    if submission.checks:
        return merge_follow_up(store, course, submission, report, followup.where_graded(dict(os.environ), platform.node()))
    report = write_views(report, store.path_for(submission.student, submission.practical, submission.commit))
    store.save(to_gradescope(report), provenance(submission, course, report))
    queue.remove(key)
    delivered = deliver(store, course, submission, report)
    if report.error:
        return f"an autograder error is recorded after {submission.attempts + 1} attempts: {report.error[:200]}{delivered}"
    return f"graded: {report.headline()}{delivered}{followup.request(store, course, submission, report)}"


def merge_follow_up(store: ResultsStore, course: Course, submission: Submission, later: GradingReport, where: str) -> str:
    """A follow-up's report merged into its stored grade (grader/submit/followup.py), the
    feedback delivered again; what a place could not grade either is reported to staff. The
    record leaves the queue either way (`regrade --deferred` asks again)."""
    merged = followup.merge(store, submission, later, where)
    Queue(store).remove(submission.key)
    if merged is None:
        return "follow-up not merged: its grade was regraded meanwhile, or has nothing deferred left"
    still = set(followup.deferred_here(merged)) & set(submission.checks)
    told = ""
    if still:
        given = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        why = f": {later.error[:200]}" if later.error else (f": the job was given GPUs {given[:60]} but torch sees no CUDA GPU there (a CPU build of torch, or no driver? run `grader doctor` on the node)" if given and not later.environment.get("cuda_gpus") else " (see the follow-up's verdicts)")
        problem = f"the place for deferred checks ({course.follow_up.describe() if course.follow_up else 'none any more'}) could not grade {', '.join(sorted(still))} of {submission.practical}{why}"
        told = "; reported to staff" if report_problem(store, problem, platform.node(), submission.key, now()) else "; known to staff already"
    return f"followed up: {merged.headline()}{told}{deliver(store, course, submission, merged)}"


def deliver(store: ResultsStore, course: Course, submission: Submission, report: GradingReport) -> str:
    """The feedback into the student's repository, for a pushed submission, with what the
    course's policy makes of its time; what became of it (the stored result stands either way)."""
    if submission.source.get("kind") != "git":
        return ""
    after = deadline_passed(course.policy, submission.student, submission.practical, datetime.datetime.now(datetime.timezone.utc))
    notes = lateness_note(course.policy, submission.student, submission.practical, submission.submitted_at)
    no_deadline = course.policy.deadline(submission.student, submission.practical) is None
    branch = Branch(Path(submission.source["repo"]), submission.practical, submission.commit, after_deadline=None if no_deadline else after, notes=notes)
    (outcome,) = deliver_all(with_lateness(report, course.policy, submission.student, submission.practical, submission.submitted_at), [Route(GIT_BRANCH, branch)])
    if isinstance(outcome, Problem):
        return f"; feedback not delivered to the repository: {outcome.message}"
    if after:
        mark_revealed(store, submission.student, submission.practical, submission.commit)
    return "; feedback on the repository's feedback branch"
