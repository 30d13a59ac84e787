"""Submissions by `git push`: a post-receive hook in each student's bare repository.

Installing the hook registers the repository in the store (grader/submit/reconcile.py: every
dispatch then queues whatever version of a practical has neither a result nor a record, so a
push the hook could not record is still graded). On every push to the default branch, each
practical whose folder (assignments/<id>/) changed is queued for the pushed commit — that record is made first, in the store on this
machine, so the push is never lost. The hook then starts a detached dispatcher (its output
goes to the store's logs/dispatch.log, never to git's pipe, so it cannot hold the push
open), or, when the pushes' dispatcher is running already, asks it for one more pass
(grader/submit/dispatch.py, dispatch_coalesced: in a deadline burst one pass at a time), waits a few seconds to tell the student what became of each submission
(`remote: queued p6 @abc1234: started as job 42`), and always exits 0: it never blocks or
breaks a push, also when grading is down — the record stays queued, and the next dispatch
(the next push, `grader dispatch`, a cron job) starts it.

A student asks for a regrade with a commit whose message starts with "regrade" (`git commit
--allow-empty -m "regrade p6"`; "regrade" alone: every practical they have submitted): the
pushed commit is graded for those practicals as any push is (its files are the latest ones),
its feedback on the feedback branch, at most REGRADES_PER_DAY times a practical in 24 hours
(`regrade_request`; the requests are kept in the store's requests/ folder).
"""
from __future__ import annotations

import datetime
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, TextIO

from grader.course import Course
from grader.results.escape import terminal_line
from grader.files import write_atomically
from grader.store import ResultsStore, safe_name
from grader.submit.dispatch import WAITING_FOR_SLOT, pass_requested
from grader.submit.feedback import read_command
from grader.submit.queue import Queue, Submission
from grader.submit.reconcile import register
from grader.submit.gitenv import GIT_TIMEOUT_S, git_free_environment, student_git, student_git_environment

ZERO = "0" * 40
BRANCHES = ("refs/heads/main", "refs/heads/master")
KEPT_ENVIRONMENT = ("SLURM_CONF", "PATH")
DOWN = "waiting (grading is down; it will be graded when it is back)"
UNDECIDED = "recorded; grading starts when the cluster answers"


def job_arguments(options: dict) -> list[str]:
    """`options` (gpus, partition, time_min, cpus, mem_mb) as command-line options of `hook receive`."""
    names = {"gpus": "--gpus", "partition": "--partition", "time_min": "--time", "cpus": "--cpus", "mem_mb": "--mem"}
    return [part for key, flag in names.items() if options.get(key) for part in (flag, str(options[key]))]


def install(repo: Path, results_dir: Path, backend: str, options: dict, course_root: Path, student: str | None = None, at: Path | None = None) -> Path:
    """Write the repository's post-receive hook; returns its path. `at`: where the repository
    will be when students push to it, for one made in a temporary folder and moved there
    afterwards (`grader roster`); the hook and the store's record name that place."""
    if not (repo / "HEAD").is_file() or not (repo / "objects").is_dir():
        raise ValueError(f"{repo} is not a bare git repository")
    home = Path(at) if at is not None else Path(repo)
    student = safe_name(student or home.name.removesuffix(".git"), "student")
    try:  # first: a store that cannot take the record would leave pushes that nothing grades
        register(ResultsStore(results_dir), student, home, backend, options)
    except OSError as exc:
        raise ValueError(f"the results store {results_dir} cannot record the repository: {exc.strerror or exc}") from None
    exports = "".join(f"export {name}={shlex.quote(os.environ[name])}\n" for name in KEPT_ENVIRONMENT if os.environ.get(name))
    command = [sys.executable, "-m", "grader", "--course-root", str(Path(course_root).resolve()), "hook", "receive", "--repo", str(home.resolve()), "--results-dir", str(results_dir.resolve()), "--backend", backend, *job_arguments(options), "--student", student]
    hook = repo / "hooks" / "post-receive"
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(
        "#!/bin/sh\n"
        "# Installed by `python -m grader hook install`: queue each pushed commit for grading.\n"
        "# Whatever happens here, the push itself has already succeeded.\n"
        f"{exports}"
        f"{' '.join(shlex.quote(part) for part in command)} || echo 'grading could not take this push; it is recorded in git and will be graded later'\n"
        "exit 0\n"
    )
    hook.chmod(0o755)
    return hook


