"""File trees the submission controls, handled by the grader (often root) without ever
following a path the submission could have changed.

Mechanism: every step goes through a directory file descriptor. A tree is walked with an
explicit stack (no recursion, so a 10,000-level tree cannot raise RecursionError), each entry
opened relative to its parent's descriptor with O_NOFOLLOW (a link is never followed, in the
last component or in any intermediate one: a directory swapped for a link to /etc between
listing and use is refused, not entered) and checked with fstat on what was opened. Files
the grader makes for the sandbox's user are created with O_EXCL relative to a directory the
grader still owns and handed over with fchown on their descriptor, never by path.

What a copy refuses or leaves out: a regular file with more than one name (a hard link could
name a file only root may read: its content would reach the feedback), FIFOs, sockets and
devices (reading a FIFO blocks), `.git` and `__pycache__`; and it stops at a size, an entry
count and a depth (`TreeLimits`). Removal is `rm -rf` (coreutils walks with directory
descriptors too, at any depth, and never follows links).
"""
from __future__ import annotations

import errno
import os
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

SKIPPED_FOLDERS = frozenset({".git", "__pycache__"})
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
_CHUNK = 1 << 20


class TreeRefused(Exception):
    """The tree is larger, deeper or holds more entries than the copy accepts."""


@dataclass(frozen=True)
class TreeLimits:
    """How much of a submission the grader copies at most."""

    max_bytes: int = 50 << 20
    max_entries: int = 10_000
    max_depth: int = 32


@dataclass
class _Level:
    source: int
    target: int
    names: list[str]
    relative: str
    depth: int


def _kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device")):
        if test(mode):
            return word
    return "not a regular file"


def _copy_file(name: str, level: _Level, owner: int | None, budget: list[int], limits: TreeLimits) -> str | None:
    """Copy one regular file; returns a note when it is left out instead."""
    path = f"{level.relative}{name}"
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=level.source)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return f"{path} is {_kind(info.st_mode)} and was left out"
        if info.st_nlink > 1:
            return f"{path} is a hard link (the file has {info.st_nlink} names) and was left out: submit the file itself"
        budget[0] -= info.st_size
        if budget[0] < 0:
            raise TreeRefused(f"the submission holds more than {limits.max_bytes >> 20} MiB")
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if info.st_mode & 0o111 else 0o644, dir_fd=level.target)
        try:
            left = info.st_size
            while left > 0:
                chunk = os.read(fd, min(left, _CHUNK))
                if not chunk:
                    break
                os.write(out, chunk)
                left -= len(chunk)
            if owner is not None:
                os.fchown(out, owner, owner)
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return None


def _enter(name: str, level: _Level, limits: TreeLimits) -> _Level:
    if level.depth + 1 > limits.max_depth:
        raise TreeRefused(f"the submission's folders are nested more than {limits.max_depth} levels deep ({level.relative}{name}/…)")
    source = os.open(name, _DIRECTORY, dir_fd=level.source)
    try:
        os.mkdir(name, 0o755, dir_fd=level.target)
        target = os.open(name, _DIRECTORY, dir_fd=level.target)
    except OSError:
        os.close(source)
        raise
    return _Level(source, target, sorted(os.listdir(source), reverse=True), f"{level.relative}{name}/", level.depth + 1)


def open_folder(path: Path, max_links: int = 40) -> int:
    """A descriptor of the folder `path`, reached one component at a time from / (or from the
    current folder, for a relative path) without trusting any link another user could have
    planted: a symbolic link is followed only when it belongs to root or to the grader itself
    (a student's link to the solutions, to /root or to another student's folder is refused),
    and the link that was checked is the one read (opened with O_PATH, its target read from
    that descriptor), so swapping it afterwards changes nothing. Raises OSError."""
    text = str(path)
    pending = [part for part in text.split("/") if part not in ("", ".")]
    current = os.open("/" if text.startswith("/") else ".", _DIRECTORY)
    links = 0
    try:
        while pending:
            part = pending.pop(0)
            try:
                following = os.open(part, _DIRECTORY, dir_fd=current)
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target, links = _trusted_link(current, part, links, max_links), links + 1
                pending = [piece for piece in target.split("/") if piece not in ("", ".")] + pending
                if target.startswith("/"):
                    following = os.open("/", _DIRECTORY)
                else:
                    continue
            os.close(current)
            current = following
    except OSError:
        os.close(current)
        raise
    return current


