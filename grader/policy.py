"""The course's policy on time: per-practical deadlines, per-student extensions and what a late
submission costs. It is read from course.yaml (all three keys optional):

    deadlines:                  # per practical; ISO 8601, UTC when no zone is given
      p6: 2026-12-01T23:59:00+01:00
    extensions:                 # per student and practical: a later deadline, or days added
      alice: {p6: 2026-12-04T23:59:00+01:00}
      bob: {p6: 2}
    late_policy:
      penalty_per_day: 0.10     # the fraction of the score lost per day late (a part of a day counts whole)
      cutoff_days: 3            # a submission later than this many days scores 0

Which submission counts (grader.collect): the latest one made by the deadline, unless a later
one scores more after its penalty. Without a late_policy, late work keeps its points and is
flagged; `cutoff_days: 0` refuses it. `judge` is pure: the same submission and policy give the
same verdict in `collect`, in the student's feedback and in the class report.
"""
from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

DAY = datetime.timedelta(days=1)
MAX_DAYS = 3650  # the most days a cut-off or an extension may give


def percent(fraction: float) -> str:
    """0.1 -> '10%', 0.125 -> '12.5%', 0.001 -> '0.1%'."""
    return f"{round(fraction * 100, 2):g}%"


class PolicyError(ValueError):
    """course.yaml's deadlines, extensions or late_policy cannot be read."""


def parse_time(value: Any) -> datetime.datetime:
    """An ISO 8601 time with its time of day (a string, or the datetime YAML makes of an
    unquoted one); without a zone it is taken as UTC. ValueError when it is neither; a date
    alone is refused (is 2026-12-01 its first minute or its last?)."""
    if isinstance(value, datetime.datetime):
        moment = value
    elif isinstance(value, str) and ("T" in value.upper() or " " in value.strip()):
        moment = datetime.datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    else:
        raise ValueError(f"{value!r} is not a time of day")
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


@dataclass(frozen=True)
class LatePolicy:
    penalty_per_day: float = 0.0  # fraction of the score lost per (started) day late
    cutoff_days: float | None = None  # later than this: 0 points; None: no cut-off

    def describe(self) -> str:
        """"−10 % per day late, 0 after 3 days"."""
        parts = [f"−{percent(self.penalty_per_day)} per day late" if self.penalty_per_day else "no penalty for lateness"]
        if self.cutoff_days is not None:
            parts.append(f"0 after {self.cutoff_days:g} day(s)")
        return ", ".join(parts)


@dataclass(frozen=True)
class Lateness:
    """What the policy makes of one submission."""

    deadline: datetime.datetime | None
    days_late: int  # started days after the deadline (0: on time, or no deadline)
    factor: float  # what part of the score counts
    effect: str  # in words, for the CSV and the feedback

    @property
    def late(self) -> bool:
        return self.days_late > 0

    def final(self, score: float) -> float:
        return round(score * self.factor, 4)


@dataclass(frozen=True)
class CoursePolicy:
    deadlines: Mapping[str, datetime.datetime] = field(default_factory=dict)
    extensions: Mapping[tuple[str, str], datetime.datetime] = field(default_factory=dict)  # (student, practical)
    late: LatePolicy = LatePolicy()
    every: datetime.datetime | None = None  # one deadline for every practical and student (`collect --deadline`)

    def deadline(self, student: str, practical: str) -> datetime.datetime | None:
        """The student's deadline for the practical: an extension's, else the practical's."""
        if self.every is not None:
            return self.every
        return self.extensions.get((student, practical), self.deadlines.get(practical))

    def judge(self, student: str, practical: str, submitted_at: datetime.datetime) -> Lateness:
        """How late the submission is and what it costs."""
        deadline = self.deadline(student, practical)
        if deadline is None:
            return Lateness(None, 0, 1.0, "no deadline")
        if submitted_at <= deadline:
            return Lateness(deadline, 0, 1.0, "on time")
        days = math.ceil((submitted_at - deadline) / DAY)
        extended = " (extended)" if self.every is None and (student, practical) in self.extensions else ""
        if self.late.cutoff_days is not None and submitted_at - deadline > self.late.cutoff_days * DAY:
            return Lateness(deadline, days, 0.0, f"{days} day(s) late{extended}: past the {self.late.cutoff_days:g}-day cut-off, 0 points")
        factor = max(0.0, 1.0 - self.late.penalty_per_day * days)
        cost = f"−{percent(1 - factor)}" if factor < 1 else "no penalty"
        return Lateness(deadline, days, factor, f"{days} day(s) late{extended}: {cost}")


def _time(value: Any, where: str) -> datetime.datetime:
    try:
        moment = parse_time(value)
        moment.astimezone(datetime.timezone.utc) + MAX_DAYS * DAY  # a time that the policy can still add days to
        return moment
    except (ValueError, OverflowError):
        raise PolicyError(f"{where}: expected an ISO 8601 time with its time of day, like 2026-12-01T23:59:00+01:00, found {value!r}") from None


def _number(value: Any, where: str, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not low <= value <= high:
        raise PolicyError(f"{where}: expected a number between {low:g} and {high:g}, found {value!r}")
    return float(value)


def load_policy(data: Mapping[str, Any], practicals: tuple[str, ...]) -> CoursePolicy:
    """The policy in course.yaml's `data` (PolicyError naming the key that is wrong)."""
    raw_deadlines = data.get("deadlines") or {}
    if not isinstance(raw_deadlines, dict):
        raise PolicyError(f"deadlines: expected a mapping of practical to time, found {raw_deadlines!r}")
    deadlines = {}
    for practical, value in raw_deadlines.items():
        if str(practical) not in practicals:
            raise PolicyError(f"deadlines: {practical!r} is not one of this course's practicals ({', '.join(practicals)})")
        deadlines[str(practical)] = _time(value, f"deadlines.{practical}")
    raw_extensions = data.get("extensions") or {}
    if not isinstance(raw_extensions, dict):
        raise PolicyError(f"extensions: expected a mapping of student to {{practical: time or days}}, found {raw_extensions!r}")
    extensions = {}
    for student, granted in raw_extensions.items():
        if not isinstance(granted, dict):
            raise PolicyError(f"extensions.{student}: expected a mapping of practical to a time or a number of days, found {granted!r}")
        for practical, value in granted.items():
            where = f"extensions.{student}.{practical}"
            if str(practical) not in practicals:
                raise PolicyError(f"{where}: {practical!r} is not one of this course's practicals ({', '.join(practicals)})")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if str(practical) not in deadlines:
                    raise PolicyError(f"{where}: {value} day(s) added to no deadline (deadlines.{practical} is not set)")
                extensions[(str(student), str(practical))] = deadlines[str(practical)] + _number(value, where, 0, MAX_DAYS) * DAY
            else:
                extensions[(str(student), str(practical))] = _time(value, where)
    raw_late = data.get("late_policy") or {}
    if not isinstance(raw_late, dict) or set(raw_late) - {"penalty_per_day", "cutoff_days"}:
        raise PolicyError(f"late_policy: expected penalty_per_day and cutoff_days, found {raw_late!r}")
    late = LatePolicy(
        penalty_per_day=_number(raw_late.get("penalty_per_day", 0), "late_policy.penalty_per_day", 0, 1),
        cutoff_days=None if raw_late.get("cutoff_days") is None else _number(raw_late["cutoff_days"], "late_policy.cutoff_days", 0, MAX_DAYS),
    )
    return CoursePolicy(deadlines=deadlines, extensions=extensions, late=late)
