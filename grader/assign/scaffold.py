"""`python -m grader new ID --title "..."`: a new practical from templates/practical/.

It writes the solution (with markers), the spec, the README, the practical's module and a
test, adds the practical to course.yaml, and releases its template; the new practical grades
its own solution at full marks from the start, and the author edits from there.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from grader.assign.release import release_practical, write
from grader.course import Course, load_course

TEMPLATES = Path("templates") / "practical"
ID = re.compile(r"^p[0-9]+[a-z]?$")


class ScaffoldError(ValueError):
    """The practical cannot be made (bad id, already there, no templates)."""


def _targets(practical: str) -> dict[str, str]:
    """Template file -> where it goes, relative to the course root."""
    return {
        "solution.py": f"solutions/{practical}/{practical}.py",
        "assignment.yaml": f"solutions/{practical}/assignment.yaml",
        "README.md": f"solutions/{practical}/README.md",
        "module.py": f"grader/practicals/{practical}.py",
        "test.py": f"tests/test_practical_{practical}.py",
    }


def new_practical(course: Course, practical: str, title: str) -> list[str]:
    """Make the practical; return the files written (relative to the course root)."""
    if not ID.match(practical):
        raise ScaffoldError(f"practical ids look like p7 or p11b, not {practical!r}")
    if practical in course.practicals or course.solution_dir(practical).exists():
        raise ScaffoldError(f"{practical} exists already")
    if not title.strip():
        raise ScaffoldError("give the practical a title: --title '...'")
    templates = course.root / TEMPLATES
    if not templates.is_dir():
        raise ScaffoldError(f"{templates} is missing: it holds the files a new practical starts from")
    values = {"{{id}}": practical, "{{title}}": title.strip(), "{{title_yaml}}": json.dumps(title.strip(), ensure_ascii=False)}
    written = []
    for template, target in _targets(practical).items():
        text = (templates / template).read_text(encoding="utf-8")
        for placeholder, value in values.items():
            text = text.replace(placeholder, value)
        path = course.root / target
        if path.exists():
            raise ScaffoldError(f"{target} exists already")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(target)
    _add_to_course(course, practical)
    written.append("course.yaml")
    updated = load_course(course.root)
    written += write(updated, release_practical(updated, practical))
    return written


def _add_to_course(course: Course, practical: str) -> None:
    path = course.root / "course.yaml"
    text = path.read_text(encoding="utf-8")
    comments = "".join(line + "\n" for line in text.splitlines() if line.startswith("#"))
    data = yaml.safe_load(text)
    data["practicals"] = [*data["practicals"], practical]
    path.write_text(comments + yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
