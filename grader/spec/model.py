"""The assignment spec as the rest of the grader sees it: validated, typed and immutable."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from grader.run.job import Layout

VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")


@dataclass(frozen=True)
class RunDef:
    """One launch the grading performs: a name, a layout of ranks, and how many virtual GPUs
    each simulated node has (0: the machine's real devices, if any)."""

    name: str
    layout: Layout
    virtual_gpus: int = 0
    script: str | None = None  # another script than the assignment's
    args: Mapping[str, Any] = field(default_factory=dict)  # arguments that differ in this run
    solution: str | None = None  # run this practical's reference solution, not the submission (its own args only)
    carried: bool = False  # the grader's hub carries the ranks' process groups (grader/probe/transport): verdicts about communication rest on its traffic
    hide_gpus: bool = False  # its ranks see none of the machine's GPUs (set on GPU nodes for the spec's CPU runs the hub carries)
    substitutes: bool = False  # the hub delivers one send of each step each way between neighbouring ranks with values of its own (grader/probe/transport/traffic.py Substitution; needs `carried` and the `dim`, `micro_batches` and `steps` arguments)


@dataclass(frozen=True)
class Timing:
    """The timing protocol of the spec's speed checks: each timed run is launched `repeats`
    times, interleaved with the reference solution's launches, and the first `warmup_steps`
    optimizer steps of every launch are not timed. A timed run the grader's hub does not carry is
    timed by the grader's clock: each of its launches is a pair, one with the run's
    `steps_argument` and one with `clock_factor` times as many steps (grader/speed/measure.py)."""

    repeats: int = 3
    warmup_steps: int = 1
    steps_argument: str = "steps"
    clock_factor: int = 3


@dataclass(frozen=True)
class CheckSpec:
    """One graded check: which check function, its points, visibility, runs and options."""

    id: str
    check: str  # the id of the check function in the practical's table
    title: str
    points: float
    visibility: str
    runs: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def public(self) -> bool:
        """Public checks are the ones a student's self-check runs."""
        return self.visibility == "visible"


@dataclass(frozen=True)
class Assignment:
    """A practical's grading spec (assignment.yaml)."""

    id: str
    title: str
    script: str
    args: Mapping[str, Any]
    seed_argument: str | None
    variables: tuple[str, ...]
    runs: tuple[RunDef, ...]
    checks: tuple[CheckSpec, ...]
    run_timeout_s: float
    total_timeout_s: float
    source: Path
    sandbox: str = "preferred"  # "required": never graded without the sandbox (official grading)
    answers: str | None = None  # the submission's answers file (YAML), if the practical has one
    manual_answers: tuple[str, ...] = ()  # dotted keys of free-text answers, graded by people
    timing: Timing = Timing()
    draw: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)  # argument -> the values one is drawn from per grading (as the seed is)

    @property
    def max_score(self) -> float:
        return sum(c.points for c in self.checks)

    def run(self, name: str) -> RunDef:
        return next(r for r in self.runs if r.name == name)
