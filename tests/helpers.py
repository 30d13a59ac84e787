"""Helpers shared by the tests: running the grader's CLI and reading its results."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((Path(__file__).parent / "gradescope_results.schema.json").read_text())


AS_ME = ("--allow-root",) if os.geteuid() == 0 else ()  # roster and hook install refuse root without it (the tests' machines run as root)


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m grader ARGS` as a user would run it, in its own process."""
    return subprocess.run([sys.executable, "-m", "grader", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


# What torch's gloo prints when a process aborts in its C++ teardown, after the program ended
# (seen about once in a dozen bare `torchrun` launches of p6 on a loaded 2-core machine, with no
# grader involved; graded ranks end with os._exit and never reach that teardown).
TEARDOWN_ABORT = "terminate called without an active exception"


def again_after_teardown_abort(launch: Callable[[], subprocess.CompletedProcess]) -> subprocess.CompletedProcess:
    """`launch()`, once more when it failed only that way (any other failure stands)."""
    done = launch()
    if done.returncode != 0 and TEARDOWN_ABORT in done.stdout + done.stderr:
        return launch()
    return done


def load_results(path: Path) -> dict:
    return json.loads(path.read_text())


def checks_by_id(results: dict) -> dict[str, dict]:
    """Gradescope test entries keyed by check id (the first tag)."""
    return {t["tags"][0]: t for t in results["tests"] if t.get("tags")}


def grade_in_process(practical: str, folder: Path, results: Path, *extra: str, timed: bool = False, views: bool = False) -> dict:
    """`python -m grader grade` in this process (saves a Python start and a torch import);
    it must exit 0 and write valid Gradescope results. Speed checks are left out (deferred)
    unless `timed`: a buggy variant's verdicts must not depend on the machine's load. The
    views of the runs (about 0.6 s a run) only when asked: tests of the views grade with the CLI."""
    import jsonschema

    from grader.cli import main

    assert main(["grade", practical, str(folder), "--results", str(results), *extra, *(() if timed else ("--no-timing",)), *(() if views else ("--no-views",))]) == 0
    document = load_results(results)
    jsonschema.validate(document, SCHEMA)
    return document


def assert_loses_exactly(results: dict, loses: frozenset[str], messages: dict) -> None:
    """The failed checks are exactly `loses` and each named feedback contains its fragment."""
    checks = checks_by_id(results)
    lost = {check_id for check_id, entry in checks.items() if entry.get("status") == "failed"}
    assert lost == set(loses), {k: v["output"] for k, v in checks.items() if v.get("status") == "failed"}
    for check_id, fragment in messages.items():
        assert fragment in checks[check_id]["output"], checks[check_id]["output"]



def copy_course(target: Path) -> Path:
    """A copy of the course (what `--course-root` needs) to change freely in a test."""
    import shutil

    target.mkdir(parents=True, exist_ok=True)
    for name in ("course.yaml", "pyproject.toml"):
        shutil.copy(ROOT / name, target / name)
    for name in ("assignments", "solutions", "grader", "templates", "scripts", ".github"):
        shutil.copytree(ROOT / name, target / name, ignore=shutil.ignore_patterns("__pycache__"))
    (target / "tests").mkdir()
    return target


def needs(component: str, problem: str | None) -> "pytest.MarkDecorator":
    """Skip a test when `component` (a real part: "sandbox", "slurm") cannot be had here
    (`problem` says why) — unless the run requires it: GRADER_TESTS_REQUIRE=sandbox,slurm
    (set by .ci/run) turns that skip into an error, so CI never passes by skipping them."""
    import os

    import pytest

    if problem is not None and component in os.environ.get("GRADER_TESTS_REQUIRE", "").split(","):
        raise RuntimeError(f"GRADER_TESTS_REQUIRE names {component}, but it cannot be had here: {problem}")
    return pytest.mark.skipif(problem is not None, reason=f"no {component} here: {problem}")


def sandbox_problem() -> str | None:
    """Why official (sandboxed) grading cannot run here, or None."""
    from grader.run.sandbox import open_sandbox

    sandbox = open_sandbox()
    if isinstance(sandbox, str):
        return sandbox
    sandbox.release()
    return None


def git(*args: str, cwd: Path) -> str:
    """Run git as a student would (a fixed name and e-mail, main as the first branch); its stdout."""
    identity = ["-c", "user.name=Student", "-c", "user.email=student@example.org", "-c", "init.defaultBranch=main"]
    return subprocess.run(["git", *identity, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def make_deep_tree(folder: Path, levels: int) -> None:
    """A chain of `levels` folders named `d` in the existing `folder`, made through directory
    descriptors (the path of the deepest is longer than PATH_MAX)."""
    import os

    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    os.close(fd)
