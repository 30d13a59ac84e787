"""Loading and validating assignment.yaml: the one place that knows the spec's format.

Every problem is reported as a SpecError naming the file, the key (as a path such as
`checks[2].points`), what was expected and what was found.
"""
from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import yaml

from grader.checks.base import CheckDef
from grader.run.job import Layout
from grader.spec.model import VISIBILITIES, Assignment, CheckSpec, RunDef, Timing

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PRACTICAL_ID = re.compile(r"^p[0-9]+[a-z]?$")
_REQUIRED = object()


class SpecError(ValueError):
    """A malformed assignment spec."""

    def __init__(self, file: Path | str, key: str, expected: str, found: Any) -> None:
        self.file, self.key, self.expected, self.found = str(file), key, expected, found
        shown = found if isinstance(found, str) and found.startswith("<") else repr(found)
        super().__init__(f"{file}: {key}: expected {expected}, found {shown}")


class _Node:
    """A mapping from the YAML with the path that leads to it, for error messages."""

    def __init__(self, file: Path, path: str, data: Any) -> None:
        self.file, self.path = file, path
        if not isinstance(data, dict):
            raise SpecError(file, path or "(top level)", "a mapping of keys to values", data)
        self.data = data

    def key(self, name: str) -> str:
        return f"{self.path}.{name}" if self.path else name

    def only(self, *allowed: str) -> None:
        for name in self.data:
            if name not in allowed:
                raise SpecError(self.file, self.key(str(name)), f"one of the keys {', '.join(allowed)}", "<an unknown key>")

    def get(self, name: str, expected: str, test: Callable[[Any], bool], default: Any = _REQUIRED) -> Any:
        if name not in self.data:
            if default is _REQUIRED:
                raise SpecError(self.file, self.key(name), expected, "<nothing: the key is missing>")
            return default
        value = self.data[name]
        if not test(value):
            raise SpecError(self.file, self.key(name), expected, value)
        return value

    def child(self, name: str, default: Any = _REQUIRED) -> "_Node":
        if name not in self.data and default is not _REQUIRED:
            return _Node(self.file, self.key(name), default)
        return _Node(self.file, self.key(name), self.get(name, "a mapping", lambda v: isinstance(v, dict)))


