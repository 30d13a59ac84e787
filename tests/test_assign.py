"""Authoring with markers: the transforms, their errors, and `release`."""
from __future__ import annotations

import subprocess
from pathlib import Path

import nbformat
import pytest

from grader.assign.leaks import public_lines, scan, solution_lines
from grader.assign.markers import Code, MarkerError
from grader.assign.release import differences, release_practical, transform
from grader.course import find_course_root, load_course
from helpers import ROOT, copy_course, run_cli

SOURCE = """import torch

def f(x):
    # BEGIN SOLUTION TODO 1: double x
    #: TODO 1: return twice x
    #:
    #: (keep it simple)
    y = x * 2  # the doubled value
    return y
    # END SOLUTION

# BEGIN HIDDEN
SECRET_TEST_VALUE = 41
# END HIDDEN
answer = 42  # TEMPLATE: answer = None
"""


def released(text: str, python: bool = True) -> str:
    return "\n".join(transform(Code("solutions/p9/x.py", tuple(text.splitlines()), python)).lines)


def test_solution_regions_hidden_regions_and_template_lines() -> None:
    assert released(SOURCE) == (
        "import torch\n\ndef f(x):\n"
        "    # TODO 1: return twice x\n    #\n    # (keep it simple)\n"
        '    raise NotImplementedError("TODO 1: double x")\n\n'
        "answer = None"
    )
    assert released("a: 1\n# BEGIN SOLUTION\nb: 2\n# END SOLUTION\nc: 3  # TEMPLATE: c:", python=False) == "a: 1\nc:"
    assert released("    # BEGIN SOLUTION\n    x = 1\n    # END SOLUTION") == '    raise NotImplementedError("TODO: complete this part")'


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("# BEGIN SOLUTION\nx = 1\n", "solutions/p9/x.py:1: BEGIN SOLUTION is never closed by END SOLUTION"),
        ("x = 1\n# END SOLUTION\n", "solutions/p9/x.py:2: END SOLUTION without a BEGIN SOLUTION before it"),
        ("# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n# END SOLUTION\n", "solutions/p9/x.py:2: BEGIN SOLUTION inside the solution region opened at line 1 (regions do not nest)"),
        ("# BEGIN HIDDEN\n# BEGIN SOLUTION\n# END SOLUTION\n# END HIDDEN\n", "solutions/p9/x.py:2: BEGIN SOLUTION inside the hidden region opened at line 1"),
        ("# BEGIN HIDDEN\nx = 1\n", "solutions/p9/x.py:1: BEGIN HIDDEN is never closed by END HIDDEN"),
        ("x = 1\n# BEGIN SOLUTON\nx = 2\n# END SOLUTON\n", "solutions/p9/x.py:2: this looks like a marker but is not one"),
        ("x = 1\n  #: a prompt outside a region\n", "solutions/p9/x.py:2: a marker is left after the transforms"),
    ],
)
def test_malformed_markers_fail_with_file_and_line(text: str, error: str) -> None:
    with pytest.raises(MarkerError) as caught:
        released(text)
    assert str(caught.value).startswith(error)


def test_a_marker_in_a_markdown_cell_is_refused(tmp_path: Path) -> None:
    course = copy_course(tmp_path)
    path = course / "solutions" / "p4" / "p4_concepts.ipynb"
    notebook = nbformat.read(path, as_version=4)
    notebook.cells[3].source += "\n# BEGIN SOLUTION\nthe answer\n# END SOLUTION"
    nbformat.write(notebook, path)
    done = run_cli("--course-root", str(course), "release", "p4")
    assert done.returncode == 1
    assert "solutions/p4/p4_concepts.ipynb, cell 4:" in done.stderr and "markers belong in code cells; this is a markdown cell" in done.stderr


def test_assignments_are_in_step_with_solutions() -> None:
    course = load_course(find_course_root(cwd=ROOT))
    for practical in course.practicals:
        assert differences(course, release_practical(course, practical)) == [], "run: python -m grader release"


def test_the_templates_hold_no_solution_line() -> None:
    course = load_course(find_course_root(cwd=ROOT))
    public = public_lines(course)
    secrets = [s for p in course.practicals for s in solution_lines(course, p, public)]
    assert any("dist.init_process_group(backend=backend)" == s.text for s in secrets)
    files = {f"assignments/{p}/{n}": c for p in course.practicals for n, c in release_practical(course, p).files.items()}
    assert scan(files, secrets, {}) == []


def test_releasing_twice_leaves_git_status_clean(tmp_path: Path) -> None:
    course = copy_course(tmp_path)
    git = ["git", "-c", "user.email=t@t", "-c", "user.name=t", "-C", str(course)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "course"], check=True)
    for _ in range(2):
        assert run_cli("--course-root", str(course), "release").returncode == 0
        assert subprocess.run([*git, "status", "--porcelain"], capture_output=True, text=True).stdout == ""
    (course / "solutions" / "p6" / "p6_ddp.py").write_text((course / "solutions" / "p6" / "p6_ddp.py").read_text().replace("lr = 0.05", "lr = 0.1"))
    assert run_cli("--course-root", str(course), "release", "--check").returncode == 1
    assert run_cli("--course-root", str(course), "release", "p6").stdout.strip() == "p6: assignments/p6/p6_ddp.py"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("    points: 2\n", "    pointz: 2\n"), "checks[0].pointz: expected one of the keys id, check, title, points"),
        (("    points: 2\n", "    points: two\n"), "checks[0].points: expected"),
        (("    options: {max_ratio: 1.3}\n", "    options: {max_ratio: 1.3, fastest: yes}\n"), "fastest"),
    ],
    ids=["unknown key", "points not a number", "unknown option"],
)
def test_a_bad_spec_is_refused_at_release_naming_the_file_to_fix(change: tuple[str, str], message: str, tmp_path: Path) -> None:
    course = copy_course(tmp_path)
    source = course / "solutions" / "p6" / "assignment.yaml"
    text = source.read_text()
    assert change[0] in text
    source.write_text(text.replace(change[0], change[1], 1))
    released = (course / "assignments" / "p6" / "assignment.yaml").read_text()
    done = run_cli("--course-root", str(course), "release")
    assert done.returncode == 1 and "nothing released: fix the spec of p6 first" in done.stderr
    assert f"{source}: " in done.stderr and message in done.stderr
    assert (course / "assignments" / "p6" / "assignment.yaml").read_text() == released
    listed = run_cli("--course-root", str(course), "list")  # the others are still listed
    assert listed.returncode == 1 and f"p6: cannot be loaded: {source}: " in listed.stdout
    assert all(f"\n{p}: " in listed.stdout for p in ("p4", "p5", "p10"))


def test_the_readme_is_a_front_door_and_every_audience_has_its_guide() -> None:
    """README.md: what this is, the two commands, where to read on (at most 150 lines); each
    guide in docs/ exists and is linked from it, and the speed section stays short."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    for guide in ("students", "instructors", "admins", "design"):
        assert (ROOT / "docs" / f"{guide}.md").is_file() and f"(docs/{guide}.md)" in readme, guide
    assert "bash scripts/setup.sh && .venv/bin/python -m grader verify" in readme and "bash scripts/setup.sh --test && .venv/bin/python -m pytest" in readme
    speed = readme.split("## How speed is judged", 1)[1].split("\n## ", 1)[0]
    assert len(speed.strip().splitlines()) <= 25
