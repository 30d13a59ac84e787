"""Where the course lives and what its practicals are.

The course root is the folder with `course.yaml` (the list of practicals) and the
`assignments/` and `solutions/` folders. It is resolved in one place, in this order:
an explicit path (--course-root), $GRADER_COURSE_ROOT, the current folder or one of its
parents, and finally the folder that holds the installed grader package.
"""
from __future__ import annotations

import difflib

import importlib
import importlib.util
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Mapping

import yaml

from grader.policy import CoursePolicy, PolicyError, load_policy
from grader.spec import Assignment, load_assignment

COURSE_FILE = "course.yaml"
_PRACTICAL_ID = re.compile(r"^p[0-9]+[a-z]?$")


class CourseError(Exception):
    """The course or one of its practicals cannot be found or loaded."""


BACKENDS = ("local", "slurm")


@dataclass(frozen=True)
class FollowUpPlace:
    """Where the checks a grading defers for its machine are graded (course.yaml's `deferred`):
    a follow-up job of those checks alone, for the same commit and seed (grader/submit/followup.py).

        deferred:
          backend: slurm     # or local
          partition: gpu     # Slurm's partition (optional)
          gpus: 2            # GPUs the job asks for (GRES)
          time_min: 30       # the job's limit (optional: the spec's budget and 5 minutes)
    """

    backend: str = "slurm"
    partition: str | None = None
    gpus: int = 0
    time_min: int | None = None

    def describe(self) -> str:
        """"partition gpu (2 GPUs)" or "the local backend"."""
        where = f"partition {self.partition}" if self.partition else f"the {self.backend} backend"
        return where + (f" ({self.gpus} GPUs)" if self.gpus else "")

    def job_options(self) -> dict:
        """The queued follow-up's job options (grader/submit/queue.py `Submission.options`)."""
        return {key: value for key, value in (("partition", self.partition), ("gpus", self.gpus), ("time_min", self.time_min)) if value}


@dataclass(frozen=True)
class Course:
    root: Path
    title: str
    practicals: tuple[str, ...]
    policy: CoursePolicy = CoursePolicy()  # deadlines, extensions, late policy (grader/policy.py)
    follow_up: FollowUpPlace | None = None  # where deferred checks are graded; None: they stay pending
    leaderboard: tuple[str, ...] = ()  # practicals whose fully correct submissions are ranked by the grader's measured step time (grader/results/leaderboard.py)

    def spec_path(self, practical: str) -> Path:
        return self.root / "assignments" / practical / "assignment.yaml"

    def template_dir(self, practical: str) -> Path:
        return self.root / "assignments" / practical

    def solution_dir(self, practical: str) -> Path:
        return self.root / "solutions" / practical


@dataclass(frozen=True)
class Practical:
    """A practical ready to grade: its validated spec and its module (checks, references)."""

    assignment: Assignment
    module: ModuleType
    course: "Course | None" = None  # where it was loaded from (its reference solutions, its baselines)

    @property
    def id(self) -> str:
        return self.assignment.id


def find_course_root(explicit: Path | None = None, environ: Mapping[str, str] = os.environ, cwd: Path | None = None) -> Path:
    """The course root, searched in the documented order; CourseError if there is none."""
    if explicit is not None:
        if not (explicit / COURSE_FILE).is_file():
            raise CourseError(f"--course-root {explicit}: no {COURSE_FILE} there")
        return explicit.resolve()
    if environ.get("GRADER_COURSE_ROOT"):
        root = Path(environ["GRADER_COURSE_ROOT"])
        if not (root / COURSE_FILE).is_file():
            raise CourseError(f"GRADER_COURSE_ROOT={root}: no {COURSE_FILE} there")
        return root.resolve()
    start = (cwd or Path.cwd()).resolve()
    for folder in (start, *start.parents):
        if (folder / COURSE_FILE).is_file():
            return folder
    package_home = Path(__file__).resolve().parents[1]
    if (package_home / COURSE_FILE).is_file():
        return package_home
    raise CourseError(f"no {COURSE_FILE} in {start} or its parents; run from the course repository or pass --course-root")


