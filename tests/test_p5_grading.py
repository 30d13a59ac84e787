"""p5 end to end: DataParallel on virtual GPUs, the answers file, deferred GPU checks."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import ROOT, assert_loses_exactly, checks_by_id, grade_in_process, load_results, run_cli
from p5_variants import ALL_CHECKS, UNUSUAL_VARIANTS, VARIANTS
from variants import Variant

pytestmark = pytest.mark.slow
DEFERRED = {"gpu_step_times", "gpu0_memory"}


def test_reference_solution_passes_everything_gradable_here(tmp_path: Path) -> None:
    done = run_cli("grade", "p5", "solutions/p5", "--results", str(tmp_path / "r.json"))
    assert done.returncode == 0, done.stderr
    results = load_results(tmp_path / "r.json")
    checks = checks_by_id(results)
    assert {k for k, v in checks.items() if v.get("status") == "passed"} == set(ALL_CHECKS)
    for check_id in DEFERRED:
        assert "status" not in checks[check_id] and checks[check_id]["extra_data"]["deferred_points"] == 1
        assert "not graded here: needs ≥ 2 CUDA GPUs (this machine has 0)" in checks[check_id]["output"]
    assert results["score"] == results["extra_data"]["max_score"] == 13, {k: v["output"] for k, v in checks_by_id(results).items() if v.get("status") != "passed"}
    assert "rows 1, 1, 1 on cuda:0, cuda:1, cuda:2 (batch 3 over 5 GPUs)" in checks["replica_shapes"]["output"]
    assert results["extra_data"]["manual_answers"]["questions.faster"].startswith("No.")
    assert [r["name"] for r in results["extra_data"]["runs"]] == ["dp2", "dp3", "dp5", "dp5_batch3"]  # no real-GPU runs here


def test_three_virtual_gpus_show_22_22_20(tmp_path: Path) -> None:
    done = run_cli("grade", "p5", "solutions/p5", "--virtual-gpus", "3", "--results", str(tmp_path / "r.json"))
    assert done.returncode == 0
    assert "rows 22, 22, 20 on cuda:0, cuda:1, cuda:2 (batch 64 over 3 GPUs)" in done.stdout


def test_untouched_template_scores_zero(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = grade_in_process("p5", ROOT / "assignments" / "p5", tmp_path / "r.json")
    capsys.readouterr()
    assert results["score"] == 0
    checks = checks_by_id(results)
    assert "TODO 1: choose the first device" in checks["replica_shapes"]["output"]
    assert checks["split_table"]["output"] == "split_table: 3 GPUs: no answer; 5 GPUs: no answer"
    assert checks["timing_table"]["output"].startswith("timing: fill in single_gpu.step_time")


@pytest.mark.parametrize("variant", VARIANTS + UNUSUAL_VARIANTS, ids=[v.name for v in VARIANTS + UNUSUAL_VARIANTS])
def test_a_variant_loses_exactly_its_checks(variant: Variant, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = grade_in_process("p5", variant.write(tmp_path / variant.name, "p5"), tmp_path / "r.json")
    capsys.readouterr()
    assert_loses_exactly(results, variant.loses, variant.messages)