def _git(repo: Path, command: list[str]) -> subprocess.CompletedProcess:
    """A git command on the student's repository, hardened (grader/submit/gitenv.py); one that
    cannot run or takes too long reads as one that printed nothing."""
    try:
        return subprocess.run([*student_git(str(repo)), *command], capture_output=True, text=True, env=student_git_environment(), timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return subprocess.CompletedProcess(command, 1, "", "")


def changed_practicals(repo: Path, old: str, new: str, practicals: tuple[str, ...]) -> list[str]:
    """The practicals whose folder the push changed (all present ones for a new branch)."""
    asked = ["ls-tree", "-r", "--name-only", new, "assignments/"] if old == ZERO else ["diff", "--name-only", old, new, "--", "assignments/"]
    done = _git(repo, asked)
    folders = {line.split("/")[1] for line in done.stdout.splitlines() if line.count("/") >= 2}
    return [p for p in practicals if p in folders]


REGRADE = "regrade"
REGRADES_PER_DAY = 3  # a student's regrade requests of one practical in 24 hours
DAY = datetime.timedelta(days=1)


def regrade_asked(repo: Path, commit: str, practicals: tuple[str, ...]) -> list[str] | None:
    """The practicals a commit's message asks to regrade — its first line "regrade p6 p7"
    (those of `practicals` it names) or "regrade" alone (all of them) — of those whose folder
    the commit holds; None when its message asks for no regrade."""
    words = _git(repo, ["log", "-1", "--format=%s", commit]).stdout.split()
    if not words or words[0].casefold().rstrip(":") != REGRADE:
        return None
    named = [practical for practical in practicals if practical in words[1:]]
    held = changed_practicals(repo, ZERO, commit, practicals)  # every practical folder the commit holds
    return [practical for practical in named or practicals if practical in held]


def regrade_request(store: ResultsStore, student: str, practical: str, now: datetime.datetime) -> tuple[bool, str]:
    """Whether a regrade of `practical` may go ahead for `student` now (recorded when it may),
    and the sentence that says so: at most REGRADES_PER_DAY in any 24 hours."""
    folder = store.root / "requests"
    store.staff_folder(folder)
    path = folder / f"{safe_name(student, 'student')}--{safe_name(practical, 'practical')}"
    try:
        earlier = [datetime.datetime.fromisoformat(line) for line in path.read_text(encoding="utf-8").split()]
    except (OSError, ValueError):
        earlier = []
    recent = sorted(moment for moment in earlier if now - moment < DAY)
    if len(recent) >= REGRADES_PER_DAY:
        return False, f"regrade of {practical} refused: {len(recent)} in the last 24 hours already (at most {REGRADES_PER_DAY}); the next from {(recent[0] + DAY):%Y-%m-%d %H:%M} UTC"
    write_atomically(path, "\n".join(moment.isoformat() for moment in [*recent, now]) + "\n", mode=0o640)
    return True, f"regrade of {practical}: request {len(recent) + 1} of {REGRADES_PER_DAY} in 24 hours"


def start_detached(command: list[str], log: Path) -> None:
    """Start `command` in its own session, its output to `log`: it outlives the hook and
    holds none of git's pipes."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as handle:
        subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True, env=git_free_environment())


def start_dispatcher(command: list[str], store: ResultsStore) -> None:
    """Start the pushes' dispatcher (`command`, detached), unless one is running: that one then
    makes one more pass for this push (grader/submit/dispatch.py, dispatch_coalesced)."""
    if not pass_requested(store):
        start_detached(command, store.root / "logs" / "dispatch.log")


def dispatcher_command(course_root: Path, results_dir: Path, backend: str) -> list[str]:
    """The dispatcher a push starts: coalesced with the other pushes' (dispatch_coalesced)."""
    return [sys.executable, "-m", "grader", "--course-root", str(course_root), "dispatch", "--results-dir", str(results_dir), "--backend", backend, "--coalesce"]


def describe(queue: Queue, submission: Submission) -> str | None:
    """What became of a queued submission, for its receipt (None: not known yet)."""
    if not queue.exists(submission.key):
        return "graded" if queue.store.has(submission.student, submission.practical, submission.commit) else None
    try:
        current = queue.load(submission.key)
    except (OSError, ValueError, TypeError):
        return None
    if current.state == "dispatched" and current.job:
        return f"started as job {current.job}"
    if current.history and "not started" in current.history[-1]:
        return DOWN
    if current.history and current.history[-1].endswith(WAITING_FOR_SLOT):
        return WAITING_FOR_SLOT
    return None


def _tell(out: TextIO, text: str) -> None:
    """One receipt line for the student's `git push` (escaped: it may carry stored text)."""
    print(terminal_line(text), file=out)


def receive(lines: Iterable[str], repo: Path, store: ResultsStore, course: Course, student: str, backend: str, options: dict, start_dispatcher: Callable[[], None], out: TextIO, wait_s: float = 3.0) -> None:
    """Handle a push (post-receive's stdin lines 'old new ref'): queue what it changed, start
    the dispatcher, print one receipt per practical to `out` within about `wait_s`."""
    queue = Queue(store)
    queued: list[Submission] = []
    known: list[str] = []  # practicals of this push queued or graded before it (the same commit pushed again)
    for line in lines:
        parts = line.split()
        if len(parts) != 3 or parts[2] not in BRANCHES or parts[1] == ZERO:
            continue
        old, new, _ = parts
        practicals = changed_practicals(repo, old, new, course.practicals)
        asked = regrade_asked(repo, new, course.practicals)
        if asked is not None:
            submitted = {practical for who, practical, _ in store.graded() if who == student} | {s.practical for s in queue.pending() if s.student == student}
            asked = [practical for practical in asked if practical in practicals or practical in submitted]
            for practical in [p for p in asked if p not in practicals]:
                allowed, said = regrade_request(store, student, practical, datetime.datetime.now(datetime.timezone.utc))
                _tell(out, said)
                practicals += [practical] if allowed else []
        if not practicals:
            _tell(out, f"nothing to grade in {new[:7]} (no practical's folder changed{'' if asked is None else ', and no regrade of one you submitted can be made'})")
        for practical in practicals:
            submission = Submission(student=student, practical=practical, commit=new, source={"kind": "git", "repo": str(repo)}, backend=backend, options=dict(options))
            status = queue.add(submission)
            if status == "queued":
                queued.append(submission)
            else:
                _tell(out, f"{practical} @{new[:7]}: {status}")
                known.append(practical)
    if not queued:
        _tell_where_feedback_is(out, known)
        return
    try:
        start_dispatcher()
    except Exception as exc:  # noqa: BLE001 - a push must never fail for grading's sake
        for submission in queued:
            _tell(out, f"queued {submission.practical} @{submission.commit[:7]}: {DOWN} ({type(exc).__name__})")
        return
    receipts: dict[str, str | None] = {}
    deadline = time.monotonic() + wait_s
    while True:
        receipts = {s.key: describe(queue, s) for s in queued}
        if all(receipts.values()) or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    for submission in queued:
        _tell(out, f"queued {submission.practical} @{submission.commit[:7]}: {receipts[submission.key] or UNDECIDED}")
    _tell_where_feedback_is(out, [*(s.practical for s in queued), *known])


def _tell_where_feedback_is(out: TextIO, practicals: Iterable[str]) -> None:
    """How to read each practical's feedback, once per practical."""
    for practical in dict.fromkeys(practicals):
        _tell(out, f"feedback, once graded: {read_command(practical)}")
