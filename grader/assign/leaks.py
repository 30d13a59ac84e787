"""Finding what must not reach students: solution lines, hidden checks, markers.

A *solution line* is a line inside a `# BEGIN SOLUTION` region, or the solution side of a
`# TEMPLATE:` line, that is long enough to be telling (10 characters, not a comment) and that
the released template does not hold anyway (`import torch` inside a region is no secret).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import nbformat

from grader.assign.markers import ANY_MARKER, BEGIN_SOLUTION, END_SOLUTION, TEMPLATE_LINE
from grader.assign.release import release_practical
from grader.course import Course

MIN_LENGTH = 10


@dataclass(frozen=True)
class SolutionLine:
    text: str  # stripped
    source: str  # "solutions/p6/p6_ddp.py:58"


@dataclass(frozen=True)
class AnswerNeedle:
    name: str  # the question, e.g. "main_overhead"
    forms: tuple[str, ...]  # its answer as code or YAML would write it
    source: str  # "solutions/p4/answer_key.yaml"


@dataclass(frozen=True)
class Leak:
    where: str  # "assignments/p6/p6_ddp.py:57"
    what: str

    def describe(self) -> str:
        return f"{self.where}: {self.what}"


def _code_units(path: Path, label: str) -> Iterable[tuple[str, list[str]]]:
    """(label, lines) of a text file, or of each code cell of a notebook."""
    if path.suffix == ".ipynb":
        notebook = nbformat.read(path, as_version=4)
        for index, cell in enumerate(notebook.cells, 1):
            if cell.cell_type == "code":
                yield f"{label}, cell {index}", str(cell.source).splitlines()
    elif path.suffix in (".py", ".yaml", ".yml"):
        yield label, path.read_text(encoding="utf-8").splitlines()


def _telling(text: str) -> bool:
    return len(text) >= MIN_LENGTH and not text.startswith("#")


def public_lines(course: Course) -> set[str]:
    """Every line of every released template: no secret, wherever it appears."""
    lines: set[str] = set()
    for practical in course.practicals:
        for content in release_practical(course, practical).files.values():
            lines.update(line.strip() for line in content.decode("utf-8", errors="replace").splitlines())
    return lines


def solution_lines(course: Course, practical: str, public: set[str]) -> list[SolutionLine]:
    """The lines of `practical`'s solution that no template holds (`public`)."""
    folder = course.solution_dir(practical)
    found = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or ".template." in path.name:
            continue
        for label, lines in _code_units(path, path.relative_to(course.root).as_posix()):
            inside = False
            for number, line in enumerate(lines, 1):
                if BEGIN_SOLUTION.match(line):
                    inside = True
                    continue
                if END_SOLUTION.match(line):
                    inside = False
                    continue
                template = TEMPLATE_LINE.match(line)
                text = (template["code"] if template else line).strip()
                if (inside or template) and _telling(text) and text not in public:
                    found.append(SolutionLine(text=text, source=f"{label}:{number}"))
    return found


def answer_needles(practical: str, key: Mapping[str, Any]) -> list[AnswerNeedle]:
    """How each answer of a practical's answer key would be written beside its question's
    name: quoted or in YAML for a word, as Python or YAML writes a list."""
    needles = []
    for name, value in key.items():
        if isinstance(value, list):
            forms = (str(value), "[" + ",".join(str(v) for v in value) + "]")
        else:
            forms = (f'"{value}"', f"'{value}'", f"{name}: {value}")
        needles.append(AnswerNeedle(name=name, forms=forms, source=f"solutions/{practical}/answer_key.yaml"))
    return needles


def scan(files: dict[str, bytes], secrets: list[SolutionLine], hidden_checks: dict[str, dict[str, str]], answers: list[AnswerNeedle] = ()) -> list[Leak]:
    """Every leak in `files` (exported path -> content): solution lines, markers, an answer of
    an answer key on a line with its question's name, and the ids or titles of a practical's
    hidden checks (practical -> id -> title) in its specs and markdown."""
    by_text = {s.text: s for s in secrets}
    leaks = []
    for name, content in sorted(files.items()):
        text = content.decode("utf-8", errors="replace")
        lines = text.splitlines()
        if name.endswith(".ipynb"):
            try:
                notebook = nbformat.reads(text, as_version=4)
                lines = [line for cell in notebook.cells for line in str(cell.source).splitlines()]
            except Exception:  # noqa: BLE001 - scan the raw text then
                pass
        for number, line in enumerate(lines, 1):
            stripped = line.strip()
            if stripped in by_text:
                leaks.append(Leak(f"{name}:{number}", f"a line of the solution ({by_text[stripped].source}): {stripped[:100]!r}"))
            elif ANY_MARKER.search(line) and not name.endswith(".md") and not name.startswith("grader/"):
                leaks.append(Leak(f"{name}:{number}", f"a solution marker: {stripped[:100]!r}"))
            else:
                for needle in answers:
                    if needle.name in line and any(form in line for form in needle.forms):
                        leaks.append(Leak(f"{name}:{number}", f"the answer to {needle.name} ({needle.source}): {stripped[:100]!r}"))
        practical = name.split("/")[1] if name.startswith("assignments/") else None
        if practical and name.endswith(("assignment.yaml", ".md")):
            for check_id, title in hidden_checks.get(practical, {}).items():
                needles = (check_id, title) if name.endswith(".yaml") else (title,)  # ids are common words in prose
                for needle in needles:
                    if needle and needle in text:
                        leaks.append(Leak(name, f"the hidden check {check_id!r} ({needle!r})"))
    return leaks
