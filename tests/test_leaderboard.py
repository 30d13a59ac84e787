"""The course's leaderboard (grader/results/leaderboard.py): opt-in per practical in
course.yaml; a fully correct submission's step time as the grader measured it, on Gradescope's
results and in the class report; a wrong one, or one whose speed was not graded, ranks nowhere."""
from __future__ import annotations

from pathlib import Path

import jsonschema
import pytest

from grader.class_report import practical_stats, render_html
from grader.collect import Chosen
from grader.course import CourseError, load_course
from grader.policy import Lateness
from grader.results.gradescope import read_report, to_gradescope
from grader.results.leaderboard import STEP_TIME, ranked, step_time_ms
from grader.results.model import CheckResult, GradingReport, Later, Status
from grader.store import Entry
from helpers import ROOT, SCHEMA


def report(cost_s: float | None, *, wrong: bool = False, deferred: bool = False) -> GradingReport:
    """A p6 grading whose `efficiency` measured the submission at `cost_s` a step (the grader's
    own data), its other check right or `wrong`; `deferred`: efficiency not graded here."""
    speed = {"speed": {"timed": {"ratio": 1.05, "submission": {"cost_step_s": cost_s}, "reference": {"cost_step_s": 0.02}}}} if cost_s else {}
    efficiency = CheckResult("efficiency", "Step time", 2, 0.0 if deferred else 2.0, 2.0, Status.DEFERRED if deferred else Status.PASSED, "1.05×", data=speed, later=Later.QUIET_MACHINE if deferred else None)
    checks = (
        CheckResult("grad_sync", "Gradients averaged", 1, 0.0 if wrong else 6.0, 6.0, Status.FAILED if wrong else Status.PASSED, "ok"),
        efficiency,
        CheckResult("ddp_vs_dp", "DDP against DataParallel", 3, 0.0, 1.0, Status.DEFERRED, "needs GPUs", later=Later.GPU_NODE),
    )
    return GradingReport("p6", "DDP", checks)


def test_a_fully_correct_grading_is_ranked_by_the_step_time_the_grader_measured() -> None:
    assert step_time_ms(report(0.0213)) == 21.3  # a check deferred for GPUs does not keep it off
    assert step_time_ms(report(0.0213, wrong=True)) is None and step_time_ms(report(None, deferred=True)) is None
    assert ranked(report(0.0213), on_board=False).leaderboard == ()
    document = to_gradescope(ranked(report(0.0213), on_board=True))
    assert document["leaderboard"] == [{"name": STEP_TIME, "value": 21.3, "order": "asc"}]
    jsonschema.validate(document, SCHEMA)
    assert read_report(document).leaderboard == ranked(report(0.0213), on_board=True).leaderboard
    assert "leaderboard" not in to_gradescope(ranked(report(0.0213, wrong=True), on_board=True))


def test_the_class_report_ranks_the_counted_submissions_fastest_first(tmp_path: Path) -> None:
    def chosen(student: str, graded: GradingReport) -> Chosen:
        return Chosen(Entry(student, "p6", "c" * 40, to_gradescope(ranked(graded, on_board=True))), Lateness(None, 0, 1.0, "on time"), 0)

    counted = [chosen("slow<b>", report(0.030)), chosen("fast", report(0.018)), chosen("wrong", report(0.010, wrong=True))]
    stats = practical_stats("p6", counted, 9.0)
    assert stats.board == (("fast", 18.0), ("slow<b>", 30.0))
    page = render_html("PDL", [stats])
    assert "<h3>Leaderboard</h3>" in page and "<td>1</td><td>fast</td><td>18.00</td>" in page and "slow&lt;b&gt;" in page and "wrong" not in page.split("<h3>Leaderboard</h3>")[1].split("<h3>")[0]


def test_course_yaml_opts_practicals_in_and_names_a_mistake(tmp_path: Path) -> None:
    (tmp_path / "course.yaml").write_text("practicals: [p6, p10]\nleaderboard: [p6]\n")
    assert load_course(tmp_path).leaderboard == ("p6",) and load_course(ROOT).leaderboard == ()
    (tmp_path / "course.yaml").write_text("practicals: [p6]\nleaderboard: [p8]\n")
    with pytest.raises(CourseError, match=r"leaderboard: expected a list of this course's practicals \(p6\)"):
        load_course(tmp_path)
