"""`python -m grader new`: a new practical grades its own solution at full marks at once."""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.assign.scaffold import add_to_course
from grader.course import Course
from helpers import copy_course, load_results, run_cli

pytestmark = pytest.mark.slow


def test_a_new_practical_is_listed_released_and_graded(tmp_path: Path) -> None:
    course = copy_course(tmp_path / "course")
    root = ("--course-root", str(course))
    done = run_cli(*root, "new", "p11", "--title", "A mean over all ranks")
    assert done.returncode == 0, done.stderr
    for made in ("solutions/p11/p11.py", "solutions/p11/assignment.yaml", "grader/practicals/p11.py", "tests/test_practical_p11.py", "assignments/p11/p11.py"):
        assert (course / made).is_file(), made
    assert "# BEGIN SOLUTION" not in (course / "assignments" / "p11" / "p11.py").read_text()
    assert "p11: A mean over all ranks — 4 points" in run_cli(*root, "list").stdout
    assert run_cli(*root, "release", "--check").returncode == 0
    solution = run_cli(*root, "grade", "p11", str(course / "solutions" / "p11"), "--results", str(tmp_path / "s.json"))
    assert solution.returncode == 0 and load_results(tmp_path / "s.json")["score"] == 4, solution.stdout
    template = run_cli(*root, "grade", "p11", str(course / "assignments" / "p11"), "--results", str(tmp_path / "t.json"))
    assert load_results(tmp_path / "t.json")["score"] == 0 and "stops at TODO 1: compute the mean of the whole batch" in template.stdout


def test_new_refuses_bad_or_taken_ids(tmp_path: Path) -> None:
    course = copy_course(tmp_path / "course")
    root = ("--course-root", str(course))
    assert "error: p6 exists already" in run_cli(*root, "new", "p6", "--title", "again").stderr
    assert "practical ids look like p7 or p11b, not 'lab7'" in run_cli(*root, "new", "lab7", "--title", "x").stderr


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (
            "# the course\ncourse: PDL   # its title\n\npracticals:\n    -   p4   # first\n    -   p6\n\n# more to come\ndeadline: x\n",
            "# the course\ncourse: PDL   # its title\n\npracticals:\n    -   p4   # first\n    -   p6\n    -   p11\n\n# more to come\ndeadline: x\n",
        ),
        ("course: PDL\npracticals: [p4, p6]  # all\n", "course: PDL\npracticals: [p4, p6, p11]  # all\n"),
        ("course: PDL\npracticals:\n- p4", "course: PDL\npracticals:\n- p4\n- p11\n"),
    ],
    ids=["block list with comments", "flow list", "no final newline"],
)
def test_new_adds_one_line_to_course_yaml_and_keeps_the_rest(before: str, after: str, tmp_path: Path) -> None:
    (tmp_path / "course.yaml").write_text(before)
    add_to_course(Course(root=tmp_path, title="PDL", practicals=()), "p11")
    assert (tmp_path / "course.yaml").read_text() == after
