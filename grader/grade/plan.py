"""The plan of a grading: which runs, as this machine can make them, with which arguments, and
which checks are left to another machine (or to a grading that times)."""
from __future__ import annotations

import random
import secrets
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from grader.checks.base import CheckDef, Verdict
from grader.course import Practical
from grader.grade.machine import usable_cpus
from grader.grade.options import GradeOptions
from grader.grade.prepared import Prepared
from grader.probe.transport.traffic import CarrierPlan, Substitution
from grader.results.model import Later
from grader.run.job import JobSpec, Layout
from grader.spec import Assignment, CheckSpec, RunDef

KEEP_BYTES = 64 << 20  # of what the ranks send, the hub keeps this much for the grader in a checked run (p6, p10: about 0.1 MiB)
KEEP_TIMED_BYTES = 9 << 20  # and of a timed launch (p6's timed run: 4 MiB a step; p10's 2 MiB, 8 MiB where each micro-batch syncs): its first step is checked whole


def merged_args(args: Mapping[str, Any], run: RunDef) -> dict[str, Any]:
    """The arguments a run is given: the common ones, then its own."""
    return {**args, **run.args}


def runs_of(practical: Practical, checks: tuple[CheckSpec, ...], keep: Callable[[CheckDef], bool]) -> frozenset[str]:
    """The names of the runs that the checks among `checks` whose definition `keep`s use."""
    return frozenset(name for check in checks if keep(practical.module.CHECKS[check.check]) for name in check.runs)


def on_this_machine(run: RunDef, gpus: int) -> RunDef:
    """The run as a machine with `gpus` CUDA GPUs can make it, with the verdicts it gets on
    every machine. There, a CPU run that the grader's hub carries stays a CPU run: its ranks
    see none of the machine's GPUs (the hub carries host memory; ranks on the real GPUs would
    talk over NCCL, which no grader's process can read, and a script that asks for NCCL
    without CUDA must fail there as on a CPU machine: measured on an H200 node, where such runs
    on virtual GPUs gave it full marks). A run with more ranks per node than the machine has
    GPUs goes on virtual GPUs, one per rank: a rank without a GPU of its own would fail with
    "invalid device ordinal" (measured on a node of one H100: every reference run of p6 with
    2 ranks or more)."""
    if not gpus or run.virtual_gpus:
        return run
    if run.carried:
        return replace(run, hide_gpus=True)
    if run.layout.ranks_per_node > gpus:
        return replace(run, virtual_gpus=run.layout.ranks_per_node)
    return run


def carried(run: RunDef, gpus: int) -> bool:
    """Whether the grader's hub carries the run's process groups on a machine with `gpus` CUDA
    GPUs (never on the real GPUs: there, only where the run goes on virtual ones or sees none)."""
    return run.carried and (bool(run.virtual_gpus) or run.hide_gpus or not gpus)


def carrier_plan(run: RunDef, timed: tuple[RunDef, ...], workloads: frozenset[str], run_timeout: float, trusted: bool = False, args: Mapping[str, Any] | None = None) -> CarrierPlan:
    """What the grader's hub of a carried launch is told: a collective may wait for its last
    member as long as the launch may run (a rank may take long to get there: torch.compile, a
    first DDP); a checked run's data is kept whole, a timed launch's first steps only (none of
    a `trusted` one, the reference solution's: its steps are found by their sizes), and none
    of a timing workload (`workloads`: the runs a speed check of the spec times) launched where
    no speed check reads it (`--no-timing`: it ran for `clean_exit` alone; p6's would carry
    80 MiB of gradients to the grader for nothing). A checked run that `substitutes` has one send
    of each step, each way between neighbouring ranks (its `args`: `micro_batches` sends a step
    of `dim` columns, `steps` steps), delivered with the hub's own values."""
    if run in timed:
        return CarrierPlan(wait_s=run_timeout, keep_bytes=0 if trusted else KEEP_TIMED_BYTES, keep_broadcasts=False, keep_sends=False)
    if run.name in workloads:
        return CarrierPlan(wait_s=run_timeout, keep_bytes=0, keep_broadcasts=False, keep_sends=False)
    given = args or {}
    substitute = Substitution(int(given["dim"]), int(given["micro_batches"]), int(given.get("steps", 1))) if run.substitutes else None
    return CarrierPlan(wait_s=run_timeout, keep_bytes=KEEP_BYTES, keep_broadcasts=True, substitute=substitute)


