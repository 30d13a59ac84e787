"""`python -m grader release`: generate assignments/<id>/ from solutions/<id>/.

Per file of the solution folder:
  *.py, *.yaml, *.yml   the transforms (grader/assign/transforms), in order;
  *.ipynb               each code cell through the transforms; markers in a markdown or raw
                        cell are an error; outputs and execution counts are cleared;
  NAME.template.EXT     released as NAME.EXT, in place of the solution's NAME.EXT;
  anything else         copied as it is.
The output is deterministic (same input, same bytes), so releasing twice changes nothing, and
files in assignments/<id>/ that the release would not make are removed.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nbformat

from grader.assign.markers import ANY_MARKER, Code, MarkerError
from grader.assign.transforms import TRANSFORMS
from grader.course import Course
from grader.spec import ANSWER_KEY

TRANSFORMED = {".py": True, ".yaml": False, ".yml": False}  # suffix -> Python (regions become a raise)
SKIPPED_PARTS = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache"}


@dataclass(frozen=True)
class Released:
    """What a release of one practical makes: relative path -> content."""

    practical: str
    files: dict[str, bytes]


def transform(code: Code) -> Code:
    for step in TRANSFORMS:
        code = step(code)
    return code


def _text(source: Path, label: str, python: bool) -> bytes:
    text = source.read_text(encoding="utf-8")
    code = transform(Code(where=label, lines=tuple(text.splitlines()), python=python))
    return ("\n".join(code.lines) + ("\n" if text.endswith("\n") else "")).encode()


def _notebook(source: Path, label: str) -> bytes:
    notebook = nbformat.read(source, as_version=4)
    for index, cell in enumerate(notebook.cells, 1):
        where = f"{label}, cell {index}"
        lines = tuple(str(cell.source).splitlines())
        if cell.cell_type != "code":
            for number, line in enumerate(lines, 1):
                if ANY_MARKER.search(line):
                    raise MarkerError(where, number, f"markers belong in code cells; this is a {cell.cell_type} cell")
            continue
        cell.source = "\n".join(transform(Code(where=where, lines=lines)).lines)
        cell.outputs = []
        cell.execution_count = None
    return nbformat.writes(notebook).encode() + b"\n"


def release_practical(course: Course, practical: str) -> Released:
    """The template files of `practical`, made in memory (MarkerError for bad markers); the
    answer key (answer_key.yaml) stays with the solution."""
    source_dir = course.solution_dir(practical)
    if not source_dir.is_dir():
        raise FileNotFoundError(f"{source_dir} does not exist")
    sources = sorted(p for p in source_dir.rglob("*") if p.is_file() and not SKIPPED_PARTS.intersection(p.relative_to(source_dir).parts) and p.relative_to(source_dir).as_posix() != ANSWER_KEY)
    twins = {p.with_name(p.name.replace(".template.", ".")) for p in sources if ".template." in p.name}
    files: dict[str, bytes] = {}
    for source in sources:
        if source in twins:
            continue  # its NAME.template.EXT is released in its place
        target = source.relative_to(source_dir).as_posix().replace(".template.", ".")
        label = source.relative_to(course.root).as_posix()
        if ".template." in source.name:
            files[target] = source.read_bytes()
        elif source.suffix in TRANSFORMED:
            files[target] = _text(source, label, TRANSFORMED[source.suffix])
        elif source.suffix == ".ipynb":
            files[target] = _notebook(source, label)
        else:
            files[target] = source.read_bytes()
    return Released(practical=practical, files=files)


def differences(course: Course, released: Released) -> list[str]:
    """How assignments/<id>/ differs from `released` ([] when in step)."""
    folder = course.template_dir(released.practical)
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and not SKIPPED_PARTS.intersection(p.relative_to(folder).parts)} if folder.is_dir() else set()
    problems = [f"assignments/{released.practical}/{name} would not be made by a release" for name in sorted(present - set(released.files))]
    for name, content in sorted(released.files.items()):
        path = folder / name
        if name not in present:
            problems.append(f"assignments/{released.practical}/{name} is missing")
        elif path.read_bytes() != content:
            problems.append(f"assignments/{released.practical}/{name} differs from what solutions/{released.practical} releases")
    return problems


def write(course: Course, released: Released) -> list[str]:
    """Make assignments/<id>/ exactly `released`; return the paths that changed."""
    folder = course.template_dir(released.practical)
    changed = []
    for name, content in sorted(released.files.items()):
        path = folder / name
        if not path.is_file() or path.read_bytes() != content:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            changed.append(str(path.relative_to(course.root)))
    if folder.is_dir():
        for path in sorted(folder.rglob("*"), reverse=True):
            relative = path.relative_to(folder).as_posix()
            if path.is_file() and relative not in released.files and not SKIPPED_PARTS.intersection(path.relative_to(folder).parts):
                path.unlink()
                changed.append(f"{path.relative_to(course.root)} (removed)")
    return changed
