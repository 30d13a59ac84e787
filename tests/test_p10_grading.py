"""p10 end to end: DDP over two-stage models on four virtual GPUs, micro-batches, answers."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import ROOT, again_after_teardown_abort, assert_loses_exactly, checks_by_id, grade_in_process, run_cli
from p10_forgeries import EVERY_MICRO_BATCH_HIDDEN, FORGERIES, REPLAY
from p10_variants import ALL_CHECKS, TUTORIAL_VARIANT, UNUSUAL_VARIANTS, VARIANTS
from p6_forgeries import Forgery
from variants import Variant

pytestmark = pytest.mark.slow


def test_reference_solution_gets_full_marks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = grade_in_process("p10", ROOT / "solutions" / "p10", tmp_path / "r.json", timed=True)
    capsys.readouterr()
    checks = checks_by_id(results)
    assert {k for k, v in checks.items() if v["status"] == "passed"} == {*ALL_CHECKS, "efficiency"}
    assert results["score"] == 20
    assert "main (1 node × 2 ranks, 4 virtual GPUs): rank 0→cuda:0+cuda:2, rank 1→cuda:1+cuda:3" in checks["stage_placement"]["output"]
    assert "2x2 (2 nodes × 2 ranks, 4 virtual GPUs each): rank 0→cuda:0+cuda:2, rank 1→cuda:1+cuda:3, rank 2→cuda:0+cuda:2" in checks["stage_placement"]["output"]
    assert checks["sync_pattern"]["extra_data"]["allreduce_per_micro_batch"] == {"main": [0, 0, 0, 1], "m2": [0, 1], "m8": [0] * 7 + [1], "uneven": [0, 0, 0, 1]}
    assert "m8 (1 node × 2 ranks, 4 virtual GPUs): 8 forward and 8 backward passes per step on every rank, together its 20-row shard" in checks["passes_per_step"]["output"]


def test_a_submission_with_int_devices_like_pytorchs_ddp_tutorial_gets_full_marks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """self.stage1.to(local_rank): an int names the GPU, on virtual GPUs as on CUDA Untimed: every check but
    efficiency passes (the timed tests of the reference and the slow variant cover speed)."""
    results = grade_in_process("p10", TUTORIAL_VARIANT.write(tmp_path / "tutorial", "p10"), tmp_path / "r.json")
    capsys.readouterr()
    assert results["score"] == 18, {k: v["output"] for k, v in checks_by_id(results).items() if v["status"] == "failed"}
    placement = checks_by_id(results)["stage_placement"]["output"]
    assert "main (1 node × 2 ranks, 4 virtual GPUs): rank 0→cuda:0+cuda:2, rank 1→cuda:1+cuda:3" in placement


@pytest.mark.parametrize("world_size", ["2", "1"])
def test_full_marks_with_one_run_of_one_or_two_ranks(world_size: str, tmp_path: Path) -> None:
    done = run_cli("grade", "p10", "solutions/p10", "--virtual-gpus", "4", "--world-size", world_size, "--results", str(tmp_path / "r.json"))
    assert done.returncode == 0 and "Score: 18 of 20 points so far — 2 graded by the autograder" in done.stdout, done.stdout


def test_untouched_template_scores_zero(tmp_path: Path) -> None:
    done = run_cli("grade", "p10", "assignments/p10", "--results", str(tmp_path / "r.json"))
    assert done.returncode == 0 and "Score: 0 of 20 points\n" in done.stdout
    assert "efficiency" in done.stdout or "as fast as the reference" in done.stdout
    assert "the script stops at TODO 1: pick the two stage devices of this rank" in done.stdout


@pytest.mark.parametrize("variant", (*VARIANTS, EVERY_MICRO_BATCH_HIDDEN), ids=[v.name for v in (*VARIANTS, EVERY_MICRO_BATCH_HIDDEN)])
def test_buggy_variant_loses_exactly_its_checks(variant: Variant, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = grade_in_process("p10", variant.write(tmp_path / variant.name, "p10"), tmp_path / "r.json")
    capsys.readouterr()
    assert_loses_exactly(results, variant.loses, variant.messages)
    if variant.name in ("sync_on_every_micro_batch", EVERY_MICRO_BATCH_HIDDEN.name):
        assert checks_by_id(results)["sync_pattern"]["score"] == 1.5  # half of 3: right result, wasted communication (hidden from the records or not)


@pytest.fixture(scope="module")
def earlier_records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The records of an earlier run of the reference solution (another seed), per rank, as a
    student gets them from `grader observe`."""
    import json
    import shutil

    folder = tmp_path_factory.mktemp("earlier")
    shutil.copy(ROOT / "solutions" / "p10" / "p10_hybrid.py", folder)
    out = folder / "out"
    command = ("observe", "--virtual-gpus", "4", "--out", str(out), "--", sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", str(folder / "p10_hybrid.py"), "--steps=2", "--seed=7")
    done = again_after_teardown_abort(lambda: run_cli(*command))  # gloo's teardown aborts now and then, after the program ended
    assert done.returncode == 0, done.stdout + done.stderr
    records = {}
    for path in (out / "events").glob("*.jsonl"):
        first = json.loads(path.read_text().splitlines()[0])
        records[f"rank{first['rank']}.jsonl"] = path.read_bytes()
    assert set(records) == {"rank0.jsonl", "rank1.jsonl"}, records.keys()
    return records


@pytest.mark.parametrize("forgery", FORGERIES, ids=[f.name for f in FORGERIES])
def test_a_forgery_scores_zero_on_every_check_it_targets_and_says_what_the_grader_saw(forgery: Forgery, earlier_records: dict[str, bytes], tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """As p6's forgeries (test_p6_grading.py): the untouched template scores 0 on every check,
    and so does each forgery on the checks it forges, with what the hub carried in the feedback."""
    folder = forgery.variant.write(tmp_path / forgery.name, "p10")
    if forgery.name == REPLAY:
        (folder / "earlier").mkdir()
        for name, data in earlier_records.items():
            (folder / "earlier" / name).write_bytes(data)
    forgery.assert_fails_its_targets("p10", folder, tmp_path / "r.json")
    capsys.readouterr()


@pytest.mark.parametrize("variant", UNUSUAL_VARIANTS, ids=[v.name for v in UNUSUAL_VARIANTS])
def test_a_correct_but_unusual_submission_keeps_every_point(variant: Variant, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = grade_in_process("p10", variant.write(tmp_path / variant.name, "p10"), tmp_path / "r.json")
    capsys.readouterr()
    assert results["score"] == 18, {k: v["output"] for k, v in checks_by_id(results).items() if v.get("status") == "failed"}
    assert "every step's all-reduces delivered the full-batch gradient, each rank's its own shard's" in checks_by_id(results)["grad_sync"]["output"]