def plan_runs(assignment: Assignment, checks: tuple[CheckSpec, ...], options: GradeOptions, gpus: int = 0, workloads: frozenset[str] = frozenset()) -> tuple[RunDef, ...]:
    """The launches a grading performs on a machine with `gpus` CUDA GPUs: those the selected
    checks use, or the override. With `--no-timing`, the timing workloads (`workloads`: the runs
    a speed check of the spec times) are left out where every check that reads them has other
    runs too (p6's and p10's `clean_exit` read the timed run beside five others)."""
    if options.world_size is not None:
        runs: tuple[RunDef, ...] = (RunDef(name=f"ws{options.world_size}", layout=Layout(1, options.world_size), carried=any(run.carried for run in assignment.runs), substitutes=any(run.substitutes for run in assignment.runs)),)
    else:
        wanted = {name for check in checks for name in check.runs}
        if not options.timing:
            wanted -= untimed_workloads(checks, workloads)
        runs = tuple(run for run in assignment.runs if run.name in wanted)
    if options.virtual_gpus is not None:
        runs = tuple(replace(run, virtual_gpus=options.virtual_gpus) for run in runs)
    return tuple(on_this_machine(run, gpus) for run in runs)


def untimed_workloads(checks: tuple[CheckSpec, ...], workloads: frozenset[str]) -> set[str]:
    """The timing workloads a grading without timing leaves out: those every check of `checks`
    that reads them reads beside other runs."""
    return {name for name in workloads if all(set(check.runs) - workloads for check in checks if name in check.runs)}


def choose_args(assignment: Assignment, seed: int | None) -> dict:
    """The script's arguments: the spec's, a seed chosen now (never known in advance) and the
    spec's drawn ones (`draw`: e.g. a batch size, so that a table of the right answers for
    one size fails), drawn from the seed, so that a given seed reproduces a grading."""
    args = dict(assignment.args)
    chosen = seed if seed is not None else secrets.randbelow(2**31 - 2) + 1
    if assignment.seed_argument:
        args[assignment.seed_argument] = chosen
    draws = random.Random(chosen)
    for name, values in sorted(assignment.draw.items()):
        args[name] = draws.choice(values)
    return args


def drawn_note(assignment: Assignment, args: Mapping[str, Any]) -> tuple[str, ...]:
    """'drawn for this grading: batch_size 71' where the spec draws arguments."""
    if not assignment.draw:
        return ()
    return ("drawn for this grading: " + ", ".join(f"{name} {args[name]}" for name in sorted(assignment.draw)) + " (runs with their own values keep them)",)


def speed_problem(practical: Practical, options: GradeOptions) -> str | None:
    """Why speed checks cannot be graded in this grading, or None."""
    if not options.timing:
        return "speed is not measured in this grading (--no-timing)"
    if options.world_size is not None:
        return "speed is not measured when --world-size replaces the spec's runs"
    if getattr(practical.module, "prepare", None) is not None:
        return "speed checks need a script (not a prepared submission such as a notebook)"
    needed = {practical.id} | {run.solution for run in practical.assignment.runs if run.solution}
    if options.solutions is None or not all((options.solutions / name).is_dir() for name in needed):
        return "it compares with the reference solution, which is not available here (a self-check); the autograder measures it"
    return None


def reference_at_hand(practical: Practical, options: GradeOptions) -> bool:
    """Whether the practical's reference solution can be launched here as the submission is
    (a script, its solution's folder given): runs are then held to its pace."""
    return options.solutions is not None and (options.solutions / practical.id).is_dir() and getattr(practical.module, "prepare", None) is None


