"""Feedback through git: the student's view of a report, committed to the bare repository's
feedback branch with git's plumbing, read back from a clone."""
from __future__ import annotations

import subprocess
from pathlib import Path

from grader.results.model import CheckResult, GradingReport, Status
from grader.submit.feedback import publish, student_view


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


def report(score: float) -> GradingReport:
    checks = (
        CheckResult("rank_setup", "Ranks", 1, score, 2.0, Status.PASSED if score == 2 else Status.FAILED, "ranks said"),
        CheckResult("params_sync", "Parameters after the deadline", 2, 4.0, 4.0, Status.PASSED, "params said", visibility="after_due_date"),
        CheckResult("secret", "A hidden check", 3, 0.0, 1.0, Status.FAILED, "hidden said", visibility="hidden"),
    )
    return GradingReport("p6", "DDP", checks, environment={"host": "node-7", "isolation": "bubblewrap"})


def test_the_student_sees_visible_checks_and_after_the_deadline_the_others_due() -> None:
    before = student_view(report(2.0), after_deadline=False)
    assert [c.id for c in before.checks] == ["rank_setup"] and before.environment == {}
    assert before.notes == ("2 more check(s) are shown after the deadline",)
    after = student_view(report(2.0), after_deadline=True)
    assert [c.id for c in after.checks] == ["rank_setup", "params_sync"]


def test_each_grading_lands_on_the_feedback_branch_and_the_history_is_kept(tmp_path: Path) -> None:
    bare = tmp_path / "alice.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    first = publish(bare, "p6", "a" * 40, report(0.0))
    second = publish(bare, "p6", "b" * 40, report(2.0))
    publish(bare, "p4", "c" * 40, report(2.0))
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(bare), str(clone)], check=True, capture_output=True)
    git("fetch", "-q", "origin", "feedback", cwd=clone)
    latest = git("show", "origin/feedback:p6.md", cwd=clone)
    assert "**Score: 2 / 2**" in latest and f"Graded commit: {'b' * 40}" in latest
    assert "**Score: 0 / 2**" in git("show", f"origin/feedback:p6/{'a' * 40}.md", cwd=clone)
    assert "p4.md" in git("ls-tree", "--name-only", "origin/feedback", cwd=clone)
    assert git("rev-parse", f"{second}^", cwd=clone) == first  # a history, not a rewrite
    assert "hidden said" not in latest and "params said" not in latest and "node-7" not in latest
