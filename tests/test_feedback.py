"""Feedback through git: the student's view of a report, committed to the bare repository's
feedback branch with git's plumbing, read back from a clone."""
from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from grader.policy import load_policy, parse_time
from grader.results.gradescope import read_report, to_gradescope
from grader.results.model import CheckResult, GradingReport, Status
from grader.results.render import markdown
from grader.store import ResultsStore
from grader.submit.feedback import lateness_note, mark_revealed, publish, reveal_after_deadlines, student_view


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
    assert before.notes == ("1 more check(s) are shown after the deadline", "1 more check(s) are shown when the grades are published")
    assert before.headline() == "2 of 7 points so far — 4 shown after the deadline, 1 shown when the grades are published"  # the practical's total, the others' points named, not their scores
    after = student_view(report(2.0), after_deadline=True)
    assert [c.id for c in after.checks] == ["rank_setup", "params_sync"] and after.headline() == "6 of 7 points so far — 1 shown when the grades are published"
    never = student_view(report(2.0), after_deadline=None)  # the course set no deadline: said so, not promised
    assert [c.id for c in never.checks] == ["rank_setup"] and never.notes == ("1 more check(s) are shown after the deadline, which the course has not set yet", "1 more check(s) are shown when the grades are published")


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
    assert "**Score: 2 of 7 points so far — 4 shown after the deadline, 1 shown when the grades are published**" in latest and f"Graded commit: {'b' * 40}" in latest
    assert "**Score: 0 of 7 points so far — " in git("show", f"origin/feedback:p6/{'a' * 40}.md", cwd=clone)
    assert "p4.md" in git("ls-tree", "--name-only", "origin/feedback", cwd=clone)
    assert git("rev-parse", f"{second}^", cwd=clone) == first  # a history, not a rewrite
    assert "hidden said" not in latest and "params said" not in latest and "node-7" not in latest


def test_a_stored_result_reads_back_as_the_report_the_student_is_shown() -> None:
    back = read_report(to_gradescope(report(0.0)))
    assert [(c.id, c.score, c.max_score, c.status, c.visibility) for c in back.checks] == [(c.id, c.score, c.max_score, c.status, c.visibility) for c in report(0.0).checks]
    assert (back.practical, back.title) == ("p6", "DDP")
    assert markdown(student_view(back, True)) == markdown(student_view(replace(report(0.0), environment={}, execution_time_s=1.0), True))


def test_feedback_says_whether_it_was_late_and_shows_the_after_deadline_checks_once_the_deadline_passed(tmp_path: Path) -> None:
    bare = tmp_path / "alice.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    store = ResultsStore(tmp_path / "results")
    policy = load_policy({"deadlines": {"p6": "2026-12-01T23:59:00Z"}, "late_policy": {"penalty_per_day": 0.2}}, ("p6",))
    for commit, when in (("a" * 40, "2026-12-01T10:00:00Z"), ("b" * 40, "2026-12-02T10:00:00Z")):
        store.save(to_gradescope(report(2.0)), {"student": "alice", "practical": "p6", "commit": commit, "submitted_at": when, "source": {"kind": "git", "repo": str(bare)}})
        publish(bare, "p6", commit, report(2.0), notes=lateness_note(policy, "alice", "p6", when))
    shown = lambda path: git("show", f"feedback:{path}", cwd=bare)  # noqa: E731
    assert "Parameters after the deadline" not in shown("p6.md") and "1 more check(s) are shown after the deadline" in shown("p6.md")
    assert "Submitted 2026-12-02 10:00 UTC: 1 day(s) late: −20% (your deadline: 2026-12-01 23:59 UTC; late policy: −20% per day late)" in shown("p6.md")
    assert "Submitted 2026-12-01 10:00 UTC: on time (your deadline: 2026-12-01 23:59 UTC)" in shown(f"p6/{'a' * 40}.md")
    assert reveal_after_deadlines(store, policy, parse_time("2026-12-01T23:00:00Z")) == []
    revealed = reveal_after_deadlines(store, policy, parse_time("2026-12-02T00:00:00Z"))
    assert revealed == [f"alice p6 @{c * 7}: feedback after the deadline delivered" for c in "ab"]
    assert "Parameters after the deadline" in shown("p6.md") and "A hidden check" not in shown("p6.md")
    assert "1 more check(s) are shown when the grades are published" in shown("p6.md")
    assert "**Score: 6 of 7 points so far — 1 shown when the grades are published; 6 → 4.8: 1 day(s) late: −20%**" in shown("p6.md")  # the late penalty in the student's own feedback, as collect counts it
    assert "6 of 7 points so far — 1 shown when the grades are published**" in shown(f"p6/{'a' * 40}.md")  # on time: nothing taken
    assert f"Graded commit: {'b' * 40}" in shown("p6.md")  # the latest stays the latest
    assert reveal_after_deadlines(store, policy, parse_time("2026-12-03T00:00:00Z")) == []  # once


def test_revealing_an_older_commit_after_the_deadline_leaves_the_latest_as_the_latest(tmp_path: Path) -> None:
    bare = tmp_path / "alice.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    store = ResultsStore(tmp_path / "results")
    policy = load_policy({"deadlines": {"p6": "2026-12-01T23:59:00Z"}}, ("p6",))
    for commit, when in (("a" * 40, "2026-12-01T10:00:00Z"), ("b" * 40, "2026-12-02T10:00:00Z")):
        store.save(to_gradescope(report(2.0)), {"student": "alice", "practical": "p6", "commit": commit, "submitted_at": when, "source": {"kind": "git", "repo": str(bare)}})
        publish(bare, "p6", commit, report(2.0))
    mark_revealed(store, "alice", "p6", "b" * 40)  # the later one was graded after the deadline, whole
    (store.root / "alice" / "p6" / "a copy.json").write_text("{}")  # put there by hand: passed over
    assert reveal_after_deadlines(store, policy, parse_time("2026-12-03T00:00:00Z")) == [f"alice p6 @{'a' * 7}: feedback after the deadline delivered"]
    assert f"Graded commit: {'b' * 40}" in git("show", "feedback:p6.md", cwd=bare)
    assert "Parameters after the deadline" in git("show", f"feedback:p6/{'a' * 40}.md", cwd=bare)


def test_a_repository_whose_config_would_make_git_run_a_program_is_not_written_to(tmp_path: Path) -> None:
    bare = tmp_path / "mallory.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    hook = bare / "hooks" / "reference-transaction"
    hook.write_text(f"#!/bin/sh\ntouch {tmp_path / 'hook-ran'}\n")
    hook.chmod(0o755)
    publish(bare, "p6", "a" * 40, report(2.0))
    assert not (tmp_path / "hook-ran").exists()  # the repository's hooks never run for the grader
    subprocess.run(["git", "--git-dir", str(bare), "config", "filter.x.smudge", f"touch {tmp_path / 'filter-ran'}"], check=True)
    with pytest.raises(RuntimeError, match="its git config sets filter.x.smudge, which would make git run a program"):
        publish(bare, "p6", "b" * 40, report(2.0))
