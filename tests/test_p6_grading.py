"""p6 end to end: real ranks, real gloo, the real CLI.

The reference solution gets full marks on every run of the spec (world sizes 1-4 and a
simulated 2 nodes × 2 ranks); the untouched template gets 0 with one line per check; every
buggy variant loses exactly its checks, with the feedback asserted.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import jsonschema
import pytest

from helpers import ROOT, SCHEMA, assert_loses_exactly, checks_by_id, grade_in_process, load_results, run_cli
from grader.cli import main
from p6_forgeries import FORGERIES, RECORDS_CLAIM_EXTRA_ALL_REDUCES, Forgery
from p6_variants import ALL_CHECKS, CONSTANT_START, HOISTED_WORK, SKIPS_WORK_WHEN_TIMED, SLOW_VARIANT, TUTORIAL_VARIANT, UNUSUAL_VARIANTS, VARIANTS
from variants import Variant

pytestmark = pytest.mark.slow


def grade_with_cli(folder: str, results_path: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """`python -m grader grade p6 FOLDER`: it must exit 0 and write valid Gradescope results."""
    done = run_cli("grade", "p6", folder, "--results", str(results_path))
    assert done.returncode == 0, done.stdout + done.stderr
    results = load_results(results_path)
    jsonschema.validate(results, SCHEMA)
    return done, results


def test_reference_solution_gets_full_marks_on_every_layout(tmp_path: Path) -> None:
    done, results = grade_with_cli("solutions/p6", tmp_path / "R.json")
    assert results["score"] == results["extra_data"]["max_score"] == 20, {k: v["output"] for k, v in checks_by_id(results).items() if v.get("status") != "passed"}
    checks = checks_by_id(results)
    assert set(checks) == {*ALL_CHECKS, "efficiency", "ddp_vs_dp"}
    assert checks["efficiency"]["status"] == "passed" and "the reference's step time" in checks["efficiency"]["output"]
    assert checks["ddp_vs_dp"]["extra_data"]["deferred_points"] == 1  # needs 2 real GPUs
    for check in (checks[name] for name in ALL_CHECKS):
        assert check["status"] == "passed", check
        for run in ("ws1 (1 process)", "ws2 (1 node × 2 ranks)", "ws3 (1 node × 3 ranks)", "2x2 (2 nodes × 2 ranks, 2 virtual GPUs each)"):
            assert f"✓ {run}" in check["output"]
    assert "rank 2→cuda:0, rank 3→cuda:1" in checks["device_mapping"]["output"]
    assert re.search(r"ws3 \(1 node × 3 ranks\): 3 × \d+ rows; [12] left over and dropped: what each rank all-reduced is its own shard's gradient \(the rows your ranks' records name\)", checks["batch_shard"]["output"])
    assert re.match(r"drawn for this grading: batch_size \d+", results["extra_data"]["notes"][0])
    seed = results["extra_data"]["environment"]["seed"]  # no --seed: a fresh one (7 is the one test_grade_uses_the_seed_it_is_given gives)
    assert isinstance(seed, int) and seed != 7 and f"seed {seed}" in done.stdout
    assert checks["grad_sync"]["extra_data"]["allreduce_per_step"]["ws2"] == [1, 1, 1]
    assert "Score: 20 of 21 points so far — 1 graded on a GPU node" in done.stdout
    assert_views_beside(tmp_path / "R.json", results, done.stdout, {"ws1", "ws2", "ws3", "ws4", "2x2"})
    assert "all-reduce    DDP gradient buckets: 1 per step" in (tmp_path / "R-runs" / "ws2" / "report.txt").read_text()


def assert_views_beside(results_path: Path, results: dict, stdout: str, runs: set[str]) -> None:
    """The grading left each run's report, timeline PNG and trace beside results.json, named
    in it (extra_data.runs[].views, and the output) and on the console."""
    named = {run["name"]: run.get("views", []) for run in results["extra_data"]["runs"]}
    assert {name for name, views in named.items() if views} == runs, named
    for name in runs:
        assert named[name] == [f"{results_path.stem}-runs/{name}/{file}" for file in ("report.txt", "timeline.png", "trace.json")]
        assert (results_path.parent / named[name][1]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"{results_path.stem}-runs/{name}/" in results["output"] and f"{results_path.stem}-runs/{name}/" in stdout


def test_untouched_template_gets_zero_with_one_line_per_check(tmp_path: Path) -> None:
    done, results = grade_with_cli("assignments/p6", tmp_path / "T.json")
    assert results["score"] == 0
    assert_views_beside(tmp_path / "T.json", results, done.stdout, {"ws1", "ws2", "ws3", "ws4", "2x2"})
    assert "uncaught NotImplementedError: TODO 1: initialise the process group" in (tmp_path / "T-runs" / "ws1" / "report.txt").read_text()
    checks = checks_by_id(results)
    assert checks["efficiency"]["status"] == "failed"
    assert checks["efficiency"]["output"].startswith("timed: your script could not be timed: the script stops at TODO 1")
    assert "deferred_points" in checks["ddp_vs_dp"]["extra_data"]  # needs 2 real GPUs
    for check in (checks[name] for name in ALL_CHECKS):
        assert check["status"] == "failed"
        assert check["output"].count("\n") == 0, check["output"]
        assert check["output"].startswith("the script stops at TODO 1: initialise the process group")
        assert "(p6_ddp.py:" in check["output"] and "every rank" in check["output"]


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_buggy_variant_loses_exactly_its_checks(variant: Variant, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = variant.write(tmp_path / variant.name, "p6")
    extra = ["--timeout", str(variant.timeout_s)] if variant.timeout_s else []
    results = grade_in_process("p6", folder, tmp_path / "results.json", *extra)
    capsys.readouterr()
    assert_loses_exactly(results, variant.loses, variant.messages)


@pytest.mark.parametrize("forgery", FORGERIES, ids=[f.name for f in FORGERIES])
def test_a_forgery_scores_zero_on_every_check_it_targets_and_says_what_the_grader_saw(forgery: Forgery, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The untouched template scores 0 on every check; so does each forgery on the checks it
    forges, with what the grader's hub carried in the feedback."""
    forgery.assert_fails_its_targets("p6", forgery.variant.write(tmp_path / forgery.name, "p6"), tmp_path / "r.json")
    capsys.readouterr()


