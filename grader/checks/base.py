"""What a check is: a small pure function from observations to a verdict.

A check receives a `CheckContext` (the runs it grades, the reference the grader computed for
each of them, its validated options, the arguments the grader chose) and returns a `Verdict`.
It never prints, never runs anything, and never trusts a number the student's code reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from grader.results.model import Later
from grader.run.job import JobResult


@dataclass(frozen=True)
class Verdict:
    """The outcome of one check: passed or not, one summary line, and details.

    `fraction` is the share of the points earned (1.0 or 0.0 for all-or-nothing checks).
    `deferred` names why the check cannot be graded on this machine (its points are then
    neither given nor taken), `later` where it is graded (Later.REGRADE when not said). `data`
    holds observed numbers for the results' extra data.
    """

    passed: bool
    summary: str
    details: tuple[str, ...] = ()
    fraction: float | None = None
    deferred: str | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    later: Later | None = None

    @property
    def earned(self) -> float:
        if self.fraction is not None:
            return self.fraction
        return 1.0 if self.passed else 0.0


@dataclass(frozen=True)
class Answers:
    """The submission's answers file: its parsed content, or why it could not be read."""

    data: Mapping[str, Any] | None
    problem: str | None = None

    def get(self, dotted: str) -> Any:
        """The value at `a.b.c`, or None."""
        node: Any = self.data
        for part in dotted.split("."):
            if isinstance(node, Mapping):
                node = node.get(part, node.get(int(part)) if part.isdigit() else None)
            else:
                return None
        return node


@dataclass(frozen=True)
class OptionDef:
    """One option a check accepts in the spec: its type, default and accepted range."""

    kind: type
    default: Any
    minimum: float | None = None
    maximum: float | None = None
    help: str = ""

    def describe(self) -> str:
        text = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list"}.get(self.kind, self.kind.__name__)
        if self.minimum is not None and self.maximum is not None:
            text += f" from {self.minimum} to {self.maximum}"
        elif self.minimum is not None:
            text += f" ≥ {self.minimum}"
        elif self.maximum is not None:
            text += f" ≤ {self.maximum}"
        return text

    def accepts(self, value: Any) -> bool:
        if self.kind is float:
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        else:
            ok = isinstance(value, self.kind) and not (self.kind is int and isinstance(value, bool))
        if ok and self.minimum is not None and value < self.minimum:
            return False
        if ok and self.maximum is not None and value > self.maximum:
            return False
        return ok


@dataclass(frozen=True)
class CheckContext:
    """Everything a check may look at."""

    runs: tuple[JobResult, ...]
    options: Mapping[str, Any]
    args: Mapping[str, Any]  # what the grader passed to the script (--name=value), seed included
    references: Mapping[str, Any] = field(default_factory=dict)  # run name -> the practical's reference
    gpus: int = 0  # real CUDA devices of the grading machine
    run_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # run name -> its own arguments
    answers: "Answers | None" = None  # the submission's answers file, when the practical has one
    timings: Mapping[str, Any] = field(default_factory=dict)  # timed run name -> timing.TimedRuns (speed checks)
    warmup_steps: int = 1  # the spec's timing protocol: steps not timed at the start of a launch
    baselines: Mapping[str, Any] | None = None  # this machine's calibration (calibration/<practical>.yaml), if measured
    answer_key: Mapping[str, Any] | None = None  # solutions/<id>/answer_key.yaml; None where the staff's files are absent

    def args_of(self, run: JobResult) -> Mapping[str, Any]:
        """The arguments `run` was given: the common ones and its own."""
        return {**self.args, **self.run_args.get(run.spec.name, {})}

    def gpus_of(self, run: JobResult) -> int:
        """CUDA devices per node that `run` saw: its virtual ones, else the machine's (none
        where they were hidden from it)."""
        if run.spec.hide_gpus:
            return 0
        return run.spec.virtual_gpus or self.gpus


@dataclass(frozen=True)
class CheckDef:
    """A check a practical offers to its spec: the function and the options it understands."""

    id: str
    function: Callable[[CheckContext], Verdict]
    description: str
    options: Mapping[str, OptionDef] = field(default_factory=dict)
    real_gpus: int = 0  # real CUDA devices it needs; deferred (with its runs) on machines with fewer
    core_per_rank: bool = False  # its runs' ranks must work at once: a CPU core each and one for the grader's hub, or it is deferred (with its runs)
    timed: bool = False  # a speed check: its runs are launched k times (the spec's timing.repeats)
    against_reference: bool = True  # a timed check's launches alternate with the reference solution's
    # a timed check's "would these launches fail me?" (timed runs, warm-up steps, options): while
    # it says yes, the grading adds rounds of launches (up to the spec's timing.repeats more), so
    # a failing speed verdict rests on twice the evidence and a burst of load cannot decide it
    doubtful: Callable[[Any, int, Mapping[str, Any]], bool] | None = None
    whole_run: bool = False  # judges what the whole training did: a run the grader stopped before it ended fails it (grader/checks/runs.py `unfinished`)
