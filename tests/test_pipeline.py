"""The grading pipeline above the runner, with the fake runner: planning, seeds, budgets,
missing scripts, grader failures."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import ModuleType

from grader.checks.base import CheckDef, Verdict
from grader.checks.distributed import CHECKS
from grader.course import Practical
from grader.grade.pipeline import GradeOptions, grade
from grader.grade.plan import KEEP_BYTES, KEEP_TIMED_BYTES, carried, carrier_plan, on_this_machine, plan_runs
from grader.results.model import Status
from grader.run.fake import FakeRunner
from grader.run.job import JobResult, JobSpec, Layout
from grader.spec.model import RunDef
from grader.spec import load_assignment
from helpers import ROOT
from observations import FakeWorkload, contiguous, ddp_rank, ddp_traffic
from grader.practicals.reference import DataParallelReference

SPEC = """
id: p6
title: DDP
script: p6_ddp.py
seed_argument: seed
args: {batch_size: 64, steps: 3}
variables: [rank, local_rank, world_size]
runs:
  - {name: ws2, ranks_per_node: 2, carried: true}
  - {name: 2x2, nodes: 2, ranks_per_node: 2, carried: true}
checks:
  - {id: rank_setup, title: Ranks, points: 2}
  - {id: grad_sync, title: Sync, points: 5, runs: [2x2], visibility: hidden}
  - {id: broken, title: Broken, points: 1}
