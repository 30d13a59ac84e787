"""`python -m grader roster ROSTER.csv --repos DIR --results-dir R`: every student's bare
repository, made from a roster.

The roster is a CSV file whose first line is a header naming a `student` column; other columns
(a name, an e-mail) are ignored, and so are blank lines and spaces around a cell. A student's id
becomes the folder DIR/<student>.git and a folder of the results store, so it is held to the
store's names (letters, digits and . _ @ -, starting with a letter or digit, at most 128
characters, no '..', not one of the store's own folders); a student twice (also in another
case), an empty id or a file that is not UTF-8 text is refused, naming the line, and nothing is
made.

Each new repository is made in a hidden folder of DIR (`.<student>.git.<random>`): `git init
--bare`, one commit on main by "Course staff" holding the student export (what `export-student`
writes, scanned for leaks; the same commit in every repository one run makes), the
post-receive hook and the store's record of the repository (`hook install`'s, naming the
repository's final place), and only then renamed into place. A repository that exists already
is kept as it is: a student's pushes are never overwritten. A student whose repository cannot
be made leaves nothing behind (no folder, no record), and the others still get theirs.
"""
from __future__ import annotations

import csv
import io
import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from grader.assign.export import build_export, write_export
from grader.course import Course
from grader.store import RESERVED, ResultsStore, StoreError, safe_name
from grader.submit import hook
from grader.submit.gitenv import student_git, student_git_environment
from grader.submit.reconcile import record_path

COLUMN = "student"
MAX_BYTES = 1 << 20  # a roster of thousands of students is far smaller: a larger file is another file
MAX_ID = 128  # the store's limit (grader/store.py)
BRANCH = "refs/heads/main"
AUTHOR = ("Course staff", "staff@course.invalid")
MESSAGE = "The course's starter repository\n\nMade by `python -m grader roster` from the student export.\n"
GIT_TIMEOUT_S = 120


class RosterError(ValueError):
    """The roster cannot be used; `problems` names each bad line."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{path} is not a usable roster:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class RosterResult:
    """What became of each student's repository: made now, kept (it existed), or failed (why)."""

    repos: Path
    created: tuple[str, ...]
    kept: tuple[str, ...]
    failed: tuple[tuple[str, str], ...]

    def repository(self, student: str) -> Path:
        """The student's repository."""
        return self.repos / f"{student}.git"


def _shown(value: str) -> str:
    """A cell as a message shows it: quoted, control characters escaped, long ones cut."""
    return repr(value if len(value) <= 40 else value[:40] + "…")


def refused_id(value: str) -> str | None:
    """Why `value` cannot be a student's id (it names their folders), or None."""
    if not value:
        return "no student id"
    if len(value) > MAX_ID:
        return f"the student id is {len(value)} characters long (at most {MAX_ID})"
    control = next((c for c in value if unicodedata.category(c).startswith("C")), None)
    if control is not None:
        return f"the student id {_shown(value)} holds a control or invisible character ({control!r})"
    if "/" in value or "\\" in value:
        return f"the student id {_shown(value)} holds a slash (it becomes a folder's name)"
    if value.startswith((".", "-")):
        return f"the student id {_shown(value)} starts with {value[0]!r} (a hidden file or an option)"
    if value.casefold() in RESERVED:
        return f"the student id {_shown(value)} is a name the results store keeps for itself"
    try:
        safe_name(value, "student id")
    except StoreError:
        return f"the student id {_shown(value)} may hold only letters, digits and . _ @ - (and no '..')"
    return None


