"""GitHub Classroom's view of a grading: the one module that knows the result format its
grading reporter (classroom-resources/autograding-grading-reporter) reads.

The reporter takes, per runner, base64 of a JSON document — `status` ("pass", "fail" or
"error"), `max_score` and `tests` (each with `name`, `status`, `score` and `message`) — from
the environment variable RUNNER_RESULTS, prints it and gives Classroom "Points score/max"
(the sum of the tests' scores over the sum of the runners' max_score). Checks left to another
machine (deferred) are not in it: their points are not the self-check's to give.
"""
from __future__ import annotations

import base64
import json

from grader.results.escape import cap, json_safe, visible
from grader.results.model import GradingReport, Status

MESSAGE_CHARS = 2000


def to_classroom(report: GradingReport) -> dict:
    """The runner's result document of one grading."""
    graded = [c for c in report.checks if c.status is not Status.DEFERRED]
    tests = [
        {
            "name": cap(visible(f"{report.practical} {c.number}. {c.title}"), MESSAGE_CHARS),
            "status": "pass" if c.status is Status.PASSED else "error" if c.status is Status.ERROR else "fail",
            "score": c.score,
            "message": cap(visible(c.summary), MESSAGE_CHARS),
        }
        for c in graded
    ]
    if report.error:
        tests.append({"name": f"{report.practical}: the grader", "status": "error", "score": 0, "message": cap(visible(report.error), MESSAGE_CHARS)})
    status = "error" if report.error else "pass" if all(t["status"] == "pass" for t in tests) else "fail"
    return json_safe({"version": 1, "status": status, "max_score": report.max_score, "tests": tests})


def classroom_encoded(report: GradingReport) -> str:
    """to_classroom as the reporter reads it from the environment: base64 of the JSON."""
    return base64.b64encode(json.dumps(to_classroom(report), ensure_ascii=False).encode()).decode()
