"""Staff's view of the class: alike submissions (copydetect, the template left out) and the
HTML class report, opened in headless Chromium."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from grader.results.gradescope import to_gradescope
from grader.results.model import CheckResult, GradingReport, Status
from grader.store import ResultsStore
from helpers import ROOT, git, needs, run_cli

TEMPLATE = (ROOT / "assignments" / "p6" / "p6_ddp.py").read_text()
SOLUTION = (ROOT / "solutions" / "p6" / "p6_ddp.py").read_text()
HOSTILE = "<img src=x onerror=\"document.title='pwned'\"> gradients 64× too big"


def chromium_problem() -> str | None:
    return None if shutil.which("chromium") or shutil.which("chromium-browser") else "chromium is not installed (apt-get install chromium)"


def renamed(code: str) -> str:
    """The solution with its names changed, as a student who copied it would."""
    return re.sub(r"\bmodel\b", "network", code).replace("optimizer", "opt").replace("loss", "objective")


def own_work() -> str:
    """A p6 written by someone else: the real-program DDP tutorial's own script."""
    return next((ROOT / "tests" / "real_programs" / "ddp_tutorial").glob("*.py")).read_text()


def student_repository(tmp_path: Path, student: str, code: str | None) -> tuple[str, str]:
    """A student's bare repository whose last commit holds `code` as p6 (the template when None);
    (its path, the commit)."""
    work = tmp_path / f"{student}-work"
    (work / "assignments" / "p6").mkdir(parents=True)
    (work / "assignments" / "p6" / "p6_ddp.py").write_text(TEMPLATE if code is None else code)
    git("init", "-q", cwd=work)
    git("add", "-A", cwd=work)
    git("commit", "-qm", "p6", cwd=work)
    bare = tmp_path / f"{student}.git"
    git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    return str(bare), git("rev-parse", "HEAD", cwd=work)


def graded(score: float, failure: str) -> dict:
    checks = (
        CheckResult("rank_setup", "Ranks and devices", 1, 2.0, 2.0, Status.PASSED, "ok"),
        CheckResult("grad_sync", "Gradients averaged", 2, score, 6.0, Status.PASSED if score == 6 else Status.FAILED, failure),
    )
    return to_gradescope(GradingReport("p6", "DDP", checks))


WAITED = "ws2: rank {rank} waited {seconds}s at p6_ddp.py:{line} for a collective the others never made"  # one kind of failure, its numbers each student's own


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ResultsStore:
    """Six students' p6: two identical, one renamed copy, two of their own, one untouched template."""
    tmp_path = tmp_path_factory.mktemp("class")
    results = ResultsStore(tmp_path / "results")
    for student, code, score, when in [
        ("alice", SOLUTION, 6.0, "2026-12-01T10:00:00Z"),
        ("bob", SOLUTION, 6.0, "2026-12-01T11:00:00Z"),
        ("carol", renamed(SOLUTION), 6.0, "2026-12-03T11:00:00Z"),
        ("dave", own_work(), 0.0, "2026-12-01T11:00:00Z"),
        ("erin", None, 0.0, "2026-12-01T11:00:00Z"),
        ("frank", own_work().replace("print(", "print('frank', "), 0.0, "2026-12-01T12:00:00Z"),
    ]:
        repo, commit = student_repository(tmp_path, student, code)
        failure = HOSTILE if student == "dave" else WAITED.format(rank=1, seconds=6.2, line=108) if student == "frank" else WAITED.format(rank=0, seconds=12.5, line=97) if student == "erin" else "no all-reduce at all: is the model wrapped in DistributedDataParallel?"
        results.save(graded(score, failure), {"student": student, "practical": "p6", "commit": commit, "submitted_at": when, "source": {"kind": "git", "repo": repo}})
    return results


