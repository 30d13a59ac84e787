"""Taking a submission in: the grader's own copy of it (`take`), and what stops its scripts
before any run (`unrunnable`): a script missing, one that does not compile, one that imports at
its top level a module that is not there. Each is found once, at the start, not after every run
has failed alike."""
from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

from grader.grade.prepared import Prepared
from grader.run.safeio import UntrustedFileError, read_untrusted
from grader.run.tree import TreeRefused, copy_tree, open_folder, remove_tree
from grader.spec import Assignment, RunDef

MAX_COMPILED_BYTES = 1 << 20  # a script is compiled before any run up to this size


def take(submission: Path, into: Path) -> tuple[Path, Prepared]:
    """The submission copied once, at the start, into the grader's own folder `into`: every
    later read and every job's copy come from it, so a student who can change the folder
    being graded (swap it for a link to the solutions, edit it between two runs) changes
    nothing. Returns the copy and what the copy left out (notes), or why it cannot be taken
    (problem: the folder is then empty)."""
    try:
        handle = open_folder(submission)
    except OSError as exc:
        into.mkdir()
        return into, Prepared(problem=f"the submission folder cannot be opened: {exc.strerror or exc}")
    try:
        return into, Prepared(notes=copy_tree(handle, into))
    except (TreeRefused, OSError) as exc:
        remove_tree(into)
        into.mkdir()
        return into, Prepared(problem=str(exc) if isinstance(exc, TreeRefused) else f"the submission cannot be taken: {exc}")
    finally:
        os.close(handle)


def unrunnable(runs: tuple[RunDef, ...], assignment: Assignment, submission: Path) -> str | None:
    """Why the submission's scripts cannot be run at all: one is missing, or a Python script
    does not compile (found before any run, not after every run has failed alike)."""
    for script in sorted({run.script or assignment.script for run in runs}):
        if not (submission / script).is_file():
            present = sorted(p.name for p in submission.iterdir() if p.is_file())[:8] if submission.is_dir() else []
            found = f" (it holds: {', '.join(present)})" if present else ""
            return f"{script} is not in the submission{found}"
        if script.endswith(".py"):
            problem = _script_problem(submission / script)
            if problem:
                return problem
    return None


def _script_problem(path: Path) -> str | None:
    """Why the Python script at `path` stops before its first line, read once (at most
    MAX_COMPILED_BYTES; a longer one, or one that cannot be read, is left to its runs): it does
    not compile (compiled only, never run: the parser's own limits bound it), or an import is
    missing (`_missing_import`); or None."""
    try:
        source, longer = read_untrusted(path, MAX_COMPILED_BYTES)
    except (OSError, UntrustedFileError):
        return None  # the runs say what is wrong with it
    if longer:
        return None
    try:
        tree = ast.parse(source, path.name)
        compile(tree, path.name, "exec", dont_inherit=True)
    except SyntaxError as exc:  # IndentationError and TabError too
        where = f" (line {exc.lineno})" if exc.lineno else ""
        return f"{path.name} does not compile: {exc.msg}{where}"
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; nesting past the compiler's depth
        return f"{path.name} does not compile: {type(exc).__name__}: {exc}"
    return _missing_import(tree, path)


def _missing_import(tree: ast.Module, path: Path) -> str | None:
    """An import, at the script's top level and outside any `try`, of a module that is neither
    in the submission's folder nor installed where the grader runs it (found with importlib's
    finders, which run none of the module's code), or None. Imports inside a `try`, an `if` or
    a function are the script's own business: it may do without them."""
    for statement in tree.body:
        if isinstance(statement, ast.Import):
            names = [alias.name for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
            names = [statement.module]
        else:
            continue
        for name in names:
            top = name.partition(".")[0]
            if (path.parent / f"{top}.py").is_file() or (path.parent / top).is_dir() or _installed(top):
                continue
            return f"{path.name} imports {top} (line {statement.lineno}), which is not installed where the grader runs your code (ModuleNotFoundError: No module named {top!r}); use what the course's environment has (torch, numpy and the standard library), or ask the course staff"
    return None


def _installed(module: str) -> bool:
    """Whether a top-level module can be imported here (its spec found; nothing of it run)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return True  # a finder that cannot tell: the runs will
