"""Feedback delivered through git: after each grading of a pushed commit, the student's bare
repository gets a commit on its `feedback` branch holding what the student may see.

  feedback/<practical>.md              the latest graded commit's feedback
  feedback/<practical>/<commit>.md     every graded commit's, kept

The student reads it with `git fetch origin feedback && git show origin/feedback:p6.md`. It says
when the commit was submitted and what the course's late policy makes of it. The
branch is written with git's plumbing (a private index file, write-tree, commit-tree, and
update-ref against the old value, retried when two gradings race), so the student's own
branches and working trees are never touched. What goes in is the student's view of the report:
visible checks only (after_due_date ones once the student's deadline for the practical has
passed; hidden and after_published ones never), no environment, no run folders of the grader's.
Feedback delivered before the deadline is delivered again once it has passed
(`reveal_after_deadlines`, run by every dispatch); the store's feedback/ folder records what was.
"""
from __future__ import annotations

import datetime
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from grader.files import write_atomically
from grader.policy import CoursePolicy, parse_time
from grader.results.gradescope import read_report
from grader.results.model import GradingReport, Penalty
from grader.results.render import markdown
from grader.store import Entry, ResultsStore
from grader.submit.gitenv import GIT_TIMEOUT_S, refused_config, student_git, student_git_environment

BRANCH = "refs/heads/feedback"
ATTEMPTS = 5


REVEALED = "feedback"  # the store's folder of marks: feedback delivered after the deadline


def student_view(report: GradingReport, after_deadline: bool | None, notes: tuple[str, ...] = ()) -> GradingReport:
    """The report as its student may see it, with `notes` (e.g. when it was submitted) first."""
    seen = report.as_students_see(after_deadline)
    return replace(seen, environment={}, runs=(), notes=notes + seen.notes)


def read_command(practical: str) -> str:
    """How the student reads the feedback of `practical` from their clone."""
    return f"git fetch origin feedback && git show origin/feedback:{practical}.md"


