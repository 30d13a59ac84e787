"""`python -m grader export-student PRACTICAL... --out DIR`: the students' starter repository.

What goes in is an allow-list, nothing else:
  assignments/<id>/**      the released templates (each file must be one `release` makes), the
                           spec reduced to its public checks
  grader/**/*.py           the grader, for the self-check: the probe, the checks, the practical
                           modules of the exported practicals (a module that starts with the line
                           `# grader: private` never goes out)
  pyproject.toml, scripts/setup.sh
  calibration/<id>.yaml    the course's baselines (`grader calibrate`), where measured: the pace
                           of the self-check's runs (grader/grade/pace.py)
  course.yaml, README.md   made for the export (README from templates/student/, its examples
                           naming a practical the export holds: `student_readme`)
  .github/workflows/student-self-check.yml   the self-check on every push
Every export is scanned before anything is written: a line of any practical's solution, a
solution marker, an answer of an answer key (solutions/<id>/answer_key.yaml, which stays home)
beside its question's name, or a hidden check's id or title in a spec or README makes it
refuse, naming the file, the line and what leaked.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from string import Template

import yaml

from grader.assign.leaks import Leak, answer_needles, public_lines, scan, solution_lines
from grader.assign.release import SKIPPED_PARTS, release_practical
from grader.course import Course, load_practical
from grader.spec import load_answer_key

PRIVATE = "# grader: private"
STUDENT_TEMPLATES = Path("templates") / "student"
STUDENT_WORKFLOW = ".github/workflows/student-self-check.yml"


class ExportRefused(Exception):
    """The export would leak something, or holds a file it may not."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("export refused:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class Export:
    files: dict[str, bytes]


def public_spec(course: Course, practical: str) -> tuple[bytes, dict[str, str]]:
    """The spec with only its public checks (and the runs they use), and the hidden checks
    (id -> title) it left out."""
    spec = course.spec_path(practical)
    data = yaml.safe_load(spec.read_text(encoding="utf-8"))
    checks = load_practical(course, practical).assignment.checks
    hidden = {c.id: c.title for c in checks if not c.public}
    data["checks"] = [entry for entry in data["checks"] if entry["id"] not in hidden]
    used = {name for c in checks if c.public for name in c.runs}
    data["runs"] = [run for run in data["runs"] if run["name"] in used]
    header = f"# Grading spec of {practical}: the public checks (the self-check runs these).\n"
    return (header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)).encode(), hidden


def _grader_files(course: Course, practicals: list[str]) -> dict[str, bytes]:
    files = {}
    for path in sorted((course.root / "grader").rglob("*.py")):
        relative = path.relative_to(course.root)
        if SKIPPED_PARTS.intersection(relative.parts):
            continue
        if relative.parts[:2] == ("grader", "practicals") and path.stem not in ("__init__", "reference", *practicals):
            continue
        content = path.read_bytes()
        if content.startswith(PRIVATE.encode()):
            continue
        files[relative.as_posix()] = content
    return files


def build_export(course: Course, practicals: list[str]) -> Export:
    """The export's files, scanned; ExportRefused lists every problem found."""
    problems: list[str] = []
    files: dict[str, bytes] = {}
    hidden_checks: dict[str, dict[str, str]] = {}
    for practical in practicals:
        released = release_practical(course, practical)
        folder = course.template_dir(practical)
        for path in sorted(folder.rglob("*")):
            relative = path.relative_to(folder).as_posix()
            if not path.is_file() or SKIPPED_PARTS.intersection(path.relative_to(folder).parts):
                continue
            if relative not in released.files:
                problems.append(f"assignments/{practical}/{relative}: not a file that `release` makes from solutions/{practical} (not on the allow-list)")
                continue
            files[f"assignments/{practical}/{relative}"] = path.read_bytes()
        spec, hidden = public_spec(course, practical)
        files[f"assignments/{practical}/assignment.yaml"] = spec
        hidden_checks[practical] = hidden
    files.update(_grader_files(course, practicals))
    for name in ("pyproject.toml", "scripts/setup.sh"):
        files[name] = (course.root / name).read_bytes()
    for practical in practicals:  # the course's measured baselines: the self-check's pace where no reference solution is at hand
        baselines = course.root / "calibration" / f"{practical}.yaml"
        if baselines.is_file():
            files[f"calibration/{practical}.yaml"] = baselines.read_bytes()
    files["course.yaml"] = f"# The practicals of this repository.\ncourse: {course.title}\npracticals: [{', '.join(practicals)}]\n".encode()
    templates = course.root / STUDENT_TEMPLATES
    for path in sorted(templates.rglob("*")) if templates.is_dir() else []:
        if path.is_file():
            files[path.relative_to(templates).as_posix()] = path.read_bytes()
    if "README.md" in files:
        files["README.md"] = student_readme(files["README.md"].decode("utf-8"), course, practicals).encode("utf-8")
    files[STUDENT_WORKFLOW] = (course.root / STUDENT_WORKFLOW).read_bytes()
    public = public_lines(course)
    secrets = [line for practical in course.practicals for line in solution_lines(course, practical, public)]
    keys = {practical: load_answer_key(course.root / "solutions", practical) for practical in course.practicals}
    answers = [needle for practical, key in keys.items() if key for needle in answer_needles(practical, key)]
    leaks: list[Leak] = scan(files, secrets, hidden_checks, answers)
    problems += [leak.describe() for leak in leaks]
    if problems:
        raise ExportRefused(problems)
    return Export(files=files)


def student_readme(template: str, course: Course, practicals: list[str]) -> str:
    """templates/student/README.md for an export of `practicals`: `$practicals_table` (each
    practical's id and title), and in the examples `$practical` and `$script`, the first of
    them whose script is a Python file (a notebook cannot be run by `grader run`)."""
    specs = {practical: load_practical(course, practical).assignment for practical in practicals}
    example = next((p for p in practicals if specs[p].script.endswith(".py")), practicals[0])
    table = "\n".join(["| practical | what it is about |", "|---|---|", *(f"| `{p}` | {specs[p].title} |" for p in practicals)])
    return Template(template).safe_substitute(practicals_table=table, practical=example, script=specs[example].script)


def write_export(export: Export, out: Path) -> None:
    """Write the export into `out`, which must be empty or absent."""
    if out.exists() and any(out.iterdir()):
        raise FileExistsError(f"{out} is not empty")
    for name, content in sorted(export.files.items()):
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        if name.endswith(".sh"):
            path.chmod(0o755)
