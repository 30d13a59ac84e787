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
    add_to_course(course, practical)
    written.append("course.yaml")
    updated = load_course(course.root)
    written += write(updated, release_practical(updated, practical))
    return written


def add_to_course(course: Course, practical: str) -> None:
    """Append `practical` to course.yaml's `practicals:` list by editing that list's lines only:
    the file's comments, order and indentation stay as the staff wrote them."""
    path = course.root / "course.yaml"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if re.match(r"practicals\s*:", line)), None)
    if start is None:
        raise ScaffoldError(f"{path} has no `practicals:` list to add {practical} to")
    flow = re.match(r"(practicals\s*:\s*\[)([^\]]*)\](.*)$", lines[start].rstrip("\n"))
    if flow:
        items = flow.group(2).strip()
        lines[start] = f"{flow.group(1)}{items + ', ' if items else ''}{practical}]{flow.group(3)}\n"
    else:
        last = start
        for index in range(start + 1, len(lines)):
            if re.match(r"\s*-\s", lines[index]):
                last = index
            elif lines[index].strip() and not lines[index].lstrip().startswith("#"):
                break
        item = re.match(r"\s*-\s*", lines[last]) if last > start else None
        if not lines[last].endswith("\n"):
            lines[last] += "\n"
        lines.insert(last + 1, f"{item.group(0) if item else '  - '}{practical}\n")
    edited = "".join(lines)
    listed = (yaml.safe_load(text) or {}).get("practicals") or []
    if (yaml.safe_load(edited) or {}).get("practicals") != [*listed, practical]:
        raise ScaffoldError(f"could not add {practical} to the `practicals:` list of {path}: add it by hand")
    path.write_text(edited, encoding="utf-8")
