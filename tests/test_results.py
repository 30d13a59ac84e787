"""The results model and its writers: Gradescope JSON (validated against the published
format), the console table and the markdown summary."""
from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema
import pytest

from grader.results.gradescope import read_report, to_gradescope, write_results
from grader.results.model import CheckResult, GradingReport, Later, Pending, RunSummary, Status
from grader.results.render import console_table, markdown
from helpers import ROOT, SCHEMA


def report() -> GradingReport:
    checks = (
        CheckResult("rank_setup", "Ranks", 1, 2.0, 2.0, Status.PASSED, "ok", ("✓ ws2: all 2 ranks",)),
        CheckResult("grad_sync", "Sync", 2, 0.0, 5.0, Status.FAILED, "ws2: gradients differ", visibility="after_due_date", data={"allreduce_per_step": {"ws2": [0, 0]}}),
        CheckResult("gpu_speed", "Speed", 3, 0.0, 3.0, Status.DEFERRED, "not graded here: needs ≥ 2 CUDA GPUs", later=Later.GPU_NODE),
    )
    runs = (RunSummary("ws2", "1 node × 2 ranks", 0.4, "rank 1 raised ValueError", "rank 1 stderr (last lines):\nValueError: boom"),)
    return GradingReport("p6", "DDP", checks, runs, 12.3, {"host": "vm", "seed": 5, "torch": "2.13.0+cpu"}, total_points=12.0, unseen=(Pending(2.0, Later.AUTOGRADER),))


def test_gradescope_document_follows_the_format() -> None:
    document = to_gradescope(report())
    jsonschema.validate(document, SCHEMA)
    assert document["score"] == 2.0
    assert document["execution_time"] == 12
    passed, failed, deferred = document["tests"]
    assert passed["status"] == "passed" and failed["status"] == "failed"
    assert failed["visibility"] == "after_due_date" and failed["extra_data"]["allreduce_per_step"] == {"ws2": [0, 0]}
    assert "status" not in deferred and deferred["max_score"] == 0 and deferred["extra_data"]["deferred_points"] == 3.0
    assert deferred["output"].startswith("Deferred: 3 points graded on a GPU node.\nnot graded here: needs ≥ 2 CUDA GPUs")  # Gradescope's status is passed or failed: the output says it
    assert document["extra_data"]["max_score"] == 7.0 and document["extra_data"]["deferred_points"] == 3.0 and document["extra_data"]["total_points"] == 12.0
    assert document["extra_data"]["headline"] == "2 of 12 points so far — 3 graded on a GPU node, 2 graded by the autograder"
    assert "rank 1 raised ValueError" in document["output"] and "seed 5" in document["output"]
    # the visible output counts what the student may see now: the after_due_date check's points are pending, its score not shown
    assert "Score: 2 of 12 points so far — 3 graded on a GPU node, 2 graded by the autograder, 5 shown after the deadline" in document["output"]
    assert "1 more check(s) are shown after the deadline" in document["output"]
    stored = read_report(document)
    assert stored.headline() == report().headline() and stored.as_students_see(False).headline() == report().as_students_see(False).headline()


def test_an_autograder_error_is_still_a_valid_result() -> None:
    document = to_gradescope(GradingReport.failure("p6", "spec broken"))
    jsonschema.validate(document, SCHEMA)
    assert document["score"] == 0
    (entry,) = document["tests"]
    assert entry["name"] == "Autograder error" and "spec broken" in entry["output"]


def test_results_are_written_atomically_and_readable(tmp_path: Path) -> None:
    path = tmp_path / "out" / "results.json"
    write_results(report(), path)
    assert json.loads(path.read_text())["score"] == 2.0
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert os.listdir(path.parent) == ["results.json"]


def test_console_and_markdown_show_the_table_and_the_feedback() -> None:
    table = console_table(report())
    assert "  2  Sync" in table and "0/5  FAIL" in table and "–/3  DEFERRED (graded on a GPU node)" in table
    assert "Score: 2 of 12 points so far — 3 graded on a GPU node, 2 graded by the autograder" in table
    assert "✗ 2. Sync: ws2: gradients differ" in table and "✓ 1. Ranks: ok" in table
    assert "ValueError: boom" in table
    md = markdown(report())
    assert "| 2 | Sync | 0/5 | ❌ fail |" in md and "| 3 | Speed | –/3 | ⏸ deferred (graded on a GPU node) |" in md and "<details>" in md
    assert "**Score: 2 of 12 points so far — 3 graded on a GPU node, 2 graded by the autograder**" in md


def _classroom(report: GradingReport) -> dict:
    import base64

    from grader.results.classroom import classroom_encoded

    return json.loads(base64.b64decode(classroom_encoded(report)))


