"""Gradescope's results.json: the only module that knows its schema.

Format: https://gradescope-autograders.readthedocs.io/en/latest/specs/ — a top-level score,
execution_time, output and visibility settings, and one entry per test with score,
max_score, status, name, number, output, tags, visibility and extra_data.
"""
from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from grader.files import write_atomically
from grader.results.escape import BLOCK_CHARS, cap, json_safe, terminal_line, visible
from grader.results.model import CheckResult, GradingReport, LeaderboardEntry, Later, Pending, RunSummary, Status
from grader.results.render import overview_text

AUTOGRADER_ERROR = "Autograder error"
DEFERRED_PREFIX = "Deferred: "  # a deferred test's output begins with it: "Deferred: 2 points graded on a GPU node."
OUTPUT_CHARS = 4 * BLOCK_CHARS  # the text of one test or of the whole submission
DATA_CHARS = 200_000  # one extra_data part: a test's data, a run's telemetry, the environment, the answers


def _text(text: str) -> str:
    """An output field: capped and visible, its newlines kept."""
    return visible(cap(text, OUTPUT_CHARS), keep_newlines=True)


def _test(check: CheckResult) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": terminal_line(check.title),
        "name_format": "text",
        "number": str(check.number),
        "score": round(check.score, 4),
        "max_score": round(check.max_score, 4),
        "output": _text(check.feedback),
        "output_format": "text",
        "tags": [check.id],
        "visibility": check.visibility,
        "extra_data": json_safe({"check": check.id, "status": check.status.value, **check.data}, max_total=DATA_CHARS),
    }
    if check.status is Status.DEFERRED:  # Gradescope's status is passed or failed: a deferred test has none, and says so first
        later = check.later or Later.REGRADE
        entry["name"] = f"{terminal_line(check.title)} (deferred)"
        entry["score"] = 0
        entry["max_score"] = 0  # not graded here: counts neither for nor against the student
        entry["output"] = _text(f"{DEFERRED_PREFIX}{check.max_score:g} points {later.value}.\n{check.feedback}")
        entry["extra_data"]["deferred_points"] = round(check.max_score, 4)
        entry["extra_data"]["later"] = later.value
    else:
        entry["status"] = "passed" if check.status is Status.PASSED else "failed"
    return entry


def _run(run: RunSummary) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": terminal_line(run.name),
        "layout": terminal_line(run.layout),
        "wall_s": round(run.wall_s, 3),
        "outcome": _text(run.outcome),
    }
    if run.views:
        entry["views"] = [terminal_line(path) for path in run.views]
    if run.telemetry:
        entry["gpu_telemetry"] = json_safe(dict(run.telemetry), max_total=DATA_CHARS)
    return entry


def to_gradescope(report: GradingReport) -> dict[str, Any]:
    """The results.json document for `report`. What came from the submission is visible in the
    output fields; each part is bounded on its own (so no test is ever dropped), and the whole
    is JSON-safe (see grader.results.escape)."""
    tests = [_test(c) for c in report.checks]
    if report.error:
        tests.append(
            {
                "name": AUTOGRADER_ERROR,
                "name_format": "text",
                "score": 0,
                "max_score": 0,
                "status": "failed",
                "output": _text(f"The autograder could not finish grading this submission: {report.error}\n")
                + "This is not a verdict on your work; the course staff will look into it.",
                "output_format": "text",
                "tags": ["autograder-error"],
                "visibility": "visible",
            }
        )
    return json_safe({
        "score": round(report.score, 4),
        "execution_time": max(1, round(report.execution_time_s)),
        "output": cap(overview_text(report.as_students_see(after_deadline=False)), OUTPUT_CHARS),  # visible to the student at once
        "output_format": "text",
        "test_output_format": "text",
        "test_name_format": "text",
        "visibility": "visible",
        "stdout_visibility": "hidden",
        "extra_data": {
            "practical": report.practical,
            "title": terminal_line(report.title),
            "notes": [terminal_line(note) for note in report.notes],
            "max_score": round(report.max_score, 4),
            "deferred_points": round(report.deferred_points, 4),
            "total_points": round(report.total, 4),  # the practical's total: every check of its spec
            "headline": report.headline(),
            "unseen": [{"points": round(part.points, 4), "later": part.later.value} for part in report.unseen],
            "environment": json_safe(dict(report.environment), max_total=DATA_CHARS),
            "runs": [_run(r) for r in report.runs],
            "autograder_error": None if report.error is None else _text(report.error),
            "manual_answers": json_safe(dict(report.manual), max_total=DATA_CHARS),
        },
        "tests": tests,
        **({"leaderboard": [{"name": entry.name, "value": entry.value, "order": entry.order} for entry in report.leaderboard]} if report.leaderboard else {}),
    }, max_total=sys.maxsize)


