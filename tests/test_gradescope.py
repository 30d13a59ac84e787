"""The Gradescope autograder: built as a zip, unpacked into an /autograder-like layout and run
on a submission as Gradescope runs it; the results follow Gradescope's schema."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path

import jsonschema
import pytest

from helpers import ROOT, SCHEMA, load_results, needs, run_cli


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


def run_autograder(root: Path, submission: Path, wrapper: tuple[str, ...] = ()) -> dict:
    """Gradescope's run of one submission; `wrapper`: a command line that runs the script."""
    shutil.rmtree(root / "submission", ignore_errors=True)
    shutil.rmtree(root / "results", ignore_errors=True)
    shutil.copytree(submission, root / "submission")
    env = {**os.environ, "AUTOGRADER_ROOT": str(root), "PYTHON": sys.executable}
    done = subprocess.run([*wrapper, "bash", str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=300)
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
    assert run_cli("gradescope", "p99", "--out", str(out)).returncode == 2  # no such practical


@pytest.mark.slow
def test_run_autograder_grades_the_solution_in_full_and_a_repository_upload_of_the_template(tmp_path: Path) -> None:
    root = autograder(tmp_path, "p4")
    solved = run_autograder(root, ROOT / "solutions" / "p4")
    assert solved["score"] == 14 and all(t["status"] == "passed" for t in solved["tests"])
    repository = tmp_path / "repository"
    shutil.copytree(ROOT / "assignments" / "p4", repository / "assignments" / "p4")
    untouched = run_autograder(root, repository)
    assert untouched["score"] == 0 and "TODO" in untouched["tests"][0]["output"]


# --- where bubblewrap cannot run (Gradescope's image, Docker without user namespaces) ----------

# What bwrap says on such an image; mounted over the real one in a mount namespace of the test's
NO_USER_NAMESPACES = "#!/bin/sh\necho 'bwrap: No permissions to create new namespace, likely because the kernel does not allow non-privileged user namespaces' >&2\nexit 1\n"

# A graded cell that searches the whole file system for the reference's notebook and answer key
# and shows every line of them that carries a mark (the test's stand-in for "a line of the
# reference"): the lines come back in the error message, which the feedback shows
SEARCH_EVERYWHERE = """import os
SKIP_TOP = {"proc", "sys", "dev", "usr", "lib", "lib64", "lib32", "bin", "sbin", "boot", "snap", "etc", "run"}
SKIP_ANY = {"site-packages", "dist-packages", ".git", "node_modules", "__pycache__"}
found, searched = [], 0
for folder, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if d not in SKIP_ANY and not (folder == "/" and d in SKIP_TOP)]
    for name in files:
        searched += 1
        if name in ("answer_key.yaml", "p4_concepts.ipynb"):
            try:
                found += [line.strip() for line in open(os.path.join(folder, name), errors="replace") if "-mark-" in line]
            except OSError:
                pass
raise RuntimeError(f"searched {searched} files; found: {found}")
"""


def uid_tier_problem() -> str | None:
    """Why this machine cannot stand in for an image without user namespaces, or None."""
    if os.geteuid() != 0:
        return "the unprivileged-uid tier needs the grader to be root"
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True, text=True)
    return None if done.returncode == 0 else f"no mount namespace for the stand-in bwrap: {done.stderr.strip()[:200]}"


@pytest.mark.slow
@needs("sandbox", uid_tier_problem())
def test_without_bubblewrap_the_submission_runs_as_another_uid_and_no_line_of_the_reference_reaches_it(tmp_path: Path) -> None:
    from hostile_corpus import p4_notebook

    mark = uuid.uuid4().hex
    place = Path(tempfile.mkdtemp(prefix="gradescope-", dir="/var/tmp"))  # reachable by every user, as /autograder is
    try:
        place.chmod(0o755)
        root = autograder(place, "p4")
        key = root / "source" / "solutions" / "p4" / "answer_key.yaml"
        key.write_text(key.read_text() + f"# reference-mark-{mark}\n")
        notebook = root / "source" / "solutions" / "p4" / "p4_concepts.ipynb"
        notebook.write_text(notebook.read_text().replace('"cells": [', f'"cells": [{{"cell_type": "markdown", "id": "mark", "metadata": {{}}, "source": "reference-mark-{mark}"}}, ', 1))
        (place / "staff-notes").mkdir(mode=0o755)  # readable by all: the search must find it
        (place / "staff-notes" / "answer_key.yaml").write_text(f"# readable-mark-{mark}\n")
        (tmp_path / "submission").mkdir()
        (tmp_path / "submission" / "p4_concepts.ipynb").write_text(p4_notebook(SEARCH_EVERYWHERE))
        fake = place / "bwrap"
        fake.write_text(NO_USER_NAMESPACES)
        fake.chmod(0o755)
        bwrap = shutil.which("bwrap") or "/usr/bin/bwrap"
        stand_in = ("unshare", "--mount", "--propagation", "private", "sh", "-c", f"mount --bind {fake} {bwrap} && exec \"$@\"", "sh")
        results = run_autograder(root, tmp_path / "submission", stand_in if os.path.exists(bwrap) else ())
    finally:
        shutil.rmtree(place, ignore_errors=True)
    text = json.dumps(results)
    assert results["extra_data"]["environment"]["isolation"].startswith("unprivileged uid ")
    assert f"readable-mark-{mark}" in text  # the search ran, and what it found reached the feedback
    assert f"reference-mark-{mark}" not in text
