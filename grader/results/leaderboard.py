"""The course's leaderboard (opt-in per practical: course.yaml's `leaderboard: [p6, p10]`):
the step time the grader measured for a fully correct submission, never what a script prints.

The number is `efficiency`'s own measurement of the submission's timed run (grader/speed/
measure.py: each timed step by its median over the launches the grader made, by the hub's
clock or the grader's), read from the check's data, which no submission writes. A submission is
on the board only when every check graded here passed and `efficiency` was graded (not
deferred): a fast wrong program ranks nowhere.
"""
from __future__ import annotations

from dataclasses import replace

from grader.results.model import GradingReport, LeaderboardEntry, Status

STEP_TIME = "Step time (ms, measured by the grader)"
SPEED_CHECK = "efficiency"


def step_time_ms(report: GradingReport) -> float | None:
    """The grader's measured step time of a fully correct submission's timed run, in ms (the
    mean over the check's runs); None where it is not fully correct or was not timed."""
    if report.error or any(c.status is not Status.PASSED for c in report.checks if c.status is not Status.DEFERRED):
        return None
    check = next((c for c in report.checks if c.id == SPEED_CHECK and c.status is Status.PASSED), None)
    speed = check.data.get("speed") if check is not None else None
    costs = [run["submission"].get("cost_step_s") for run in speed.values() if isinstance(run, dict) and isinstance(run.get("submission"), dict)] if isinstance(speed, dict) else []
    costs = [cost for cost in costs if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost > 0]
    return round(1000 * sum(costs) / len(costs), 3) if costs else None


def ranked(report: GradingReport, on_board: bool) -> GradingReport:
    """`report` with its leaderboard entry, where its practical is on the course's board."""
    value = step_time_ms(report) if on_board else None
    return report if value is None else replace(report, leaderboard=(LeaderboardEntry(STEP_TIME, value, "asc"),))
