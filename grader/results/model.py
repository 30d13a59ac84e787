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

    @property
    def score(self) -> float:
        return sum(c.score for c in self.checks)

    @property
    def max_score(self) -> float:
        return sum(c.max_score for c in self.checks if c.status is not Status.DEFERRED)

    @property
    def deferred_points(self) -> float:
        return sum(c.max_score for c in self.checks if c.status is Status.DEFERRED)

    def as_students_see(self, after_deadline: bool | None) -> "GradingReport":
        """The checks its student may see now (visible ones; after_due_date ones too once the
        deadline has passed; hidden and after_published ones never), with a note on the others:
        what the student is shown counts nothing else (Gradescope's visible output, git's
        feedback). `after_deadline` None: the course has set no deadline."""
        shown = {"visible", "after_due_date"} if after_deadline else {"visible"}
        left_out = [c for c in self.checks if c.visibility not in shown]
        if not left_out:
            return self
        when = "once the results are published" if after_deadline else "after the deadline" if after_deadline is False else "after the deadline, which the course has not set yet"
        note = f"{len(left_out)} more check(s) are shown {when}"
        return replace(self, checks=tuple(c for c in self.checks if c.visibility in shown), notes=(*self.notes, note))

    @classmethod
    def failure(cls, practical: str, message: str, *, execution_time_s: float = 0.0, environment: Mapping[str, Any] | None = None) -> "GradingReport":
        """The report of a grading that could not be done at all."""
        return cls(practical=practical, title=practical, checks=(), execution_time_s=execution_time_s, environment=environment or {}, error=message)