def parse_roster(text: str, path: Path) -> list[str]:
    """The students of a roster's text, in its order; RosterError names every bad line."""
    reader = csv.reader(io.StringIO(text, newline=""))
    problems: list[str] = []
    column: int | None = None
    seen: dict[str, int] = {}
    students: list[str] = []
    try:
        for row in reader:
            cells = [cell.strip() for cell in row]
            if not any(cells):
                continue  # a blank line
            line = reader.line_num
            if column is None:
                names = [cell.casefold() for cell in cells]
                if names.count(COLUMN) != 1:
                    found = ", ".join(_shown(cell) for cell in cells[:8])
                    what = "names `student` twice" if names.count(COLUMN) else "has no `student` column"
                    raise RosterError(path, [f"line {line}: the header {what} (found: {found}); the first line names the columns, e.g. student,name,email"])
                column = names.index(COLUMN)
                continue
            value = cells[column] if column < len(cells) else ""
            why = refused_id(value)
            if why:
                problems.append(f"line {line}: {why}")
            elif value.casefold() in seen:
                problems.append(f"line {line}: the student {_shown(value)} again (first on line {seen[value.casefold()]})")
            else:
                seen[value.casefold()] = line
                students.append(value)
    except csv.Error as exc:
        problems.append(f"line {reader.line_num}: {exc}")
    if column is None and not problems:
        problems.append("it is empty: its first line must name the columns (a `student` column among them), then one student a line")
    elif not students and not problems:
        problems.append("no student in it, only the header")
    if problems:
        raise RosterError(path, problems)
    return students


