"""Stacks from Python's fault handler, trimmed to the frames a student wrote."""
from __future__ import annotations

import re
from pathlib import Path

from grader.run.job import Frame

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
    """Line `line` (1-based) of a file, stripped, or '' if unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for number, text in enumerate(handle, 1):
                if number == line:
                    return text.strip()[:200]
    except OSError:
        pass
    return ""


def student_frames(text: str, workdir: Path) -> list[Frame] | None:
    """The student's frames (outermost first) of the thread that ran the script (the last
    such thread in the dump), or None if no frame is in `workdir`."""
    prefix = str(workdir.resolve()) + "/"
    best: list[Frame] | None = None
    for thread in parse_fault_dump(text):
        frames = [
            Frame(file=f[len(prefix):], line=line, func=func, code=source_line(Path(f), line))
            for f, line, func in reversed(thread)
            if f.startswith(prefix)
        ]
        if frames and (best is None or frames[0].func == "<module>"):
            best = frames
    return best
