"""Baselines from the reference solution, and grades out of a results store."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml

from grader.policy import parse_time
from grader.results.gradescope import to_gradescope
from grader.results.model import CheckResult, GradingReport, Status
from grader.store import ResultsStore, StoreError
from helpers import copy_course, run_cli


@pytest.mark.slow
def test_calibrate_records_the_reference_step_times_of_this_machine(tmp_path: Path) -> None:
    course = copy_course(tmp_path / "course")
    done = run_cli("--course-root", str(course), "calibrate", "p6", "--repeat", "1")
    assert done.returncode == 0, done.stderr
    machines = yaml.safe_load((course / "calibration" / "p6.yaml").read_text())["machines"]
    (key, entry), = machines.items()
    assert key.endswith("; no GPU") and set(entry["runs"]) == {"ws1", "ws2", "ws3", "ws4", "2x2", "timed"}
    # warmup_steps: 2 — the spec's 3-step runs time their last step, the timed run 18 of its 20
    assert {name: run["steps"] for name, run in entry["runs"].items()} == {"ws1": 1, "ws2": 1, "ws3": 1, "ws4": 1, "2x2": 1, "timed": 18}
    assert all(0 < run["median_step_s"] < 5 for run in entry["runs"].values())


def test_calibrate_refuses_a_practical_without_speed_checks_at_once(tmp_path: Path) -> None:
    done = run_cli("calibrate", "p4")
    assert done.returncode == 1 and "error: p4 has no speed checks: there is nothing to calibrate" in done.stderr


def report(points: dict[str, float], answer: str = "") -> dict:
    checks = tuple(CheckResult(check, check, i, score, 2.0, Status.PASSED if score == 2 else Status.FAILED, "") for i, (check, score) in enumerate(points.items(), 1))
    return to_gradescope(GradingReport("p6", "DDP", checks, manual=(("questions.why", answer),) if answer else ()))


def submit(store: ResultsStore, student: str, commit: str, when: str, points: dict[str, float], answer: str = "") -> None:
    store.save(report(points, answer), {"student": student, "practical": "p6", "commit": commit, "submitted_at": when})


def test_collect_takes_the_latest_submission_before_the_deadline(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path / "results")
    submit(store, "alice", "a1", "2026-12-01T10:00:00+00:00", {"rank_setup": 0, "grad_sync": 0})
    submit(store, "alice", "a2", "2026-12-01T20:00:00+00:00", {"rank_setup": 2, "grad_sync": 0}, "because of the all-reduce")
    submit(store, "alice", "a3", "2026-12-03T09:00:00+00:00", {"rank_setup": 0, "grad_sync": 2})  # late, and no better
    submit(store, "bob", "b1", "2026-12-04T09:00:00Z", {"rank_setup": 2, "grad_sync": 2})
    grades, answers = tmp_path / "grades.csv", tmp_path / "answers.csv"
    done = run_cli("collect", str(store.root), "--csv", str(grades), "--answers", str(answers), "--deadline", "2026-12-02T23:59:00+00:00")
    assert done.returncode == 0, done.stderr
    assert "2 students" in done.stdout and "; 1 late: bob (p6: 2 day(s) late: no penalty)" in done.stdout
    rows = list(csv.DictReader(grades.open()))
    alice, bob = rows
    assert (alice["student"], alice["p6.commit"], alice["p6.score"], alice["p6.max"], alice["p6.rank_setup"], alice["p6.grad_sync"], alice["p6.late"], alice["p6.later_submissions"]) == ("alice", "a2", "2", "4", "2", "0", "no", "1")
    # no late policy in the course: a late submission is flagged and keeps its points
    assert (bob["p6.commit"], bob["p6.late"], bob["p6.days_late"], bob["p6.policy"], bob["total"], bob["max"]) == ("b1", "yes", "2", "2 day(s) late: no penalty", "4", "4")
    assert list(csv.reader(answers.open()))[1] == ["alice", "p6", "a2", "questions.why", "because of the all-reduce"]


def test_store_names_and_bad_deadlines_are_refused(tmp_path: Path) -> None:
    store = ResultsStore(tmp_path)
    with pytest.raises(StoreError, match="student '../etc' cannot be used as a file name"):
        store.path_for("../etc", "p6", "abc")
    with pytest.raises(StoreError, match="student 'alice\\\\n' cannot"):  # a final newline, which "$" alone lets through
        store.path_for("alice\n", "p6", "abc")
    assert run_cli("collect", str(tmp_path), "--csv", str(tmp_path / "g.csv"), "--deadline", "next friday").returncode == 2
    assert parse_time("2026-12-01T10:00:00").tzinfo is not None
