"""Reconciliation: nothing pushed is left ungraded, whatever happened to the hook.

`hook install` registers each student's repository in the store (repositories/<student>.json).
Every dispatch (the hook's, `grader dispatch`, a cron line) first looks at each registered
repository's main branch: for each practical whose folder there differs from the repository's
first commit (the starter template is not a submission), that version must have a result or a
queue record, made from a commit whose folder holds the same files (git's tree of
assignments/<id>/ is compared, so a later commit that touched only other files is not graded
again). What has neither is queued, so a push whose record could not be written (a full disk,
a store that was not writable, a hook that crashed) is graded by the next dispatch.
"""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

from grader.course import Course
from grader.files import write_atomically
from grader.store import ResultsStore, safe_name
from grader.submit.gitenv import GIT_TIMEOUT_S, student_git, student_git_environment
from grader.submit.queue import Queue, Submission

REGISTRY = "repositories"
BRANCHES = ("refs/heads/main", "refs/heads/master")


def record_path(store: ResultsStore, student: str) -> Path:
    """Where the store records `student`'s repository (`register`)."""
    return store.root / REGISTRY / f"{safe_name(student, 'student')}.json"


def register(store: ResultsStore, student: str, repo: Path, backend: str, options: dict) -> Path:
    """Record a student's repository for reconciliation; returns the record's path."""
    path = record_path(store, student)
    store.staff_folder(path.parent)
    write_atomically(path, json.dumps({"student": student, "repo": str(Path(repo).resolve()), "backend": backend, "options": options}, indent=2) + "\n", mode=0o640)
    return path


def _git(repo: str, *args: str) -> str | None:
    done = subprocess.run([*student_git(repo), *args], capture_output=True, text=True, env=student_git_environment(), timeout=GIT_TIMEOUT_S)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def _folder_trees(repo: str, names: list[str]) -> dict[str, str | None]:
    """The object each `<commit>:assignments/<practical>` of `names` names (None: there is
    none), all in one git process: reconciliation reads every registered repository in every
    dispatch, and one process per name made that 15 s for 300 repositories."""
    if not names:
        return {}
    done = subprocess.run([*student_git(repo), "cat-file", "--batch-check=%(objectname)"], input="".join(f"{name}\n" for name in names), capture_output=True, text=True, env=student_git_environment(), timeout=GIT_TIMEOUT_S)
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) != len(names):
        return dict.fromkeys(names)
    return {name: line if len(line) in (40, 64) and all(c in "0123456789abcdef" for c in line) else None for name, line in zip(names, lines)}


def _accounted(store: ResultsStore, queue: Queue) -> dict[tuple[str, str], set[str]]:
    """(student, practical) -> the commits with a result or a queue record (read once a pass).
    The queue is read first: a job stores its result before it removes its record, so a
    version is in one of the two reads whenever its job ends. Read the other way round, a job
    that ended between them was in neither, and its version was queued again under the
    repository's newer head (a second grading of the same files; bench/bench_burst.py)."""
    known: dict[tuple[str, str], set[str]] = {}
    for submission in queue.pending():
        known.setdefault((submission.student, submission.practical), set()).add(submission.commit)
    for entry in store.entries():
        known.setdefault((entry.student, entry.practical), set()).add(entry.commit)
    return known


def reconcile(store: ResultsStore, course: Course) -> list[str]:
    """Queue every registered repository's current version of each practical that has neither
    a result nor a queue record; what was queued, one line each."""
    queue, found = Queue(store), []
    folder = store.root / REGISTRY
    records = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not records:
        return found
    heads = []  # every repository's head first, what is accounted for after: a version pushed
    # and recorded while the pass reads hundreds of repositories is then in both or in neither
    # (read the other way round, a head pushed after the records were read had its parent's
    # practical queued again under the new commit; bench/bench_burst.py)
    for record in records:
        try:
            entry = json.loads(record.read_text(encoding="utf-8"))
            student, repo = safe_name(entry["student"], "student"), str(entry["repo"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        head = next((commit for commit in (_git(repo, "rev-parse", "--verify", "-q", branch) for branch in BRANCHES) if commit), None)
        if head is not None:
            heads.append((entry, student, repo, head))
    known = _accounted(store, queue)
    for entry, student, repo, head in heads:
        roots = (_git(repo, "rev-list", "--max-parents=0", head) or "").split()
        names = {practical: [f"{commit}:assignments/{practical}" for commit in (head, *roots, *sorted(known.get((student, practical), ())))] for practical in course.practicals}
        trees = _folder_trees(repo, list(dict.fromkeys(name for group in names.values() for name in group)))
        for practical in course.practicals:
            tree = trees[f"{head}:assignments/{practical}"]
            if tree is None or any(trees[f"{root}:assignments/{practical}"] == tree for root in roots):
                continue  # absent, or as the repository began: the starter template, nothing to grade
            if any(trees[f"{commit}:assignments/{practical}"] == tree for commit in known.get((student, practical), ())):
                continue
            submission = Submission(student=student, practical=practical, commit=head, source={"kind": "git", "repo": repo}, backend=str(entry.get("backend", "local")), options=dict(entry.get("options") or {}))
            if queue.add(submission) == "queued":
                submission.note("found by reconciliation (no record of this version)")
                queue.save(submission)
                found.append(f"{student} {practical} @{head[:7]}: queued by reconciliation")
    return found