def test_identical_and_renamed_copies_are_flagged_and_the_template_and_own_work_are_not(store: ResultsStore, tmp_path: Path) -> None:
    done = run_cli("similarity", str(store.root), "--csv", str(tmp_path / "pairs.csv"))
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert lines[0] == ["p6", "alice", "bob", "identical"]
    flagged = {(line[1], line[2]) for line in lines[:-1]}
    assert {("alice", "carol"), ("bob", "carol")} <= flagged
    assert not any("erin" in pair for pair in flagged)  # the untouched template is nobody's work
    assert ("dave", "frank") in flagged  # one tutorial, copied twice
    assert not any({"alice", "dave"} <= set(pair) for pair in flagged)
    assert done.stdout.splitlines()[-1].startswith(f"{len(flagged)} pair(s) at least 80% alike")
    assert (tmp_path / "pairs.csv").read_text().splitlines()[1] == "p6,alice,bob,1.000,yes"


def test_a_template_only_difference_is_not_similarity() -> None:
    from grader.similarity import compare

    one = TEMPLATE.replace("# TODO", "# TODO done:  x = 1\n# ") .encode()
    assert compare("p6", {"a": TEMPLATE.encode(), "b": TEMPLATE.encode()}, TEMPLATE, "p6_ddp.py", 0.8) == ()
    assert compare("p6", {"a": one, "b": SOLUTION.encode()}, TEMPLATE, "p6_ddp.py", 0.8) == ()


def test_the_class_report_holds_each_table_and_escapes_what_students_wrote(store: ResultsStore, tmp_path: Path) -> None:
    course = tmp_path / "course"
    shutil.copytree(ROOT, course, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "tests", "bench"), symlinks=True)
    (course / "course.yaml").write_text((ROOT / "course.yaml").read_text() + "deadlines:\n  p6: 2026-12-02T00:00:00Z\n")
    page = tmp_path / "report.html"
    done = run_cli("--course-root", str(course), "report", str(store.root), "--out", str(page))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"class report of 6 students written to {page}"
    text = page.read_text()
    assert "6 students · mean 5.0 · median 5 of 8 · 1 late · 0 autograder error(s)" in text
    assert "<td>Gradients averaged</td><td>3/6</td><td>50%</td>" in text
    assert "<td>ws2: rank # waited #s at p6_ddp.py:# for a collective the others never made</td><td>2</td>" in text  # erin's and frank's: one kind
    assert re.search(r"<h3>Late</h3>\n<table><tr><th>student</th><th>what the late policy made of it</th></tr><tr><td>carol</td><td>[^<]*late[^<]*</td></tr></table>", text), text[text.find("<h3>Late"):][:400]
    assert "<img src=x" not in text and "&lt;img src=x onerror=&quot;document.title=&#x27;pwned&#x27;&quot;&gt;" in text
    assert "<td>alice</td><td>bob</td><td>identical</td>" in text
    assert text.count("data:image/png;base64,") == 2


@needs("chromium", chromium_problem())
def test_the_class_report_opens_in_a_browser(store: ResultsStore, tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert run_cli("report", str(store.root), "--out", str(page)).returncode == 0
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    flags = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert "Pass rate of each check" in dom.stdout, dom.stderr[-2000:]
    assert "<title>Parallelism in Deep Learning: class report</title>" in dom.stdout  # the student's markup did not run
    shot = tmp_path / "report.png"
    subprocess.run([*flags, f"--screenshot={shot}", "--window-size=1280,1600", page.as_uri()], capture_output=True, timeout=120)
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[:2] == (1600, 1280)
    assert (pixels[..., :3].mean(axis=2) < 0.9).mean() > 0.03  # text and plots drawn, not a blank page


def test_a_hand_made_notebook_or_a_script_of_nothing_is_compared_without_a_crash() -> None:
    from grader.similarity import code_of, compare

    assert code_of("p4.ipynb", b'{"cells": [{"cell_type": "code", "source": [1, "x = 1"]}, {"cell_type": "code", "source": 5}]}') == "x = 1\n\n"
    assert code_of("p4.ipynb", b'{"cells": 5}') == '{"cells": 5}'
    deep = b"[" * 100_000 + b"]" * 100_000
    assert code_of("p4.ipynb", deep) == deep.decode()
    assert compare("p6", {"a": b"", "b": b"", "c": TEMPLATE.replace("\n", "\r\n").encode(), "d": (TEMPLATE + "# mine\n").encode()}, TEMPLATE, "p6_ddp.py", 0.8) == ()
