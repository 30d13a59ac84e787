"""A practical's folder of a student's commit, taken out of git as the committed bytes.

`take(repo, commit, prefix, folder, limits)` lists the tree under `prefix` with `git ls-tree -r
-t -z --long` and checks it against `limits` by the sizes the listing names, before any file
is read; then it streams each blob out of one `git cat-file --batch`, request by request, into
a file created afresh. No attribute, filter or substitution of git's applies: `git archive`
honours a committed `.gitattributes`, and an `export-subst` file of 3.4 MB with
`$Format:%>(16000)%H$` in it made it take 2.3 GiB before any limit saw the file. git's own
memory stays about one blob's size (at most `limits.max_bytes`), and the whole read is stopped
after `timeout_s`.

Paths come from the student's trees, which a crafted commit can fill with any names: an entry
with `..` in its path, or whose folder is a link leading out of `folder`, is passed over; a
second entry of one name (git accepts such a tree) too; links are written as links, never
followed; submodules are left out.
"""
from __future__ import annotations

import os
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Iterator

from grader.run.tree import TreeLimits
from grader.submit.gitenv import student_git, student_git_environment

CHUNK = 1 << 16
MAX_LINK = 4096  # bytes of a link's target


class GitReadError(Exception):
    """git could not list or read the commit (or took too long): the grader's problem to retry,
    not a verdict on the submission."""


@dataclass(frozen=True)
class Entry:
    mode: str
    kind: str  # blob, tree or commit (a submodule)
    name: str  # the object
    size: int  # bytes of a blob, 0 otherwise
    path: str  # relative to the practical's folder


def take(repo: str, commit: str, prefix: str, folder: Path, limits: TreeLimits = TreeLimits(), timeout_s: float = 120) -> str | None:
    """Write `prefix` of `commit` into the empty `folder`; returns why the submission was refused
    (past `limits`: nothing is read then), or None. Raises GitReadError."""
    late = threading.Event()
    processes: list[subprocess.Popen] = []

    def stop() -> None:
        late.set()
        for process in processes:
            process.kill()

    watchdog = threading.Timer(timeout_s, stop)
    watchdog.start()
    try:
        listed = _listing(repo, commit, prefix, limits, processes)
        if isinstance(listed, str):
            return listed
        _write(repo, listed, folder, processes)
    except GitReadError:
        if not late.is_set():
            raise
    finally:
        watchdog.cancel()
        for process in processes:
            process.kill()
            process.wait()
    if late.is_set():  # git killed by the watchdog: what it said then is not the reason
        raise GitReadError(f"reading {commit} out of git took more than {timeout_s:g} s")
    return None


def _listing(repo: str, commit: str, prefix: str, limits: TreeLimits, processes: list[subprocess.Popen]) -> list[Entry] | str:
    """The entries under `prefix` (folders before what they hold), or why they are refused."""
    git = subprocess.Popen([*student_git(repo), "ls-tree", "-r", "-t", "-z", "--long", commit, "--", prefix], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=student_git_environment())
    processes.append(git)
    entries, total = [], 0
    assert git.stdout is not None
    for record in _records(git.stdout):
        entry = _entry(record, prefix)
        if entry is None:
            continue
        entries.append(entry)
        total += entry.size
        if len(entries) > limits.max_entries:
            return f"the submission holds more than {limits.max_entries} files and folders"
        if total > limits.max_bytes:
            return f"the submission holds more than {limits.max_bytes >> 20} MiB"
        if len(Path(entry.path).parts) > limits.max_depth:
            return f"the submission's folders are nested more than {limits.max_depth} levels deep ({entry.path[:80]}…)"
    if git.wait() != 0:
        assert git.stderr is not None
        said = git.stderr.read(4096).decode(errors="replace").strip()
        raise GitReadError(f"git ls-tree {commit}: {said[:300] or f'exit status {git.returncode}'}")
    return entries


def _records(stream: IO[bytes]) -> Iterator[bytes]:
    """The NUL-terminated records of a stream, read in chunks."""
    pending = b""
    while chunk := stream.read(CHUNK):
        pending += chunk
        *records, pending = pending.split(b"\0")
        yield from records


def _entry(record: bytes, prefix: str) -> Entry | None:
    """One line of `ls-tree --long` ("<mode> <type> <object> <size>\\t<path>") under `prefix`,
    or None where it is not (the folders above it) or cannot be read."""
    head, tab, raw_path = record.partition(b"\t")
    fields = head.split()
    if not tab or len(fields) != 4:
        return None
    path = os.fsdecode(raw_path)
    relative = path[len(prefix):].lstrip("/")
    if not path.startswith(prefix + "/") or not relative:
        return None
    mode, kind, name, size = (field.decode("ascii", "replace") for field in fields)
    return Entry(mode, kind, name, int(size) if size.isdigit() else 0, relative)


def _write(repo: str, entries: list[Entry], folder: Path, processes: list[subprocess.Popen]) -> None:
    """Each folder made, each blob streamed from `git cat-file --batch` into its file."""
    inside = os.path.realpath(folder) + os.sep
    blobs = subprocess.Popen([*student_git(repo), "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=student_git_environment())
    processes.append(blobs)
    assert blobs.stdin is not None and blobs.stdout is not None
    for entry in entries:
        if ".." in Path(entry.path).parts or entry.kind not in ("tree", "blob"):
            continue
        target = folder / entry.path
        try:
            if not (os.path.realpath(target.parent) + os.sep).startswith(inside):
                continue  # a path through a link that leaves the folder
            if entry.kind == "tree":
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            continue  # a folder where a file of that name came first
        try:
            size = _request(blobs.stdin, blobs.stdout, entry)
            _place(blobs.stdout, entry, target, size)
            blobs.stdout.read(1)  # the newline after each object
        except (BrokenPipeError, ValueError) as exc:
            raise GitReadError(f"git cat-file stopped: {exc}") from None


def _request(requests: IO[bytes], answers: IO[bytes], entry: Entry) -> int:
    """Ask for the entry's blob; its size, from the answer's header."""
    requests.write(entry.name.encode("ascii") + b"\n")
    requests.flush()
    header = answers.readline().split()
    if len(header) != 3 or header[1] != b"blob" or not header[2].isdigit():
        raise GitReadError(f"git cat-file gave no blob for {entry.path!r}: {b' '.join(header)[:200].decode(errors='replace')}")
    return int(header[2])


def _place(answers: IO[bytes], entry: Entry, target: Path, size: int) -> None:
    """The blob's `size` bytes into a new file (or link) at `target`; read and dropped where
    the name is taken already (a second entry of one name: the first counts)."""
    if entry.mode == "120000":
        if size > MAX_LINK:
            _copy(answers, None, size)
            return
        try:
            os.symlink(os.fsdecode(answers.read(size)), target)
        except FileExistsError:
            pass
        return
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if entry.mode == "100755" else 0o644)
    except (FileExistsError, IsADirectoryError):
        _copy(answers, None, size)
        return
    with os.fdopen(fd, "wb") as out:
        _copy(answers, out, size)


def _copy(source: IO[bytes], out: IO[bytes] | None, size: int) -> None:
    """`size` bytes of `source` into `out` (or dropped), in chunks."""
    left = size
    while left:
        chunk = source.read(min(CHUNK, left))
        if not chunk:
            raise GitReadError("git cat-file ended in the middle of a blob")
        if out is not None:
            out.write(chunk)
        left -= len(chunk)
