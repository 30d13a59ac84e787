"""Problems of the grading itself that only staff can fix (a node without the sandbox, a spec
that does not load): retrying the job cannot help, so the submission gets its autograder-error
result at once and the problem is recorded here once, however many submissions it stops.

    problems/<id>.json   {"message", "node", "first_seen", "last_seen", "count", "submissions"}

`grader status` lists them first; `grader regrade --errors` (after the fix) queues the stopped
submissions again and clears the list.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

from grader.files import write_atomically
from grader.store import ResultsStore

FOLDER = "problems"
KEPT_SUBMISSIONS = 100  # the first ones a problem stopped, by queue key (the count goes on)


@dataclass
class Problem:
    message: str
    node: str
    first_seen: str
    last_seen: str
    count: int = 0
    submissions: list[str] = field(default_factory=list)


def _path(store: ResultsStore, message: str, node: str) -> Path:
    digest = hashlib.sha256((node + "\n" + message).encode()).hexdigest()
    return store.root / FOLDER / f"{digest[:16]}.json"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def report_problem(store: ResultsStore, message: str, node: str, key: str, when: str) -> bool:
    """Count submission `key` against the problem; True when the problem is new."""
    path = _path(store, message, node)
    store.staff_folder(path.parent)
    with _locked(path):
        found = read_problem(path)
        problem = found or Problem(message=message, node=node, first_seen=when, last_seen=when)
        problem.count += 1
        problem.last_seen = when
        if key not in problem.submissions and len(problem.submissions) < KEPT_SUBMISSIONS:
            problem.submissions.append(key)
        write_atomically(path, json.dumps(asdict(problem), indent=2) + "\n", mode=0o640)
    return found is None


def read_problem(path: Path) -> Problem | None:
    """The problem a file records (None when it cannot be read or is not one: begun anew)."""
    try:
        problem = Problem(**json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None
    texts = (problem.message, problem.node, problem.first_seen, problem.last_seen)
    if not all(isinstance(t, str) for t in texts) or not isinstance(problem.count, int) or not isinstance(problem.submissions, list):
        return None
    return problem


def open_problems(store: ResultsStore) -> list[Problem]:
    """The recorded problems, oldest first."""
    folder = store.root / FOLDER
    found = [read_problem(path) for path in sorted(folder.glob("*.json"))] if folder.is_dir() else []
    return sorted((p for p in found if p is not None), key=lambda p: p.first_seen)


def clear_problems(store: ResultsStore) -> int:
    """Forget every recorded problem (their submissions are being regraded); how many there were."""
    folder = store.root / FOLDER
    paths = list(folder.glob("*.json")) if folder.is_dir() else []
    for path in paths:
        path.unlink(missing_ok=True)
        path.with_suffix(".lock").unlink(missing_ok=True)
    return len(paths)
