"""The command line: list, the self-check, exit codes, and a results file on every path."""
from __future__ import annotations

import shutil
from pathlib import Path

import jsonschema
import pytest

from grader.cli import main
from helpers import ROOT, SCHEMA, checks_by_id, load_results, run_cli


def test_list_shows_practicals_checks_points_and_visibility(capsys: pytest.CaptureFixture) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "p6: DistributedDataParallel under torchrun — 21 points" in out and "efficiency          2 pts" in out
    assert "p5: Data parallelism with nn.DataParallel — 17 points" in out and "gpu0_memory" in out and "scaling" in out
    assert "p4: Understanding parallelism (notebook) — 14 points" in out
    assert "2x2 (2 nodes × 2 ranks, 2 virtual GPUs)" in out
    assert "params_sync         4 pts  after_due_date" in out


def test_an_unknown_practical_still_writes_results(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / "r.json"
    assert main(["grade", "p99", str(ROOT / "solutions" / "p6"), "--results", str(results)]) == 1
    document = load_results(results)
    jsonschema.validate(document, SCHEMA)
    assert document["tests"][0]["name"] == "Autograder error"
    assert "unknown practical 'p99'; this course has: p4, p5, p6" in document["tests"][0]["output"]
    assert "AUTOGRADER ERROR" in capsys.readouterr().out


def test_a_missing_submission_folder_still_writes_results(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    results = tmp_path / "r.json"
    assert main(["grade", "p6", str(tmp_path / "nowhere"), "--results", str(results)]) == 1
    assert "does not exist" in load_results(results)["tests"][0]["output"]
    capsys.readouterr()


def test_a_broken_spec_is_an_autograder_error_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    course = tmp_path / "course"
    shutil.copytree(ROOT / "assignments" / "p6", course / "assignments" / "p6")
    (course / "course.yaml").write_text("course: a copy\npracticals: [p6]\n")
    spec = course / "assignments" / "p6" / "assignment.yaml"
    spec.write_text(spec.read_text().replace("points: 5", "points: lots"))
    results = tmp_path / "r.json"
    code = main(["--course-root", str(course), "grade", "p6", str(ROOT / "solutions" / "p6"), "--results", str(results)])
    assert code == 1
    output = load_results(results)["tests"][0]["output"]
    assert "assignment.yaml: checks[3].points: expected a number ≥ 0, found 'lots'" in output
    assert main(["--course-root", str(course), "list"]) == 1
    assert "checks[3].points" in capsys.readouterr().err


def test_bad_command_lines_exit_2() -> None:
    done = run_cli("grade", "p6")
    assert done.returncode == 2 and "SUBMISSION" in done.stderr.upper()
    assert run_cli("grade", "p6", "x", "--world-size", "0").returncode == 2


@pytest.mark.slow
def test_the_self_check_runs_public_checks_on_the_template_by_default(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    summary = tmp_path / "summary.md"
    results = tmp_path / "r.json"
    assert main(["check", "p6", "--world-size", "2", "--markdown", str(summary), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "TODO 1: initialise the process group" in out
    checks = checks_by_id(load_results(results))
    assert "params_sync" not in checks and set(checks) == {"rank_setup", "device_mapping", "batch_shard", "grad_sync", "clean_exit", "efficiency", "ddp_vs_dp"}
    assert "| 1 | Rank, local rank and world size match the launcher | 0/2 | ❌ fail |" in summary.read_text()
