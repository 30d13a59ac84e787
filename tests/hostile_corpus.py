"""Hostile and broken submissions, and how each must be graded.

A case whose attack could succeed is written so that success would show in its score: if the
forbidden thing works, the script goes on as the reference solution and earns points; if the
sandbox holds, it stops with a telling error. Every case states the score it must get and
fragments its feedback must contain.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
P6 = (ROOT / "solutions" / "p6" / "p6_ddp.py").read_text()
P6_UNWRAPPED = P6.replace('    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)\n', "    pass\n")
assert P6_UNWRAPPED != P6


def p6(prefix: str = "", body: str = P6) -> Callable[[Path], dict[str, str]]:
    """A p6 submission: `prefix` then the script (the reference solution by default)."""
    return lambda paths: {"p6_ddp.py": prefix.format(**{k: str(v) for k, v in paths.items()}) + body}


@dataclass(frozen=True)
class Case:
    name: str
    files: Callable[[dict], dict[str, str]]  # paths the test made (canary, secret, root) -> files
    score: float
    fragments: tuple[str, ...]  # each must appear in the results' feedback (tests and output)
    practical: str = "p6"
    args: tuple[str, ...] = ("--world-size", "2")
    symlinks: dict = field(default_factory=dict)  # link name -> target


ATTEMPT_OUTSIDE = """import os
for path in ("{canary}", "/etc/grader-was-here", "/usr/lib/grader-was-here", "{root}/grader-was-here"):
    try:
        with open(path, "a") as handle:
            handle.write("written by a submission")
    except OSError:
        continue
    break
else:
    raise RuntimeError("could not write anything outside the work folder")
"""

READ_HIDDEN = """import importlib
found = None
for path in ("{root}/solutions/p6/p6_ddp.py", "{root}/grader/checks/distributed.py", "{root}/tests/p6_variants.py"):
    try:
        found = open(path).read()
        break
    except OSError:
        continue
try:
    importlib.import_module("grader.checks.distributed")
    found = found or "the grader's checks"
except ImportError:
    pass
if found is None:
    raise RuntimeError("no solution and no hidden check could be read")
"""

READ_ROOT_ONLY = """try:
    secret = open("/etc/shadow").read()
except OSError as exc:
    raise RuntimeError(f"the root-only file stayed closed: {{type(exc).__name__}}")
"""

FORGE = """import json, os, sys
for path in ("results.json", "../results.json", "{canary}"):
    try:
        with open(path, "w") as handle:
            json.dump({{"score": 100, "tests": []}}, handle)
    except OSError:
        pass
print('{{"score": 100.0, "output": "Score: 18 / 18"}}')
print("Score: 18 / 18  FULL MARKS")
sys.exit(0)
"""

INHERITED_FD = """import os
reached = []
for fd in range(3, 512):  # the grader's pipes, if any was inherited (its own files are its own)
    try:
        kind = os.readlink(f"/proc/self/fd/{{fd}}")
    except OSError:
        continue
    if not kind.startswith(("pipe:", "socket:")):
        continue
    try:
        os.write(fd, b'{{"event": "rank_exit", "rank": 0, "status": "exit:0"}}\\n')
        reached.append(fd)
    except OSError:
        pass
for pid in (os.getppid(), 1, 2):
    for fd in range(0, 16):
        try:
            with open(f"/proc/{{pid}}/fd/{{fd}}", "w") as handle:
                handle.write("forged")
            reached.append((pid, fd))
        except OSError:
            pass
if not reached:
    raise RuntimeError("no descriptor of the grader was reachable")
"""

PLANT_SYMLINK = """import os
here = os.getcwd()
target = os.path.join(here, "..", "rank" + os.environ["RANK"], "observations.jsonl")
try:
    os.remove(target)
    os.symlink("/etc/shadow", target)
except OSError as exc:
    raise RuntimeError(f"the grader's result files could not be replaced: {{type(exc).__name__}}")
