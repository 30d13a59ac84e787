"""Gradescope's results.json: the only module that knows its schema.

Format: https://gradescope-autograders.readthedocs.io/en/latest/specs/ — a top-level score,
execution_time, output and visibility settings, and one entry per test with score,
max_score, status, name, number, output, tags, visibility and extra_data.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.files import write_atomically
from grader.results.model import CheckResult, GradingReport, RunSummary, Status
from grader.results.render import overview_text

AUTOGRADER_ERROR = "Autograder error"


def _test(check: CheckResult) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": check.title,
        "name_format": "text",
        "number": str(check.number),
        "score": round(check.score, 4),
        "max_score": round(check.max_score, 4),
        "output": check.feedback,
        "output_format": "text",
        "tags": [check.id],
        "visibility": check.visibility,
        "extra_data": {"check": check.id, "status": check.status.value, **check.data},
    }
    if check.status is Status.DEFERRED:
        entry["name"] = f"{check.title} (deferred)"
        entry["score"] = 0
        entry["max_score"] = 0  # not graded here: counts neither for nor against the student
        entry["extra_data"]["deferred_points"] = round(check.max_score, 4)
    else:
        entry["status"] = "passed" if check.status is Status.PASSED else "failed"
    return entry


def _run(run: RunSummary) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": run.name, "layout": run.layout, "wall_s": round(run.wall_s, 3), "outcome": run.outcome}
    if run.telemetry:
        entry["gpu_telemetry"] = dict(run.telemetry)
    return entry


def to_gradescope(report: GradingReport) -> dict[str, Any]:
    """The results.json document for `report`."""
    tests = [_test(c) for c in report.checks]
    if report.error:
        tests.append(
            {
                "name": AUTOGRADER_ERROR,
                "name_format": "text",
                "score": 0,
                "max_score": 0,
                "status": "failed",
                "output": f"The autograder could not finish grading this submission: {report.error}\n"
                "This is not a verdict on your work; the course staff will look into it.",
                "output_format": "text",
                "tags": ["autograder-error"],
                "visibility": "visible",
            }
        )
    return {
        "score": round(report.score, 4),
        "execution_time": max(1, round(report.execution_time_s)),
        "output": overview_text(report),
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {
            "practical": report.practical,
            "max_score": round(report.max_score, 4),
            "deferred_points": round(report.deferred_points, 4),
            "environment": dict(report.environment),
            "runs": [_run(r) for r in report.runs],
            "autograder_error": report.error,
            "manual_answers": dict(report.manual),
        },
        "tests": tests,
    }


@dataclass(frozen=True)
class Scores:
    """What a stored results.json says about the grade."""

    total: float
    checks: dict[str, float]  # check id -> score (deferred checks left out)
    answers: dict[str, str]  # free-text answers for manual grading


def read_scores(document: dict[str, Any]) -> Scores:
    """The scores of a results.json this module wrote."""
    checks = {}
    for test in document.get("tests", []):
        tags = test.get("tags") or []
        if tags and tags[0] != "autograder-error" and "deferred_points" not in test.get("extra_data", {}):
            checks[tags[0]] = float(test.get("score", 0))
    extra = document.get("extra_data", {})
    return Scores(total=float(document.get("score", 0)), checks=checks, answers=dict(extra.get("manual_answers") or {}))


def write_results(report: GradingReport, path: Path) -> None:
    """Write results.json atomically: a temporary file in the same folder, then a rename."""
    write_atomically(Path(path), json.dumps(to_gradescope(report), indent=2, ensure_ascii=False) + "\n")