@pytest.mark.parametrize("variant", (*UNUSUAL_VARIANTS, RECORDS_CLAIM_EXTRA_ALL_REDUCES), ids=[v.name for v in (*UNUSUAL_VARIANTS, RECORDS_CLAIM_EXTRA_ALL_REDUCES)])
def test_a_correct_but_unusual_submission_keeps_every_point(variant: Variant, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Also one whose records claim all-reduces it did not make: the records decide nothing."""
    results = grade_in_process("p6", variant.write(tmp_path / variant.name, "p6"), tmp_path / "r.json")
    capsys.readouterr()
    assert results["score"] == 18, {k: v["output"] for k, v in checks_by_id(results).items() if v.get("status") != "passed"}
    assert "every step's all-reduces delivered the full-batch gradient, each rank's its own shard's" in checks_by_id(results)["grad_sync"]["output"]


def test_a_submission_written_like_pytorchs_ddp_tutorial_gets_full_marks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """model.to(local_rank), x.to(local_rank): an int names the GPU, on the 2x2 run's virtual GPUs as on CUDA Untimed: every check but
    efficiency passes (the timed tests of the reference and the slow variant cover speed)."""
    results = grade_in_process("p6", TUTORIAL_VARIANT.write(tmp_path / "tutorial", "p6"), tmp_path / "r.json")
    capsys.readouterr()
    assert results["score"] == 18, {k: v["output"] for k, v in checks_by_id(results).items() if v["status"] == "failed"}
    assert "rank 2→cuda:0, rank 3→cuda:1" in checks_by_id(results)["device_mapping"]["output"]


TIMED_ONLY = """
id: p6
title: DDP, its timed run only
script: p6_ddp.py
seed_argument: seed
args: {batch_size: 64, dim: 32, hidden: 64, steps: 3, lr: 0.05}
variables: [rank, local_rank, world_size, device]
timing: {repeats: 1, warmup_steps: 2}
runs:
  - {name: timed, ranks_per_node: 2, carried: true, args: {batch_size: 256, dim: 512, hidden: 1024, steps: 20, lr: 0.01}}
checks:
  - {id: efficiency, title: Speed, points: 2, runs: [timed], options: {max_ratio: 1.3}}
"""


def grade_timed_only(tmp_path: Path, variants: tuple[Variant, ...], spec: str = TIMED_ONLY) -> list:
    """Each variant graded on p6's timed run alone (the spec's run, one round; more when its
    verdict is in doubt), with the reference solution's launches interleaved: the reports.
    Each launch may take the spec's 60 s: with no checked run before it, a launch 6.5× as slow
    as the reference's would meet a hang's pace (5 ×) on a loaded machine, and these tests
    are about the speed verdict (the pace has its own in test_speed.py)."""
    from grader.course import Practical
    from grader.grade.pipeline import GradeOptions, grade
    from grader.practicals import p6
    from grader.run.local import LocalRunner
    from grader.spec import load_assignment

    (tmp_path / "assignment.yaml").write_text(spec)
    practical = Practical(load_assignment(tmp_path / "assignment.yaml", p6.CHECKS), p6)
    (tmp_path / "runs").mkdir()
    with LocalRunner(tmp_path / "runs") as runner:
        return [grade(practical, v.write(tmp_path / v.name, "p6"), runner, GradeOptions(solutions=ROOT / "solutions", seed=11 + i, run_timeout_s=60.0)) for i, v in enumerate(variants)]


def test_a_timed_launch_must_do_the_work_the_hub_shows_it_and_times_it_by_its_clock(tmp_path: Path) -> None:
    """p6's timed run alone: the reference solution's launch does the grader's training, so it
    is timed; the cheat's fast launch trained on one row, which what its ranks all-reduced
    shows, so it cannot be timed. A correct script whose sampler shuffles anew in each of the
    20 steps is timed. A correct script that does needless work in every step, behind a clock
    of its own slowed to a third, fails: the hub's clock times its steps."""
    from grader.results.model import Status

    unusual = next(v for v in UNUSUAL_VARIANTS if "shuffling_each_step" in v.name)
    # its sampler alone: its tiny buckets would need its checked runs (the reference is timed with their DDP options)
    shuffling = Variant("a_sampler_shuffling_each_step", unusual.edits[1:], frozenset())
    cheat, correct, slow = (next(c for c in report.checks if c.id == "efficiency") for report in grade_timed_only(tmp_path, (SKIPS_WORK_WHEN_TIMED, shuffling, SLOW_VARIANT)))
    assert "× the reference's step time" in correct.summary and "could not be timed" not in correct.summary, correct.summary
    assert cheat.status is Status.FAILED, cheat.summary
    assert SKIPS_WORK_WHEN_TIMED.messages["efficiency"] in cheat.summary
    assert "step 0:" in cheat.summary
    assert slow.status is Status.FAILED and SLOW_VARIANT.messages["efficiency"] in slow.summary, slow.summary
    assert slow.data["speed"]["timed"]["ratio"] > 1.3