def read_roster(path: Path) -> list[str]:
    """The students of the roster file `path`, in its order; RosterError when it cannot be used."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise RosterError(path, [f"it cannot be read: {exc.strerror or exc}"]) from None
    if len(raw) > MAX_BYTES:
        raise RosterError(path, [f"it is larger than {MAX_BYTES >> 20} MiB: not a roster"])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise RosterError(path, [f"line {line}: not UTF-8 text (save the file as CSV UTF-8)"]) from None
    return parse_roster(text, path)


def is_bare_repository(path: Path) -> bool:
    """Whether `path` looks like a bare git repository (what `hook install` asks of one)."""
    return path.is_dir() and not path.is_symlink() and (path / "HEAD").is_file() and (path / "objects").is_dir()


def _git(repo: Path, *args: str, env: dict[str, str], cwd: Path | None = None) -> str:
    """`git ARGS` on the repository being made (hardened as on a student's); its output."""
    done = subprocess.run([*student_git(str(repo)), *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=GIT_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"git {args[0]} failed: {done.stderr.strip() or f'exit status {done.returncode}'}")
    return done.stdout.strip()


def _seed(repo: Path, export: Path, scratch: Path, date: str) -> str:
    """Make `repo` a bare repository whose main branch is one commit holding the files of the
    folder `export`; the commit's id. git runs without the system's or the user's config, so
    the commit holds the files' bytes (no autocrlf, filter or excludes of this machine)."""
    env = student_git_environment()
    _git(repo, "init", "--bare", "-q", str(repo), env=env)
    _git(repo, "symbolic-ref", "HEAD", BRANCH, env=env)
    indexed = {**env, "GIT_INDEX_FILE": str(scratch / f"index-{repo.name}"), "GIT_WORK_TREE": str(export)}
    _git(repo, "add", "--all", "--force", ".", env=indexed, cwd=export)  # --force: the export's .gitignore leaves none of its files out
    tree = _git(repo, "write-tree", env=indexed)
    name, email = AUTHOR
    authored = {**env, "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    commit = _git(repo, "commit-tree", tree, "-m", MESSAGE, env=authored)
    _git(repo, "update-ref", BRANCH, commit, hook.ZERO, env=env)
    return commit


def _restore(record: Path, before: bytes | None) -> None:
    """Put the store's record of a repository back as it was before `hook install`."""
    if before is None:
        record.unlink(missing_ok=True)
    else:
        record.write_bytes(before)


def _create(course: Course, student: str, target: Path, export: Path, scratch: Path, date: str, results_dir: Path, backend: str, options: dict) -> None:
    """Make the student's repository at `target`: all of it, or nothing."""
    temporary = target.with_name(f".{target.name}.{secrets.token_hex(6)}")
    os.mkdir(temporary)  # not mkdtemp's 0700: the repository gets the modes `git init` would give it here
    try:
        _seed(temporary, export, scratch, date)
        record = record_path(ResultsStore(results_dir), student)
        before = record.read_bytes() if record.is_file() else None
        try:
            hook.install(temporary, results_dir, backend, options, course.root, student, at=target)
            if target.exists() or target.is_symlink():
                raise RuntimeError(f"{target} appeared while it was being made: left as it is")
            os.rename(temporary, target)
        except BaseException:
            _restore(record, before)
            raise
    finally:
        if temporary.exists():
            shutil.rmtree(temporary, ignore_errors=True)


def create_repositories(course: Course, students: Sequence[str], repos: Path, practicals: Sequence[str], results_dir: Path, backend: str = "local", options: dict | None = None) -> RosterResult:
    """Make REPOS/<student>.git for each student that has none: bare, seeded with the student
    export of `practicals`, with the post-receive hook that grades pushes into `results_dir`
    (`backend`, job `options` as `hook install` takes them). ExportRefused (or MarkerError)
    when the export cannot be built: then nothing is made."""
    export = build_export(course, list(practicals))
    repos = Path(repos)
    repos.mkdir(parents=True, exist_ok=True)
    created: list[str] = []
    kept: list[str] = []
    failed: list[tuple[str, str]] = []
    date = f"{int(time.time())} +0000"  # one date for the run: every repository it makes starts at the same commit
    with tempfile.TemporaryDirectory(prefix="grader-roster-") as scratch:
        tree = Path(scratch) / "export"
        write_export(export, tree)
        for student in students:
            target = repos / f"{student}.git"
            if target.exists() or target.is_symlink():
                if is_bare_repository(target):
                    kept.append(student)
                else:
                    failed.append((student, f"{target} exists and is not a bare git repository: left as it is"))
                continue
            try:
                _create(course, student, target, tree, Path(scratch), date, results_dir, backend, dict(options or {}))
            except (OSError, RuntimeError, ValueError, subprocess.SubprocessError) as exc:
                failed.append((student, str(exc)))
            else:
                created.append(student)
    return RosterResult(repos=repos, created=tuple(created), kept=tuple(kept), failed=tuple(failed))


def forced_command(repo: Path) -> str:
    """The authorized_keys `command=` of a student's key: `git push` and `git fetch`/`clone`
    of their own repository, whatever path the client asks for, and nothing else."""
    path = shlex.quote(str(Path(repo).resolve()))
    script = (
        'case "$SSH_ORIGINAL_COMMAND" in '
        f"git-receive-pack*) exec git-receive-pack {path};; "
        f"git-upload-pack*) exec git-upload-pack {path};; "
        "*) echo 'this key may only git push and git fetch' >&2; exit 1;; esac"
    )
    return script.replace('"', '\\"')  # the only escape inside authorized_keys' quoted option


def access_instructions(repos: Path, account: str, host: str, example: str = "alice") -> list[str]:
    """How to give each student push access (and fetch) to their own repository only, as lines
    of instructions (nothing here does it): the clone URL and the authorized_keys line."""
    folder = Path(repos).resolve()
    repo = folder / f"{example}.git"
    return [
        f"Clone URL of each repository: {account}@{host}:{folder}/<student>.git",
        f"  (e.g. git clone {account}@{host}:{repo} )",
        "Give each student push access only (this command changes no access):",
        f"  1. The repositories, their hooks and the results store stay {account}'s: students get no shell",
        f"     and no write access to {folder} (a hook of their own would run as {account} on every push).",
        f"  2. Add each student's SSH public key to ~{account}/.ssh/authorized_keys on one line that may",
        "     only push to and fetch from their own repository (git-shell's commands, pinned to one path),",
        f"     {account}'s login shell being /bin/sh; e.g. for {example}:",
        f'     restrict,command="{forced_command(repo)}" ssh-ed25519 AAAA...their-key... {example}',
        "  3. Check it: `ssh -T` with the student's key answers 'this key may only git push and git fetch',",
        "     and a push naming another student's path still reaches only the key's own repository.",
    ]