def test_github_classroom_gets_the_graded_checks_as_its_reporter_reads_them() -> None:
    checks = (
        CheckResult("rank_setup", "Rank setup", 1, 2.0, 2.0, Status.PASSED, "ok"),
        CheckResult("grad_sync", "Gradients \x1b[2J", 2, 1.5, 5.0, Status.FAILED, "3 of 5\nsteps \u202e", ("::notice title=Autograding complete::Points 14/14",)),
        CheckResult("ddp_vs_dp", "On 2 GPUs", 3, 0.0, 1.0, Status.DEFERRED, "not graded here", later=Later.GPU_NODE),
    )
    document = _classroom(GradingReport("p6", "DDP", checks, total_points=10.0, unseen=(Pending(2.0, Later.AUTOGRADER),)))
    assert document["status"] == "fail" and document["max_score"] == 10.0  # the practical's total, as everywhere
    pending = [(t["name"], t["status"], t["score"]) for t in document["tests"] if "pending" in t["name"]]  # the points the self-check does not give: named, worth nothing here
    assert pending[0] == ("p6: 1 points pending, graded on a GPU node — 0.5 point, part 1 of 2", "fail", 0.0) and len(pending) == 6
    assert pending[-1] == ("p6: 2 points pending, graded by the autograder — 0.5 point, part 4 of 4", "fail", 0.0)
    tests = document["tests"]
    assert all(t["line_no"] == 0 and t["filename"] == "" for t in tests)  # the reporter prints no "line undefined"
    assert [t["name"] for t in tests[:1]] == ["p6 1. Rank setup — 0.5 point, part 1 of 4"] and "\\x1b[2J" in tests[4]["name"]
    # the failed check's feedback in the field the reporter prints (test_code), once, on its first test not passed, every line behind a gutter
    shown = [t for t in tests if t["test_code"] and "pending" not in t["name"]]
    assert len(shown) == 1 and shown[0]["status"] == "fail" and shown[0]["name"].startswith("p6 2. Gradients")
    assert shown[0]["test_code"].splitlines() == ["  | 3 of 5", "  | steps \\u202e", "  | ::notice title=Autograding complete::Points 14/14"]
    failed = _classroom(GradingReport.failure("p6", "no sandbox"))
    assert failed["status"] == "error" and failed["tests"][0]["message"] == "no sandbox" and failed["max_score"] == 0


def test_the_reporters_log_total_and_points_both_say_the_score() -> None:
    """The reporter logs (tests passed / tests) × max_score and gives Classroom the sum of the
    tests' scores: both must be the self-check's score, whatever the checks weigh."""
    from grader.results.classroom import reporter_points

    cases = [
        (CheckResult("a", "A", 1, 2.0, 2.0, Status.PASSED, "ok"), CheckResult("b", "B", 2, 0.0, 5.0, Status.FAILED, "no"), CheckResult("c", "C", 3, 3.0, 3.0, Status.PASSED, "ok")),
        (CheckResult("a", "A", 1, 2.4, 3.0, Status.FAILED, "4 of 5"), CheckResult("b", "B", 2, 0.7, 1.0, Status.FAILED, "7 of 10"), CheckResult("c", "C", 3, 0.0, 2.0, Status.ERROR, "grader broke")),
        (CheckResult("a", "A", 1, 1.75, 2.0, Status.FAILED, "7 of 8"),),
    ]
    for checks in cases:
        report = GradingReport("p6", "DDP", checks)
        document = _classroom(report)
        logged, noticed, maximum = reporter_points(document)
        assert noticed == round(report.score, 4) and maximum == report.total, (noticed, report.score)  # as it prints: "Points 3.1/6"
        assert abs(logged - report.score) < 1e-9, (logged, report.score)
        assert sum(t["status"] == "pass" for t in document["tests"]) * maximum / len(document["tests"]) == pytest.approx(report.score)
    error = _classroom(GradingReport("p6", "DDP", cases[1]))
    assert error["status"] == "error" and sum(t["status"] == "error" for t in error["tests"]) == 1 and "grader broke" in str(error["tests"])


def test_the_self_check_workflow_gives_classroom_one_runner_per_practical() -> None:
    """Named as the reporter documents; one runner per practical (P6_RESULTS for p6), and
    none where practicals would add into one assignment."""
    import yaml

    workflow = (ROOT / ".github" / "workflows" / "student-self-check.yml").read_text()
    data = yaml.safe_load(workflow)
    assert data["name"] == "Autograding Tests"
    (job,) = data["jobs"].values()
    check = next(step for step in job["steps"] if step.get("id") == "check")
    reporter = next(step for step in job["steps"] if "autograding-grading-reporter" in step.get("uses", ""))
    assert reporter["with"]["runners"] == "${{ steps.check.outputs.runners }}"
    assert '"${#practicals[@]}" -eq 1' in check["run"] and 'echo "${practicals[0]^^}_RESULTS=' in check["run"] and 'echo "runners=${practicals[0]}"' in check["run"]
    assert "self-reported" in workflow and "self-reported" in (ROOT / "templates" / "student" / "README.md").read_text()