def test_work_moved_before_the_first_timed_step_is_charged_where_it_grows_with_the_steps(tmp_path: Path) -> None:
    """Two rounds: p6's timed run of 12 steps, then of 36 (grader/grade/timing.py STRETCH).
    Each step's work done ahead of the loop makes the first timed step begin later the more
    steps are asked: charged to every step, it fails efficiency; a second of set-up that does
    not grow with the steps (torch.compile's compilation) passes."""
    from grader.results.model import Status

    spec = TIMED_ONLY.replace("timing: {repeats: 1, warmup_steps: 2}", "timing: {repeats: 2, warmup_steps: 2}").replace("steps: 20, lr: 0.01", "steps: 12, lr: 0.01")
    hoisted, constant = (next(c for c in report.checks if c.id == "efficiency") for report in grade_timed_only(tmp_path, (HOISTED_WORK, CONSTANT_START), spec))
    assert hoisted.status is Status.FAILED and HOISTED_WORK.messages["efficiency"] in hoisted.summary and "above the 1.3× allowed" in hoisted.summary, hoisted.summary
    assert "in launches of 12 steps" in hoisted.summary and "in those of 36" in hoisted.summary, hoisted.summary
    assert constant.status is Status.PASSED, constant.summary  # start-up's noise in one launch per count may charge a little, never a fail


