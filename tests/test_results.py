"""The results model and its writers: Gradescope JSON (validated against the published
format), the console table and the markdown summary."""
from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema

from grader.results.gradescope import to_gradescope, write_results
from grader.results.model import CheckResult, GradingReport, RunSummary, Status
from grader.results.render import console_table, markdown
from helpers import SCHEMA


def report() -> GradingReport:
    checks = (
        CheckResult("rank_setup", "Ranks", 1, 2.0, 2.0, Status.PASSED, "ok", ("✓ ws2: all 2 ranks",)),
        CheckResult("grad_sync", "Sync", 2, 0.0, 5.0, Status.FAILED, "ws2: gradients differ", visibility="after_due_date", data={"allreduce_per_step": {"ws2": [0, 0]}}),
        CheckResult("gpu_speed", "Speed", 3, 0.0, 3.0, Status.DEFERRED, "not graded here: needs ≥ 2 CUDA GPUs"),
    )
    runs = (RunSummary("ws2", "1 node × 2 ranks", 0.4, "rank 1 raised ValueError", "rank 1 stderr (last lines):\nValueError: boom"),)
    return GradingReport("p6", "DDP", checks, runs, 12.3, {"host": "vm", "seed": 5, "torch": "2.13.0+cpu"})


def test_gradescope_document_follows_the_format() -> None:
    document = to_gradescope(report())
    jsonschema.validate(document, SCHEMA)
    assert document["score"] == 2.0
    assert document["execution_time"] == 12
    passed, failed, deferred = document["tests"]
    assert passed["status"] == "passed" and failed["status"] == "failed"
    assert failed["visibility"] == "after_due_date" and failed["extra_data"]["allreduce_per_step"] == {"ws2": [0, 0]}
    assert "status" not in deferred and deferred["max_score"] == 0 and deferred["extra_data"]["deferred_points"] == 3.0
    assert document["extra_data"]["max_score"] == 7.0 and document["extra_data"]["deferred_points"] == 3.0
    assert "rank 1 raised ValueError" in document["output"] and "seed 5" in document["output"]
    # the visible output counts what the student may see now: the after_due_date check waits
    assert "Score: 2 / 2  (3 more points deferred" in document["output"] and "1 more check(s) are shown after the deadline" in document["output"]


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
    assert "  2  Sync" in table and "0/5  FAIL" in table and "DEFERRED" in table
    assert "Score: 2 / 7  (3 more points deferred" in table
    assert "✗ 2. Sync: ws2: gradients differ" in table and "✓ 1. Ranks: ok" in table
    assert "ValueError: boom" in table
    md = markdown(report())
    assert "| 2 | Sync | 0/5 | ❌ fail |" in md and "<details>" in md


def test_github_classroom_gets_the_graded_checks_as_its_reporter_reads_them() -> None:
    import base64
    import json

    from grader.results.classroom import classroom_encoded

    checks = (
        CheckResult("rank_setup", "Rank setup", 1, 2.0, 2.0, Status.PASSED, "ok"),
        CheckResult("grad_sync", "Gradients \x1b[2J", 2, 1.5, 5.0, Status.FAILED, "3 of 5\nsteps \u202e"),
        CheckResult("ddp_vs_dp", "On 2 GPUs", 3, 0.0, 1.0, Status.DEFERRED, "not graded here"),
    )
    document = json.loads(base64.b64decode(classroom_encoded(GradingReport("p6", "DDP", checks))))
    assert document["status"] == "fail" and document["max_score"] == 7.0  # the deferred check is not the self-check's to give
    assert [(t["name"], t["status"], t["score"]) for t in document["tests"]] == [("p6 1. Rank setup", "pass", 2.0), ("p6 2. Gradients \\x1b[2J", "fail", 1.5)]
    assert document["tests"][1]["message"] == "3 of 5\\nsteps \\u202e"  # printed on the job's log: nothing in it acts
    failed = json.loads(base64.b64decode(classroom_encoded(GradingReport.failure("p6", "no sandbox"))))
    assert failed["status"] == "error" and failed["tests"][0]["message"] == "no sandbox"