def _trusted_link(folder: int, name: str, links: int, max_links: int) -> str:
    """The target of the link `name` in `folder`, if it may be followed (see open_folder)."""
    handle = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=folder)
    try:
        info = os.fstat(handle)
        if not stat.S_ISLNK(info.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, f"{name} is not a folder")
        if info.st_uid not in (0, os.geteuid()):
            raise PermissionError(errno.EPERM, f"{name} is a symbolic link of another user (uid {info.st_uid}); grade the folder it names instead")
        if links >= max_links:
            raise OSError(errno.ELOOP, "too many symbolic links")
        return os.readlink("", dir_fd=handle)
    finally:
        os.close(handle)


def copy_tree(source: Path | int, target: Path, owner: int | None = None, limits: TreeLimits = TreeLimits()) -> tuple[str, ...]:
    """Copy the folder `source` (a path, or a descriptor from `open_folder`, which stays open)
    to the new folder `target` (its parent must belong to the grader): folders, regular files
    and symbolic links (as links); with `owner`, everything made is handed to that uid, each
    folder once it is complete. Returns notes on what was left out; raises TreeRefused past
    `limits` (and OSError when `source` cannot be read)."""
    notes: list[str] = []
    budget, entries = [limits.max_bytes], 0
    top = os.dup(source) if isinstance(source, int) else os.open(source, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.mkdir(target, 0o755)
        stack = [_Level(top, os.open(target, _DIRECTORY), sorted(os.listdir(top), reverse=True), "", 0)]
    except OSError:
        os.close(top)
        raise
    try:
        while stack:
            level = stack[-1]
            if not level.names:
                if owner is not None:
                    os.fchown(level.target, owner, owner)
                os.close(level.source)
                os.close(level.target)
                stack.pop()
                continue
            name = level.names.pop()
            entries += 1
            if entries > limits.max_entries:
                raise TreeRefused(f"the submission holds more than {limits.max_entries} files and folders")
            info = os.stat(name, dir_fd=level.source, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                if name not in SKIPPED_FOLDERS:
                    stack.append(_enter(name, level, limits))
            elif stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(name, dir_fd=level.source), name, dir_fd=level.target)
                if owner is not None:
                    os.chown(name, owner, owner, dir_fd=level.target, follow_symlinks=False)
            elif stat.S_ISREG(info.st_mode):
                note = _copy_file(name, level, owner, budget, limits)
                if note:
                    notes.append(note)
            else:
                notes.append(f"{level.relative}{name} is {_kind(info.st_mode)} and was left out")
    finally:
        for level in stack:
            os.close(level.source)
            os.close(level.target)
    return tuple(notes)


def open_beneath(folder: Path, relative: str) -> int:
    """A read-only descriptor of the regular file `relative` inside `folder`, reached one
    component at a time without following any link ('..' refused). Raises OSError."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise PermissionError(f"{relative!r} is not a path inside the folder")
    current = os.open(folder, _DIRECTORY)
    try:
        for part in parts[:-1]:
            following = os.open(part, _DIRECTORY, dir_fd=current)
            os.close(current)
            current = following
        return os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=current)
    finally:
        os.close(current)


def remove_tree(*paths: Path) -> None:
    """Remove each of `paths` and everything in it, at any depth, never following a link;
    nothing is raised (what cannot be removed stays)."""
    present = [str(path) for path in paths if os.path.lexists(path)]
    rm = shutil.which("rm")
    for start in range(0, len(present), 256):  # a bounded command line, however many paths
        batch = present[start:start + 256]
        try:
            if rm is None:
                raise FileNotFoundError("rm")
            subprocess.run([rm, "-rf", "--one-file-system", "--", *batch], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        except OSError:
            for path in batch:
                shutil.rmtree(path, ignore_errors=True)


def empty_folder(path: Path) -> None:
    """Remove everything inside `path` (the folder itself stays: it may be a sandbox's /tmp,
    bound by its inode). Any number of entries, of any name; nothing is raised."""
    find = shutil.which("find")
    try:
        if find is None:
            raise FileNotFoundError("find")
        subprocess.run(
            [find, str(path), "-mindepth", "1", "-maxdepth", "1", "-exec", "rm", "-rf", "--one-file-system", "--", "{}", "+"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
        )
    except OSError:
        try:
            names = os.listdir(path)
        except OSError:
            return
        remove_tree(*(path / name for name in names))