# p6's timed run as on a GPU node's real GPUs, which the hub does not carry: the grader's clock
# times pairs of launches of 16 and 96 steps (a larger batch than the spec's, so the
# reference's 80 steps between them take seconds: measured 22 ms a step here, the slow
# variant's 40 ms, 1.8×, with its records claiming 14 ms; the grading about 21 s)
CLOCKED_ONLY = TIMED_ONLY.replace("timing: {repeats: 1, warmup_steps: 2}", "timing: {repeats: 1, warmup_steps: 2, clock_factor: 6}").replace(
    "carried: true, args: {batch_size: 256, dim: 512, hidden: 1024, steps: 20, lr: 0.01}", "args: {batch_size: 1024, dim: 512, hidden: 1024, steps: 16, lr: 0.01}"
)
# needless work in every step (three more forward passes) behind clocks slowed to a third
SLOWED_CLOCK = Variant(
    "three_forwards_more_every_step_behind_a_slowed_clock",
    (SLOW_VARIANT.edits[1], ("p6_ddp.py", "    loss = loss_fn(model(x), y)\n", "    loss = loss_fn(model(x), y)\n    with torch.no_grad():\n        for _ in range(3):\n            model(x)\n")),
    frozenset({"efficiency"}),
    {"efficiency": "above the 1.3× allowed"},
)


def test_without_the_hub_the_graders_clock_times_whole_launches_and_a_slowed_clock_is_named(tmp_path: Path) -> None:
    """Where the hub carries nothing (ranks on real GPUs), a step is the difference of two launches'
    wall times by the grader's clock over the steps between them: the needless work fails
    efficiency though the script's own clocks ran at a third, and the feedback names what its
    records claimed."""
    from grader.results.model import Status

    (report,) = grade_timed_only(tmp_path, (SLOWED_CLOCK,), CLOCKED_ONLY)
    efficiency = next(c for c in report.checks if c.id == "efficiency")
    assert efficiency.status is Status.FAILED and SLOWED_CLOCK.messages["efficiency"] in efficiency.summary, efficiency.summary
    assert "by the grader's clock (median of 2 pairs of launches of 16 and 96 steps" in efficiency.summary
    assert "your script's own records say" in efficiency.summary, efficiency.summary


def test_grade_uses_the_seed_it_is_given(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--seed 7 is the grading's seed; without --seed a grading draws a fresh one (asserted on
    the reference's full grading above, which gives none)."""
    assert main(["grade", "p6", str(ROOT / "solutions" / "p6"), "--world-size", "2", "--results", str(tmp_path / "b.json"), "--seed", "7"]) == 0
    capsys.readouterr()
    fixed = load_results(tmp_path / "b.json")
    assert fixed["extra_data"]["environment"]["seed"] == 7
    assert [r["name"] for r in fixed["extra_data"]["runs"]] == ["ws2"]
    assert fixed["score"] == 18
