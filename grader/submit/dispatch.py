"""Settling the queue: start what is queued, watch what runs, and decide for each finished
job without a result:

  TIMEOUT                          the job ran past its Slurm time limit: a graded result says
                                   so (every check failed with that message); not retried
  CANCELLED, NODE_FAIL, FAILED,    the infrastructure failed: queued again, up to MAX_ATTEMPTS,
  a vanished job, a worker that    then an autograder-error result is stored
  ended without a word

`dispatch` is safe to run at any time and from several places (a git hook, `submit --wait`,
a cron job): a submission with a result is never graded again. A backend with `slots` runs
that many gradings at once; the others stay queued until one ends.
"""
from __future__ import annotations

import datetime
import time
from pathlib import Path

from grader.course import Course, load_practical
from grader.grade.options import GradeOptions, time_limits
from grader.grade.plan import plan_runs
from grader.results.gradescope import to_gradescope
from grader.results.model import CheckResult, GradingReport, Status
from grader.run.sandbox import Limits
from grader.store import ResultsStore
from grader.submit.backends import Backend, BackendDown, JobSize, JobState, named_backend, work_command
from grader.submit.feedback import reveal_after_deadlines
from grader.submit.queue import MAX_ATTEMPTS, Queue, Submission
from grader.submit.reconcile import reconcile
from grader.submit.worker import merge_follow_up, provenance, store_failure


def timeout_report(course: Course, submission: Submission, minutes: int) -> GradingReport:
    """The graded result of a job stopped at its time limit."""
    spec = load_practical(course, submission.practical).assignment
    message = f"not graded: the grading job ran past its time limit ({minutes} min) and was stopped; the code probably hangs or is far too slow"
    checks = tuple(CheckResult(c.id, c.title, n, 0.0, c.points, Status.FAILED, message, visibility=c.visibility) for n, c in enumerate(spec.checks, 1))
    return GradingReport(submission.practical, spec.title, checks, environment={"isolation": "the job was stopped by the scheduler"})


WAITING_FOR_SLOT = "queued behind a running grading (this machine grades one at a time)"


def job_minutes(course: Course, practical: str) -> int:
    """A grading job's default time limit, in minutes (grader/grade/options.py: TimeLimits.job_minutes)."""
    return time_limits(load_practical(course, practical).assignment).job_minutes


GRADER_MEMORY_MB = 1024  # the grader's own process beside a launch: the hub, the reference computations


def job_size(course: Course, practical: str, world_size: int | None = None) -> JobSize:
    """What a grading job of `practical` needs of a node: a CPU for every rank of its largest
    launch (launches run one after another, the reference solution's between the submission's),
    and that launch's memory cap (the sandbox's per-launch cgroup) with the grader's own."""
    assignment = load_practical(course, practical).assignment
    runs = plan_runs(assignment, assignment.checks, GradeOptions(world_size=world_size))
    return JobSize(cpus=max((run.layout.world_size for run in runs), default=1), memory_mb=Limits().job_memory_mb + GRADER_MEMORY_MB)


def _start(queue: Queue, submission: Submission, course: Course, backend: Backend) -> str:
    if not submission.options.get("time_min"):
        submission.options["time_min"] = job_minutes(course, submission.practical)
    if not submission.options.get("cpus") or not submission.options.get("mem_mb"):
        size = job_size(course, submission.practical, submission.options.get("world_size"))
        submission.options["cpus"] = submission.options.get("cpus") or size.cpus
        submission.options["mem_mb"] = submission.options.get("mem_mb") or size.memory_mb
    log = queue.store.root / "logs" / f"{submission.key}.log"
    queue.store.staff_folder(log.parent)
    try:
        # a backend with slots has no scheduler to start the next job: the job itself does
        command = work_command(course.root, queue.store.root, submission.key, then_dispatch=backend.name if backend.slots is not None else None)
        job = backend.dispatch(submission, command, log)
    except BackendDown as exc:
        submission.note(f"not started, the backend is down: {exc}")
        queue.save(submission)
        return "waiting (grading is down; it will be graded when it is back)"
    submission.state, submission.job, submission.backend = "dispatched", job, backend.name
    submission.note(f"started as job {job}")
    queue.save(submission)
    return f"started as job {job}"


