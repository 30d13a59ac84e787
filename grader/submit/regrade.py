"""`grader regrade`: grade stored results again, after the grader or a spec changed, or after
an autograder error.

A regrade moves the stored result into the commit's history (the store keeps every earlier
result) and queues the commit again, from the source its provenance names; the next dispatch
grades it. Running it twice queues nothing twice (the commit is already queued). Results of
folder submissions (`grader submit`) cannot be regraded: their files are not kept.
"""
from __future__ import annotations

from dataclasses import dataclass

from grader import __version__
from grader.course import Course
from grader.results.gradescope import autograder_error_of, read_report
from grader.store import Entry, ResultsStore
from grader.submit.followup import deferred_here, request_again
from grader.submit.problems import clear_problems
from grader.submit.queue import FOLLOW_UP_SUFFIX, Queue, Submission
from grader.submit.worker import spec_digest


@dataclass(frozen=True)
class Selection:
    """Which stored results to regrade: every one that matches all the given fields."""

    practical: str | None = None
    student: str | None = None
    commit: str | None = None  # or the first characters of one
    errors: bool = False  # only autograder errors
    stale: bool = False  # only those graded by another grader version or another spec
    deferred: bool = False  # only those with checks deferred for their machine: a follow-up of those checks alone (grader/submit/followup.py)

    def matches(self, entry: Entry, course: Course) -> bool:
        provenance = entry.provenance
        return (
            (self.practical is None or entry.practical == self.practical)
            and (self.student is None or entry.student == self.student)
            and (self.commit is None or entry.commit.startswith(self.commit))
            and (not self.errors or autograder_error_of(entry.document) is not None)
            and (not self.stale or provenance.get("grader") != __version__ or provenance.get("spec_digest") != spec_digest(course, entry.practical))
            and (not self.deferred or bool(deferred_here(read_report(entry.document))))
        )


@dataclass(frozen=True)
class Regraded:
    """What became of one selected result."""

    name: str  # student/practical@commit
    what: str  # "queued", "already queued", or why not
    key: str | None = None  # the queue key, when it was queued


def entry_key(entry: Entry) -> str:
    """The queue key of a stored grade's follow-up."""
    return f"{entry.student}--{entry.practical}--{entry.commit}{FOLLOW_UP_SUFFIX}"


def regrade(store: ResultsStore, course: Course, selection: Selection, backend: str) -> list[Regraded]:
    """Queue every selected result again (with `errors`, the problems staff were told of are
    taken as fixed: their list is cleared); with `deferred`, not the whole grading but a
    follow-up of its deferred checks at the course's place for them, the grade kept."""
    queue, done = Queue(store), []
    if selection.errors:
        clear_problems(store)
    for entry in list(store.entries()):
        if entry.practical not in course.practicals or not selection.matches(entry, course):
            continue
        name = f"{entry.student}/{entry.practical}@{entry.commit[:10]}"
        if selection.deferred:
            what = request_again(store, course, entry)
            done.append(Regraded(name, what, entry_key(entry) if what in ("queued", "already queued") else None))
            continue
        provenance = entry.provenance
        source = provenance.get("source")
        if not isinstance(source, dict) or source.get("kind") != "git" or not isinstance(source.get("repo"), str):
            why = "its files were a folder submission, which is not kept: submit it again" if isinstance(source, dict) else "graded before results recorded their source"
            done.append(Regraded(name, f"not regraded: {why}"))
            continue
        options = provenance.get("options") if isinstance(provenance.get("options"), dict) else {}
        submission = Submission(
            student=entry.student,
            practical=entry.practical,
            commit=entry.commit,
            source=source,
            backend=backend,
            options={key: value for key, value in options.items() if key in ("gpus", "partition", "time_min", "world_size")},
        )
        if isinstance(provenance.get("submitted_at"), str):
            submission.submitted_at = provenance["submitted_at"]  # a regrade keeps the time of the push (deadlines)
        retired = store.retire(entry.student, entry.practical, entry.commit)
        submission.note(f"regrade; the earlier result is {retired.relative_to(store.root)}")
        what = queue.add(submission)
        done.append(Regraded(name, what, submission.key if what in ("queued", "already queued") else None))
    return done
