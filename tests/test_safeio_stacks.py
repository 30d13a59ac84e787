"""Reading what student code may have tampered with, and trimming fault-handler stacks."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.run.safeio import UntrustedFileError, read_text_tail, read_untrusted
from grader.run.stacks import parse_fault_dump, student_frames


def test_links_and_special_files_are_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("top secret")
    link = tmp_path / "observations.jsonl"
    link.symlink_to(secret)
    with pytest.raises(UntrustedFileError, match="symbolic link"):
        read_untrusted(link, 100)
    assert read_text_tail(link, 100) == ""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(UntrustedFileError, match="not a regular file"):
        read_untrusted(fifo, 100)


def test_size_caps(tmp_path: Path) -> None:
    path = tmp_path / "events"
    path.write_text('{"kind": "a"}\n' + "x" * 1000)
    data, longer = read_untrusted(path, 10)
    assert data == b'{"kind": "' and longer
    lines = tmp_path / "lines"
    lines.write_text("first\nsecond\nthird\n")
    assert read_text_tail(lines, 9) == "…third\n"  # the cut-off start of a line is dropped


DUMP = '''Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/work/job/work/helper.py", line 4 in background

Current thread 0x00007f0000000001 (most recent call first):
  File "/venv/torch/autograd/__init__.py", line 200 in backward
  File "/work/job/work/helper.py", line 9 in step
  File "/work/job/work/main.py", line 31 in <module>
  File "<frozen runpy>", line 88 in _run_code
'''


def test_fault_dumps_are_trimmed_to_the_students_main_thread(tmp_path: Path) -> None:
    work = tmp_path / "job" / "work"
    work.mkdir(parents=True)
    (work / "main.py").write_text("\n" * 30 + "step(model)\n")
    threads = parse_fault_dump(DUMP)
    assert len(threads) == 2 and threads[1][0] == ("/venv/torch/autograd/__init__.py", 200, "backward")
    frames = student_frames(DUMP.replace("/work/job/work", str(work)), work)
    assert [(f.file, f.line, f.func) for f in frames] == [("main.py", 31, "<module>"), ("helper.py", 9, "step")]
    assert frames[0].code == "step(model)"
    assert student_frames("Fatal Python error: Segmentation fault\n", work) is None

