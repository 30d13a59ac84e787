"""Benchmarks of grading (not tests): latency, overhead, the speed checks' false-fail rate, and —
on a machine with CUDA — the real-GPU path. Writes its sections into bench/RESULTS.md (the
sections it did not measure are kept) and prints them.

    python bench/bench_grading.py [--repeat N] [--false-fail-runs N] [--out bench/RESULTS.md]

1. Latency: `python -m grader grade P solutions/P` for every practical, as a user waits for it
   (Python start, imports, the reference computation, every run, results.json). Target: all
   four in ≤ 60 s together on the project's 2-core machine. The same grading with
   `--no-sandbox` (no bubblewrap, no per-job cgroups, no capped tmpfs) alternates with it:
   the sandbox's cost. Target: ratio ≤ 1.3.
2. Overhead: each grading against bare runs of the same scripts with the same arguments and
   layouts — every launch the grading makes, timed launches and the reference solution's
   launches included: `torchrun` (two agents meeting on 127.0.0.1 for a 2-node layout), under
   `python -m grader run --virtual-gpus N` where the spec runs on virtual GPUs. Grader and bare
   runs alternate; the minimum of the repeats is compared. Target: ratio ≤ 1.5. p4 has no bare
   equivalent (the grader runs a notebook's graded cells through its own driver).
3. False fails: the reference solutions graded N times while a competing process keeps the
   other core busy; a speed check that fails the reference is a false fail. Target: 0 of 20.
4. The grader's hub (`--carried REV`, alone): a graded p6 with the grader of REV (before every
   run was carried) and with this checkout's, a planted 1.5× slowdown hidden behind a forged
   clock (caught in ≥ 19 of 20), false fails of p6's and p10's references under a busy core
   (0 of 20). Spliced into the results file.
5. Steady verdicts (`--steady N`, alone): every reference solution and every correct variant
   the tests hold (tests/p*_variants.py: the correct-but-unusual ones, the tutorial-style
   ones) graded N times in a row, timed; every grading must give full marks. Spliced into the
   results file. With `--busy`, a competing process keeps the last core busy throughout; with
   `--bursty`, bursts of one or two busy processes come and go (bench/bursts.py): no grading may
   fall short, and a speed check the busy machine defers is counted apart. `--practicals p6,p10`
   narrows it; `--speed-only` grades `efficiency` alone (its timed runs and the reference's).
6. Spread (`--spread N`, alone): p6's and p10's reference solutions graded N times each,
   timed: the ratio of the submission's side (the reference itself) to the reference's side
   by what a step costs (each step's median over the launches, what `efficiency` judges), by
   first deciles and by launch medians, and how widely each spreads. Spliced into the results file.
7. The grader's clock where the hub carries nothing (`--clocked N`, alone): p6's timed run as on
   real GPUs, timed by pairs of whole launches of two step counts. p6's
   reference graded N times under a busy core (false fails, target 0 of N) and a planted 1.5×
   slowdown behind a forged clock graded N times (caught, target ≥ 19 of 20). Spliced into
   the results file.
8. GPU (only with CUDA): p6 on NCCL with world size 1, p5's single-GPU baseline and its
   DataParallel step times, NVML readings, and the fidelity suite (virtual vs real devices).
9. Shapes (`--shapes N`, alone): a planted 1.5× slowdown in every timed step, in most, in every
   fifth, in one, and ahead of the loop, on p6's timed run carried by the hub, N gradings each
   (caught, target ≥ 19 of 20), each shape's spin first calibrated to pay half the
   reference's steps by the hub's clock. With `--bursty`, under bursts of other load: caught or
   deferred, never passed. Spliced into the results file.
10. Peak memory (`--memory`, alone, as root): each practical's grading started in a cgroup of
   its own, whose peak counts the grader, its launchers, every rank and their tmpfs files: what
   a grading machine (or Gradescope's image) must hold. Spliced into the results file.
11. Before and after (`--compare REV`, alone): p6 and p10 graded with the grader of REV and
   with this checkout's, alternating, the minimum of --repeat + 1. Spliced into the results file.
All ratios are measured in this one process run.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from grader.course import Practical, load_course, load_practical  # noqa: E402 - after the path is set
from grader.grade.options import GradeOptions  # noqa: E402
from grader.grade.plan import deferred_checks, plan_runs  # noqa: E402
from grader.grade.timing import reference_launched, timed_runs  # noqa: E402
from grader.spec.model import RunDef  # noqa: E402
from bursts import bursty_load  # noqa: E402 - bench/bursts.py, beside this file

PYTHON = sys.executable
TORCHRUN = [PYTHON, "-m", "torch.distributed.run"]
PRACTICALS = ("p4", "p5", "p6", "p10")
SPEED_CHECKS = ("efficiency", "scaling", "faster_than")


def machine() -> str:
    """CPU model and count, memory, GPUs, Python and torch."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    gpus = f"{torch.cuda.device_count()} × {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, {memory:.0f} GiB; {gpus}; Python {platform.python_version()}, torch {torch.__version__}"


class BareRunFailed(Exception):
    """A bare launch exited with an error."""


def timed(commands: list[list[str]]) -> float:
    """Wall time of running `commands` together (each must succeed)."""
    started = time.perf_counter()
    procs = [subprocess.Popen(c, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in commands]
    errors = [p.communicate()[1] for p in procs]
    elapsed = time.perf_counter() - started
    failed = [(p.returncode, e) for p, e in zip(procs, errors) if p.returncode]
    if failed:
        stderr = failed[0][1].decode(errors="replace")
        causes = "; ".join(line.strip() for line in stderr.splitlines() if "exitcode" in line) or stderr.strip()[-300:]
        raise BareRunFailed(f"exit {failed[0][0]} of {' '.join(commands[0][-8:])} ({len(commands)} agent(s)): {causes}")
    return elapsed


def retried(launch: Callable[[], float], failures: list[str], attempts: int = 3) -> float:
    """`launch()`, up to `attempts` times while it fails (each failure is kept for the results:
    a bare torchrun can abort in torch's teardown on a loaded machine)."""
    for _ in range(attempts - 1):
        try:
            return launch()
        except BareRunFailed as exc:
            failures.append(str(exc))
    return launch()


def grade(practical: str, results: Path, *extra: str, tree: Path = ROOT, folder: Path | None = None) -> tuple[float, dict]:
    """Grade the reference solution of `practical` (or `folder`) with the grader of `tree` (this
    checkout, or an earlier commit's worktree); the wall time and the results."""
    started = time.perf_counter()
    command = [PYTHON, "-m", "grader", "grade", practical, str(folder or f"solutions/{practical}"), "--results", str(results), *extra]
    done = subprocess.run(command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"grading {practical} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return elapsed, json.loads(results.read_text())


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bare_launch(practical: Practical, run: RunDef, argv: list[str]) -> float:
    """One bare launch of a run, as a user would start it: python for a single-process
    practical, torchrun otherwise; under `grader run --virtual-gpus N` for virtual GPUs."""
    spec = practical.assignment
    script = str(ROOT / "solutions" / (run.solution or practical.id) / (run.script or spec.script))
    layout = run.layout
    wrap = [PYTHON, "-m", "grader", "run", "--virtual-gpus", str(run.virtual_gpus), "--"] if run.virtual_gpus else []
    if not any(r.layout.world_size > 1 for r in spec.runs):
        return timed([[*wrap, PYTHON, script, *argv]])
    if layout.nodes == 1:
        return timed([[*wrap, *TORCHRUN, f"--nproc_per_node={layout.ranks_per_node}", script, *argv]])
    port = free_port()
    agents = [
        [*wrap, *TORCHRUN, f"--nnodes={layout.nodes}", f"--node_rank={n}", f"--nproc_per_node={layout.ranks_per_node}", "--master_addr=127.0.0.1", f"--master_port={port}", script, *argv]
        for n in range(layout.nodes)
    ]
    return timed(agents)


def bare_grading(practical: Practical, seed: int, failures: list[str]) -> float:
    """Every launch a CPU grading of the practical makes, run bare, one after the other."""
    spec = practical.assignment
    options = GradeOptions(solutions=ROOT / "solutions")
    deferred = deferred_checks(practical, spec.checks, 0, options)
    graded = tuple(c for c in spec.checks if c.id not in deferred)
    runs = plan_runs(spec, graded, options)
    timed_ones = timed_runs(practical, graded, runs)
    referenced = reference_launched(practical, graded, runs)
    total = 0.0
    for run in runs:
        args = {**spec.args, **({spec.seed_argument: seed} if spec.seed_argument else {}), **run.args}
        argv = [f"--{k}={v}" for k, v in args.items()]
        launches = (spec.timing.repeats if run in timed_ones else 1) * (2 if run.name in referenced else 1)
        total += sum(retried(lambda: bare_launch(practical, run, argv), failures) for _ in range(launches))
    return total


def speed_failures(practical: Practical, document: dict) -> list[str]:
    """The speed checks that failed in a results document."""
    speed_ids = {c.id for c in practical.assignment.checks if practical.module.CHECKS[c.check].timed}
    return [f"{t['tags'][0]}: {t['output']}" for t in document["tests"] if t.get("status") == "failed" and t["tags"][0] in speed_ids]


SPEED_DEFERRABLE = ("efficiency",)  # speed checks a busy machine defers (the GPU checks are deferred on a CPU machine in every grading)


def competing_load() -> subprocess.Popen:
    """A busy loop on the last core (the grading's ranks share the machine with it)."""
    code = "import os\nos.sched_setaffinity(0, {os.cpu_count() - 1})\nwhile True:\n    pass\n"
    return subprocess.Popen([PYTHON, "-c", code])


def gpu_section(work: Path) -> list[str]:
    import torch

    if not torch.cuda.is_available():
        return ["No CUDA GPU on this machine: the NCCL path, p5's baseline on a real GPU, NVML readings and the real-vs-virtual comparison were not measured in this run."]
    lines = []
    seconds, document = grade("p6", work / "p6-nccl.json", "--world-size", "1")
    lines.append(f"- p6 on NCCL, world size 1: {document['score']:g}/{document['extra_data']['max_score']:g} in {seconds:.1f} s; environment: {document['extra_data']['environment']['devices']}")
    seconds, document = grade("p5", work / "p5-gpu.json")
    step = next((t for t in document["tests"] if t["tags"][0] == "gpu_step_times"), None)
    lines.append(f"- p5 on real GPUs ({seconds:.1f} s): " + (step["output"].splitlines()[0] if step else "no step-time check"))
    for run in document["extra_data"]["runs"]:
        if run.get("gpu_telemetry"):
            gpus = "; ".join(f"GPU {g['index']} +{g['memory_added_peak_mib']:.0f} MiB, {g['utilization_mean_pct']:.0f}% busy" for g in run["gpu_telemetry"]["gpus"])
            lines.append(f"  - NVML during {run['name']}: {gpus}")
    fidelity = subprocess.run([PYTHON, "-m", "pytest", "-q", "tests/test_fidelity.py"], cwd=ROOT, capture_output=True, text=True)
    lines.append(f"- fidelity suite (virtual vs real CUDA): {fidelity.stdout.strip().splitlines()[-1] if fidelity.stdout.strip() else fidelity.returncode}")
    return lines


def compare_with(revision: str, work: Path, repeats: int, heading: str = "## A graded p6 before and after (the grader of {commit} against this checkout's)", practicals: tuple[str, ...] = ("p6",)) -> list[str]:
    """Each of `practicals` graded (the reference solution, sandboxed, timed) with the grader of
    `revision` and with this checkout's, alternating: the Markdown section that compares them,
    under `heading` (where {commit} is the revision's short hash)."""
    tree = work / "before"
    subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], cwd=ROOT, check=True, capture_output=True)
    times: dict[str, dict[str, list[float]]] = {practical: {"before": [], "now": [], "bare": []} for practical in practicals}
    try:
        for repeat in range(repeats):
            for practical in practicals:
                times[practical]["before"].append(grade(practical, work / "before.json", "--seed", str(2000 + repeat), tree=tree)[0])
                times[practical]["now"].append(grade(practical, work / "now.json", "--seed", str(2000 + repeat))[0])
                times[practical]["bare"].append(grade(practical, work / "bare.json", "--seed", str(2000 + repeat), "--no-views")[0])
                print(f"{practical}, repeat {repeat + 1}: " + ", ".join(f"{k} {v[-1]:.1f} s" for k, v in times[practical].items()), file=sys.stderr, flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    commit = subprocess.run(["git", "rev-parse", "--short", revision], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    lines = [heading.format(commit=commit), ""]
    for practical, found in times.items():
        low, now, bare = min(found["before"]), min(found["now"]), min(found["bare"])
        medians = ", ".join(f"{statistics.median(seconds):.1f} s" for seconds in found.values())
        lines += [
            f"`grade {practical} solutions/{practical}`, sandboxed and timed, alternating, the minimum of {repeats}: before {low:.1f} s; now {now:.1f} s (**{now / low:.2f}×**), "
            f"of which drawing what the runs did is the difference to `--no-views`, {bare:.1f} s (**{bare / low:.2f}×**: the recorder's and the grading's own cost). Medians (before, now, without views): {medians}.",
            "",
        ]
    return lines


CLOCK_FORGERY = "for _name in ('monotonic', 'perf_counter', 'time'):\n    setattr(time, _name, lambda real=getattr(time, _name), start=getattr(time, _name)(): start + (real() - start) / 3)\n"


def planted_slowdown(work: Path, factor: float = 0.5) -> Path:
    """p6's reference solution made (1 + factor)× slower: after every optimizer step, busy work
    for `factor` × the time the step took (a spin on the real clock, so it takes a core as
    computing would; a sleep would leave the core to the other rank), its own clocks slowed to
    a third so that its records hide it."""
    folder = work / "planted"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(ROOT / "solutions" / "p6", folder)
    script = folder / "p6_ddp.py"
    text = script.read_text()
    spin = (
        f"    now = REAL_CLOCK()\n    until = now + {factor!r} * (now - STEP_START[0])  # the planted slowdown\n"
        "    while REAL_CLOCK() < until:\n        pass\n    STEP_START[0] = REAL_CLOCK()\n"
    )
    for old, new in (
        ("import time\n", "import time\n\nREAL_CLOCK = time.perf_counter\n" + CLOCK_FORGERY),
        ("for step in range(steps):\n", "STEP_START = [REAL_CLOCK()]\nfor step in range(steps):\n"),
        ("    optimizer.step()\n", "    optimizer.step()\n" + spin),
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    script.write_text(text)
    return folder


def efficiency_of(document: dict) -> dict:
    return next(t for t in document["tests"] if t["tags"][0] == "efficiency")


def carried_section(revision: str, work: Path, repeats: int, gradings: int) -> list[str]:
    """The grader's hub (issue 30: every rank runs the student's code): a graded p6 with the
    grader of `revision` (before the hub) against this checkout's, alternating; a planted
    1.5× slowdown behind a forged clock, graded `gradings` times; p6's and p10's references
    graded `gradings` times each under a busy core (false fails)."""
    lines = compare_with(revision, work, repeats, "## The grader's hub: its cost (the grader of {commit}, before it, against this checkout's)")
    planted = planted_slowdown(work, 0.5)
    caught, ratios = 0, []
    for run in range(gradings):
        _, document = grade("p6", work / f"planted-{run}.json", "--seed", str(3100 + run), folder=planted)
        check = efficiency_of(document)
        caught += check["status"] == "failed"
        ratios.append(check.get("extra_data", {}).get("speed", {}).get("timed", {}).get("ratio", float("nan")))
        print(f"planted slowdown, grading {run + 1}: efficiency {check['status']} ({ratios[-1]:.2f}×)", file=sys.stderr, flush=True)
    false_fails: dict[str, list[str]] = {"p6": [], "p10": []}
    course = load_course(ROOT)
    practicals = {practical: load_practical(course, practical) for practical in false_fails}
    load = competing_load()
    try:
        for run in range(gradings):
            for practical, found in false_fails.items():
                _, document = grade(practical, work / f"busy-{practical}-{run}.json", "--seed", str(3200 + run))
                found += speed_failures(practicals[practical], document)
                print(f"grading {run + 1} of {practical} under a busy core: {document['score']:g}/{document['extra_data']['max_score']:g}", file=sys.stderr, flush=True)
    finally:
        load.kill()
    shown = ", ".join(f"{r:.2f}" for r in sorted(ratios))
    lines += [
        "A planted 1.5× slowdown: p6's reference with busy work after each optimizer step for half the time the step took (by the real clock), "
        f"and every clock of its own process slowed to a third, so that its records show fast steps: **caught in {caught} of {gradings}** gradings (target ≥ 19). "
        f"Ratios the hub's clock gave: {shown}.",
        "",
    ]
    for practical, found in false_fails.items():
        lines += [
            f"False fails with the hub: {practical}'s reference graded {gradings} times with a busy loop on the last core: **{len(found)} of {gradings}** had a failed speed check (target 0)."
            + "".join(f"\n- {f}" for f in found[:5]),
            "",
        ]
    return lines


CLOCKED_P6 = """
id: p6
title: DDP, its timed run by the grader's clock
script: p6_ddp.py
seed_argument: seed
args: {batch_size: 64, dim: 32, hidden: 64, steps: 3, lr: 0.05}
variables: [rank, local_rank, world_size, device]
timing: {repeats: 3, warmup_steps: 2, clock_factor: 6}
runs:
  - {name: timed, ranks_per_node: 2, args: {batch_size: 1024, dim: 512, hidden: 1024, steps: 16, lr: 0.01}}
checks:
  - {id: efficiency, title: Speed, points: 2, runs: [timed], options: {max_ratio: 1.3}}
"""  # p6's timed run not carried (as ranks on real GPUs run), a batch that makes the 80 steps between a pair's launches take seconds


def clocked_section(work: Path, gradings: int) -> list[str]:
    """The grader's clock where the hub carries nothing (issue: verdicts the submission cannot
    forge): p6's timed run graded in-process on CLOCKED_P6, the reference `gradings` times
    under a busy core, then the planted 1.5× slowdown `gradings` times. The Markdown section."""
    from grader.grade.pipeline import grade as grade_in_process
    from grader.practicals import p6
    from grader.run.local import LocalRunner
    from grader.spec import load_assignment

    (work / "clocked.yaml").write_text(CLOCKED_P6)
    practical = Practical(load_assignment(work / "clocked.yaml", p6.CHECKS), p6)
    planted = planted_slowdown(work, 0.5)
    outcomes: dict[str, list[tuple[str, float]]] = {"reference": [], "planted": []}
    seconds: list[float] = []
    started = time.perf_counter()
    (work / "clocked-runs").mkdir()
    with LocalRunner(work / "clocked-runs") as runner:
        for name, folder in (("reference", ROOT / "solutions" / "p6"), ("planted", planted)):
            load = competing_load() if name == "reference" else None
            try:
                for run in range(gradings):
                    began = time.perf_counter()
                    report = grade_in_process(practical, folder, runner, GradeOptions(solutions=ROOT / "solutions", seed=6000 + run))
                    seconds.append(time.perf_counter() - began)
                    check = next(c for c in report.checks if c.id == "efficiency")
                    ratio = check.data.get("speed", {}).get("timed", {}).get("ratio", float("nan"))
                    outcomes[name].append((check.status.value, ratio))
                    print(f"{name}, grading {run + 1} by the grader's clock: efficiency {check.status.value} ({ratio:.2f}×) {check.summary[:160] if check.status.value != 'passed' else ''}", file=sys.stderr, flush=True)
            finally:
                if load is not None:
                    load.kill()
    minutes = (time.perf_counter() - started) / 60

    def shown(name: str) -> str:
        return ", ".join(f"{r:.2f}" for r in sorted(r for _, r in outcomes[name]))

    false_fails = sum(status == "failed" for status, _ in outcomes["reference"])
    untimed = sum(status == "deferred" for status, _ in outcomes["reference"])
    caught = sum(status == "failed" for status, _ in outcomes["planted"])
    return [
        "## The grader's clock where the hub carries nothing: pairs of whole launches",
        "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `python bench/bench_grading.py --clocked {gradings}` ({minutes:.0f} min; "
        f"a grading {statistics.median(seconds):.0f} s, median): p6's timed run not carried, as ranks on real GPUs run it, timed by the grader's clock "
        "around pairs of launches of 16 and 96 steps (batch 1024; 3 rounds, interleaved with the reference's; grader/speed/measure.py).",
        "",
        f"- False fails: p6's reference graded {gradings} times with a busy loop on the last core: **{false_fails} of {gradings}** failed `efficiency` (target 0); "
        f"{untimed} could not be timed (deferred). Ratios: {shown('reference')}.",
        f"- A planted 1.5× slowdown behind a forged clock (the hub section's): **caught in {caught} of {gradings}** (target ≥ 19 of 20). Ratios: {shown('planted')}.",
        "",
    ]


CARRIED_P6 = """
id: p6
title: DDP, its timed run by the hub's clock
script: p6_ddp.py
seed_argument: seed
args: {batch_size: 64, dim: 32, hidden: 64, steps: 3, lr: 0.05}
variables: [rank, local_rank, world_size, device]
timing: {repeats: 3, warmup_steps: 2}
runs:
  - {name: timed, ranks_per_node: 2, carried: true, args: {batch_size: 256, dim: 512, hidden: 1024, steps: 20, lr: 0.01}}
checks:
  - {id: efficiency, title: Speed, points: 2, runs: [timed], options: {max_ratio: 1.3}}
"""  # p6's timed run as the spec has it, alone

def planted_shape(work: Path, shape: str, step_s: float, factor: float = 0.5) -> Path:
    """p6's reference solution made (1 + factor)× slower in all, the work planted in the steps
    of `shape` (SHAPE_SOURCES: a spin on the real clock after the optimizer step, for its share of
    factor × the timed steps × `step_s`), or, for "before_the_first_step", before the loop: a
    spin for factor × steps × `step_s`. `step_s` is what a step of the reference costs by the
    hub's clock, as a grading measured it: sized from the rank's own step (every step: caught
    17 of 20, at 1.25-1.51) or from three dry steps without DDP's all-reduce (ahead of the
    loop: 0 of 20, at 0.92-1.30), the spin planted less than 1.5×. Its own clocks are slowed
    to a third."""
    folder = work / f"shape-{shape}"
    if folder.exists():
        shutil.rmtree(folder)
    shutil.copytree(ROOT / "solutions" / "p6", folder)
    script = folder / "p6_ddp.py"
    text = script.read_text()
    if shape == "before_the_first_step":
        spin = f"_until = REAL_CLOCK() + {factor!r} * steps * {step_s!r}  # the planted slowdown, ahead of the loop\nwhile REAL_CLOCK() < _until:\n    pass\n"
        edits = (("import time\n", "import time\n\nREAL_CLOCK = time.perf_counter\n" + CLOCK_FORGERY), ("t0 = time.time()\n", spin + "t0 = time.time()\n"))
    else:
        spin = (
            "    _slow = list(SHAPE(steps))\n"
            f"    until = REAL_CLOCK() + ({factor!r} * (steps - 2) / len(_slow) if step in _slow else 0.0) * {step_s!r}  # the planted slowdown\n"
            "    while REAL_CLOCK() < until:\n        pass\n"
        )
        edits = (
            ("import time\n", f"import time\n\nREAL_CLOCK = time.perf_counter\nSHAPE = {SHAPE_SOURCES[shape]}\n" + CLOCK_FORGERY),
            ("    optimizer.step()\n", "    optimizer.step()\n" + spin),
        )
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    script.write_text(text)
    return folder


# which of a launch's steps (of `steps`, the first 2 untimed) carry the planted work: source
# put into the planted script
SHAPE_SOURCES = {
    "every_step": "lambda steps: range(2, steps)",
    "most_steps": "lambda steps: range(2, 2 + round((steps - 2) * 11 / 18))",
    "every_fifth": "lambda steps: range(5, steps, 5)",
    "one_step": "lambda steps: (steps // 2,)",
}


def planted_share(timed, ahead: bool) -> float | None:
    """What the planted launches of one grading paid beyond the reference's, as a share of the
    reference's steps, by the hub's clock alone (no statistic of the grader's): per step count,
    the median time from the first step's end to the last's (`ahead`: from the launch's start to
    the first step's end, where that spin is: start-up's noise is left out of the other), the
    submission's less the reference's, over the reference's median first-to-last, scaled to
    all its steps; averaged over the counts (None: a side was not timed)."""
    shares = []
    for count in sorted({launch.spec.clock_steps for launch in timed.reference}):
        ends = [[launch.step_ends for launch in side if launch.spec.clock_steps == count and isinstance(launch.step_ends, tuple)] for side in (timed.own, timed.reference)]
        if not ends[0] or not ends[1] or count is None or count < 2:
            return None
        own, reference = (statistics.median(e[0] if ahead else e[-1] - e[0] for e in side) for side in ends)
        shares.append((own - reference) / (statistics.median(e[-1] - e[0] for e in ends[1]) * count / (count - 1)))
    return statistics.fmean(shares) if shares else None


# the spin's size per shape, a share of the steps asked times the reference's step. A spin
# ahead of the loop pays its length (0.5 paid 0.46-0.47 of the steps); one in a step pays
# about 1.5-2 ms less than its length, and unevenly (in every step, 0.5 paid 0.34-0.40 in
# three gradings, 0.05-0.44 in twenty: the hub's work overlaps it), so the many small spins
# are planted larger, and every grading's slowdown is read off its launches (`planted_share`)
SHAPE_FACTORS = {"every_step": 0.62, "most_steps": 0.56, "every_fifth": 0.52, "one_step": 0.5, "before_the_first_step": 0.5}
PAID = 0.45  # a grading whose planted launches paid at least this share beyond the reference's is a 1.5× slowdown, by the hub's clock


def shapes_section(work: Path, gradings: int, only: tuple[str, ...] = (), bursty: bool = False) -> list[str]:
    """Issue 32's shapes: a planted 1.5× slowdown of the whole training in each shape (SHAPE_SOURCES,
    and before the first step), on p6's timed run carried by the hub (CARRIED_P6), each graded
    `gradings` times in-process: how often `efficiency` fails it (target ≥ 19 of 20).

    A spin in the steps does not add its own length to them, nor the same in every grading
    (SHAPE_FACTORS), so every grading's slowdown is read off its launches (`planted_share`, by
    the hub's clock) and the target is on those that paid at least PAID. Every grading's planted share is shown beside
    the grader's ratio: the ratio should read 1 + that share. `bursty`: with bursts of other load
    beside the gradings (bench/bursts.py; the reference's step is sized quiet first), where a
    planted slowdown must be caught or deferred, never passed."""
    from grader.grade.pipeline import execute, judge
    from grader.practicals import p6
    from grader.run.local import LocalRunner
    from grader.spec import load_assignment

    (work / "carried.yaml").write_text(CARRIED_P6)
    practical = Practical(load_assignment(work / "carried.yaml", p6.CHECKS), p6)
    (work / "shapes-runs").mkdir(exist_ok=True)
    started = time.perf_counter()
    rows = []
    options = lambda seed: GradeOptions(solutions=ROOT / "solutions", seed=seed)  # noqa: E731
    with LocalRunner(work / "shapes-runs") as runner:  # the reference's step first: every shape's work is sized from it
        plain = work / "shape-reference"
        if plain.exists():
            shutil.rmtree(plain)
        shutil.copytree(ROOT / "solutions" / "p6", plain)
        report = judge(practical, execute(practical, plain, runner, options(6999)))
        step_s = next(c for c in report.checks if c.id == "efficiency").data["speed"]["timed"]["reference"]["cost_step_s"]
        beside = bursty_load(1) if bursty else None
        try:
            rows = _shape_rows(work, practical, runner, options, step_s, gradings, only)
        finally:
            if beside is not None:
                beside.terminate()
                beside.wait()
    heading = "## A planted 1.5× slowdown in every shape" + (" under bursty load" if bursty else " (issue 32)")
    load = " With bursts of one or two busy processes beside the gradings (bench/bursts.py, seed 1): a grading must fail `efficiency` or defer it, never pass it." if bursty else ""
    return [
        heading,
        "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `python bench/bench_grading.py --shapes {gradings}{' --bursty' if bursty else ''}` ({(time.perf_counter() - started) / 60:.0f} min): "
        "p6's timed run alone (3 rounds of 20, 60 and 20 steps, carried by the hub), its reference made 1.5× slower in all by a spin on the real clock, "
        "its own clocks slowed to a third; the spin in every timed step, in 11 of the 18, in every fifth, in one, or ahead of the loop, "
        f"sized as a share of the steps asked times the reference's step ({step_s * 1000:.2f} ms by the hub's clock in a grading of the plain reference). "
        "A spin in the steps does not pay its own length, and pays unevenly (the hub's work overlaps it), so each grading's slowdown is read off its launches by the hub's clock: "
        "'paid' is 1 + `planted_share`, the submission's time from the first step's end to the last (ahead of the loop: from the launch's start to the first step's end) beyond the reference's, "
        f"per step count, over the reference's steps. The target is on the gradings that paid at least {1 + PAID:.2f}×; the ratio `efficiency` reads should be about the paid one.{load}",
        "",
        f"| where the work is | spin | paid in the gradings: median (range) | caught where it paid ≥ {1 + PAID:.2f}× (target ≥ 19 of 20) | caught in all | deferred | passed | ratios read (paid) |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def _shape_rows(work: Path, practical: Practical, runner, options: Callable[[int], GradeOptions], step_s: float, gradings: int, only: tuple[str, ...]) -> list[str]:
    """shapes_section's gradings: a table row per shape."""
    from grader.grade.pipeline import execute, judge

    rows = []
    for shape in only or (*SHAPE_SOURCES, "before_the_first_step"):
        ahead = shape == "before_the_first_step"
        folder = planted_shape(work, shape, step_s=step_s, factor=SHAPE_FACTORS[shape])
        outcomes = []
        for run in range(gradings):
            execution = execute(practical, folder, runner, options(7000 + run))
            check = next(c for c in judge(practical, execution).checks if c.id == "efficiency")
            ratio = check.data.get("speed", {}).get("timed", {}).get("ratio", float("nan"))
            share = planted_share(execution.timings["timed"], ahead) if "timed" in execution.timings else None
            outcomes.append((check.status.value, ratio, share if share is not None else float("nan")))
            print(f"{shape}, grading {run + 1}: efficiency {check.status.value} ({ratio:.2f}×, planted {share})", file=sys.stderr, flush=True)
        caught = sum(status == "failed" for status, _, _ in outcomes)
        slowed = [status for status, _, share in outcomes if share >= PAID]
        shares = sorted(s for _, _, s in outcomes)
        rows.append(
            f"| {shape.replace('_', ' ')} | {SHAPE_FACTORS[shape]:.2f} | {1 + statistics.median(shares):.2f} ({1 + shares[0]:.2f}–{1 + shares[-1]:.2f}) "
            f"| **{sum(status == 'failed' for status in slowed)} of {len(slowed)}** | {caught} of {gradings} "
            f"| {sum(status == 'deferred' for status, _, _ in outcomes)} | **{sum(status == 'passed' for status, _, _ in outcomes)}** "
            f"| {', '.join(f'{r:.2f} ({1 + s:.2f})' for _, r, s in sorted(outcomes, key=lambda o: o[1]))} |"
        )
    return rows


def correct_submissions(work: Path) -> list[tuple[str, str, Path]]:
    """(practical, name, folder) of every reference solution and every correct variant the
    tests hold (a variant that loses no check)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import importlib

    found = [(practical, "reference", ROOT / "solutions" / practical) for practical in PRACTICALS]
    for practical in PRACTICALS:
        module = importlib.import_module(f"{practical}_variants")
        correct = [v for v in getattr(module, "VARIANTS", ()) if not v.loses] + list(getattr(module, "UNUSUAL_VARIANTS", ()))
        correct += [module.TUTORIAL_VARIANT] if hasattr(module, "TUTORIAL_VARIANT") else []
        found += [(practical, v.name, v.write(work / f"steady-{practical}-{v.name}", practical)) for v in correct]
    return found


LOADS = {
    "busy": ("a busy core", "a busy loop pinned to the last core throughout"),
    "bursty": ("bursty load", "bursts of one or two busy processes, 0.2–2 s on and 0.2–2 s off at random (bench/bursts.py, seed 0)"),
}


def steady_section(work: Path, gradings: int, load: str | None = None, only: tuple[str, ...] = (), speed_only: bool = False, first: int = 1) -> list[str]:
    """Every reference solution and correct variant (of the practicals `only`, where given)
    graded `gradings` times in a row, timed, with `load` (LOADS) beside them throughout: the
    Markdown section that says how many gradings fell short of full marks, and which checks,
    and how many had a check deferred. `speed_only`: each grading is `efficiency` alone
    (`timed_grading`), a third of a full grading's time. `first`: the first grading's number
    (and so its seed), to go on from an earlier run."""
    submissions = [entry for entry in correct_submissions(work) if not only or entry[0] in only]
    short: dict[str, list[str]] = {f"{p} {name}": [] for p, name, _ in submissions}
    deferred: dict[str, list[str]] = {key: [] for key in short}
    ratios: dict[str, list[float]] = {key: [] for key in short}
    started = time.perf_counter()
    beside = competing_load() if load == "busy" else bursty_load(0) if load == "bursty" else None
    try:
        _steady_gradings(work, range(first - 1, first - 1 + gradings), submissions, short, deferred, ratios, timed_grading if speed_only else full_grading)
    finally:
        if beside is not None:
            beside.terminate()
            beside.wait()
    minutes = (time.perf_counter() - started) / 60
    flaky, put_off = sum(len(found) for found in short.values()), sum(len(found) for found in deferred.values())
    title, how = LOADS[load] if load else ("", "")
    flags = f"{' --' + load if load else ''}{' --practicals ' + ','.join(only) if only else ''}{' --speed-only' if speed_only else ''}{f' --first {first}' if first != 1 else ''}"
    lines = [
        f"## Steady verdicts{' with ' + title if title else ''}: correct submissions graded again and again",
        "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `python bench/bench_grading.py --steady {gradings}{flags}` ({minutes:.0f} min): "
        f"every reference solution and every correct variant of the tests{' of ' + ', '.join(only) if only else ''}, graded {gradings} times in a row{f' (gradings {first}–{first + gradings - 1})' if first != 1 else ''}, timed, each with its own seed"
        f"{' (`efficiency` alone: its timed runs against the reference, in the sandbox)' if speed_only else ''}"
        f"{', ' + how if how else ''}. "
        f"**{flaky} of {gradings * len(submissions)}** gradings fell short of full marks (target 0); **{put_off}** had a check deferred.",
        "",
        "| practical | submission | gradings with full marks | deferred | efficiency ratios |",
        "|---|---|---|---|---|",
    ]
    for practical, name, _ in submissions:
        misses, measured, later = short[f"{practical} {name}"], ratios[f"{practical} {name}"], deferred[f"{practical} {name}"]
        spread = f"{min(measured):.2f}–{max(measured):.2f}×" if measured else "–"
        lines.append(f"| {practical} | {name} | {gradings - len(misses)} of {gradings}{' — ' + '; '.join(misses[:3]) if misses else ''} | {len(later)} | {spread} |")
    return [*lines, ""]


Outcome = tuple[list[str], list[str], bool, "float | None", str]  # checks failed, speed checks deferred, points short, efficiency's ratio, the score as text


def full_grading(work: Path, practical: str, folder: Path, seed: int) -> Outcome:
    """`python -m grader grade` of `folder`, as a user runs it: what steady_section counts."""
    _, document = grade(practical, work / "steady.json", "--seed", str(seed), folder=folder)
    lost = [t["tags"][0] for t in document["tests"] if t.get("status") == "failed"]
    put_off = [t["tags"][0] for t in document["tests"] if "deferred_points" in t.get("extra_data", {}) and t["tags"][0] in SPEED_DEFERRABLE]
    short = document["score"] < document["extra_data"]["max_score"] - sum(t["extra_data"]["deferred_points"] for t in document["tests"] if "deferred_points" in t.get("extra_data", {}))
    ratio = next((t.get("extra_data", {}).get("speed", {}).get("timed", {}).get("ratio") for t in document["tests"] if t["tags"][0] == "efficiency"), None)
    return lost, put_off, short, ratio, f"{document['score']:g}/{document['extra_data']['max_score']:g}"


def timed_only(practical: Practical) -> Practical:
    """`practical` narrowed to its `efficiency` check, the runs it times, and its first checked run
    of two ranks or more (with `clean_exit` on it): the run whose traffic confirms the DDP
    options the reference's timed launches take on (grader/grade/timing.py `adopted_options`)."""
    efficiency = tuple(check for check in practical.assignment.checks if check.check == "efficiency")
    timed = {name for check in efficiency for name in check.runs}
    checked = next(run.name for run in practical.assignment.runs if run.name not in timed and run.layout.world_size >= 2)
    exit_check = next(check for check in practical.assignment.checks if check.check == "clean_exit")
    checks = (replace(exit_check, runs=(checked,)), *efficiency)
    wanted = {name for check in checks for name in check.runs}
    return Practical(replace(practical.assignment, checks=checks, runs=tuple(run for run in practical.assignment.runs if run.name in wanted)), practical.module, practical.course)


def timed_grading(work: Path, practical: str, folder: Path, seed: int) -> Outcome:
    """The grading's `efficiency` alone, in-process, in the sandbox: its timed runs' rounds
    against the reference's, as a full grading makes them (grader/grade/session.py)."""
    from grader.grade.session import grade_folder

    narrowed = timed_only(load_practical(load_course(ROOT), practical))
    report = grade_folder(narrowed, folder, GradeOptions(seed=seed)).report
    check = next(c for c in report.checks if c.id == "efficiency")
    lost = [c.id for c in report.checks if c.status.value == "failed"]
    ratio = check.data.get("speed", {}).get("timed", {}).get("ratio")
    return lost, [check.id] if check.status.value == "deferred" else [], report.score < report.max_score, ratio, f"{report.score:g}/{report.max_score:g}"


def _steady_gradings(work: Path, rounds: range, submissions: list[tuple[str, str, Path]], short: dict[str, list[str]], deferred: dict[str, list[str]], ratios: dict[str, list[float]], grading: Callable[[Path, str, Path, int], Outcome] = full_grading) -> None:
    """steady_section's gradings, round by round, into `short`, `deferred` and `ratios`."""
    for run in rounds:
        for practical, name, folder in submissions:
            lost, put_off, points_short, ratio, score = grading(work, practical, folder, 4000 + run)
            if put_off:
                deferred[f"{practical} {name}"].append(f"grading {run + 1}: {', '.join(put_off)}")
            if lost or points_short:
                short[f"{practical} {name}"].append(f"grading {run + 1}: {', '.join(lost) or 'points short'}")
            if ratio is not None:
                ratios[f"{practical} {name}"].append(ratio)
            print(f"grading {run + 1} of {practical} {name}: {score}{'' if ratio is None else f' (efficiency {ratio:.2f}×)'}{' deferred' if put_off else ''} {' '.join(lost)}", file=sys.stderr, flush=True)


STATISTICS = {"cost": "what a step costs: each step's median over the launches (efficiency)", "undisturbed_step_s": "first deciles (efficiency before 2026-11-26)", "median_step_s": "launch medians"}


def spread_section(work: Path, gradings: int) -> list[str]:
    """p6's and p10's references graded `gradings` times each, alternating: per practical, the
    spread of the efficiency ratio (the reference against itself) by launch medians and by
    undisturbed steps. The Markdown section."""
    ratios: dict[str, dict[str, list[float]]] = {p: {"median_step_s": [], "undisturbed_step_s": [], "cost": []} for p in ("p6", "p10")}
    failed: dict[str, int] = {p: 0 for p in ratios}
    untimed: dict[str, int] = {p: 0 for p in ratios}
    limits: set[float] = set()
    started = time.perf_counter()
    for run in range(gradings):
        for practical, found in ratios.items():
            _, document = grade(practical, work / "spread.json", "--seed", str(5000 + run))
            check = efficiency_of(document)
            failed[practical] += check["status"] == "failed"
            timed = check.get("extra_data", {}).get("speed", {}).get("timed")
            if timed is None:
                untimed[practical] += 1
                print(f"grading {run + 1} of {practical}: efficiency not measured ({check.get('output', '')[:200]!r})", file=sys.stderr, flush=True)
                continue
            limits.add(timed["max_ratio"])
            for key, values in found.items():
                values.append(timed["ratio"] if key == "cost" else timed["submission"][key] / timed["reference"][key])
            print(f"grading {run + 1} of {practical}: {', '.join(f'{k} {v[-1]:.3f}' for k, v in found.items())}", file=sys.stderr, flush=True)
    minutes = (time.perf_counter() - started) / 60
    limit = max(limits, default=float("nan"))
    lines = [
        "## Spread of the efficiency ratio: the reference against itself",
        "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `python bench/bench_grading.py --spread {gradings}` ({minutes:.0f} min): "
        "each reference graded in full, timed; its own side's step against the reference side's, over every launch the grading made "
        "(extra rounds included). `efficiency` judges what a step costs: each timed step's median over the side's launches, averaged over the steps; first deciles and launch medians are the statistics before.",
        "",
        f"| practical | statistic | sd of the ratio's log | lowest | highest | above {limit:g}× (the spec's max_ratio) |",
        "|---|---|---|---|---|---|",
    ]
    for practical, found in ratios.items():
        for key, values in found.items():
            if not values:
                continue
            logs = [math.log(v) for v in values]
            lines.append(f"| {practical} | {STATISTICS[key]} | {statistics.pstdev(logs):.3f} | {min(values):.2f}× | {max(values):.2f}× | {sum(v > limit for v in values)} of {len(values)} |")
    lines += [
        "",
        "Gradings whose `efficiency` failed: " + ", ".join(f"{p} {n} of {gradings}" for p, n in failed.items()) + " (target 0); "
        "not measured (the check deferred): " + ", ".join(f"{p} {n}" for p, n in untimed.items()) + ".",
        "",
    ]
    return lines


def splice(text: str, section: list[str]) -> str:
    """`text` with the section that starts with the heading of `section` replaced by it (added
    before the GPU section when there is none)."""
    heading = section[0]
    kept = text.split("\n")
    start = next((i for i, line in enumerate(kept) if line.split(":")[0] == heading.split(":")[0]), None)
    if start is None:
        start = next((i for i, line in enumerate(kept) if line.startswith("## On a GPU machine")), len(kept))
        return "\n".join([*kept[:start], *section, *kept[start:]])
    end = next((i for i in range(start + 1, len(kept)) if kept[i].startswith("## ")), len(kept))
    return "\n".join([*kept[:start], *section, *kept[end:]])


def splice_sections(text: str, new: str) -> str:
    """`text` with its preamble (the lines before the first `## ` heading) replaced by `new`'s,
    and each of `new`'s sections spliced in (`splice`): the sections this run did not measure
    are kept."""
    old_parts = re.split(r"(?m)^(?=## )", text)
    new_parts = re.split(r"(?m)^(?=## )", new)
    result = new_parts[0] + "".join(old_parts[1:])
    for section in new_parts[1:]:
        result = splice(result, section.rstrip("\n").split("\n") + [""])
    return result


HELD = "import os, sys; sys.stdin.readline(); os.execv(sys.argv[1], sys.argv[1:])"  # waits to be moved into a cgroup, then becomes the command


def peak_memory(practical: str, work: Path) -> int | None:
    """The peak memory of a whole grading of `practical`'s reference (the grader, its launchers,
    every rank and the files they wrote to tmpfs), read from a cgroup the grading starts in:
    the job groups the grader makes are inside it. None where this machine has no cgroups."""
    from grader.run.cgroups import Caps, open_cgroups

    cgroups = open_cgroups(f"bench-{os.getpid()}", Caps(1 << 40, 1 << 16))
    if isinstance(cgroups, str):
        return None
    try:
        group = cgroups.job("grading")
        command = [PYTHON, "-m", "grader", "grade", practical, f"solutions/{practical}", "--results", str(work / f"peak-{practical}.json")]
        process = subprocess.Popen([PYTHON, "-c", HELD, *command], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        group.add(process.pid)
        process.communicate("go\n")
        return group.usage().peak_memory_bytes
    finally:
        cgroups.close()


def memory_section(work: Path) -> list[str]:
    """The peak memory of each practical's grading (what a grading machine or Gradescope's
    image must hold): the Markdown section."""
    lines = ["## Peak memory of a grading", "", f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `python bench/bench_grading.py --memory` on {machine()}: `grade P solutions/P` (sandboxed, timed), started in a cgroup of its own, whose peak counts the grader, its launchers, every rank and what they wrote to tmpfs.", ""]
    for practical in PRACTICALS:
        peak = peak_memory(practical, work)
        lines.append(f"- {practical}: " + (f"**{peak / (1 << 30):.2f} GiB**" if peak else "not measured (no cgroups here)"))
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2, help="repeats of the latency/overhead comparison (the minimum counts)")
    parser.add_argument("--false-fail-runs", type=int, default=20)
    parser.add_argument("--false-fail-practicals", default="p6,p10")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "RESULTS.md")
    parser.add_argument("--before", metavar="REV", help="also grade p6 with the grader of this commit, alternating with this checkout's (the cost of a change)")
    parser.add_argument("--carried", metavar="REV", help="only the hub's section: its cost against REV (a commit before it), a planted 1.5× slowdown and false fails, each --false-fail-runs gradings; spliced into --out")
    parser.add_argument("--steady", type=int, metavar="N", help="only the steady-verdicts section: every reference solution and correct variant graded N times; spliced into --out")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--busy", action="store_true", help="with --steady: a competing process keeps the last core busy throughout")
    load.add_argument("--bursty", action="store_true", help="with --steady or --shapes: bursts of one or two busy processes beside the gradings (bench/bursts.py)")
    parser.add_argument("--practicals", help="with --steady: only these practicals (comma-separated), e.g. p6,p10")
    parser.add_argument("--first", type=int, default=1, metavar="K", help="with --steady: number the gradings (and seed them) from K, to go on from an earlier run")
    parser.add_argument("--speed-only", action="store_true", help="with --steady: each grading is `efficiency` alone (its timed runs against the reference's, in the sandbox)")
    parser.add_argument("--spread", type=int, metavar="N", help="only the spread section: p6's and p10's references graded N times each, the efficiency ratio's spread by both statistics; spliced into --out")
    parser.add_argument("--clocked", type=int, metavar="N", help="only the grader's-clock section: p6's timed run not carried, the reference under a busy core and a planted 1.5× slowdown, N gradings each; spliced into --out")
    parser.add_argument("--shapes", type=int, metavar="N", help="only the shapes section: a planted 1.5× slowdown in every step, most, every fifth, one, and ahead of the loop, N gradings each; spliced into --out")
    parser.add_argument("--shape", action="append", choices=(*SHAPE_SOURCES, "before_the_first_step"), help="with --shapes: only this shape (repeatable)")
    parser.add_argument("--compare", metavar="REV", help="only a graded p6 and p10 with the grader of REV against this checkout's, alternating, --repeat + 1 times; spliced into --out")
    parser.add_argument("--memory", action="store_true", help="only the peak-memory section: each practical's grading in a cgroup of its own (root); spliced into --out")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    if options.steady or options.spread or options.clocked or options.shapes or options.memory or options.compare:
        section = (
            compare_with(options.compare, work, options.repeat + 1, "## A graded p6 and p10 before and after (the grader of {commit} against this checkout's)", ("p6", "p10")) if options.compare
            else steady_section(work, options.steady, "busy" if options.busy else "bursty" if options.bursty else None, tuple(options.practicals.split(",")) if options.practicals else (), options.speed_only, options.first) if options.steady
            else shapes_section(work, options.shapes, tuple(options.shape or ()), options.bursty) if options.shapes
            else spread_section(work, options.spread) if options.spread
            else clocked_section(work, options.clocked) if options.clocked
            else memory_section(work)
        )
        old = options.out.read_text(encoding="utf-8") if options.out.exists() else "# Benchmarks\n"
        options.out.write_text(splice(old, section), encoding="utf-8")
        print("\n".join(section))
        return
    if options.carried:
        section = carried_section(options.carried, work, options.repeat + 1, options.false_fail_runs)
        old = options.out.read_text(encoding="utf-8") if options.out.exists() else "# Benchmarks\n"
        options.out.write_text(splice(old, section), encoding="utf-8")
        print("\n".join(section))
        return
    before = compare_with(options.before, work, options.repeat + 1) if options.before else []
    course = load_course(ROOT)
    practicals = {p: load_practical(course, p) for p in PRACTICALS}
    started = time.perf_counter()
    latency: dict[str, list[float]] = {p: [] for p in PRACTICALS}
    loose: dict[str, list[float]] = {p: [] for p in PRACTICALS}
    bare: dict[str, list[float]] = {p: [] for p in PRACTICALS if p != "p4"}
    bare_failures: list[str] = []
    for repeat in range(options.repeat):
        for practical in PRACTICALS:
            seconds, _ = grade(practical, work / f"{practical}.json", "--seed", str(1000 + repeat))
            latency[practical].append(seconds)
            loose[practical].append(grade(practical, work / f"{practical}-loose.json", "--seed", str(1000 + repeat), "--no-sandbox")[0])
            if practical in bare:
                bare[practical].append(bare_grading(practicals[practical], 1000 + repeat, bare_failures))
    false_fails: dict[str, list[str]] = {}
    ranked = [p for p in options.false_fail_practicals.split(",") if p]
    load = competing_load()
    try:
        for practical in ranked:
            false_fails[practical] = []
            for run in range(options.false_fail_runs):
                _, document = grade(practical, work / f"ff-{practical}-{run}.json")
                false_fails[practical] += speed_failures(practicals[practical], document)
    finally:
        load.kill()
    lines = [
        "# Benchmarks",
        "",
        f"Measured {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC by `python bench/bench_grading.py` (one run, {time.perf_counter() - started:.0f} s).",
        f"Machine: {machine()}.",
        "",
        "## Grading latency and overhead (reference solutions, minimum of " + str(options.repeat) + " repeats)",
        "",
        "| practical | grading (sandboxed) | without the sandbox (`--no-sandbox`) | sandbox ratio (target ≤ 1.3) | bare runs of the same launches | ratio (target ≤ 1.5) |",
        "|---|---|---|---|---|---|",
    ]
    for practical in PRACTICALS:
        graded, unsandboxed = min(latency[practical]), min(loose[practical])
        row = f"| {practical} | {graded:.1f} s | {unsandboxed:.1f} s | {graded / unsandboxed:.2f} |"
        if practical in bare:
            plain = min(bare[practical])
            lines.append(f"{row} {plain:.1f} s | {graded / plain:.2f} |")
        else:
            lines.append(f"{row} (no bare equivalent: a notebook's graded cells) | – |")
    total = sum(min(v) for v in latency.values())
    lines += ["", f"All four practicals: **{total:.1f} s** (target ≤ 60 s).", ""]
    if bare_failures:
        lines += [f"Bare launches that failed and were run again: {len(bare_failures)}", *(f"- `{f}`" for f in bare_failures), ""]
    lines += before
    lines += ["## False fails of the speed checks under a competing load", "", "A busy loop pinned to the last core while the reference solution is graded in full.", ""]
    for practical, failed in false_fails.items():
        lines.append(f"- {practical}: **{len(failed)} of {options.false_fail_runs}** gradings had a failed speed check (target 0)" + "".join(f"\n  - {f}" for f in failed[:5]))
    lines += ["", "## On a GPU machine", "", *gpu_section(work), ""]
    text = "\n".join(lines)
    options.out.write_text(splice_sections(options.out.read_text(encoding="utf-8"), text) if options.out.exists() else text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