def _start_when_free(queue: Queue, submission: Submission, course: Course, backend: Backend) -> str:
    """Start the submission, unless the backend's slots are all taken (it then stays queued).
    One dispatcher at a time counts and starts (a lock per backend): two pushes at once must
    not both take the last slot."""
    if backend.slots is None:
        return _start(queue, submission, course, backend)
    with queue.hold(f"{backend.name}.slots") as mine:
        if mine:
            running = [s for s in queue.pending() if s.state == "dispatched" and s.backend == backend.name and s.job and not backend.state(s.job).finished]
            if len(running) < backend.slots:
                return _start(queue, submission, course, backend)
    if not (submission.history and submission.history[-1].endswith(WAITING_FOR_SLOT)):
        submission.note(WAITING_FOR_SLOT)
        queue.save(submission)
    return WAITING_FOR_SLOT


def progress(submission: Submission, backend: Backend | None) -> str:
    """Where a queued submission stands, from its scheduler's own state where a job is on it:
    "queued …", "running …", or "ended … (the next dispatch settles it)"."""
    last = submission.history[-1].split(" ", 1)[-1] if submission.history else ""
    if submission.state != "dispatched" or not submission.job or backend is None:
        return f"queued ({last})" if last else "queued"
    try:
        state = backend.state(submission.job)
    except BackendDown as exc:
        return f"dispatched as job {submission.job} (the scheduler does not answer: {exc})"
    if state is JobState.PENDING:
        return f"queued in {backend.name} as job {submission.job}"
    if state is JobState.RUNNING:
        return f"running as job {submission.job}"
    return f"job {submission.job} ended {state.value} without a result yet (the next dispatch settles it)"


def backend_for(submission: Submission, course: Course, backend: Backend) -> Backend:
    """The backend a record's jobs run on: a follow-up's is the course's place for deferred
    checks (grader/submit/followup.py), whichever backend the pass was given; the others', `backend`."""
    place = course.follow_up
    if submission.checks and place is not None and place.backend != backend.name:
        return named_backend(place.backend)
    return backend


def settle(queue: Queue, submission: Submission, course: Course, backend: Backend) -> str:
    """Move one queued submission on (a follow-up on its own place's backend); return what happened."""
    with queue.hold(submission.key) as mine:
        if not mine:
            return "being dispatched by another process"
        return _settle(queue, submission.key, course, backend_for(submission, course, backend))


def _settle(queue: Queue, key: str, course: Course, backend: Backend) -> str:
    store = queue.store
    if not queue.exists(key):
        return "graded"
    submission = queue.load(key)
    if queue.settled(submission):
        queue.remove(key)
        return "graded"
    if submission.state == "queued":
        return _start_when_free(queue, submission, course, backend)
    state = backend.state(submission.job or "")
    if not state.finished:
        return state.value.lower()
    current = queue.load(key) if queue.exists(key) else None  # the job may have written it meanwhile
    if current is None or queue.settled(current):
        queue.remove(key)
        return "graded"
    if current.state == "queued":  # the worker asked for a retry after a grader failure
        return _start_when_free(queue, current, course, backend)
    if state is JobState.TIMEOUT:
        report = timeout_report(course, current, int(current.options.get("time_min") or 0))
        if current.checks:  # a follow-up: its checks get the verdict, the stored grade the rest
            return merge_follow_up(store, course, current, report, f"job {current.job}")
        store.save(to_gradescope(report), provenance(current, course, report))
        queue.remove(key)
        return f"job {current.job} timed out: recorded as such"
    current.attempts += 1
    current.note(f"job {current.job} ended {state.value} without a result (attempt {current.attempts})")
    if current.attempts >= MAX_ATTEMPTS:
        message = f"the grading job failed {current.attempts} times ({state.value}); course staff will regrade it"
        if current.checks:  # a follow-up: the stored grade stands, its checks stay deferred
            return merge_follow_up(store, course, current, GradingReport.failure(current.practical, message), f"job {current.job}")
        store_failure(store, current, course, message)
        queue.remove(key)
        return f"gave up after {current.attempts} attempts: an autograder error is recorded"
    current.state, current.job = "queued", None
    queue.save(current)
    return f"job ended {state.value}; {_start(queue, current, course, backend)}"


