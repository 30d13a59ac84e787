"""Queued submissions: one JSON record per (student, practical, commit) under the store's
queue/ folder, written atomically. A record leaves the queue only when the store holds a
result for it, so an accepted submission is never lost: a job that dies leaves its record,
and the next dispatch retries it."""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from grader.files import write_atomically
from grader.store import ResultsStore, StoreError, safe_name

MAX_ATTEMPTS = 3  # infrastructure failures retried; then an autograder-error result is stored
FOLLOW_UP_SUFFIX = "--deferred"  # a follow-up's queue key: <student>--<practical>--<commit>--deferred


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass
class Submission:
    student: str
    practical: str
    commit: str
    source: dict  # {"kind": "git", "repo": "/srv/git/alice.git"} or {"kind": "folder", "path": "…"}
    submitted_at: str = field(default_factory=now)
    backend: str = "local"
    options: dict = field(default_factory=dict)  # gpus, partition, time_min, world_size
    state: str = "queued"  # queued (to be started) or dispatched (a job is on it)
    job: str | None = None
    attempts: int = 0
    history: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)  # a follow-up: only these checks, deferred by the stored grading (grader/submit/followup.py)
    seed: int | None = None  # a follow-up: the stored grading's seed
    requested_at: str = ""  # a follow-up: when it was asked for (the stored grade names it once merged)

    @property
    def key(self) -> str:
        return f"{self.student}--{self.practical}--{self.commit}" + (FOLLOW_UP_SUFFIX if self.checks else "")

    def note(self, text: str) -> None:
        self.history.append(f"{now()} {text}")


class Queue:
    """The queue/ folder of a results store."""

    def __init__(self, store: ResultsStore) -> None:
        self.store = store
        self.root = store.root / "queue"

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def add(self, submission: Submission) -> str:
        """Queue a submission unless it is graded or queued already: 'queued', 'graded' or
        'already queued' (the same commit is graded once)."""
        for value, what in ((submission.student, "student"), (submission.practical, "practical"), (submission.commit, "commit")):
            safe_name(value, what)
            if "--" in value:
                raise StoreError(f"{what} {value!r} cannot contain '--' (it separates the parts of a queue key)")
        if self.settled(submission):
            return "graded"
        if self.path(submission.key).exists():
            return "already queued"
        submission.note(f"accepted ({submission.source['kind']})")
        self.save(submission)
        return "queued"

    def settled(self, submission: Submission) -> bool:
        """Whether the store holds what the record asks for: a result of its commit; for a
        follow-up, a stored grade that names it as merged (or none left to merge into: a regrade
        retired it, and the new grading asks for its own)."""
        if not submission.checks:
            return self.store.has(submission.student, submission.practical, submission.commit)
        entry = self.store.entry(submission.student, submission.practical, submission.commit)
        if entry is None:
            return True
        merged = entry.provenance.get("follow_ups")
        return isinstance(merged, list) and any(isinstance(done, dict) and done.get("requested_at") == submission.requested_at for done in merged)

    def save(self, submission: Submission) -> None:
        write_atomically(self.path(submission.key), json.dumps(asdict(submission), indent=2) + "\n")

    def load(self, key: str) -> Submission:
        return Submission(**json.loads(self.path(key).read_text(encoding="utf-8")))

    def exists(self, key: str) -> bool:
        return self.path(key).exists()

    def remove(self, key: str) -> None:
        """Drop the record (its result is stored) and its lock file."""
        self.path(key).unlink(missing_ok=True)
        (self.root / "locks" / key).unlink(missing_ok=True)

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[bool]:
        """An exclusive, non-blocking lock on the record `key` (True when this process got it),
        so that two dispatchers (a hook, a cron job) never start two jobs for one record.
        Whoever gets it must re-read the record: it may have changed meanwhile."""
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(locks / key, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    def pending(self) -> list[Submission]:
        """Every queued record, oldest first (unreadable ones are passed over)."""
        found = []
        for path in sorted(self.root.glob("*.json")) if self.root.is_dir() else []:
            try:
                found.append(Submission(**json.loads(path.read_text(encoding="utf-8"))))
            except (OSError, ValueError, TypeError):
                continue
        return sorted(found, key=lambda s: s.submitted_at)