def _number(minimum: float = 0.0, strict: bool = False) -> Callable[[Any], bool]:
    def test(value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        return value > minimum if strict else value >= minimum

    return test


def _count(minimum: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def _practical_id(value: Any) -> bool:
    return isinstance(value, str) and bool(_PRACTICAL_ID.match(value))


def _name(value: Any) -> bool:
    return isinstance(value, str) and bool(_NAME.match(value))


def _identifier(value: Any) -> bool:
    return isinstance(value, str) and bool(_IDENTIFIER.match(value))


def _scalar(value: Any) -> bool:
    return isinstance(value, (int, float, str, bool))


def _script(value: Any) -> bool:
    return isinstance(value, str) and value.endswith((".py", ".ipynb")) and ".." not in value and not value.startswith("/")


def _load_args(node: _Node) -> dict[str, Any]:
    for name, value in node.data.items():
        if not _identifier(name) or not _scalar(value):
            raise SpecError(node.file, node.key(str(name)), "a Python identifier with a number, string or true/false", value)
    return dict(node.data)


def _load_draw(node: _Node) -> dict[str, tuple[Any, ...]]:
    """Arguments drawn anew for every grading: name -> the values one is drawn from."""
    for name, values in node.data.items():
        if not _identifier(name) or not isinstance(values, list) or not 1 <= len(values) <= 1000 or not all(_scalar(v) for v in values):
            raise SpecError(node.file, node.key(str(name)), "a Python identifier with a list of 1 to 1000 numbers, strings or true/false to draw from", values)
    return {name: tuple(values) for name, values in node.data.items()}


def _load_runs(top: _Node) -> tuple[RunDef, ...]:
    items = top.get("runs", "a non-empty list of runs", lambda v: isinstance(v, list) and len(v) > 0)
    runs: list[RunDef] = []
    for index, item in enumerate(items):
        node = _Node(top.file, f"runs[{index}]", item)
        node.only("name", "nodes", "ranks_per_node", "virtual_gpus", "script", "args", "solution", "carried", "substitutes")
        name = node.get("name", "a name (letters, digits, _ . -)", _name)
        if any(r.name == name for r in runs):
            raise SpecError(top.file, node.key("name"), "a name no other run has", name)
        layout = Layout(
            nodes=node.get("nodes", "a whole number ≥ 1", _count(1), 1),
            ranks_per_node=node.get("ranks_per_node", "a whole number ≥ 1", _count(1), 1),
        )
        runs.append(
            RunDef(
                name=name,
                layout=layout,
                virtual_gpus=node.get("virtual_gpus", "a whole number ≥ 0 (virtual GPUs per node)", _count(0), 0),
                script=node.get("script", "the file name of a script of the submission", _script, None),
                args=_load_args(node.child("args", default={})),
                solution=node.get("solution", "a practical's id (its reference solution runs instead of the submission)", _practical_id, None),
                carried=node.get("carried", "true or false (the grader's hub carries the ranks' process groups)", lambda v: isinstance(v, bool), False),
                substitutes=node.get("substitutes", "true or false (the hub delivers one send of each step each way with values of its own; needs carried: true)", lambda v: isinstance(v, bool), False),
            )
        )
    return tuple(runs)


def _check_substitutes(path: Path, args: Mapping[str, Any], runs: tuple[RunDef, ...]) -> None:
    """A run whose sends the hub substitutes is carried and has whole-number `dim`,
    `micro_batches` and `steps` arguments (the width of what crosses between stages, the sends
    of a step, the steps)."""
    for index, run in enumerate(runs):
        if not run.substitutes:
            continue
        given = {**args, **run.args}
        if not run.carried:
            raise SpecError(path, f"runs[{index}].substitutes", "carried: true as well (only the grader's hub substitutes sends)", True)
        for name in ("dim", "micro_batches", "steps"):
            if not _count(1)(given.get(name)):
                raise SpecError(path, f"runs[{index}].args.{name}", "a whole number ≥ 1 (substitutes needs it)", given.get(name))


def _load_timing(top: _Node) -> Timing:
    node = top.child("timing", default={})
    node.only("repeats", "warmup_steps", "steps_argument", "clock_factor")
    return Timing(
        repeats=node.get("repeats", "a whole number from 1 to 20 (launches of each timed run)", lambda v: _count(1)(v) and v <= 20, Timing.repeats),
        warmup_steps=node.get("warmup_steps", "a whole number ≥ 0 (steps not timed)", _count(0), Timing.warmup_steps),
        steps_argument=node.get("steps_argument", "the script's argument that sets its number of steps (a Python identifier)", _identifier, Timing.steps_argument),
        clock_factor=node.get("clock_factor", "a whole number from 2 to 20 (the long launch's steps per step of the short one)", lambda v: _count(2)(v) and v <= 20, Timing.clock_factor),
    )


def _check_timed_steps(path: Path, args: Mapping[str, Any], runs: tuple[RunDef, ...], checks: tuple[CheckSpec, ...], available: Mapping[str, CheckDef], timing: Timing) -> None:
    """Every run a speed check times gives the script its number of steps: a run the grader
    times by its own clock is launched with two step counts (grader/speed/measure.py)."""
    timed = {name for check in checks if available[check.check].timed for name in check.runs}
    for run in runs:
        steps = run.args.get(timing.steps_argument, None if run.solution else args.get(timing.steps_argument))
        if run.name in timed and not (_count(1)(steps)):
            raise SpecError(path, f"runs.{run.name}.args.{timing.steps_argument}", f"a whole number ≥ 1 of steps (the run is timed; timing.steps_argument is {timing.steps_argument!r})", steps)


def _load_options(node: _Node, check: CheckDef) -> dict[str, Any]:
    options = {name: option.default for name, option in check.options.items()}
    given = node.child("options", default={})
    for name, value in given.data.items():
        option = check.options.get(name)
        if option is None:
            known = ", ".join(check.options) or "none"
            raise SpecError(node.file, given.key(str(name)), f"an option of check '{check.id}' ({known})", "<an unknown option>")
        if not option.accepts(value):
            raise SpecError(node.file, given.key(name), option.describe(), value)
        options[name] = float(value) if option.kind is float else value
    return options


def _load_checks(top: _Node, runs: tuple[RunDef, ...], available: Mapping[str, CheckDef]) -> tuple[CheckSpec, ...]:
    items = top.get("checks", "a non-empty list of checks", lambda v: isinstance(v, list) and len(v) > 0)
    run_names = tuple(r.name for r in runs)
    checks: list[CheckSpec] = []
    for index, item in enumerate(items):
        node = _Node(top.file, f"checks[{index}]", item)
        node.only("id", "check", "title", "points", "visibility", "runs", "options")
        check_id = node.get("id", "a name (letters, digits, _ . -)", _name)
        if any(c.id == check_id for c in checks):
            raise SpecError(top.file, node.key("id"), "an id no other check has", check_id)
        function = node.get("check", f"one of the practical's checks ({', '.join(available)})", lambda v: v in available, check_id)
        if function not in available:
            raise SpecError(top.file, node.key("id"), f"one of the practical's checks ({', '.join(available)}) or a `check:` key naming one", check_id)
        chosen = node.get("runs", f"a list of run names from {list(run_names)} ([] for none)", lambda v: isinstance(v, list) and all(x in run_names for x in v), list(run_names))
        checks.append(
            CheckSpec(
                id=check_id,
                check=function,
                title=node.get("title", "a non-empty string", lambda v: isinstance(v, str) and v.strip() != ""),
                points=float(node.get("points", "a number ≥ 0", _number())),
                visibility=node.get("visibility", f"one of {', '.join(VISIBILITIES)}", lambda v: v in VISIBILITIES, "visible"),
                runs=tuple(chosen),
                options=_load_options(node, available[function]),
            )
        )
    return tuple(checks)


def load_assignment(path: Path, available: Mapping[str, CheckDef]) -> Assignment:
    """Read and validate `path` against the checks the practical offers.

    Raises SpecError for any problem, including a file that is missing or is not YAML.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(path, "(file)", "a readable assignment.yaml", f"<{exc.strerror or exc}>") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise SpecError(path, "(file)", "valid YAML", f"<{getattr(exc, 'problem', None) or exc}{where}>") from None
    top = _Node(path, "", data)
    top.only("id", "title", "script", "seed_argument", "args", "draw", "variables", "timeouts", "runs", "checks", "answers", "manual_answers", "sandbox", "timing")
    args = _load_args(top.child("args", default={}))
    draw = _load_draw(top.child("draw", default={}))
    timeouts = top.child("timeouts", default={})
    timeouts.only("run_s", "total_s")
    run_timeout = float(timeouts.get("run_s", "a number of seconds > 0", _number(strict=True), 60))
    total_timeout = float(timeouts.get("total_s", "a number of seconds > 0", _number(strict=True), 4 * run_timeout))
    if total_timeout < run_timeout:
        raise SpecError(path, timeouts.key("total_s"), f"at least run_s ({run_timeout:g})", total_timeout)
    runs = _load_runs(top)
    _check_substitutes(path, args, runs)
    checks, timing = _load_checks(top, runs, available), _load_timing(top)
    _check_timed_steps(path, args, runs, checks, available, timing)
    return Assignment(
        id=top.get("id", "the practical's id, e.g. p6", _name),
        title=top.get("title", "a non-empty string", lambda v: isinstance(v, str) and v.strip() != ""),
        script=top.get("script", "the file name of the student's script", _script),
        args=args,
        seed_argument=top.get("seed_argument", "a Python identifier, or null", lambda v: v is None or _identifier(v), None),
        variables=tuple(top.get("variables", "a list of Python identifiers", lambda v: isinstance(v, list) and all(_identifier(x) for x in v), [])),
        runs=runs,
        checks=checks,
        run_timeout_s=run_timeout,
        total_timeout_s=total_timeout,
        source=path,
        sandbox=top.get("sandbox", "required or preferred", lambda v: v in ("required", "preferred"), "preferred"),
        answers=top.get("answers", "the file name of the answers (.yaml)", lambda v: isinstance(v, str) and v.endswith((".yaml", ".yml")) and "/" not in v, None),
        timing=timing,
        draw=draw,
        manual_answers=tuple(top.get("manual_answers", "a list of dotted keys of the answers file", lambda v: isinstance(v, list) and all(isinstance(x, str) and x for x in v), [])),
    )


ANSWER_KEY = "answer_key.yaml"  # solutions/<id>/answer_key.yaml: never exported


def load_answer_key(solutions: Path | None, practical: str) -> Mapping[str, Any] | None:
    """The answers with one right value (question -> answer: a word, a number or a list of
    them), kept with the staff in solutions/<id>/answer_key.yaml; None where there is none (a
    student's repository: the checks that need it are left to the autograder)."""
    if solutions is None:
        return None
    path = solutions / practical / ANSWER_KEY
    if not path.is_file():
        return None
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(path, "(file)", "a readable YAML mapping", f"<{exc}>") from None
    node = _Node(path, "", data)
    for key, value in node.data.items():
        if not (isinstance(key, str) and _identifier(key)):
            raise SpecError(path, str(key), "a question's name (a Python identifier)", key)
        if not _plain_answer(value):
            raise SpecError(path, key, "a word, a number or a list of them", value)
    return MappingProxyType(dict(node.data))


def _plain_answer(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain_answer(item) and not isinstance(item, list) for item in value)
    return isinstance(value, (str, int, float)) and not isinstance(value, bool)
