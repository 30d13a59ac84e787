"""p7 end to end: a pipeline under GPipe and 1F1B, judged on the sends the grader's hub carried
(two stages as the spec runs it, three with --world-size 3). One grading per submission; each
test asserts all it needs of it."""
from __future__ import annotations

import re
import shutil
from pathlib import Path
from types import MappingProxyType

import pytest

from helpers import ROOT, assert_loses_exactly, checks_by_id, grade_in_process
from p6_forgeries import Forgery
from p7_forgeries import FORGERIES
from p7_variants import ALL_CHECKS, UNUSUAL_VARIANTS, VARIANTS
from variants import Variant

pytestmark = pytest.mark.slow
HANGS = MappingProxyType({  # variant -> where ranks 0 and 1 wait when it is stopped
    "1f1b_warm_up_reversed_deadlocks": ("in backward: dist.recv(grad, src=stage + 1)", "in forward: dist.recv(inp, src=stage - 1)"),
    # as under torchrun with gloo, whose send waits for its receiver: stage 0 sends micro-batch 1 while stage 1 sends 0's gradient
    "1f1b_blocking_sends_deadlock": ("in forward: dist.send(out.detach(), dst=stage + 1)", "in backward: dist.send(inp.grad, dst=stage - 1)"),
})


def test_reference_solution_gets_full_marks_for_both_schedules(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = grade_in_process("p7", ROOT / "solutions" / "p7", tmp_path / "r.json")
    capsys.readouterr()
    checks = checks_by_id(results)
    assert {k for k, v in checks.items() if v["status"] == "passed"} == set(ALL_CHECKS)
    assert results["score"] == 12
    order = checks["schedule_order"]["output"]
    assert "gpipe (1 node × 2 ranks): gpipe: micro-batches in flight at most [4, 4] (by stage)" in order
    assert "1f1b (1 node × 2 ranks): 1f1b: micro-batches in flight at most [2, 1] (by stage)" in order
    assert "1f1b (1 node × 2 ranks): 12 activations and 12 gradients across each of the 1 cut(s), all the grader's (element by element)" in checks["p2p_values"]["output"]


def test_reference_solution_in_three_stages_gets_full_marks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """--world-size 3: one 1F1B run of three stages, the middle one receiving and sending both ways."""
    results = grade_in_process("p7", ROOT / "solutions" / "p7", tmp_path / "r.json", "--world-size", "3")
    capsys.readouterr()
    checks = checks_by_id(results)
    assert results["score"] == 12, {k: v["output"] for k, v in checks.items()}
    assert "ws3 (1 node × 3 ranks): 12 activations and 12 gradients across each of the 2 cut(s), all the grader's (element by element)" in checks["p2p_values"]["output"]
    assert "ws3 (1 node × 3 ranks): 1f1b: micro-batches in flight at most [3, 2, 1] (by stage)" in checks["schedule_order"]["output"]


def test_torch_pipelining_schedules_get_full_marks(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The whole program written with torch.distributed.pipelining (PipelineStage, ScheduleGPipe
    and Schedule1F1B, which send shape metadata first and every activation and gradient with
    batch_isend_irecv). A stage allocates its receive buffers once, from the first micro-batch's
    shape, which is why the spec draws batches that micro_batches divides (with 7 rows sent to
    a buffer of 8, the hub refuses the send; under torchrun gloo receives them into its first
    rows and the loss then fails on 8 rows against 7 targets)."""
    folder = tmp_path / "submission"
    shutil.copytree(ROOT / "solutions" / "p7", folder)
    shutil.copy(Path(__file__).parent / "p7_submissions" / "pipelining_schedules.py", folder / "p7_pipeline.py")
    results = grade_in_process("p7", folder, tmp_path / "r.json")
    capsys.readouterr()
    checks = checks_by_id(results)
    assert results["score"] == 12, {k: v["output"] for k, v in checks.items()}
    assert "1f1b (1 node × 2 ranks): 12 activations and 12 gradients across each of the 1 cut(s), all the grader's (element by element)" in checks["p2p_values"]["output"]
    assert "1f1b (1 node × 2 ranks): 1f1b: micro-batches in flight at most [2, 1] (by stage)" in checks["schedule_order"]["output"]
    assert "1f1b_s3 (1 node × 3 ranks): 1f1b: micro-batches in flight at most [3, 2, 1] (by stage)" in checks["schedule_order"]["output"]


def test_untouched_template_scores_zero_with_one_line_per_check(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = grade_in_process("p7", ROOT / "assignments" / "p7", tmp_path / "r.json")
    capsys.readouterr()
    checks = checks_by_id(results)
    assert results["score"] == 0 and set(checks) == set(ALL_CHECKS)
    for check_id in ("p2p_values", "schedule_order", "clean_exit"):
        assert checks[check_id]["output"].startswith("the script stops at TODO 1: keep this stage's part of the model (p7_pipeline.py:"), checks[check_id]["output"]
        assert checks[check_id]["output"].endswith("— in every run"), checks[check_id]["output"]
    assert checks["pipeline_answers"]["output"].startswith("0 of 6 right; bubble.s2_m4: no answer")


@pytest.mark.parametrize("variant", (*VARIANTS, *UNUSUAL_VARIANTS), ids=[v.name for v in (*VARIANTS, *UNUSUAL_VARIANTS)])
def test_variant_loses_exactly_its_checks(variant: Variant, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = grade_in_process("p7", variant.write(tmp_path / variant.name, "p7"), tmp_path / "r.json")
    capsys.readouterr()
    assert_loses_exactly(results, variant.loses, variant.messages)
    waits = HANGS.get(variant.name)
    if waits:  # named a hang within seconds, where each stage waits; not left to the run's 60 s
        for check_id in variant.loses:
            output = checks_by_id(results)[check_id]["output"]
            assert "1f1b (1 node × 2 ranks): hung: stopped after" in output and re.search(r"when none of its processes had used the CPU for [234](\.\d)? s", output), output
            for rank, where in enumerate(waits):
                assert f"rank {rank} waits at p7_pipeline.py:" in output and where in output, output
        assert results["execution_time"] < 40


@pytest.mark.parametrize("forgery", FORGERIES, ids=[f.name for f in FORGERIES])
def test_a_forgery_scores_zero_on_every_check_it_targets_and_says_what_the_grader_saw(forgery: Forgery, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """As p6's forgeries: each scores 0 on the checks it forges, with what the hub carried."""
    forgery.assert_fails_its_targets("p7", forgery.variant.write(tmp_path / forgery.name, "p7"), tmp_path / "r.json")
    capsys.readouterr()