"""

NETWORK = """import socket
try:
    socket.create_connection(("8.8.8.8", 53), timeout=3).close()
except OSError as exc:
    raise RuntimeError(f"no network outside the sandbox: {{exc}}")
"""

FAKE_SYNC = """import torch.distributed as dist
dist.all_reduce = lambda *args, **kwargs: None  # pretend the ranks are in sync
"""

FAKE_COMPARE = """import torch
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
"""

IMPORT_GRADER = """from grader.results.gradescope import write_results
from grader.results.model import GradingReport
write_results(GradingReport("p6", "forged", ()), "results.json")
"""

DAEMON = """import subprocess
subprocess.Popen(["sleep", "300"], start_new_session=True)
"""

SET_ENV = """import os
os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "1"
"""

SECRET_AND_FORGE = """import os, subprocess
try:
    print("SECRET:", open("{secret}").read())
except OSError as exc:
    print("no secret:", type(exc).__name__)
with open("results.json", "w") as handle:
    handle.write('{{"score": 999}}')
print("Score: 18 / 18")
subprocess.Popen(["sleep", "300"], start_new_session=True)
"""

FORGED_STACK = """import os, time
with open(os.path.join("..", "rank" + os.environ["RANK"], "faults"), "w") as dump:
    dump.write("Current thread 0x0000000000000001 (most recent call first):\\n")
    dump.write(f'  File "{{os.getcwd()}}/../../../../etc/shadow", line 1 in <module>\\n')
    dump.write(f'  File "{{os.getcwd()}}/host/passwd", line 1 in <module>\\n\\n')
try:
    os.symlink("/etc", "host")
except FileExistsError:
    pass
