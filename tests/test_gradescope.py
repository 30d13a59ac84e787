"""The Gradescope autograder: built as a zip, unpacked into an /autograder-like layout and run
on a submission as Gradescope runs it; the results follow Gradescope's schema."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

from helpers import ROOT, SCHEMA, load_results, run_cli


def autograder(tmp_path: Path, practical: str) -> Path:
    """The zip built and unpacked as Gradescope does: ROOT/source, and run_autograder beside it."""
    out = tmp_path / "autograder.zip"
    done = run_cli("gradescope", practical, "--out", str(out))
    assert done.returncode == 0, done.stderr
    root = tmp_path / "autograder"
    with zipfile.ZipFile(out) as archive:
        archive.extractall(root / "source")
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
    assert stat.S_IMODE(modes["run_autograder"]) == 0o755 and stat.S_IMODE(modes["setup.sh"]) == 0o755
    for name in ("run_autograder", "setup.sh", "scripts/setup.sh"):
        (root / "source" / name).chmod(0o755)
    shutil.copy(root / "source" / "run_autograder", root / "run_autograder")
    return root


def run_autograder(root: Path, submission: Path) -> dict:
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    shutil.copytree(submission, root / "submission")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHON": sys.executable}
    done = subprocess.run(["bash", str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=300)
    assert (root / "results" / "results.json").is_file(), f"run_autograder wrote no results (exit {done.returncode}): {done.stderr[-2000:]}"
    results = load_results(root / "results" / "results.json")
    jsonschema.validate(results, SCHEMA)
    return results


def test_the_zip_holds_the_practical_and_its_reference_but_no_other_practical(tmp_path: Path) -> None:
    out = tmp_path / "autograder.zip"
    assert run_cli("gradescope", "p6", "--out", str(out)).returncode == 0
    names = set(zipfile.ZipFile(out).namelist())
    assert {"setup.sh", "run_autograder", "scripts/setup.sh", "pyproject.toml", "course.yaml", "grader/cli.py", "assignments/p6/assignment.yaml", "solutions/p6/p6_ddp.py"} <= names
    assert "solutions/p5/p5_dp.py" in names  # p6's dp_gpus run times p5's reference
    assert not [n for n in names if n.startswith(("solutions/p4/", "assignments/p10/", "tests/")) or "__pycache__" in n]
    assert run_cli("gradescope", "p7", "--out", str(out)).returncode == 2


@pytest.mark.slow
def test_run_autograder_grades_the_solution_in_full_and_a_repository_upload_of_the_template(tmp_path: Path) -> None:
    root = autograder(tmp_path, "p4")
    solved = run_autograder(root, ROOT / "solutions" / "p4")
    assert solved["score"] == 14 and all(t["status"] == "passed" for t in solved["tests"])
    repository = tmp_path / "repository"
    shutil.copytree(ROOT / "assignments" / "p4", repository / "assignments" / "p4")
    untouched = run_autograder(root, repository)
    assert untouched["score"] == 0 and "TODO" in untouched["tests"][0]["output"]
