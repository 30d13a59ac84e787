"""Grading one submission: choose the inputs, run the script, judge, report.

1. select the checks (public ones for a self-check); defer those that need more real GPUs
   than this machine has, and plan the runs the others need (the spec's, or the overrides);
2. choose the arguments, the seed among them, afresh for every grading;
3. take the submission once, into the grader's own folder (`take`: what is graded cannot
   change under the grader), prepare it when the practical needs it (its module's `prepare`,
   e.g. taking a notebook's graded cells and a driver that runs them), read its answers file;
4. start the runner and, while it warms up, compute the practical's reference;
5. run each launch within the grading's time budget; a run that a speed check times is
   launched k times (the spec's `timing.repeats`), each launch after one of the reference
   solution's launches of the same run (so both see the same machine load; see
   grader/checks/timing.py for the protocol), and up to k times more while a speed check
   would fail it on the launches so far;
6. judge every check on its runs and build the report.

Nothing the submission does can make this raise; a failure of the grader's own code ends in
a report whose `error` says so.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import platform
import random
import secrets
import tempfile
import time
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Iterable, Mapping

from grader import __version__
from grader.checks import failures
from grader.checks.base import Answers, CheckContext, CheckDef, Verdict
from grader.checks.timing import TimedRuns, adopted_options, carried_work
from grader.course import Practical
from grader.grade.machine import machine_key
from grader.grade.answers import load_answers, manual_texts
from grader.grade.prepared import Prepared
from grader.probe.messages import DdpOptions
from grader.probe.transport.traffic import CarrierPlan
from grader.results.model import CheckResult, GradingReport, RunSummary, Status
from grader.run.job import JobResult, JobRunner, JobSpec, Layout
from grader.run.safeio import UntrustedFileError, read_untrusted
from grader.run.tree import TreeRefused, copy_tree, open_folder, remove_tree
from grader.spec import Assignment, CheckSpec, RunDef, load_answer_key

MIN_RUN_S = 1.0  # a run is skipped rather than started with less time than this
MAX_COMPILED_BYTES = 1 << 20  # a script is compiled before any run up to this size
REFERENCE_LAUNCH_S = 10.0  # the budget kept for each of the reference's timed launches still to come, until one has been seen
RESERVE_MARGIN = 1.5  # × the longest reference launch seen
MAX_RESERVE_SHARE = 1 / 3  # of the budget, at most, kept for the reference's launches
KEEP_BYTES = 64 << 20  # of what the ranks send, the hub keeps this much for the grader in a checked run (p6, p10: about 0.1 MiB)
KEEP_TIMED_BYTES = 9 << 20  # and of a timed launch (p6's timed run: 4 MiB a step; p10's 2 MiB, 8 MiB where each micro-batch syncs): its first step is checked whole


@dataclass(frozen=True)
class GradeOptions:
    """How to grade, beyond the spec."""

    world_size: int | None = None  # one run of this many ranks instead of the spec's runs
    virtual_gpus: int | None = None  # every run on this many virtual GPUs per node
    public_only: bool = False  # the student's self-check: visible checks only
    seed: int | None = None  # fix the seed (to reproduce a grading); chosen at random otherwise
    run_timeout_s: float | None = None  # one launch of the script
    total_timeout_s: float | None = None  # the whole grading, wall clock from its start
    solutions: Path | None = None  # the reference solutions (solutions/<id>/): speed checks compare with them
    calibration: Mapping[str, Any] | None = None  # every machine's baselines of the practical (calibration.load)
    timing: bool = True  # False: speed checks are deferred (no timed launches)
    progress: Callable[[str], None] | None = None  # told one line as each launch starts ("run ws2 (1 node × 2 ranks)")


@dataclass(frozen=True)
class TimeLimits:
    """How long a grading may take, resolved in one place (`time_limits`)."""

    run_s: float  # one launch of the script
    total_s: float  # the whole grading, wall clock from its start

    @property
    def cpu_s(self) -> int:
        """CPU seconds one process of the submission may use: the whole budget and a minute."""
        return int(self.total_s + 60)

    @property
    def job_minutes(self) -> int:
        """A grading job's limit on a cluster: the budget and 5 minutes to start and store it."""
        return int(self.total_s // 60 + 5)


def time_limits(assignment: Assignment, options: GradeOptions = GradeOptions()) -> TimeLimits:
    """The spec's time limits, or the options' where they give one."""
    return TimeLimits(run_s=options.run_timeout_s or assignment.run_timeout_s, total_s=options.total_timeout_s or assignment.total_timeout_s)


def merged_args(args: Mapping[str, Any], run: RunDef) -> dict[str, Any]:
    """The arguments a run is given: the common ones, then its own."""
    return {**args, **run.args}


def _runs_of(practical: Practical, checks: tuple[CheckSpec, ...], keep: Callable[[CheckDef], bool]) -> frozenset[str]:
    """The names of the runs that the checks among `checks` whose definition `keep`s use."""
    return frozenset(name for check in checks if keep(practical.module.CHECKS[check.check]) for name in check.runs)


def timed_runs(practical: Practical, checks: tuple[CheckSpec, ...], runs: tuple[RunDef, ...]) -> tuple[RunDef, ...]:
    """The planned runs that a speed check among `checks` times."""
    wanted = _runs_of(practical, checks, lambda definition: definition.timed)
    return tuple(run for run in runs if run.name in wanted)


def reference_launched(practical: Practical, checks: tuple[CheckSpec, ...], runs: tuple[RunDef, ...]) -> frozenset[str]:
    """The timed runs whose launches alternate with the reference solution's: those of a speed
    check that compares with it (a run of a solution is its own reference)."""
    wanted = _runs_of(practical, checks, lambda definition: definition.timed and definition.against_reference)
    return frozenset(run.name for run in runs if run.name in wanted and not run.solution)


def _doubts(practical: Practical, checks: tuple[CheckSpec, ...], warmup: int) -> Callable[[str, TimedRuns], bool]:
    """Whether a speed check among `checks` would fail the named timed run on its launches so far."""

    def doubtful(name: str, timed: TimedRuns) -> bool:
        for check in checks:
            definition = practical.module.CHECKS[check.check]
            if name in check.runs and definition.doubtful is not None and definition.doubtful(timed, warmup, check.options):
                return True
        return False

    return doubtful


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


def carrier_plan(run: RunDef, timed: tuple[RunDef, ...], workloads: frozenset[str], run_timeout: float, trusted: bool = False) -> CarrierPlan:
    """What the grader's hub of a carried launch is told: a collective may wait for its last
    member as long as the launch may run (a rank may take long to get there: torch.compile, a
    first DDP); a checked run's data is kept whole, a timed launch's first steps only (none of
    a `trusted` one, the reference solution's: its steps are found by their sizes), and none
    of a timing workload (`workloads`: the runs a speed check of the spec times) launched where
    no speed check reads it (`--no-timing`: it ran for `clean_exit` alone; p6's would carry
    80 MiB of gradients to the grader for nothing)."""
    if run in timed:
        return CarrierPlan(wait_s=run_timeout, keep_bytes=0 if trusted else KEEP_TIMED_BYTES, keep_broadcasts=False)
    if run.name in workloads:
        return CarrierPlan(wait_s=run_timeout, keep_bytes=0, keep_broadcasts=False)
    return CarrierPlan(wait_s=run_timeout, keep_bytes=KEEP_BYTES, keep_broadcasts=True)


def clocked_steps(assignment: Assignment, args: Mapping[str, Any], timed: tuple[RunDef, ...], gpus: int) -> dict[str, tuple[int, int]]:
    """The timed runs the grader times by its own clock (those its hub does not carry here), each
    with the step counts of its pair of launches: the run's own, and `clock_factor` times it
    (the spec loader made sure every timed run gives one)."""
    clocked = {}
    for run in timed:
        if not carried(run, gpus):
            steps = int((run.args if run.solution else merged_args(args, run))[assignment.timing.steps_argument])
            clocked[run.name] = (steps, steps * assignment.timing.clock_factor)
    return clocked


def plan_runs(assignment: Assignment, checks: tuple[CheckSpec, ...], options: GradeOptions, gpus: int = 0) -> tuple[RunDef, ...]:
    """The launches a grading performs on a machine with `gpus` CUDA GPUs: those the selected
    checks use, or the override."""
    if options.world_size is not None:
        runs: tuple[RunDef, ...] = (RunDef(name=f"ws{options.world_size}", layout=Layout(1, options.world_size), carried=any(run.carried for run in assignment.runs)),)
    else:
        wanted = {name for check in checks for name in check.runs}
        runs = tuple(run for run in assignment.runs if run.name in wanted)
    if options.virtual_gpus is not None:
        runs = tuple(replace(run, virtual_gpus=options.virtual_gpus) for run in runs)
    return tuple(on_this_machine(run, gpus) for run in runs)


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


def environment(seed: int | None) -> dict:
    """Where this grading ran: host, Python, torch, devices, grader version."""
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    name = torch.cuda.get_device_name(0) if gpus else ""
    return {
        "host": platform.node(),
        "machine": machine_key(gpus, name),
        "python": platform.python_version(),
        "torch": str(torch.__version__),
        "cuda_gpus": gpus,
        "devices": f"{gpus} × {name}" if gpus else "CPU only (no CUDA GPU)",
        "grader": __version__,
        "seed": seed,
    }


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


def deferred_checks(practical: Practical, checks: tuple[CheckSpec, ...], gpus: int, options: GradeOptions = GradeOptions()) -> dict[str, str]:
    """Check id -> why it is not graded here: it needs more real GPUs, or it is a speed check
    that cannot be timed in this grading."""
    reasons = {}
    timing = speed_problem(practical, options)
    for check in checks:
        definition = practical.module.CHECKS[check.check]
        if definition.real_gpus > gpus:
            reasons[check.id] = f"needs ≥ {definition.real_gpus} CUDA GPUs (this machine has {gpus}); its points are left to a grading on a GPU node"
        elif definition.timed and timing:
            reasons[check.id] = timing
    return reasons


def take(submission: Path, into: Path) -> tuple[Path, Prepared]:
    """The submission copied once, at the start, into the grader's own folder `into`: every
    later read and every job's copy come from it, so a student who can change the folder
    being graded (swap it for a link to the solutions, edit it between two runs) changes
    nothing. Returns the copy and what the copy left out (notes), or why it cannot be taken
    (problem: the folder is then empty)."""
    try:
        handle = open_folder(submission)
    except OSError as exc:
        into.mkdir()
        return into, Prepared(problem=f"the submission folder cannot be opened: {exc.strerror or exc}")
    try:
        return into, Prepared(notes=copy_tree(handle, into))
    except (TreeRefused, OSError) as exc:
        remove_tree(into)
        into.mkdir()
        return into, Prepared(problem=str(exc) if isinstance(exc, TreeRefused) else f"the submission cannot be taken: {exc}")
    finally:
        os.close(handle)


def _missing_scripts(runs: tuple[RunDef, ...], assignment: Assignment, submission: Path) -> str | None:
    """Why the submission's scripts cannot be run at all: one is missing, or a Python script
    does not compile (found before any run, not after every run has failed alike)."""
    for script in sorted({run.script or assignment.script for run in runs}):
        if not (submission / script).is_file():
            present = sorted(p.name for p in submission.iterdir() if p.is_file())[:8] if submission.is_dir() else []
            found = f" (it holds: {', '.join(present)})" if present else ""
            return f"{script} is not in the submission{found}"
        if script.endswith(".py"):
            problem = _does_not_compile(submission / script) or _imports_missing(submission / script)
            if problem:
                return problem
    return None


def _imports_missing(path: Path) -> str | None:
    """Why the script at `path` stops at its first line: an import, at its top level and
    outside any `try`, of a module that is neither in the submission's folder nor installed
    where the grader runs it (found with importlib's finders, which run none of the module's
    code), or None. Imports inside a `try`, an `if` or a function are the script's own
    business: it may do without them."""
    try:
        source, longer = read_untrusted(path, MAX_COMPILED_BYTES)
        tree = None if longer else ast.parse(source, path.name)
    except (OSError, UntrustedFileError, SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for statement in tree.body if tree is not None else ():
        if isinstance(statement, ast.Import):
            names = [alias.name for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
            names = [statement.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            if (path.parent / f"{top}.py").is_file() or (path.parent / top).is_dir() or _installed(top):
                continue
            return f"{path.name} imports {top} (line {statement.lineno}), which is not installed where the grader runs your code (ModuleNotFoundError: No module named {top!r}); use what the course's environment has (torch, numpy and the standard library), or ask the course staff"
    return None


def _installed(module: str) -> bool:
    """Whether a top-level module can be imported here (its spec found; nothing of it run)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return True  # a finder that cannot tell: the runs will


def _does_not_compile(path: Path) -> str | None:
    """Why Python cannot compile the script at `path` (compiled only, never run: the parser's
    own limits bound it; a script past MAX_COMPILED_BYTES is left to its runs), or None."""
    try:
        source, longer = read_untrusted(path, MAX_COMPILED_BYTES)
    except (OSError, UntrustedFileError):
        return None  # the runs say what is wrong with it
    if longer:
        return None
    try:
        compile(source, path.name, "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError too
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return f"{path.name} does not compile: {exc.msg}{where}"
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; nesting past the compiler's depth
        return f"{path.name} does not compile: {type(exc).__name__}: {exc}"
    return None


Launch = Callable[[RunDef, float, str, int, "int | None"], JobSpec]  # (run, seconds left, "own" or "reference", repeat, steps asked or None) -> job


def _run_all(
    runs: tuple[RunDef, ...],
    timed: tuple[RunDef, ...],
    referenced: frozenset[str],
    repeats: int,
    doubtful: Callable[[str, TimedRuns], bool],
    job_for: Launch,
    runner: JobRunner,
    deadline: float,
    budget_s: float,
    problem: str | None,
    progress: Callable[[str], None] | None = None,
    clocked: Mapping[str, tuple[int, int]] = MappingProxyType({}),
    adopt: Callable[[Iterable[JobResult]], DdpOptions | None] = lambda results: None,
) -> tuple[dict[str, JobResult], dict[str, TimedRuns]]:
    """Every planned launch in order; the timed runs last, round by round: in each of the
    `repeats` rounds, every timed run's reference launch (when `referenced`) and then its own
    (the submission's launches leave the time the reference's planned launches need: `reserve`);
    each checked run may take at most its share of the time left (that time over the checked
    runs still to come, and the timed runs as one more), so a run that hangs while it keeps
    the CPU busy leaves every later run its time, and no check is relabelled "not run";
    then, round by round, up to `repeats` more for the timed runs still `doubtful` (a speed
    check would fail them on the launches so far). A run whose own launch failed (crashed,
    hung) is launched no more: its side cannot be timed. A run in `clocked` (timed by the grader's
    clock: name -> its short and long step counts) is launched in pairs (`_round_order`). The reference's
    launches build their DDP with the submission's costly options, as `adopt` finds them in the
    checked runs."""
    chosen: DdpOptions | None = None  # set once the checked runs are done: only timed launches come later
    planned = sum(repeats * len(_round_order(clocked.get(run.name))) // 2 for run in timed if run.name in referenced)

    def reserve() -> float:
        """The time kept for the reference's planned launches still to come: the submission's
        launches never take it, so a submission cannot use up the budget to leave its speed
        check without a reference (and deferred)."""
        seen = [launch.wall_s for launches in reference.values() for launch in launches]
        waiting = max(planned - len(seen), 0)
        return min(waiting * (RESERVE_MARGIN * max(seen) if seen else REFERENCE_LAUNCH_S), MAX_RESERVE_SHARE * budget_s)

    def launch(run: RunDef, role: str, repeat: int, steps: int | None = None, shares: int = 1) -> JobResult:
        kept = 0.0 if role == "reference" else reserve()
        left = deadline - time.monotonic() - kept
        job = job_for(run, max(left / shares, 0.0), role, repeat, steps)
        if role == "reference":
            job = replace(job, ddp_options=chosen)
        if problem:
            return JobResult(spec=job, ranks=[], skipped=problem)
        if left < MIN_RUN_S:
            kept_note = f" ({kept:.0f} s of it are kept for the reference solution's timed launches)" if kept else ""
            return JobResult(spec=job, ranks=[], skipped=f"the grading's time budget ({budget_s:g} s) was used up by earlier runs{kept_note}")
        if progress is None:
            return runner.run(job)
        progress(f"run {job.name} ({job.describe()})")
        result = runner.run(job)
        progress(f"{job.name}: {_ended(result)} in {result.wall_s:.1f} s")
        return result

    own: dict[str, list[JobResult]] = {run.name: [] for run in timed}
    reference: dict[str, list[JobResult]] = {run.name: [] for run in timed}
    checked = [run for run in runs if run not in timed]
    results = {run.name: launch(run, "own", 0, shares=len(checked) - index + bool(timed)) for index, run in enumerate(checked)}
    chosen = adopt(results.values())
    pending = timed
    for repeat in range(2 * repeats if timed else 0):
        if repeat >= repeats:  # the spec's rounds are done: more only for runs a check doubts, while the budget has room for them
            pending = tuple(run for run in timed if doubtful(run.name, TimedRuns(tuple(own[run.name]), tuple(reference[run.name]))) and _room_for(run.name, own, reference, deadline))
        for run in pending:
            for steps, role in _round_order(clocked.get(run.name)):
                if any(launch.skipped or failures.explain(launch) for launch in own[run.name]):
                    break  # one failed launch leaves the side untimed (timing.measure): more would only spend the budget
                if role == "own" or run.name in referenced:
                    (own if role == "own" else reference)[run.name].append(launch(run, role, repeat, steps))
    results.update({name: launches[0] for name, launches in own.items()})
    ordered = {run.name: results[run.name] for run in runs}
    return ordered, {name: TimedRuns(tuple(own[name]), tuple(reference[name])) for name in own}


def _ended(result: JobResult) -> str:
    """How a launch ended, in a word or two, for the terminal ("ok", "hung", "failed")."""
    if result.stalled_s is not None:
        return f"hung (no CPU for {result.stalled_s:g} s), stopped"
    if result.timed_out:
        return "stopped at its time limit"
    return "failed" if result.error or failures.explain(result) else "ok"


def _checked_timings(practical: Practical, args: Mapping[str, Any], carried_runs: tuple[RunDef, ...], timings: dict[str, TimedRuns]) -> dict[str, TimedRuns]:
    """The timed launches the grader's hub carried, each timed by the hub's clock and checked
    against the grader's own training on its inputs (grader/checks/timing.py carried_work), the
    submission's also against the DDP options the reference's launches took on."""
    if not carried_runs:
        return timings
    references = practical.module.references(args, carried_runs)
    checked = {}
    for name, timed in timings.items():
        reference = references.get(name)
        if reference is None:
            checked[name] = timed
            continue
        own = tuple(carried_work(launch, reference, timed.adopted_options) for launch in timed.own)
        checked[name] = TimedRuns(own, tuple(carried_work(launch, reference) for launch in timed.reference))
    return checked


def _round_order(steps: tuple[int, int] | None) -> tuple[tuple[int | None, str], ...]:
    """The launches of one round of a timed run: (steps asked, role). A run the grader times by
    its clock goes reference short, own short, own long, reference long: each side's two
    launches then follow launches of the same size, so what a launch leaves to the next (a
    long one more) weighs alike on both of a side's launches and cancels in their difference.
    (Measured on p6's reference against itself under a busy core, with the order reference
    short, own short, reference long, own long: 1.02-1.27×, every one of 16 gradings above 1.)"""
    if steps is None:
        return ((None, "reference"), (None, "own"))
    short, long = steps
    return ((short, "reference"), (short, "own"), (long, "own"), (long, "reference"))


def _room_for(name: str, own: dict[str, list[JobResult]], reference: dict[str, list[JobResult]], deadline: float, margin: float = 2.0) -> bool:
    """Whether the time left holds another round of the run's launches (`margin` × its longest
    round so far): an extra round never ends in a launch skipped for want of time."""
    round_s = sum(max((launch.wall_s for launch in side[name]), default=0.0) for side in (own, reference))
    return time.monotonic() + margin * round_s < deadline


def _summaries(results: dict[str, JobResult]) -> tuple[RunSummary, ...]:
    summaries, shown = [], set()
    for name, run in results.items():
        outcome = failures.explain(run)
        output = ""
        if outcome and run.ranks and outcome not in shown:
            shown.add(outcome)
            culprits = [r for r in run.ranks if failures.rank_end(r) and not (failures.exception_of(r) and failures.is_consequence(failures.exception_of(r)))]
            for rank in culprits[:1] or [r for r in run.ranks if r.stderr_tail.strip()][:1]:
                tail = rank.stderr_tail.strip().splitlines()[-15:]
                output = "\n".join([f"rank {rank.rank} stderr (last lines):", *tail]) if tail else ""
        summaries.append(RunSummary(name=name, layout=run.spec.describe(), wall_s=run.wall_s, outcome=outcome or "ok", output=output, telemetry=run.telemetry, records=tuple(rank.record for rank in run.ranks)))
    return tuple(summaries)


def _result(spec: CheckSpec, number: int, verdict: Verdict) -> CheckResult:
    status = Status.DEFERRED if verdict.deferred else Status.PASSED if verdict.passed else Status.FAILED
    summary = f"not graded here: {verdict.deferred}" if verdict.deferred else verdict.summary
    score = 0.0 if verdict.deferred else round(spec.points * verdict.earned, 4)
    return CheckResult(spec.id, spec.title, number, score, spec.points, status, summary, verdict.details, spec.visibility, dict(verdict.data))


def _judge_all(practical: Practical, checks: tuple[CheckSpec, ...], deferred: Mapping[str, str], results: dict[str, JobResult], base: CheckContext, everything: bool) -> tuple[list[CheckResult], list[str]]:
    graded, errors = [], []
    for number, spec in enumerate(checks, 1):
        if spec.id in deferred:
            graded.append(_result(spec, number, Verdict(False, "", deferred=deferred[spec.id])))
            continue
        chosen = tuple(results.values()) if everything else tuple(results[name] for name in spec.runs if name in results)
        context = replace(base, runs=chosen, options=spec.options)
        try:
            verdict = practical.module.CHECKS[spec.check].function(context)
        except Exception as exc:  # noqa: BLE001 - a bug in a check must not lose the other checks
            errors.append(f"check {spec.id} failed: {type(exc).__name__}: {exc}")
            graded.append(CheckResult(spec.id, spec.title, number, 0.0, spec.points, Status.ERROR, "the grader failed while judging this check (not your fault)", visibility=spec.visibility))
            continue
        graded.append(_result(spec, number, verdict))
    return graded, errors


@dataclass
class Execution:
    """Everything a grading ran and observed, before any check judged it; or, with `error`, why
    the grader itself could not run it (the one thing `execute` returns either way)."""

    started: float
    environment: dict = field(default_factory=dict)
    error: str | None = None  # the grader's own failure: judged as an autograder error
    checks: tuple[CheckSpec, ...] = ()
    args: dict = field(default_factory=dict)
    runs: tuple[RunDef, ...] = ()
    results: dict[str, JobResult] = field(default_factory=dict)
    references: Any = None
    timings: dict[str, TimedRuns] = field(default_factory=dict)
    deferred: dict[str, str] = field(default_factory=dict)
    answers: Answers | None = None
    prepared: Prepared = field(default_factory=Prepared)


def execute(practical: Practical, submission: Path, runner: JobRunner, options: GradeOptions = GradeOptions(), refused: str | None = None) -> Execution:
    """Steps 1 to 5 of the module docstring: the runs and their observations (or, when the
    grader itself fails, an Execution whose `error` says so). `refused`: why the submission
    cannot be run at all, known before (every run is then reported as not run, with it)."""
    started = time.monotonic()
    assignment = practical.assignment
    checks = tuple(c for c in assignment.checks if c.public or not options.public_only)
    args = choose_args(assignment, options.seed)
    limits = time_limits(assignment, options)
    run_timeout, budget = limits.run_s, limits.total_s
    env: dict = {}
    staging = Path(tempfile.mkdtemp(prefix="grader-prepared-"))
    try:
        runner.start()  # warms up while this process imports torch and computes the reference
        env = {**environment(args.get(assignment.seed_argument) if assignment.seed_argument else None), "isolation": runner.isolation, "gpu_telemetry": runner.telemetry}
        deferred = deferred_checks(practical, checks, env["cuda_gpus"], options)
        graded = tuple(c for c in checks if c.id not in deferred)
        runs = plan_runs(assignment, graded, options, env["cuda_gpus"])
        timed = timed_runs(practical, graded, runs)
        submission, taken = take(submission, staging / "taken")
        taken = replace(taken, problem=refused or taken.problem)
        answers = load_answers(submission, assignment.answers) if assignment.answers else None
        folder, prepared = submission, Prepared(problem=taken.problem or _missing_scripts(tuple(r for r in runs if not r.solution), assignment, submission))
        prepare = getattr(practical.module, "prepare", None)
        if prepare is not None and prepared.problem is None:
            folder = staging / "prepared"
            folder.mkdir()
            prepared = prepare(submission, folder, assignment)
        prepared = replace(prepared, notes=taken.notes + prepared.notes)
        judged = _runs_of(practical, graded, lambda definition: not definition.timed)
        checked = tuple(r for r in runs if not r.solution and (r.name in judged or options.world_size is not None))
        references = practical.module.references(args, checked)  # the expected values; speed-only runs need none
        workloads = _runs_of(practical, assignment.checks, lambda definition: definition.timed)

        def job_for(run: RunDef, left: float, role: str, repeat: int, steps: int | None = None) -> JobSpec:
            solution = run.solution or (practical.id if role == "reference" else None)
            if solution:
                assert options.solutions is not None  # speed_problem() made sure
                seed = {assignment.seed_argument: args[assignment.seed_argument]} if assignment.seed_argument else {}
                source, script, run_args = options.solutions / solution, run.script or assignment.script, {**(seed if run.solution else args), **run.args}
            else:
                source, script, run_args = folder, prepared.script or run.script or assignment.script, merged_args(args, run)
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
                timeout_s=min(run_timeout, left) if left > 0 else run_timeout,
                watch_globals=assignment.variables,
                virtual_gpus=run.virtual_gpus,
                hide_gpus=run.hide_gpus,
                driver=prepared.driver and not solution,
                private=solution is not None,
                carrier=carrier_plan(run, timed, workloads, run_timeout, trusted=solution is not None) if carried(run, env["cuda_gpus"]) else None,
                clock_steps=steps,
            )

        referenced = reference_launched(practical, graded, runs)
        doubtful = _doubts(practical, graded, assignment.timing.warmup_steps)
        clocked = clocked_steps(assignment, args, timed, env["cuda_gpus"])
        adopt = partial(adopted_options, references=references)
        results, timings = _run_all(runs, timed, referenced, assignment.timing.repeats, doubtful, job_for, runner, started + budget, budget, prepared.problem, options.progress, clocked, adopt)
        timings = _checked_timings(practical, args, tuple(r for r in timed if carried(r, env["cuda_gpus"])), timings)
    except Exception as exc:  # noqa: BLE001 - the grader's own failure becomes an autograder error
        return Execution(started, env, error=f"{type(exc).__name__}: {exc}")
    finally:
        runner.close()
        remove_tree(staging)
    return Execution(started, env, None, checks, args, runs, results, references, timings, deferred, answers, prepared)


def judge(practical: Practical, execution: Execution, options: GradeOptions = GradeOptions()) -> GradingReport:
    """Step 6: every check on its runs, and the report (an autograder error's report when the
    execution failed, or when building the report itself fails)."""
    if execution.error is None:
        try:
            return _report(practical, execution, options)
        except Exception as exc:  # noqa: BLE001 - e.g. an answer no renderer foresaw: the results are written anyway
            execution = replace(execution, error=f"{type(exc).__name__}: {exc}")
    return GradingReport.failure(practical.assignment.id, execution.error or "", execution_time_s=time.monotonic() - execution.started, environment=execution.environment)


def _report(practical: Practical, execution: Execution, options: GradeOptions) -> GradingReport:
    base = CheckContext(
        runs=(),
        options={},
        args=execution.args,
        references=execution.references,
        gpus=execution.environment["cuda_gpus"],
        run_args={r.name: r.args for r in execution.runs},
        answers=execution.answers,
        timings=execution.timings,
        warmup_steps=practical.assignment.timing.warmup_steps,
        baselines=(options.calibration or {}).get(execution.environment.get("machine", "")),
        answer_key=load_answer_key(options.solutions, practical.id),
    )
    graded, errors = _judge_all(practical, execution.checks, execution.deferred, execution.results, base, everything=options.world_size is not None)
    return GradingReport(
        practical=practical.assignment.id,
        title=practical.assignment.title,
        checks=tuple(graded),
        runs=_summaries(execution.results),
        execution_time_s=time.monotonic() - execution.started,
        environment=execution.environment,
        error="; ".join(errors) or None,
        manual=manual_texts(execution.answers or Answers(None), practical.assignment.manual_answers),
        notes=drawn_note(practical.assignment, execution.args) + execution.prepared.notes + tuple(dict.fromkeys(note for run in execution.results.values() for note in run.notes)) + left_out(practical, execution.checks, options),
    )


def left_out(practical: Practical, checks: tuple[CheckSpec, ...], options: GradeOptions) -> tuple[str, ...]:
    """What a quicker grading (`--world-size`, `--no-timing`) did not do, said in the report: a
    score from it is not the autograder's."""
    notes = []
    if options.world_size is not None:
        judged = tuple(c for c in checks if not practical.module.CHECKS[c.check].timed)
        replaced = [run.name for run in plan_runs(practical.assignment, judged, replace(options, world_size=None))]
        notes.append(
            f"quick mode: one run of {options.world_size} rank{'s' if options.world_size > 1 else ''} on one node replaced the runs "
            f"{', '.join(replaced)}; mistakes that show only there (several nodes, where LOCAL_RANK is not RANK; other world sizes; "
            "the uneven splits) are not looked for — the autograder runs them all"
        )
    if not options.timing:
        notes.append("--no-timing: the speed checks were left out")
    return tuple(notes)


def grade(practical: Practical, submission: Path, runner: JobRunner, options: GradeOptions = GradeOptions()) -> GradingReport:
    """Grade `submission` (a folder) for `practical` with `runner`; see the module docstring."""
    return judge(practical, execute(practical, submission, runner, options), options)