def dispatch(store: ResultsStore, course: Course, backend: Backend, reconciling: bool = True, watching: bool = True) -> dict[str, str]:
    """One pass: reconciliation (grader/submit/reconcile.py; not when `reconciling` is False),
    the feedback of deadlines that have passed (grader/submit/feedback.py), then the queue:
    key -> what happened to it. Without `watching`, records a job is on are left alone (their
    jobs store their own results; the next full pass retries a job that ended without one)."""
    if reconciling:
        reconcile(store, course)
    try:
        revealed = reveal_after_deadlines(store, course.policy, datetime.datetime.now(datetime.timezone.utc))
    except (OSError, ValueError) as exc:  # the feedback after deadlines must never stop grading
        revealed = [f"feedback after the deadline not delivered: {exc}"]
    queue = Queue(store)
    happened = {submission.key: settle(queue, submission, course, backend) for submission in queue.pending() if watching or submission.state != "dispatched"}
    return {**{f"feedback {n}": line for n, line in enumerate(revealed, 1)}, **happened}


RECONCILE_EVERY_S = 60  # the pushes' dispatchers reconcile at most this often (cron's and `dispatch` always do)
COALESCED = "dispatch.coalesced"  # the lock of the pushes' dispatcher (grader/submit/queue.py's locks/)
AGAIN = "dispatch.again"  # a push's request for one more pass, beside it


def pass_requested(store: ResultsStore) -> bool:
    """Ask the pushes' dispatcher for one more pass; True when one is running and so makes it
    (the hook then starts none: a Python process a push, about 0.6 CPU-s, for nothing)."""
    queue = Queue(store)
    (queue.root / "locks").mkdir(parents=True, exist_ok=True)
    (queue.root / "locks" / AGAIN).touch()
    with queue.hold(COALESCED) as mine:
        return not mine


def dispatch_coalesced(store: ResultsStore, course: Course, backend: Backend, reconcile_every_s: float = RECONCILE_EVERY_S) -> dict[str, str] | None:
    """The dispatcher a push starts (`dispatch --coalesce`): one at a time for all pushes. It
    asks for a pass (a request file), then takes the lock; one that finds it taken ends at
    once (None), and the holder makes one more pass for it. The holder passes until no
    request is left, and looks again after letting go of the lock, so that a request made
    while it let go is never left alone. A record is written before its request, so the
    pass that follows the request sees it. Reconciliation (every registered repository
    read: seconds for hundreds of them) runs after the queue is settled and at most every
    `reconcile_every_s`; what it queues gets a pass of its own. Its passes start what is
    queued and leave running jobs alone (a scheduler's query for each: passes follow each
    other all through a burst); cron's `dispatch` watches them and retries what failed.

    Each push once started a whole pass of its own, each reading every registered repository:
    with 300 repositories a pass took 14-18 s on the project's 2-core machine, so a deadline
    burst of 1,200 pushes in 10 minutes asked for about 5 hours of passes (bench/bench_burst.py)."""
    locks = Queue(store).root / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    request, stamp = locks / AGAIN, locks / "reconciled"
    request.touch()
    happened: dict[str, str] | None = None
    queue = Queue(store)
    while request.exists():
        with queue.hold(COALESCED) as mine:
            if not mine:
                return happened  # the holder passes again for this request
            while request.exists():
                request.unlink(missing_ok=True)
                happened = dispatch(store, course, backend, reconciling=False, watching=False)
                try:
                    due = time.time() - stamp.stat().st_mtime >= reconcile_every_s
                except FileNotFoundError:
                    due = True
                if due:
                    stamp.touch()
                    if reconcile(store, course):
                        request.touch()  # start what it queued
    return happened


def wait(store: ResultsStore, course: Course, backend: Backend, keys: set[str] | None = None, timeout_s: float = 3600, poll_s: float = 1.0, report=None) -> bool:
    """Dispatch until the queue (or the `keys` of it) is empty; False at the timeout."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    while time.monotonic() < deadline:
        happened = dispatch(store, course, backend)
        for key, what in happened.items():
            if report is not None and last.get(key) != what:
                report(f"{key}: {what}")
        last = happened
        left = {s.key for s in Queue(store).pending()}
        if not (left & keys if keys is not None else left):
            return True
        time.sleep(poll_s)
    return False


def inbox(store: ResultsStore, key: str) -> Path:
    """Where a folder submission is kept until graded (on the shared file system)."""
    return store.root / "inbox" / key
