"""Feedback delivered through git: after each grading of a pushed commit, the student's bare
repository gets a commit on its `feedback` branch holding what the student may see.

  feedback/<practical>.md              the latest graded commit's feedback
  feedback/<practical>/<commit>.md     every graded commit's, kept

The student reads it with `git fetch origin feedback && git show origin/feedback:p6.md`. The
branch is written with git's plumbing (a private index file, write-tree, commit-tree, and
update-ref against the old value, retried when two gradings race), so the student's own
branches and working trees are never touched. What goes in is the student's view of the report:
visible checks only (after_due_date ones once the practical's deadline has passed; hidden and
after_published ones never), no environment, no run folders of the grader's.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path

from grader.results.model import GradingReport
from grader.results.render import markdown

BRANCH = "refs/heads/feedback"
ATTEMPTS = 5


def student_view(report: GradingReport, after_deadline: bool) -> GradingReport:
    """The report as its student may see it."""
    shown = {"visible", "after_due_date"} if after_deadline else {"visible"}
    left_out = [c for c in report.checks if c.visibility not in shown]
    notes = report.notes + ((f"{len(left_out)} more check(s) are shown {'once the results are published' if after_deadline else 'after the deadline'}",) if left_out else ())
    return replace(report, checks=tuple(c for c in report.checks if c.visibility in shown), environment={}, runs=(), notes=notes)


def read_command(practical: str) -> str:
    """How the student reads the feedback of `practical` from their clone."""
    return f"git fetch origin feedback && git show origin/feedback:{practical}.md"


def _git(repo: Path, *args: str, env: dict[str, str], stdin: str | None = None) -> str:
    done = subprocess.run(["git", "--git-dir", str(repo), *args], input=stdin, capture_output=True, text=True, env=env, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"git {args[0]}: {done.stderr.strip()[:300]}")
    return done.stdout.strip()


def publish(repo: Path, practical: str, commit: str, report: GradingReport, after_deadline: bool = False) -> str:
    """Commit the student's view of `report` to the repository's feedback branch; returns the
    feedback commit's id. RuntimeError when git refuses."""
    text = markdown(student_view(report, after_deadline)) + f"\nGraded commit: {commit}\n"
    base = {name: value for name, value in os.environ.items() if not name.startswith("GIT_")}
    env = {**base, "GIT_AUTHOR_NAME": "grader", "GIT_AUTHOR_EMAIL": "grader@localhost", "GIT_COMMITTER_NAME": "grader", "GIT_COMMITTER_EMAIL": "grader@localhost"}
    blob = _git(repo, "hash-object", "-w", "--stdin", env=env, stdin=text)
    for _ in range(ATTEMPTS):
        done = subprocess.run(["git", "--git-dir", str(repo), "rev-parse", "--verify", "-q", BRANCH], capture_output=True, text=True, env=env)
        parent = done.stdout.strip() if done.returncode == 0 else None
        with tempfile.TemporaryDirectory(prefix="grader-feedback-") as scratch:
            indexed = {**env, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
            if parent:
                _git(repo, "read-tree", parent, env=indexed)
            for path in (f"{practical}.md", f"{practical}/{commit}.md"):
                _git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=indexed)
            tree = _git(repo, "write-tree", env=indexed)
        made = _git(repo, "commit-tree", tree, *(["-p", parent] if parent else []), "-m", f"feedback on {practical} @{commit[:7]}", env=env)
        update = subprocess.run(["git", "--git-dir", str(repo), "update-ref", BRANCH, made, parent or "0" * 40], capture_output=True, text=True, env=env)
        if update.returncode == 0:
            return made
    raise RuntimeError(f"the feedback branch kept moving: {ATTEMPTS} attempts")
