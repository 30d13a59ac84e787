"""Stacks from Python's fault handler, trimmed to the frames a student wrote."""
from __future__ import annotations

import os
import re
from pathlib import Path

from grader.run.job import Frame
from grader.run.safeio import UntrustedFileError, read_untrusted

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


def source_line(path: Path, line: int) -> str:
    """Line `line` (1-based) of a student's file, stripped ('' if missing, a link, not a plain
    file, or too large: the file is the submission's, the reader the grader)."""
    try:
        data, _ = read_untrusted(path, 1 << 20)
    except (OSError, UntrustedFileError):
        return ""
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[line - 1].strip()[:200] if 0 < line <= len(lines) else ""


def inside(path: str, folder: Path) -> Path | None:
    """`path` if it really is inside `folder` (after resolving '..' and links), else None: the
    dump is written by the student's process, so its file names are not to be trusted."""
    real_folder = os.path.realpath(folder)
    real = os.path.realpath(path)
    return Path(real) if real.startswith(real_folder + os.sep) else None


def student_frames(text: str, workdir: Path) -> list[Frame] | None:
    """The student's frames (outermost first) of the thread that ran the script (the last
    such thread in the dump), or None if no frame is in `workdir`."""
    prefix = str(workdir.resolve()) + "/"
    best: list[Frame] | None = None
    for thread in parse_fault_dump(text):
        frames = []
        for f, line, func in reversed(thread):
            real = inside(f, workdir) if f.startswith(prefix) else None
            if real is not None:
                frames.append(Frame(file=os.path.relpath(real, os.path.realpath(workdir)), line=line, func=func, code=source_line(real, line)))
        if frames and (best is None or frames[0].func == "<module>"):
            best = frames
    return best