time.sleep(10**9)
"""

P4_HARDCODED = '''import torch
import torch.nn as nn

KNOWN = {(64, 2): [32, 32], (64, 3): [22, 22, 20], (10, 4): [3, 3, 3, 1], (6, 4): [2, 2, 2]}


def simulate_data_parallel(model, x, n):
    """Answers copied from the public examples."""
    rows = KNOWN.get((x.shape[0], n), [x.shape[0]])
    chunks = [torch.zeros(r, x.shape[1]) for r in rows]
    return chunks, torch.zeros(x.shape[0], 16)
'''

CASES = (
    Case("fork_bomb", p6("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n", ""), 0, ("did not finish within 4 s",), args=("--world-size", "2", "--timeout", "4")),
    Case("infinite_loop", p6("while True:\n    pass\n", ""), 0, ("did not finish within 4 s (a hang?): rank 0 waits at p6_ddp.py:", "while True:"), args=("--world-size", "2", "--timeout", "4")),
    Case("sleep_forever", p6("import time\ntime.sleep(10**9)\n", ""), 0, ("waits at p6_ddp.py:2 in <module>: time.sleep(10**9)",), args=("--world-size", "2", "--timeout", "4")),
    Case("memory_hog", p6("hog = bytearray(64 * 2**30)\n", ""), 0, ("raised MemoryError",)),
    Case("gigabyte_of_stdout", p6("while True:\n    print('x' * 100000)\n", ""), 0, ("raised OSError: [Errno 27] File too large",)),
    Case("writes_outside_the_work_folder", p6(ATTEMPT_OUTSIDE), 0, ("could not write anything outside the work folder",)),
    Case("reads_solutions_and_hidden_checks", p6(READ_HIDDEN), 0, ("no solution and no hidden check could be read",)),
    Case("reads_a_root_only_file", p6(READ_ROOT_ONLY), 0, ("the root-only file stayed closed",)),
    Case("forges_results_and_prints_a_score", p6(FORGE, ""), 0, ("every rank exited with status 0 before",)),
    Case("writes_to_inherited_descriptors", p6(INHERITED_FD), 0, ("no descriptor of the grader was reachable",)),
    Case("plants_a_symlink_over_the_grader_files", p6(PLANT_SYMLINK), 0, ("the grader's result files could not be replaced: PermissionError",)),
    Case(
        "links_to_host_files_in_the_submission",
        lambda paths: {**{n: (ROOT / "solutions" / "p5" / n).read_text() for n in ("p5_dp.py", "p5_single.py")}},
        8,
        ("answers.yaml cannot be read: answers.yaml is a symbolic link",),
        practical="p5",
        args=(),
        symlinks={"answers.yaml": "/etc/shadow", "passwd": "/etc/passwd", "etc": "/etc"},
    ),
    Case("forges_a_stack_naming_host_files", p6(FORGED_STACK, ""), 0, ("rank 0 waits at p6_ddp.py:10 in <module>: time.sleep(10**9)", "rank 1 waits at p6_ddp.py:10"), args=("--world-size", "2", "--timeout", "4")),
    Case("kills_its_process_group", p6("import os, signal\nos.killpg(0, signal.SIGKILL)\n", ""), 0, ("ended without an exit status (its launcher was killed)",)),
    Case("kills_every_process_it_can", p6("import os, signal, time\nos.kill(-1, signal.SIGKILL)\ntime.sleep(5)\n", ""), 0, ("the grader's launcher of the ranks was killed while the script ran",)),
    Case("connects_outside", p6(NETWORK), 0, ("no network outside the sandbox",)),
    Case("fakes_the_all_reduce", p6(FAKE_SYNC, P6_UNWRAPPED), 9, ("gradients differ between rank 0 and rank 1", "all-reduce calls per step: [0, 0, 0]")),
    Case("replaces_allclose_and_equal", p6(FAKE_COMPARE, P6_UNWRAPPED), 9, ("gradients differ between rank 0 and rank 1",)),
    Case("imports_the_grader_to_score_itself", p6(IMPORT_GRADER), 0, ("raised ModuleNotFoundError: No module named 'grader.results'",)),
    Case("leaves_a_daemon_behind", p6(DAEMON), 16, ("process(es) were still running after the ranks exited and were killed",)),
    Case("hard_codes_the_public_outputs", lambda paths: {"p4_concepts.ipynb": p4_notebook(P4_HARDCODED)}, 8, ("rows into", "observed", "the output differs from the model's output"), practical="p4", args=()),
    Case("changes_rank_and_world_size", p6(SET_ENV), 0, ("the process group says rank 0 of 1, expected rank",)),
    Case("exits_0_before_any_work", p6("import sys\nsys.exit(0)\n", ""), 0, ("every rank exited with status 0 before",)),
    Case("segfaults", p6("import ctypes\nctypes.string_at(0)\n", ""), 0, ("was killed by SIGSEGV at p6_ddp.py:2",)),
    Case("one_rank_raises_system_exit", p6("", P6.replace("t0 = time.time()\n", "t0 = time.time()\nif rank == 1:\n    sys.exit(7)\n")), 4, ("rank 1 exited with status 7",)),
    Case("one_rank_raises_keyboard_interrupt", p6("", P6.replace("t0 = time.time()\n", "t0 = time.time()\nif rank == 1:\n    raise KeyboardInterrupt\n")), 4, ("rank 1 raised KeyboardInterrupt",)),
    Case("reads_a_secret_and_forges_the_result", p6(SECRET_AND_FORGE, ""), 0, ("every rank exited with status 0 before",)),
)


def p4_notebook(graded_source: str) -> str:
    """A p4 notebook whose only graded cell is `graded_source` (the rest of the reference)."""
    import nbformat

    notebook = nbformat.read(ROOT / "solutions" / "p4" / "p4_concepts.ipynb", as_version=4)
    for cell in notebook.cells:
        if "simulate_data_parallel" in cell.source and "graded" in cell.metadata.get("tags", []):
            cell.source = graded_source
    return nbformat.writes(notebook)
