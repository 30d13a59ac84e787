"""The course's policy on time (course.yaml: deadlines, extensions, late_policy), as collect
applies it and as the student's feedback states it."""
from __future__ import annotations

import csv
import datetime
from pathlib import Path

import pytest
import yaml

from grader.course import CourseError, load_course
from grader.policy import CoursePolicy, LatePolicy, PolicyError, load_policy, parse_time
from grader.results.gradescope import to_gradescope
from grader.results.model import CheckResult, GradingReport, Status
from grader.store import ResultsStore
from helpers import run_cli

PRACTICALS = ("p4", "p5", "p6", "p10")
POLICY = {
    "deadlines": {"p4": datetime.datetime(2026, 11, 1, 23, 59, tzinfo=datetime.timezone.utc), "p6": "2026-12-01T23:59:00+00:00"},
    "extensions": {"carol": {"p6": 3}, "dave": {"p4": "2026-11-10T12:00:00Z"}},
    "late_policy": {"penalty_per_day": 0.1, "cutoff_days": 3},
}


def at(text: str) -> datetime.datetime:
    return parse_time(text)


def test_a_late_submission_loses_its_penalty_per_started_day_and_everything_past_the_cut_off() -> None:
    policy = load_policy(POLICY, PRACTICALS)
    assert policy.judge("alice", "p6", at("2026-12-01T23:59:00Z")).effect == "on time"
    one = policy.judge("alice", "p6", at("2026-12-02T00:01:00Z"))
    assert (one.days_late, one.factor, one.effect, one.final(20)) == (1, 0.9, "1 day(s) late: −10%", 18.0)
    three = policy.judge("alice", "p6", at("2026-12-04T23:00:00Z"))
    assert (three.days_late, three.final(20)) == (3, 14.0)
    past = policy.judge("alice", "p6", at("2026-12-05T00:00:00Z"))
    assert (past.factor, past.effect) == (0.0, "4 day(s) late: past the 3-day cut-off, 0 points")
    assert policy.judge("alice", "p5", at("2030-01-01T00:00:00Z")).effect == "no deadline"


def test_an_extension_moves_one_students_deadline_by_days_or_to_a_time() -> None:
    policy = load_policy(POLICY, PRACTICALS)
    assert policy.deadline("carol", "p6") == at("2026-12-04T23:59:00Z")
    assert policy.deadline("carol", "p4") == policy.deadline("alice", "p4")
    assert policy.judge("carol", "p6", at("2026-12-04T12:00:00Z")).effect == "on time"
    assert policy.judge("carol", "p6", at("2026-12-05T12:00:00Z")).effect == "1 day(s) late (extended): −10%"
    assert policy.deadline("dave", "p4") == at("2026-11-10T12:00:00Z")
    assert CoursePolicy(every=at("2026-01-01T00:00:00Z")).deadline("carol", "p6") == at("2026-01-01T00:00:00Z")


@pytest.mark.parametrize(("data", "message"), [
    ({"deadlines": {"p7": "2026-12-01"}}, "deadlines: 'p7' is not one of this course's practicals (p4, p5, p6, p10)"),
    ({"deadlines": {"p6": "friday"}}, "deadlines.p6: expected an ISO 8601 time with its time of day, like 2026-12-01T23:59:00+01:00, found 'friday'"),
    ({"deadlines": {"p6": datetime.date(2026, 12, 1)}}, "deadlines.p6: expected an ISO 8601 time with its time of day"),  # its first minute or its last?
    ({"deadlines": {"p6": "2026-12-01"}}, "deadlines.p6: expected an ISO 8601 time with its time of day"),
    ({"deadlines": {"p6": "9999-12-31T23:00:00Z"}}, "deadlines.p6: expected an ISO 8601 time with its time of day"),
    ({"extensions": {"bob": {"p6": float("nan")}}, "deadlines": {"p6": "2026-12-01T23:59:00Z"}}, "extensions.bob.p6: expected a number between 0 and 3650, found nan"),
    ({"extensions": {"bob": {"p6": 10**24}}, "deadlines": {"p6": "2026-12-01T23:59:00Z"}}, "extensions.bob.p6: expected a number between 0 and 3650"),
    ({"late_policy": {"cutoff_days": float("inf")}}, "late_policy.cutoff_days: expected a number between 0 and 3650, found inf"),
    ({"late_policy": {"penalty_per_day": float("nan")}}, "late_policy.penalty_per_day: expected a number between 0 and 1, found nan"),
    ({"deadlines": ["p6"]}, "deadlines: expected a mapping of practical to time"),
    ({"extensions": {"bob": {"p5": 2}}}, "extensions.bob.p5: 2 day(s) added to no deadline (deadlines.p5 is not set)"),
    ({"extensions": {"bob": "p6"}}, "extensions.bob: expected a mapping of practical to a time or a number of days"),
    ({"late_policy": {"penalty_per_day": 10}}, "late_policy.penalty_per_day: expected a number between 0 and 1, found 10"),
    ({"late_policy": {"penalty": 0.1}}, "late_policy: expected penalty_per_day and cutoff_days"),
    ({"late_policy": {"cutoff_days": -1}}, "late_policy.cutoff_days: expected a number between 0 and 3650, found -1"),
])
def test_a_policy_that_cannot_be_read_names_its_key(data: dict, message: str) -> None:
    with pytest.raises(PolicyError) as raised:
        load_policy(data, PRACTICALS)
    assert message in str(raised.value)