def load_course(root: Path) -> Course:
    """Read course.yaml."""
    path = root / COURSE_FILE
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CourseError(f"{path}: cannot be read: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("practicals"), list):
        raise CourseError(f"{path}: practicals: expected a list of practical ids, found {data!r}")
    practicals = tuple(str(p) for p in data["practicals"])
    for practical in practicals:
        if not _PRACTICAL_ID.match(practical):
            raise CourseError(f"{path}: practicals: expected ids like p6, found {practical!r}")
    try:
        policy = load_policy(data, practicals)
    except PolicyError as exc:
        raise CourseError(f"{path}: {exc}") from None
    board = data.get("leaderboard") or []
    if not isinstance(board, list) or any(str(p) not in practicals for p in board):
        raise CourseError(f"{path}: leaderboard: expected a list of this course's practicals ({', '.join(practicals)}), found {board!r}")
    return Course(root=root, title=str(data.get("course", "")), practicals=practicals, policy=policy, follow_up=follow_up_place(data.get("deferred"), path), leaderboard=tuple(str(p) for p in board))


def follow_up_place(raw: object, path: Path) -> FollowUpPlace | None:
    """course.yaml's `deferred` (FollowUpPlace), None where it is not set; CourseError naming
    the key that is wrong."""
    if raw is None:
        return None
    known = {"backend", "partition", "gpus", "time_min"}
    if not isinstance(raw, dict) or set(raw) - known:
        raise CourseError(f"{path}: deferred: expected a mapping of {', '.join(sorted(known))}, found {raw!r}")
    backend, partition, gpus, minutes = raw.get("backend", "slurm"), raw.get("partition"), raw.get("gpus", 0), raw.get("time_min")
    if backend not in BACKENDS:
        raise CourseError(f"{path}: deferred.backend: expected one of {', '.join(BACKENDS)}, found {backend!r}")
    if partition is not None and not (isinstance(partition, str) and re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", partition)):
        raise CourseError(f"{path}: deferred.partition: expected a Slurm partition's name, found {partition!r}")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 <= gpus <= 64:
        raise CourseError(f"{path}: deferred.gpus: expected a whole number from 0 to 64, found {gpus!r}")
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int) or not 1 <= minutes <= 24 * 60):
        raise CourseError(f"{path}: deferred.time_min: expected minutes, from 1 to 1440, found {minutes!r}")
    return FollowUpPlace(backend=backend, partition=partition, gpus=gpus, time_min=minutes)


def _practical_module(course: Course, practical: str) -> ModuleType:
    """The practical's module: the course's own grader/practicals/<id>.py (so a course copy,
    or a practical just made by `new`, brings its own), else the installed package's."""
    name = f"grader.practicals.{practical}"
    path = course.root / "grader" / "practicals" / f"{practical}.py"
    try:
        if path.is_file():
            loaded = sys.modules.get(name)
            if loaded is not None and Path(getattr(loaded, "__file__", "")).resolve() == path.resolve():
                return loaded
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
            return module
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - a broken module is reported, not raised through
        raise CourseError(f"practical {practical}: its grader module cannot be loaded: {type(exc).__name__}: {exc}") from None


def unknown_practical(course: Course, practical: str) -> str:
    """"unknown practical 'p8' (did you mean p7?); this course has: p4, p5, p6, p7, p10"."""
    close = difflib.get_close_matches(practical, course.practicals, n=1)
    guess = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown practical {practical!r}{guess}; this course has: {', '.join(course.practicals) or 'none'}"


def load_practical(course: Course, practical: str) -> Practical:
    """The practical's module and its validated spec (SpecError for a bad spec)."""
    if practical not in course.practicals:
        raise CourseError(unknown_practical(course, practical))
    module = _practical_module(course, practical)
    for name in ("CHECKS", "references"):
        if not hasattr(module, name):
            raise CourseError(f"practical {practical}: grader/practicals/{practical}.py defines no {name}")
    source = course.solution_dir(practical) / "assignment.yaml"
    if source.is_file():
        load_assignment(source, module.CHECKS)  # the file the staff edit (assignments/ is made from it): its errors name it
    return Practical(assignment=load_assignment(course.spec_path(practical), module.CHECKS), module=module, course=course)


def check_source_spec(course: Course, practical: str) -> None:
    """Validate solutions/<id>/assignment.yaml, the spec a release copies (SpecError, CourseError)."""
    if practical not in course.practicals:
        raise CourseError(unknown_practical(course, practical))
    load_assignment(course.solution_dir(practical) / "assignment.yaml", _practical_module(course, practical).CHECKS)