def deferred_checks(practical: Practical, checks: tuple[CheckSpec, ...], gpus: int, options: GradeOptions = GradeOptions(), cpus: int | None = None) -> dict[str, Verdict]:
    """Check id -> the verdict that defers it, saying why it is not graded here and where it
    is: it needs more real GPUs, it is a speed check that cannot be timed in this grading, or
    its ranks need more CPU cores than this machine's `cpus` (None: `usable_cpus`) to work at
    once."""
    reasons = {}
    timing = speed_problem(practical, options)
    cpus = usable_cpus() if cpus is None else cpus
    for check in checks:
        definition = practical.module.CHECKS[check.check]
        cores = 1 + max((run.layout.world_size for run in practical.assignment.runs if run.name in check.runs), default=0) if definition.core_per_rank else 0
        if definition.real_gpus > gpus:
            reasons[check.id] = Verdict(False, "", deferred=f"needs ≥ {definition.real_gpus} CUDA GPUs (this machine has {gpus}); its points are left to a grading on a GPU node", later=Later.GPU_NODE)
        elif definition.timed and timing:
            reasons[check.id] = Verdict(False, "", deferred=timing, later=Later.AUTOGRADER)
        elif cpus < cores:
            reasons[check.id] = Verdict(False, "", deferred=f"needs ≥ {cores} CPU cores, one per rank and one for the grader's hub, so that they work at once (this machine has {cpus}); its points are left to a grading on a larger machine", later=Later.LARGER_MACHINE)
    return reasons


@dataclass(frozen=True)
class JobMaker:
    """The job of one launch: a run of the submission (its prepared folder, the grading's
    arguments) or of a reference solution (its own folder; the reference's launches of a
    timed run get the same inputs as the submission's), named after the run and its role
    ("timed@reference+long#2"), with the time it may take."""

    practical: Practical
    options: GradeOptions
    args: Mapping[str, Any]
    folder: Path  # the submission, as the grader took (and prepared) it
    prepared: Prepared
    run_timeout_s: float
    timed: tuple[RunDef, ...]
    workloads: frozenset[str]  # the runs a speed check of the spec times (carrier_plan)
    gpus: int

    def __call__(self, run: RunDef, left: float, role: str, repeat: int, steps: int | None = None) -> JobSpec:
        assignment = self.practical.assignment
        solution = run.solution or (self.practical.id if role == "reference" else None)
        if solution:
            assert self.options.solutions is not None  # speed_problem() made sure
            seed = {assignment.seed_argument: self.args[assignment.seed_argument]} if assignment.seed_argument else {}
            source, script, run_args = self.options.solutions / solution, run.script or assignment.script, {**(seed if run.solution else self.args), **run.args}
        else:
            source, script, run_args = self.folder, self.prepared.script or run.script or assignment.script, merged_args(self.args, run)
        long = steps is not None and steps != run_args.get(assignment.timing.steps_argument)
        if steps is not None:
            run_args = {**run_args, assignment.timing.steps_argument: steps}
        suffix = ("@reference" if role == "reference" else "") + ("+long" if long else "") + (f"#{repeat + 1}" if repeat else "")
        return JobSpec(
            name=run.name + suffix,
            submission=source,
            script=script,
            argv=tuple(f"--{key}={value}" for key, value in run_args.items()),
            layout=run.layout,
            timeout_s=min(self.run_timeout_s, left) if left > 0 else self.run_timeout_s,
            watch_globals=assignment.variables,
            virtual_gpus=run.virtual_gpus,
            hide_gpus=run.hide_gpus,
            driver=self.prepared.driver and not solution,
            private=solution is not None,
            carrier=carrier_plan(run, self.timed, self.workloads, self.run_timeout_s, trusted=solution is not None, args=run_args) if carried(run, self.gpus) else None,
            clock_steps=steps,
        )
