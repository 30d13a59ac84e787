"""The grader's one results model. Writers (Gradescope JSON, console, markdown) read it; only
grader.results.gradescope knows Gradescope's field names."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping

from grader.run.records import ProcessRecord


class Status(str, Enum):
    PASSED = "passed"
    FAILED = "failed"
    DEFERRED = "deferred"  # cannot be graded on this machine; points neither given nor taken
    ERROR = "error"  # the grader failed while grading this check (not the student's fault)


class Later(str, Enum):
    """Where or when the points of a check not graded (or not shown) in this grading come from:
    one phrase, the same in every place the grade appears."""

    GPU_NODE = "graded on a GPU node"
    LARGER_MACHINE = "graded on a machine with more CPU cores"
    QUIET_MACHINE = "graded on a quiet machine"
    AUTOGRADER = "graded by the autograder"  # what the self-check cannot grade: no reference solution, no answer key, not timed
    REGRADE = "graded in a regrade"  # the grader's side could not be measured here (e.g. the reference's launches)
    AFTER_DEADLINE = "shown after the deadline"
    WHEN_PUBLISHED = "shown when the grades are published"


@dataclass(frozen=True)
class Pending:
    """Points of a grade that are neither given nor taken yet, and where they come from."""

    points: float
    later: Later


@dataclass(frozen=True)
class Penalty:
    """What the course's late policy makes of a grade: the share of it that counts, and why."""

    factor: float
    effect: str  # "1 day(s) late: −10%"


@dataclass(frozen=True)
class LeaderboardEntry:
    """One column of Gradescope's leaderboard: a number the grader measured itself."""

    name: str
    value: float
    order: str = "asc"  # "asc": lower ranks higher (a step time)


@dataclass(frozen=True)
class CheckResult:
    """One graded check."""

    id: str
    title: str
    number: int
    score: float
    max_score: float
    status: Status
    summary: str
    details: tuple[str, ...] = ()
    visibility: str = "visible"
    data: Mapping[str, Any] = field(default_factory=dict)
    later: Later | None = None  # a deferred check: where its points come from

    @property
    def feedback(self) -> str:
        """The summary line followed by the per-run details."""
        lines = [self.summary, *self.details] if self.details and self.details != (self.summary,) else [self.summary]
        return "\n".join(lines)


@dataclass(frozen=True)
class RunSummary:
    """How one launch of the student's script went."""

    name: str
    layout: str
    wall_s: float
    outcome: str  # "ok" or the root cause of its failure
    output: str = ""  # what a student needs from the ranks' stdout/stderr
    telemetry: Mapping[str, Any] | None = None  # per-GPU memory and utilisation the grader sampled
    records: tuple[ProcessRecord, ...] = field(default=(), compare=False, repr=False)  # what each rank recorded: for its views, never written out
    views: tuple[str, ...] = ()  # its report, timeline and trace, as paths relative to the results file's folder
    view_text: str = ""  # the text of its report (what its ranks recorded), when one was written


@dataclass(frozen=True)
class GradingReport:
    """Everything a grading produced. `error` is set when the grader itself could not grade."""

    practical: str
    title: str
    checks: tuple[CheckResult, ...]
    runs: tuple[RunSummary, ...] = ()
    execution_time_s: float = 0.0
    environment: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    manual: tuple[tuple[str, str], ...] = ()  # (question, the student's text): graded by people
    notes: tuple[str, ...] = ()  # remarks on how the submission was taken (e.g. lines not run)
    total_points: float | None = None  # the practical's total, its spec's every check (None: the checks here and `unseen`)
    unseen: tuple[Pending, ...] = ()  # checks not in `checks`: left to the autograder by a self-check, or not shown to this reader yet
    penalty: Penalty | None = None  # a late submission's, where the reader is to see it (the student's feedback)
    leaderboard: tuple[LeaderboardEntry, ...] = ()  # a practical on the course's leaderboard: grader/results/leaderboard.py

    @property
    def score(self) -> float:
        return sum(c.score for c in self.checks)

    @property
    def max_score(self) -> float:
        """The points graded here (deferred and unseen checks' left out)."""
        return sum(c.max_score for c in self.checks if c.status is not Status.DEFERRED)

    @property
    def deferred_points(self) -> float:
        return sum(c.max_score for c in self.checks if c.status is Status.DEFERRED)

    @property
    def total(self) -> float:
        """The practical's total: the same in every place the grade appears."""
        return self.total_points if self.total_points is not None else sum(c.max_score for c in self.checks) + sum(p.points for p in self.unseen)

    @property
    def pending(self) -> tuple[Pending, ...]:
        """The points neither given nor taken yet, by where they come from (deferred checks and
        unseen ones), in Later's order."""
        points: dict[Later, float] = {}
        for check in self.checks:
            if check.status is Status.DEFERRED:
                later = check.later or Later.REGRADE
                points[later] = points.get(later, 0.0) + check.max_score
        for part in self.unseen:
            points[part.later] = points.get(part.later, 0.0) + part.points
        return tuple(Pending(points[later], later) for later in Later if points.get(later))

    def headline(self) -> str:
        """The grade in one line, as every place shows it: '5 of 21 points so far — 4 shown
        after the deadline, 1 graded on a GPU node' (or '21 of 21 points'), and where the late
        policy took some of it, '; 5 → 4.5: 1 day(s) late: −10%'."""
        if self.error and not self.checks:
            return "not graded yet: the autograder could not grade it (the course staff regrade it)" + (f"; {self.total:g} points to be had" if self.total else "")
        pending = self.pending
        line = f"{self.score:g} of {self.total:g} points"
        line += " so far — " + ", ".join(f"{part.points:g} {part.later.value}" for part in pending) if pending else ""
        return line + (f"; {self.score:g} → {round(self.score * self.penalty.factor, 4):g}: {self.penalty.effect}" if self.penalty is not None else "")

    def as_students_see(self, after_deadline: bool | None) -> "GradingReport":
        """The checks its student may see now (visible ones; after_due_date ones too once the
        deadline has passed; hidden and after_published ones never, until the grades are
        published): the others' points are pending (`unseen`), their scores not shown (Gradescope's
        visible output, git's feedback). `after_deadline` None: the course has set no deadline."""
        shown = {"visible", "after_due_date"} if after_deadline else {"visible"}
        left_out = [c for c in self.checks if c.visibility not in shown]
        if not left_out:
            return self
        unseen = tuple(Pending(c.max_score, Later.AFTER_DEADLINE if c.visibility == "after_due_date" else Later.WHEN_PUBLISHED) for c in left_out)
        due = sum(c.visibility == "after_due_date" for c in left_out)
        when = "after the deadline" if after_deadline is False else "after the deadline, which the course has not set yet"
        notes = ((f"{due} more check(s) are shown {when}",) if due else ()) + ((f"{len(left_out) - due} more check(s) are shown when the grades are published",) if len(left_out) > due else ())
        return replace(self, checks=tuple(c for c in self.checks if c.visibility in shown), notes=(*self.notes, *notes), total_points=self.total, unseen=(*self.unseen, *unseen))

    @classmethod
    def failure(cls, practical: str, message: str, *, execution_time_s: float = 0.0, environment: Mapping[str, Any] | None = None, total_points: float | None = None) -> "GradingReport":
        """The report of a grading that could not be done at all (`total_points`: the practical's, where known)."""
        return cls(practical=practical, title=practical, checks=(), execution_time_s=execution_time_s, environment=environment or {}, error=message, total_points=total_points)