def test_course_yaml_carries_the_policy_and_its_errors_name_the_file(tmp_path: Path) -> None:
    (tmp_path / "course.yaml").write_text(yaml.safe_dump({"course": "PDL", "practicals": list(PRACTICALS), **POLICY}))
    assert load_course(tmp_path).policy.late == LatePolicy(0.1, 3.0)
    (tmp_path / "course.yaml").write_text(yaml.safe_dump({"course": "PDL", "practicals": list(PRACTICALS), "late_policy": {"cutoff_days": "soon"}}))
    with pytest.raises(CourseError, match=r"course.yaml: late_policy.cutoff_days: expected a number"):
        load_course(tmp_path)


def result(practical: str, score: float) -> dict:
    checks = (CheckResult("work", "the work", 1, score, 20.0, Status.PASSED if score == 20 else Status.FAILED, ""),)
    return to_gradescope(GradingReport(practical, practical, checks))


def test_collect_applies_deadlines_extensions_and_the_late_penalty_with_max_score_columns(tmp_path: Path) -> None:
    course = tmp_path / "course"
    course.mkdir()
    (course / "course.yaml").write_text(yaml.safe_dump({"course": "PDL", "practicals": list(PRACTICALS), **POLICY}))
    store = ResultsStore(tmp_path / "results")
    for student, practical, commit, when, score in [
        ("alice", "p6", "a1", "2026-12-01T20:00:00Z", 10),  # on time
        ("alice", "p6", "a2", "2026-12-02T10:00:00Z", 20),  # a day late, and better even after −10 %
        ("alice", "p4", "a3", "2026-11-01T10:00:00Z", 14),
        ("bob", "p6", "b1", "2026-12-01T20:00:00Z", 19),  # on time
        ("bob", "p6", "b2", "2026-12-03T10:00:00Z", 20),  # 2 days late: 16 < 19, so b1 counts
        ("carol", "p6", "c1", "2026-12-04T10:00:00Z", 20),  # on time with her 3-day extension
        ("dave", "p6", "d1", "2026-12-09T10:00:00Z", 20),  # past the cut-off
    ]:
        store.save(result(practical, score), {"student": student, "practical": practical, "commit": commit, "submitted_at": when})
    grades = tmp_path / "grades.csv"
    done = run_cli("--course-root", str(course), "collect", str(store.root), "--csv", str(grades))
    assert done.returncode == 0, done.stderr
    assert "4 students" in done.stdout and "2 late" in done.stdout
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    alice, bob, carol, dave = rows["alice"], rows["bob"], rows["carol"], rows["dave"]
    assert (alice["p6.commit"], alice["p6.score"], alice["p6.max"], alice["p6.policy"], alice["p6.total"]) == ("a2", "20", "20", "1 day(s) late: −10%", "18")
    assert (alice["p4.total"], alice["total"], alice["max"]) == ("14", "32", "40")
    assert (bob["p6.commit"], bob["p6.policy"], bob["p6.total"], bob["p6.later_submissions"]) == ("b1", "on time", "19", "1")
    assert (carol["p6.commit"], carol["p6.late"], carol["p6.total"]) == ("c1", "no", "20")
    assert (carol["p4.max"], carol["p4.policy"], carol["p4.total"]) == ("20", "not submitted", "0")
    assert (dave["p6.late"], dave["p6.days_late"], dave["p6.policy"], dave["p6.total"]) == ("yes", "8", "8 day(s) late: past the 3-day cut-off, 0 points", "0")
    # --deadline: one deadline for everyone, extensions set aside
    done = run_cli("--course-root", str(course), "collect", str(store.root), "--csv", str(grades), "--deadline", "2026-12-01T23:59:00Z")
    carol = {row["student"]: row for row in csv.DictReader(grades.open())}["carol"]
    assert (carol["p6.late"], carol["p6.policy"], carol["p6.total"]) == ("yes", "3 day(s) late: −30%", "14")


def test_an_autograder_error_never_replaces_a_real_grade(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "results")
    store.save(result("p6", 20), {"student": "alice", "practical": "p6", "commit": "a1", "submitted_at": "2026-12-01T10:00:00Z"})
    store.save(to_gradescope(GradingReport.failure("p6", "the node had no sandbox")), {"student": "alice", "practical": "p6", "commit": "a2", "submitted_at": "2026-12-01T11:00:00Z"})
    store.save(to_gradescope(GradingReport.failure("p6", "the node had no sandbox")), {"student": "bob", "practical": "p6", "commit": "b1", "submitted_at": "2026-12-01T11:00:00Z"})
    grades = tmp_path / "grades.csv"
    assert run_cli("collect", str(store.root), "--csv", str(grades)).returncode == 0
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    assert (rows["alice"]["p6.commit"], rows["alice"]["p6.total"], rows["alice"]["p6.autograder_error"]) == ("a1", "20", "")
    assert (rows["bob"]["p6.commit"], rows["bob"]["p6.total"], rows["bob"]["p6.autograder_error"]) == ("b1", "0", "yes: regrade it (grader regrade --errors)")