@dataclass(frozen=True)
class Scores:
    """What a stored results.json says about the grade."""

    total: float
    checks: dict[str, float]  # check id -> score (deferred checks left out)
    answers: dict[str, str]  # free-text answers for manual grading
    max_score: float | None = None  # the points graded; None in a document that does not say
    total_points: float | None = None  # the practical's total (its spec's points); None in a document that does not say
    pending: dict[str, float] = field(default_factory=dict)  # check id -> points of a deferred check


def _number(value: Any) -> float:
    """A score of a stored document (0 for what is not a finite number: a file edited by hand)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) else 0.0


def _tests(document: dict[str, Any]) -> list[dict[str, Any]]:
    tests = document.get("tests")
    return [test for test in tests if isinstance(test, dict)] if isinstance(tests, list) else []


def _extra(document: dict[str, Any]) -> dict[str, Any]:
    extra = document.get("extra_data")
    return extra if isinstance(extra, dict) else {}


def read_scores(document: dict[str, Any]) -> Scores:
    """The scores of a results.json this module wrote (what a hand-edited one holds that is not
    of its type counts as nothing)."""
    checks, pending = {}, {}
    for test in _tests(document):
        tags = test.get("tags") if isinstance(test.get("tags"), list) else []
        data = test.get("extra_data") if isinstance(test.get("extra_data"), dict) else {}
        if tags and isinstance(tags[0], str) and tags[0] != "autograder-error":
            if "deferred_points" in data:
                pending[tags[0]] = _number(data["deferred_points"])
            else:
                checks[tags[0]] = _number(test.get("score", 0))
    extra = _extra(document)
    answers = extra.get("manual_answers")
    return Scores(
        total=_number(document.get("score", 0)),
        checks=checks,
        answers={str(k): str(v) for k, v in answers.items()} if isinstance(answers, dict) else {},
        max_score=_optional_number(extra.get("max_score")),
        total_points=_optional_number(extra.get("total_points")),
        pending=pending,
    )


def _optional_number(value: Any) -> float | None:
    """A number a stored document may hold, or None where it holds none."""
    return _number(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def read_report(document: dict[str, Any]) -> GradingReport:
    """The report a results.json of this module's holds, as far as it keeps it: the checks
    (their feedback as one text), notes, answers and the autograder error; not the runs."""
    extra = _extra(document)
    checks = []
    for test in _tests(document):
        tags = test.get("tags") if isinstance(test.get("tags"), list) and test.get("tags") else [""]
        data = test.get("extra_data") if isinstance(test.get("extra_data"), dict) else {}
        if tags[0] == "autograder-error":
            continue
        deferred = "deferred_points" in data
        try:
            status = Status(data.get("status", "failed"))
        except (ValueError, TypeError):
            status = Status.FAILED
        try:
            later = Later(data["later"]) if deferred else None
        except (KeyError, ValueError, TypeError):
            later = Later.REGRADE
        number = test.get("number")
        output = str(test.get("output", ""))
        if deferred and output.startswith(DEFERRED_PREFIX):
            output = output.partition("\n")[2]  # the line _test put first
        checks.append(CheckResult(
            id=str(tags[0]),
            title=str(test.get("name", "")).removesuffix(" (deferred)"),
            number=int(number) if isinstance(number, str) and number.isdigit() else len(checks) + 1,
            score=_number(test.get("score", 0)),
            max_score=_number(data["deferred_points"] if deferred else test.get("max_score", 0)),
            status=Status.DEFERRED if deferred else status,
            summary=output,
            visibility=str(test.get("visibility", "visible")),
            later=later,
        ))
    answers = extra.get("manual_answers")
    notes = extra.get("notes")
    return GradingReport(
        practical=str(extra.get("practical", "")),
        title=str(extra.get("title", extra.get("practical", ""))),
        checks=tuple(checks),
        execution_time_s=_number(document.get("execution_time", 0)),
        environment=extra["environment"] if isinstance(extra.get("environment"), dict) else {},
        error=autograder_error_of(document),
        manual=tuple((str(q), str(a)) for q, a in answers.items()) if isinstance(answers, dict) else (),
        notes=tuple(str(note) for note in notes) if isinstance(notes, list) else (),
        total_points=_optional_number(extra.get("total_points")),
        unseen=tuple(_unseen(extra.get("unseen"))),
        leaderboard=tuple(_board(document.get("leaderboard"))),
    )


def _board(entries: Any) -> list[LeaderboardEntry]:
    """The leaderboard entries a stored document holds (what is not of their type is left out)."""
    found = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("value"), (int, float)) and not isinstance(entry.get("value"), bool) and entry.get("order") in ("asc", "desc"):
            found.append(LeaderboardEntry(entry["name"], _number(entry["value"]), entry["order"]))
    return found


def merged_document(stored: dict[str, Any], graded: Mapping[str, CheckResult], note: str, runs: Sequence[RunSummary] = ()) -> dict[str, Any]:
    """`stored` (a results.json of this module's) with the checks of `graded` (by id) in place of
    its own (keeping their number and visibility), `note` added to its notes and `runs` to its
    runs: a follow-up's verdicts merged into a stored grade (grader/submit/followup.py). Its
    provenance and environment are the stored ones."""
    report = read_report(stored)
    checks = tuple(replace(graded[c.id], number=c.number, visibility=c.visibility) if c.id in graded else c for c in report.checks)
    correct = all(c.status is Status.PASSED for c in checks if c.status is not Status.DEFERRED)  # a follow-up that failed a check takes the grade off the leaderboard
    document = to_gradescope(replace(report, checks=checks, notes=(*report.notes, note), leaderboard=report.leaderboard if correct else ()))
    kept = _extra(stored)
    earlier = kept.get("runs") if isinstance(kept.get("runs"), list) else []
    document["extra_data"]["runs"] = [*earlier, *(_run(run) for run in runs)]
    if "provenance" in kept:
        document["extra_data"]["provenance"] = kept["provenance"]
    return document


def _unseen(parts: Any) -> list[Pending]:
    """The unseen points a stored document lists (what is not of their type is left out)."""
    found = []
    for part in parts if isinstance(parts, list) else []:
        try:
            found.append(Pending(_number(part["points"]), Later(part["later"])))
        except (KeyError, ValueError, TypeError):
            continue
    return found


def read_document(path: Path) -> dict[str, Any] | None:
    """A stored results.json, or None when it cannot be read or is not a results document."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return document if isinstance(document, dict) else None


def with_provenance(document: dict[str, Any], provenance: dict[str, Any]) -> dict[str, Any]:
    """`document` with where and how it was graded (student, commit, times, node…) in its extra data."""
    return {**document, "extra_data": {**document.get("extra_data", {}), "provenance": provenance}}


def provenance_of(document: dict[str, Any]) -> dict[str, Any]:
    """What `with_provenance` put into a document ({} when nothing)."""
    found = _extra(document).get("provenance", {})
    return found if isinstance(found, dict) else {}


def autograder_error_of(document: dict[str, Any]) -> str | None:
    """Why the grader could not grade, for a document of an autograder error (else None)."""
    error = _extra(document).get("autograder_error")
    return error if isinstance(error, str) and error else None


def document_text(document: dict[str, Any]) -> str:
    """A results document as the text of a results.json file (made safe to encode first)."""
    return json.dumps(json_safe(document), indent=2, ensure_ascii=False) + "\n"


def write_results(report: GradingReport, path: Path) -> None:
    """Write results.json atomically: a temporary file in the same folder, then a rename."""
    write_atomically(Path(path), document_text(to_gradescope(report)))