"""


def explode(ctx) -> Verdict:
    raise ZeroDivisionError("bug in a check")


def practical(tmp_path: Path, references=None) -> Practical:
    path = tmp_path / "assignment.yaml"
    path.write_text(SPEC)
    checks = {**CHECKS, "broken": CheckDef("broken", explode, "always fails")}
    module = ModuleType("fake_practical")
    module.CHECKS = checks
    module.references = references or (lambda args, runs: {run.name: DataParallelReference(FakeWorkload(run.layout.world_size)) for run in runs})
    return Practical(assignment=load_assignment(path, checks), module=module)


def healthy(job: JobSpec) -> JobResult:
    world = job.layout.world_size
    return JobResult(spec=job, ranks=[ddp_rank(r, job.layout) for r in range(world)], traffic=ddp_traffic(FakeWorkload(world), contiguous(world)) if job.carrier is not None else None)


def submission(tmp_path: Path) -> Path:
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "p6_ddp.py").write_text("print('hi')\n")
    return folder


def test_a_grading_runs_the_planned_jobs_with_a_fresh_seed(tmp_path: Path) -> None:
    runner = FakeRunner(healthy)
    result = grade(practical(tmp_path), submission(tmp_path), runner)
    assert runner.started and runner.closed
    assert [job.name for job in runner.jobs] == ["ws2", "2x2"]
    seed_args = [a for a in runner.jobs[0].argv if a.startswith("--seed=")]
    assert len(seed_args) == 1 and int(seed_args[0].split("=")[1]) > 0
    assert runner.jobs[0].argv[:2] == ("--batch_size=64", "--steps=3")
    statuses = {c.id: c.status for c in result.checks}
    assert statuses == {"rank_setup": Status.PASSED, "grad_sync": Status.PASSED, "broken": Status.ERROR}
    assert result.score == 7 and result.error == "check broken failed: ZeroDivisionError: bug in a check"


def test_each_launch_is_announced_as_it_starts_and_as_it_ends(tmp_path: Path) -> None:
    lines: list[str] = []
    grade(practical(tmp_path), submission(tmp_path), FakeRunner(healthy), GradeOptions(progress=lines.append))
    assert lines == ["run ws2 (1 node × 2 ranks)", "ws2: ok in 0.0 s", "run 2x2 (2 nodes × 2 ranks)", "2x2: ok in 0.0 s"]


def test_public_only_and_world_size_override_change_the_plan(tmp_path: Path) -> None:
    spec = practical(tmp_path)
    public = tuple(c for c in spec.assignment.checks if c.public)
    assert [r.name for r in plan_runs(spec.assignment, public, GradeOptions())] == ["ws2", "2x2"]
    only_hidden = tuple(c for c in spec.assignment.checks if c.id == "grad_sync")
    assert [r.name for r in plan_runs(spec.assignment, only_hidden, GradeOptions())] == ["2x2"]
    override = plan_runs(spec.assignment, public, GradeOptions(world_size=3))
    assert [(r.name, r.layout.world_size) for r in override] == [("ws3", 3)]
    runner = FakeRunner(healthy)
    result = grade(spec, submission(tmp_path), runner, GradeOptions(public_only=True, seed=11))
    assert [c.id for c in result.checks] == ["rank_setup", "broken"]
    assert "--seed=11" in runner.jobs[0].argv


def test_on_gpu_nodes_carried_cpu_runs_see_no_gpu_and_runs_with_too_few_gpus_go_on_virtual_gpus() -> None:
    """The grader's hub carries host memory (NCCL's traffic between GPUs no process of the
    grader's can read): a carried CPU run stays one, its ranks shown no GPU; a rank without a
    GPU of its own fails."""
    witnessed = RunDef(name="ws2", layout=Layout(1, 2), carried=True)
    four = RunDef(name="ws4", layout=Layout(1, 4))
    single = RunDef(name="ws1", layout=Layout(1, 1))
    virtual = RunDef(name="2x2", layout=Layout(2, 2), virtual_gpus=3)
    assert on_this_machine(witnessed, 0) == witnessed and on_this_machine(four, 0) == four  # no CUDA: the CPU, as written
    assert on_this_machine(witnessed, 8) == replace(witnessed, hide_gpus=True) and carried(on_this_machine(witnessed, 8), 8)
    assert not carried(witnessed, 8)  # as written, on real GPUs: NCCL, which the hub cannot carry
    assert on_this_machine(replace(virtual, carried=True), 1) == replace(virtual, carried=True)
    assert on_this_machine(four, 2).virtual_gpus == 4 and on_this_machine(four, 4) == four
    assert on_this_machine(single, 1) == single and on_this_machine(virtual, 1) == virtual


def test_the_hub_keeps_what_a_check_reads_of_a_launch() -> None:
    """A checked run's data whole (its sends' too); a timed launch of the submission its first steps (checked
    against the grader's training); none of the reference's timed launches (the grader's own
    code, timed by its all-reduces' sizes) nor of a timing workload no speed check reads."""
    checked, timed = RunDef(name="ws2", layout=Layout(1, 2), carried=True), RunDef(name="timed", layout=Layout(1, 2), carried=True)
    kept = {
        "checked": carrier_plan(checked, (timed,), frozenset({"timed"}), 60).keep_bytes,
        "own timed": carrier_plan(timed, (timed,), frozenset({"timed"}), 60).keep_bytes,
        "reference timed": carrier_plan(timed, (timed,), frozenset({"timed"}), 60, trusted=True).keep_bytes,
        "--no-timing": carrier_plan(timed, (), frozenset({"timed"}), 60).keep_bytes,
    }
    assert kept == {"checked": KEEP_BYTES, "own timed": KEEP_TIMED_BYTES, "reference timed": 0, "--no-timing": 0}
    # sends' data (p7's activations and gradients) in a checked run only
    assert carrier_plan(checked, (timed,), frozenset({"timed"}), 60).keep_sends and not carrier_plan(timed, (timed,), frozenset({"timed"}), 60).keep_sends


def test_the_launcher_warms_up_what_ddp_imports_only_for_the_practicals_the_hub_carries() -> None:
    from grader.course import load_course, load_practical
    from grader.grade.session import runner_options
    from grader.run.local import DDP_WARM_MODULE

    course = load_course(ROOT)
    warms = {practical: DDP_WARM_MODULE in runner_options(load_practical(course, practical), False, True).warm_modules for practical in ("p4", "p5", "p6", "p10")}
    assert warms == {"p4": False, "p5": False, "p6": True, "p10": True}


def test_a_quicker_grading_says_what_it_left_out(tmp_path: Path) -> None:
    spec, folder = practical(tmp_path), submission(tmp_path)
    quick = grade(spec, folder, FakeRunner(healthy), GradeOptions(world_size=3, timing=False))
    assert quick.notes[0].startswith("quick mode: one run of 3 ranks on one node replaced the runs ws2, 2x2; mistakes that show only there")
    assert quick.notes[1] == "--no-timing: the speed checks were left out"
    assert grade(spec, folder, FakeRunner(healthy)).notes == ()


def test_a_missing_script_is_graded_not_run(tmp_path: Path) -> None:
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "train.py").write_text("")
    runner = FakeRunner(healthy)
    result = grade(practical(tmp_path), folder, runner)
    assert runner.jobs == []
    ranks = next(c for c in result.checks if c.id == "rank_setup")
    assert ranks.status is Status.FAILED
    assert ranks.summary == "not run: p6_ddp.py is not in the submission (it holds: train.py) — in every run"


def test_the_time_budget_skips_runs_that_no_longer_fit(tmp_path: Path) -> None:
    def slow(job: JobSpec) -> JobResult:
        import time

        time.sleep(1.2)
        return healthy(job)

    result = grade(practical(tmp_path), submission(tmp_path), FakeRunner(slow), GradeOptions(total_timeout_s=1.5))
    ranks = next(c for c in result.checks if c.id == "rank_setup")
    assert "2x2 (2 nodes × 2 ranks): not run: the grading's time budget (1.5 s) was used up by earlier runs" in ranks.summary


def test_a_failing_reference_is_an_autograder_error(tmp_path: Path) -> None:
    def broken(args, runs):
        raise RuntimeError("no reference")

    runner = FakeRunner(healthy)
    result = grade(practical(tmp_path, references=broken), submission(tmp_path), runner)
    assert result.error == "RuntimeError: no reference" and result.checks == ()
    assert runner.closed


def test_a_script_that_does_not_compile_is_graded_not_run_before_any_run(tmp_path: Path) -> None:
    """A syntax error shows at once (it was found after every run had failed alike, 15.6 s)."""
    folder = submission(tmp_path)
    (folder / "p6_ddp.py").write_text("import torch\n\ndef main(:\n    pass\n")
    runner = FakeRunner(healthy)
    result = grade(practical(tmp_path), folder, runner)
    assert runner.jobs == []
    ranks = next(c for c in result.checks if c.id == "rank_setup")
    assert ranks.status is Status.FAILED and ranks.summary == "not run: p6_ddp.py does not compile: invalid syntax (line 3) — in every run"
    (folder / "p6_ddp.py").write_text("x = (" * 300 + ")" * 300 + "\n")  # past the parser's nesting: refused by it, quickly
    assert "p6_ddp.py does not compile: too many nested parentheses" in next(c for c in grade(practical(tmp_path), folder, FakeRunner(healthy)).checks if c.id == "rank_setup").summary


def test_a_script_that_imports_what_is_not_installed_is_not_run_and_one_that_may_do_without_it_is(tmp_path: Path) -> None:
    folder = submission(tmp_path)
    (folder / "p6_ddp.py").write_text("import os\nimport torch.distributed as dist\nfrom wandb_not_here.sdk import init\n")
    runner = FakeRunner(healthy)
    ranks = next(c for c in grade(practical(tmp_path), folder, runner).checks if c.id == "rank_setup")
    assert runner.jobs == []
    assert ranks.summary.startswith("not run: p6_ddp.py imports wandb_not_here (line 3), which is not installed where the grader runs your code (ModuleNotFoundError: No module named 'wandb_not_here')"), ranks.summary
    for fine in (
        "try:\n    import wandb_not_here\nexcept ImportError:\n    wandb_not_here = None\n",  # optional
        "import helpers_of_mine\n",  # the student's own module, beside the script
        "import torch.nn as nn\nif False:\n    import wandb_not_here\n",  # installed; and an import under an `if` is the script's business
    ):
        (folder / "helpers_of_mine.py").write_text("")
        (folder / "p6_ddp.py").write_text(fine)
        runner = FakeRunner(healthy)
        grade(practical(tmp_path), folder, runner)
        assert runner.jobs, fine
