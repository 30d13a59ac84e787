"""Stacks from Python's fault handler, trimmed to the frames a student wrote."""
from __future__ import annotations

import os
import re
from pathlib import Path

from grader.probe.recorder.events import Frame
from grader.run.safeio import UntrustedFileError, read_beneath

_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+) in (?P<func>.*)$')


def parse_fault_dump(text: str) -> list[list[tuple[str, int, str]]]:
    """Split a faulthandler dump into threads, each a list of (file, line, function),
    innermost first as the dump prints them."""
    threads: list[list[tuple[str, int, str]]] = []
    for line in text.splitlines():
        if _THREAD.match(line):
            threads.append([])
            continue
        match = _FRAME.match(line)
        if match and threads:
            threads[-1].append((match["file"], int(match["line"]), match["func"]))
    return threads


def source_line(folder: Path, relative: str, line: int) -> str:
    """Line `line` (1-based) of the student's file `relative` inside `folder`, stripped ('' if
    missing, reached through a link, not a plain file, or too large: the file is the
    submission's, the reader the grader)."""
    try:
        data, _ = read_beneath(folder, relative, 1 << 20)
    except (OSError, UntrustedFileError):
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[line - 1].strip()[:200] if 0 < line <= len(lines) else ""


def inside(path: str, folder: Path) -> str | None:
    """`path` relative to `folder` when it names a place inside it without '..', else None:
    the dump is written by the student's process, so its file names are not to be trusted
    (and links on the way are refused when the file is read)."""
    prefix = next((p + os.sep for p in (str(folder), os.path.realpath(folder)) if path.startswith(p + os.sep)), None)
    if prefix is None:
        return None
    relative = os.path.normpath(path[len(prefix):])
    return None if relative.startswith("..") or os.path.isabs(relative) else relative


def student_frames(text: str, workdir: Path) -> list[Frame] | None:
    """The student's frames (outermost first) of the thread that ran the script (the last
    such thread in the dump), or None if no frame is in `workdir`."""
    best: list[Frame] | None = None
    for thread in parse_fault_dump(text):
        frames = []
        for f, line, func in reversed(thread):
            relative = inside(f, workdir)
            if relative is not None:
                frames.append(Frame(file=relative, line=line, func=func, code=source_line(workdir, relative, line)))
        if frames and (best is None or frames[0].func == "<module>"):
            best = frames
    return best
