"""p4 end to end: the notebook's graded cells on two virtual GPUs, exercised by the grader."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.grade.notebook import graded_cells, neutralise_magics, read_notebook
from helpers import ROOT, assert_loses_exactly, checks_by_id, grade_in_process
from p4_variants import ALL_CHECKS, UNUSUAL_VARIANTS, VARIANTS
from variants import Variant


def test_magics_become_python_and_keep_line_numbers() -> None:
    source, notes = neutralise_magics("%%time\nx = 1\n!pip install foo\nfiles = !ls\n  %matplotlib inline\n")
    assert source == "# %%time\nx = 1\npass  # !pip install foo\nfiles = None  # !ls\n  pass  # %matplotlib inline\n"
    assert notes == (
        "line 1: the cell magic %%time was ignored",
        "line 3: !pip is IPython syntax and was not run",
        "line 4: !ls is IPython syntax; files was set to None",
        "line 5: %matplotlib is IPython syntax and was not run",
    )
    assert neutralise_magics("%%bash\necho hi\n") == (None, ("skipped: the cell magic %%bash makes it something other than Python",))


def test_only_tagged_code_cells_are_taken() -> None:
    cells = graded_cells(read_notebook(ROOT / "solutions" / "p4" / "p4_concepts.ipynb"), {"graded", "answers"})
    assert [(c.index, c.tags) for c in cells] == [(5, ("graded",)), (8, ("graded",)), (11, ("answers",))]


def test_a_broken_notebook_file_is_a_graded_result(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "p4_concepts.ipynb").write_text('{"cells": [')
    results = grade_in_process("p4", folder, tmp_path / "r.json")
    capsys.readouterr()
    assert results["score"] == 0
    assert "not run: p4_concepts.ipynb is not a valid notebook" in results["tests"][0]["output"]


@pytest.mark.slow
def test_solution_full_marks_and_template_zero(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    solution = grade_in_process("p4", ROOT / "solutions" / "p4", tmp_path / "s.json")
    assert {k for k, v in checks_by_id(solution).items() if v["status"] == "passed"} == set(ALL_CHECKS)
    assert solution["score"] == 14
    template = grade_in_process("p4", ROOT / "assignments" / "p4", tmp_path / "t.json")
    capsys.readouterr()
    assert template["score"] == 0
    checks = checks_by_id(template)
    assert "stops at TODO 1: split the batch" in checks["chunk_split"]["output"]
    assert "stops at TODO 2: put layer1 on cuda:0" in checks["mp_placement"]["output"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS + UNUSUAL_VARIANTS, ids=[v.name for v in VARIANTS + UNUSUAL_VARIANTS])
def test_a_variant_loses_exactly_its_checks(variant: Variant, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = grade_in_process("p4", variant.write(tmp_path / variant.name, "p4"), tmp_path / "r.json")
    capsys.readouterr()
    assert_loses_exactly(results, variant.loses, variant.messages)
    if variant.name == "shell_and_magic_lines_in_graded_cells":
        assert "p4_concepts.ipynb, cell 5: line 12: !nvidia-smi is IPython syntax; devices was set to None" in results["output"]
    if variant.name == "one_wrong_answer":
        assert checks_by_id(results)["concept_answers"]["score"] == pytest.approx(3 * 4 / 5)
    json.dumps(results)