def _git(repo: Path, *args: str, env: dict[str, str], stdin: str | None = None) -> str:
    done = subprocess.run([*student_git(str(repo)), *args], input=stdin, capture_output=True, text=True, env=env, timeout=GIT_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"git {args[0]}: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


def _stamp(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def lateness_note(policy: CoursePolicy, student: str, practical: str, submitted_at: str) -> tuple[str, ...]:
    """What the course's policy makes of the submission's time, for its student (nothing when
    the practical has no deadline)."""
    try:
        moment = parse_time(submitted_at)
    except ValueError:
        return ()
    lateness = policy.judge(student, practical, moment)
    if lateness.deadline is None:
        return ()
    if not lateness.late:
        return (f"Submitted {_stamp(moment)}: on time (your deadline: {_stamp(lateness.deadline)}).",)
    return (f"Submitted {_stamp(moment)}: {lateness.effect} (your deadline: {_stamp(lateness.deadline)}; late policy: {policy.late.describe()}).",)


def with_lateness(report: GradingReport, policy: CoursePolicy, student: str, practical: str, submitted_at: str) -> GradingReport:
    """`report` with what the course's late policy makes of its score, for its headline (as
    `collect` counts it); unchanged when the submission was on time or has no deadline."""
    try:
        lateness = policy.judge(student, practical, parse_time(submitted_at))
    except ValueError:
        return report
    return replace(report, penalty=Penalty(lateness.factor, lateness.effect)) if lateness.late else report


def deadline_passed(policy: CoursePolicy, student: str, practical: str, moment: datetime.datetime) -> bool:
    deadline = policy.deadline(student, practical)
    return deadline is not None and moment >= deadline


def mark_revealed(store: ResultsStore, student: str, practical: str, commit: str) -> None:
    """Record that this commit's feedback went out with the checks shown after the deadline."""
    folder = store.root / REVEALED
    store.staff_folder(folder)
    write_atomically(folder / f"{student}--{practical}--{commit}", "", mode=0o640)


def reveal_after_deadlines(store: ResultsStore, policy: CoursePolicy, moment: datetime.datetime) -> list[str]:
    """Deliver again, now with the checks shown after the deadline, the feedback of every pushed
    commit whose student's deadline has passed since it was delivered (oldest first, so that
    <practical>.md ends with the latest); what was delivered, one line each."""
    marks = store.root / REVEALED
    due, pairs = [], set()
    for student, practical, commit in store.graded():
        if not deadline_passed(policy, student, practical, moment) or (marks / f"{student}--{practical}--{commit}").exists():
            continue
        try:
            entry = store.entry(student, practical, commit)
        except ValueError:  # a file of another name put into the store by hand
            continue
        if entry is not None:
            due.append(entry)
            pairs.add((student, practical))
    newest = {}  # (student, practical) -> the commit its <practical>.md must show: the latest graded
    for student, practical, commit in store.graded():
        if (student, practical) in pairs:
            try:
                entry = store.entry(student, practical, commit)
            except ValueError:
                continue
            when = str(entry.provenance.get("submitted_at", "")) if entry else ""
            if entry is not None and when >= newest.get((student, practical), ("", ""))[0]:
                newest[(student, practical)] = (when, commit)
    done = []
    for entry in sorted(due, key=lambda e: str(e.provenance.get("submitted_at", ""))):
        source = entry.provenance.get("source") or {}
        report = read_report(entry.document)
        if isinstance(source, dict) and source.get("kind") == "git" and any(c.visibility == "after_due_date" for c in report.checks):
            submitted = str(entry.provenance.get("submitted_at", ""))
            notes = lateness_note(policy, entry.student, entry.practical, submitted)
            latest = newest.get((entry.student, entry.practical), ("", entry.commit))[1] == entry.commit
            try:
                publish(Path(str(source.get("repo"))), entry.practical, entry.commit, with_lateness(report, policy, entry.student, entry.practical, submitted), after_deadline=True, notes=notes, latest=latest)
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                done.append(f"{entry.student} {entry.practical} @{entry.commit[:7]}: feedback after the deadline not delivered: {exc}")
                continue
            done.append(f"{entry.student} {entry.practical} @{entry.commit[:7]}: feedback after the deadline delivered")
        mark_revealed(store, entry.student, entry.practical, entry.commit)
    return done


def feedback_text(report: GradingReport, commit: str, after_deadline: bool | None, notes: tuple[str, ...] = ()) -> str:
    """The student's view of `report` as markdown, naming the graded commit."""
    return markdown(student_view(report, after_deadline, notes), graded_commit=commit)


def stored_report(entry: Entry, policy: CoursePolicy, moment: datetime.datetime) -> GradingReport:
    """The student's view of a stored result at `moment`, with what the course's policy makes
    of its time (what the feedback branch holds for it)."""
    submitted = str(entry.provenance.get("submitted_at", ""))
    notes = lateness_note(policy, entry.student, entry.practical, submitted)
    report = with_lateness(read_report(entry.document), policy, entry.student, entry.practical, submitted)
    return student_view(report, deadline_passed(policy, entry.student, entry.practical, moment), notes)


def publish(repo: Path, practical: str, commit: str, report: GradingReport, after_deadline: bool | None = False, notes: tuple[str, ...] = (), latest: bool = True) -> str:
    """Commit the student's view of `report` to the repository's feedback branch (as
    <practical>.md too, when it is the `latest` graded commit); returns the feedback commit's
    id. RuntimeError when git refuses."""
    text = feedback_text(report, commit, after_deadline, notes)
    refused = refused_config(str(repo))
    if refused:
        raise RuntimeError(f"the repository is not written to: {refused}")
    env = {**student_git_environment(), "GIT_AUTHOR_NAME": "grader", "GIT_AUTHOR_EMAIL": "grader@localhost", "GIT_COMMITTER_NAME": "grader", "GIT_COMMITTER_EMAIL": "grader@localhost"}
    blob = _git(repo, "hash-object", "-w", "--stdin", env=env, stdin=text)
    for _ in range(ATTEMPTS):
        done = subprocess.run([*student_git(str(repo)), "rev-parse", "--verify", "-q", BRANCH], capture_output=True, text=True, env=env, timeout=GIT_TIMEOUT_S)
        parent = done.stdout.strip() if done.returncode == 0 else None
        with tempfile.TemporaryDirectory(prefix="grader-feedback-") as scratch:
            indexed = {**env, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
            if parent:
                _git(repo, "read-tree", parent, env=indexed)
            for path in ((f"{practical}.md",) if latest else ()) + (f"{practical}/{commit}.md",):
                _git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=indexed)
            tree = _git(repo, "write-tree", env=indexed)
        made = _git(repo, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", f"feedback on {practical} @{commit[:7]}", env=env)
        update = subprocess.run([*student_git(str(repo)), "update-ref", BRANCH, made, parent or "0" * 40], capture_output=True, text=True, env=env, timeout=GIT_TIMEOUT_S)
        if update.returncode == 0:
            return made
    raise RuntimeError(f"the feedback branch kept moving: {ATTEMPTS} attempts")
