"""Reading files that student code could have written or replaced.

Every read goes through `read_descriptor`: the file opened with O_NOFOLLOW (a planted symlink
is refused, not followed; `read_beneath` refuses links on the whole way), fstat on the opened
descriptor (a regular file with one name only), and a size cap. Nothing read is ever
unpickled (event files are parsed by grader.run.records).
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from grader.run.tree import open_beneath


class UntrustedFileError(Exception):
    """A file the grader wanted to read was a link, not a regular file, or too large."""


def read_untrusted(path: Path, max_bytes: int, *, tail: bool = False) -> tuple[bytes, bool]:
    """Read at most `max_bytes` of a regular file without following links.

    Returns the bytes and whether the file was longer (then the head, or the tail if `tail`).
    Raises FileNotFoundError if it does not exist and UntrustedFileError if it is not a
    plain file with a single name (a hard link may name a file the submission cannot read).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # the last component is a symbolic link
            raise UntrustedFileError(f"{path.name} is a symbolic link") from None
        raise
    return read_descriptor(fd, Path(path).name, max_bytes, tail=tail)


def read_beneath(folder: Path, relative: str, max_bytes: int) -> tuple[bytes, bool]:
    """`read_untrusted` of `relative` inside `folder`, reached without following any link on
    the way (see grader.run.tree.open_beneath)."""
    try:
        fd = open_beneath(folder, relative)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UntrustedFileError(f"{relative} is reached through a symbolic link") from None
        raise
    return read_descriptor(fd, relative, max_bytes)


def read_descriptor(fd: int, name: str, max_bytes: int, *, tail: bool = False) -> tuple[bytes, bool]:
    """Read (and close) an opened descriptor under the rules of `read_untrusted`."""
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(f"{name} is not a regular file")
        if info.st_nlink > 1:
            raise UntrustedFileError(f"{name} is a hard link (the file has {info.st_nlink} names)")
        longer = info.st_size > max_bytes
        if tail and longer:
            os.lseek(fd, info.st_size - max_bytes, os.SEEK_SET)
        chunks, left = [], max_bytes
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), longer
    finally:
        os.close(fd)


def read_text_tail(path: Path, max_bytes: int) -> str:
    """The last `max_bytes` of a text file ('' if missing or not a plain file)."""
    try:
        data, longer = read_untrusted(path, max_bytes, tail=True)
    except (OSError, UntrustedFileError):
        return ""
    text = data.decode("utf-8", errors="replace")
    if longer:
        text = "…" + text.split("\n", 1)[-1]
    return text
