"""{{id}} (made by `python -m grader new`): the reference solution gets full marks and the
released template none."""
from __future__ import annotations

from pathlib import Path

import pytest

from helpers import ROOT, grade_in_process

pytestmark = pytest.mark.slow


def test_solution_full_marks_template_zero(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    solution = grade_in_process("{{id}}", ROOT / "solutions" / "{{id}}", tmp_path / "s.json")
    assert solution["score"] == solution["extra_data"]["max_score"] > 0
    template = grade_in_process("{{id}}", ROOT / "assignments" / "{{id}}", tmp_path / "t.json")
    capsys.readouterr()
    assert template["score"] == 0
