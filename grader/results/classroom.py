"""GitHub Classroom's view of a grading: the one module that knows the result format its
grading reporter (classroom-resources/autograding-grading-reporter@v1) reads.

What the reporter does with it (its src/main.js, console-results.js, helpers/test-helpers.js,
notify-classroom.js): for each runner id of its `runners` input it reads base64 of a JSON
document from the environment variable `<RUNNER ID IN CAPITALS>_RESULTS` — `status` ("pass",
"fail" or "error"), `max_score` and `tests`, each with `name`, `status`, `score`, `message`,
`test_code`, `filename` and `line_no`. It then

- prints each test: "✅ name" or "❌ name", followed by " - line N" unless `line_no` is 0 (a
  missing `line_no` prints "line undefined"); for status "error" only "Error: message"; then
  `test_code`, when there is one, under "Test code:". A failed test's `message` is never
  printed: what it should say goes in `test_code`.
- logs "Total points for RUNNER: x/max_score" and its summary table with x = (tests passed /
  tests) × max_score: every test weighs the same there;
- gives Classroom "Points total/max" (the notice "Autograding complete"): total adds every
  test's `score` as it is (floats, left to right), max adds the runners' `max_score`, and
  every runner given to one reporter adds into that one total.

So that the log and the notice both say the self-check's score, each graded check is written
as tests of one equal share of points (a check of 3 points: 3 tests of a point, as many passed
as it earned); a check's feedback rides on its first test not passed. Its max_score is the
practical's total, as everywhere else: the points the self-check does not give (a check left to
another machine or to the autograder, or one shown later) are tests of their own, named
pending and where they are graded, not passed (the reporter has no other status) and scoring
nothing. One runner is one practical (its id: `p6`, read from `P6_RESULTS`).
"""
from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from fractions import Fraction

from grader.results.escape import cap, json_safe, terminal_block, visible
from grader.results.model import CheckResult, GradingReport, Status

MESSAGE_CHARS = 2000
SHARES = (Fraction(1), Fraction(1, 2), Fraction(1, 4), Fraction(1, 5), Fraction(1, 10))  # points one test may weigh, coarsest first
MAX_TESTS = 200  # tests of one runner at most: a finer share is not taken
GUTTER = "  | "  # before each line of a test's feedback: no line of it starts the log's line


def _points(value: float) -> Fraction:
    return Fraction(value).limit_denominator(10_000)


def _share(checks: list[CheckResult]) -> Fraction | None:
    """The coarsest share of points that every check's points and score are whole numbers of
    (within MAX_TESTS tests); else the finest share that divides every check's points (scores
    are then rounded down to it); None when no share divides them."""
    total = sum((_points(c.max_score) for c in checks), Fraction(0))
    allowed = [s for s in SHARES if total / s <= MAX_TESTS]
    dividing = [s for s in allowed if all((_points(c.max_score) / s).denominator == 1 for c in checks)]
    exact = [s for s in dividing if all((_points(c.score) / s).denominator == 1 for c in checks)]
    return exact[0] if exact else dividing[-1] if dividing else None


@dataclass(frozen=True)
class _Piece:
    """One test of the runner's document."""

    name: str
    status: str
    score: Fraction
    message: str = ""  # printed (for status "error") as "Error: message"
    feedback: str = ""  # printed under "Test code:"


def _check_pieces(practical: str, check: CheckResult, share: Fraction | None) -> list[_Piece]:
    name = f"{practical} {check.number}. {check.title}" if check.number else f"{practical}: {check.title}"
    feedback = "" if check.status is Status.PASSED else check.feedback
    if share is None:  # one test: the log's total then weighs it as much as any other
        status = "pass" if check.status is Status.PASSED else "error" if check.status is Status.ERROR else "fail"
        return [_Piece(name, status, _points(check.score), check.summary if status == "error" else "", feedback)]
    count = int(_points(check.max_score) / share)
    earned = min(int(_points(check.score) / share), count)
    pieces = []
    for index in range(count):
        label = name if count == 1 else f"{name} — point {index + 1} of {count}" if share == 1 else f"{name} — {float(share):g} point, part {index + 1} of {count}"
        passed = index < earned
        first_failed = index == earned
        status = "pass" if passed else "error" if first_failed and check.status is Status.ERROR else "fail"
        pieces.append(_Piece(label, status, share if passed else Fraction(0), check.summary if status == "error" else "", feedback if first_failed else ""))
    return pieces


def _scores(pieces: list[_Piece], total: Fraction) -> list[float]:
    """Each test's score as the reporter adds them (floats, left to right); when that sum would
    not print as the total, the whole total rides on the first test."""
    scores = [float(p.score) for p in pieces]
    added = 0.0
    for score in scores:
        added += score
    if added == float(total) or not scores:
        return scores
    return [float(total)] + [0.0] * (len(scores) - 1)


def to_classroom(report: GradingReport) -> dict:
    """The runner's result document of one grading (one practical)."""
    graded = [c for c in report.checks if c.status is not Status.DEFERRED]
    pending = [
        CheckResult("pending", f"{part.points:g} points pending, {part.later.value}", 0, 0.0, part.points, Status.DEFERRED, f"not graded by the self-check: {part.points:g} points {part.later.value}")
        for part in report.pending
    ]
    share = _share(graded + pending)
    pieces = [piece for check in graded + pending for piece in _check_pieces(report.practical, check, share)]
    if report.error:
        problem = f"the grader could not grade everything: {report.error}"
        if pieces:  # a test of its own would weigh as much as a share of points in the log's total
            first = pieces[0]
            pieces[0] = _Piece(first.name, first.status, first.score, first.message, "\n".join(filter(None, [problem, first.feedback])))
        else:
            pieces.append(_Piece(f"{report.practical}: the grader", "error", Fraction(0), report.error))
    total = sum((p.score for p in pieces), Fraction(0))
    tests = [
        {
            "name": visible(cap(piece.name, MESSAGE_CHARS)),
            "status": piece.status,
            "score": score,
            "message": visible(cap(piece.message, MESSAGE_CHARS)),
            "test_code": "\n".join(terminal_block(piece.feedback, GUTTER, MESSAGE_CHARS)) if piece.feedback else "",
            "filename": "",
            "line_no": 0,  # not a line of a file: 0 is the reporter's "no line" (no " - line N")
        }
        for piece, score in zip(pieces, _scores(pieces, total))
    ]
    status = "error" if report.error or any(c.status is Status.ERROR for c in graded) else "pass" if all(c.status is Status.PASSED for c in graded) else "fail"
    return json_safe({"version": 1, "status": status, "max_score": float(_points(report.total)), "tests": tests})


def classroom_encoded(report: GradingReport) -> str:
    """to_classroom as the reporter reads it from the environment: base64 of the JSON."""
    return base64.b64encode(json.dumps(to_classroom(report), ensure_ascii=False).encode()).decode()


def reporter_points(document: dict) -> tuple[float, float, float]:
    """What the reporter makes of one runner's document: (the log's "Total points", the
    notice's points, max_score), computed as its source does (for tests of this module)."""
    tests = document["tests"]
    passed = sum(1 for t in tests if t["status"] == "pass")
    logged = passed / len(tests) * (document["max_score"] or 0) if tests else float("nan")
    noticed = 0.0
    for test in tests:
        noticed += test["score"]
    return logged, noticed, document["max_score"]
