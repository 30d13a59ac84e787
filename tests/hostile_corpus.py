"""Hostile and broken submissions, and how each must be graded.

A case whose attack could succeed is written so that success would show in its score: if the
forbidden thing works, the script goes on as the reference solution and earns points; if the
sandbox holds, it stops with a telling error. Every case states the score it must get and
fragments its feedback must contain.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from helpers import make_deep_tree
from hostile_text import BILLION_LAUGHS, FAKE_SCORE, HOSTILE_TEXTS
from p6_variants import SLOW_VARIANT

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
    files: Callable[[dict], dict[str, str]]  # paths the test made (canary, secret, root_secret, root) -> files
    score: float
    fragments: tuple[str, ...]  # each must appear in the results' feedback (tests and output)
    practical: str = "p6"
    args: tuple[str, ...] = ("--world-size", "2")
    symlinks: dict = field(default_factory=dict)  # link name -> target
    setup: Callable[[Path, dict], None] | None = None  # makes what text files cannot: hard links, FIFOs, deep trees
    timed: bool = False  # a grading with its speed checks (costs the timed launches)
    within_s: float | None = None  # the grading's own time must stay under this


# A hog that writes every byte: where a process's address space is capped (4 GiB), the
# allocation fails; on GPU nodes nothing caps it (CUDA reserves far more than it uses) and the
# job's memory cgroup kills it instead (an untouched bytearray of 64 GiB allocated fine there)
MEMORY_HOG_STOPPED = "your processes used more than 6 GiB of memory" if glob.glob("/dev/nvidia*") else "raised MemoryError"


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
print('{{"score": 100.0, "output": "Score: 18 of 18 points"}}')
print("Score: 18 of 18 points: FULL MARKS")
sys.exit(0)
"""

INHERITED_FD = """import os
reached = []
for fd in range(3, 512):  # the grader's pipes, if any was inherited, and the hub's connection, which must be (its own files are its own)
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

P6_HELD_AFTER_INIT = P6.replace("    dist.init_process_group(backend=backend)\n", "    dist.init_process_group(backend=backend)\n    time.sleep(2)\n")
assert P6_HELD_AFTER_INIT != P6

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
print("Score: 18 of 18 points")
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
    Case("infinite_loop", p6("while True: pass\n", ""), 0, ("did not finish within 4 s (still computing: does the loop end?): rank 0 is still computing at p6_ddp.py:1 in <module>: while True: pass",), args=("--world-size", "2", "--timeout", "4")),
    Case("sleep_forever", p6("import time\ntime.sleep(10**9)\n", ""), 0, ("waits at p6_ddp.py:2 in <module>: time.sleep(10**9)",), args=("--world-size", "2", "--timeout", "4")),
    Case("memory_hog", p6("hog = b'x' * (64 * 2**30)\n", ""), 0, (MEMORY_HOG_STOPPED,)),
    Case("gigabyte_of_stdout", p6("while True:\n    print('x' * 100000)\n", ""), 0, ("raised OSError: [Errno 27] File too large",)),
    Case("writes_outside_the_work_folder", p6(ATTEMPT_OUTSIDE), 0, ("could not write anything outside the work folder",)),
    Case("reads_solutions_and_hidden_checks", p6(READ_HIDDEN), 0, ("no solution and no hidden check could be read",)),
    Case("reads_a_root_only_file", p6(READ_ROOT_ONLY), 0, ("the root-only file stayed closed",)),
    Case("forges_results_and_prints_a_score", p6(FORGE, ""), 0, ("every rank exited with status 0 before",)),
    Case("writes_to_inherited_descriptors", p6(INHERITED_FD), 0, ("the grader's hub ended rank ", "over the transport's bounds")),
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
    Case("kills_every_process_it_can", p6("import os, signal, time\nos.kill(-1, signal.SIGKILL)\ntime.sleep(5)\n", ""), 0, ("ended without an exit status (its launcher was killed)",)),
    Case("connects_outside", p6(NETWORK), 0, ("no network outside the sandbox",)),
    Case("fakes_the_all_reduce", p6(FAKE_SYNC, P6_UNWRAPPED), 9, ("your ranks made no all-reduce that could carry its gradients (none at all)",)),
    Case("replaces_allclose_and_equal", p6(FAKE_COMPARE, P6_UNWRAPPED), 9, ("your ranks made no all-reduce that could carry its gradients (none at all)",)),
    Case("imports_the_grader_to_score_itself", p6(IMPORT_GRADER), 0, ("raised ModuleNotFoundError: No module named 'grader.results'",)),
    Case("leaves_a_daemon_behind", p6(DAEMON), 16, ("process(es) were still running after the ranks exited and were killed",)),
    Case("hard_codes_the_public_outputs", lambda paths: {"p4_concepts.ipynb": p4_notebook(P4_HARDCODED)}, 8, ("rows into", "observed", "the output differs from the model's output"), practical="p4", args=()),
    # Both ranks then think they are rank 0 of 1 and serve the rendezvous on one port: the one that
    # comes second fails (the first holds on after its init so that this is always so; were the
    # first done before the second started, each would train alone on the whole batch, which the
    # checks that compare gradients cannot tell from real synchronisation).
    Case("changes_rank_and_world_size", p6(SET_ENV, P6_HELD_AFTER_INIT), 0, ("registered group '0' of ranks [0], of a world of 2 (init_process_group's rank and world size must be the launcher's RANK and WORLD_SIZE)",)),
    Case("exits_0_before_any_work", p6("import sys\nsys.exit(0)\n", ""), 0, ("every rank exited with status 0 before",)),
    Case("segfaults", p6("import ctypes\nctypes.string_at(0)\n", ""), 0, ("was killed by SIGSEGV at p6_ddp.py:2",)),
    Case("one_rank_raises_system_exit", p6("", P6.replace("t0 = time.time()\n", "t0 = time.time()\nif rank == 1:\n    sys.exit(7)\n")), 4, ("rank 1 exited with status 7",)),
    Case("one_rank_raises_keyboard_interrupt", p6("", P6.replace("t0 = time.time()\n", "t0 = time.time()\nif rank == 1:\n    raise KeyboardInterrupt\n")), 4, ("rank 1 raised KeyboardInterrupt",)),
    Case("reads_a_secret_and_forges_the_result", p6(SECRET_AND_FORGE, ""), 0, ("every rank exited with status 0 before",)),
)


def p4_notebook(graded_source: str | None, prefix: str = "") -> str:
    """A p4 notebook whose graded cell of `simulate_data_parallel` is `graded_source` (None:
    the reference's), after `prefix`; the rest of the reference."""
    import nbformat

    notebook = nbformat.read(ROOT / "solutions" / "p4" / "p4_concepts.ipynb", as_version=4)
    for cell in notebook.cells:
        if "simulate_data_parallel" in cell.source and "graded" in cell.metadata.get("tags", []):
            cell.source = prefix + (cell.source if graded_source is None else graded_source)
    return nbformat.writes(notebook)


# --- escaping the job: every process of a job ends with it, however it hid -------------------

REEXEC_DAEMON = """import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # double fork, then a new program with an empty environment
        os.execve(sys.executable, [sys.executable, "-c", "import time; time.sleep(300)"], {{}})
    os._exit(0)
"""

CHAIN = """import os
# Each link forks the next in a new session, then becomes `sleep` with an empty environment:
# 121 live processes that share neither a session nor an environment with the job. Forking
# (not starting an interpreter per link) keeps the chain's cost to a fraction of a second.
if int(os.environ["RANK"]) == 0:
    if os.fork() == 0:
        for depth in range(120):
            os.setsid()
            if os.fork() != 0:
                os.execve("/bin/sleep", ["sleep", "300"], {{}})
        os.setsid()
        open("chain-complete", "w").close()
        os.execve("/bin/sleep", ["sleep", "300"], {{}})
    import time
    while not os.path.exists("chain-complete"):  # every link alive before the job ends
        time.sleep(0.05)
"""

# Outlive the job, then stop every process in sight (the reference's timed launches, were they
# visible) and copy the other jobs' Python files; what it finds waits in /tmp for the next
# launch, which reports it.
SABOTEUR = """import os, sys
if os.path.exists("/tmp/found.txt"):
    raise RuntimeError("FOUND " + open("/tmp/found.txt").read()[:500])
SPY = '''
import os, signal, time
mine = os.getcwd()
end = time.time() + 120
while time.time() < end:
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in (os.getpid(), 1):
            continue
        try:
            cwd = os.readlink("/proc/" + pid + "/cwd")
            if cwd != mine:
                os.kill(int(pid), signal.SIGSTOP)
                for name in os.listdir(cwd):
                    if name.endswith(".py"):
                        with open("/tmp/found.txt", "a") as out:
                            out.write(cwd + "/" + name + ": " + open(os.path.join(cwd, name)).read()[:200])
        except OSError:
            continue
    time.sleep(0.05)
'''
if int(os.environ["RANK"]) == 0 and os.fork() == 0:
    os.setsid()
    os.execve(sys.executable, [sys.executable, "-c", SPY], dict())
"""

SWAPPER = """import os, time
if int(os.environ["RANK"]) == 0 and os.fork() == 0:  # a folder swapped for a link to /etc, again and again, for a minute
    os.makedirs("sub", exist_ok=True)
    open("sub/passwd", "w").write("mine")
    os.setsid()
    end = time.time() + 60
    while time.time() < end:
        try:
            os.rename("sub", "sub.real")
            os.symlink("/etc", "sub")
            os.remove("sub")
            os.rename("sub.real", "sub")
        except OSError:
            pass
    os._exit(0)
"""

# The sandbox's pid 1 (bubblewrap's init) runs as the ranks' uid, is dumpable and sits outside
# every job's cgroup: traced, it could be made to fork a process that outlives the job and its
# caps. Any way in — tracing it or the launcher, reading or writing its memory — is refused.
PTRACE = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
refused = []
for pid in (1, os.getppid()):
    if libc.ptrace(16, pid, None, None) == 0:  # PTRACE_ATTACH
        break
    refused.append(ctypes.get_errno())
    try:
        with open(f"/proc/{{pid}}/mem", "r+b") as memory:
            break
    except OSError as exc:
        refused.append(exc.errno)
else:
    raise RuntimeError(f"could not trace the launcher or the sandbox's init: errno {{refused}}")
"""

READ_HARD_LINK = """try:
    secret = open("notes.txt").read()
except OSError as exc:
    raise RuntimeError(f"the hard link was not copied: {{type(exc).__name__}}")
raise RuntimeError("LEAKED " + secret)
"""


def hard_link(name: str) -> Callable[[Path, dict], None]:
    """The submission's `name` is a second name of the root-only canary."""
    return lambda folder, paths: os.link(paths["root_secret"], folder / name)


def fifo(name: str) -> Callable[[Path, dict], None]:
    return lambda folder, paths: os.mkfifo(folder / name)


def deep_tree(levels: int) -> Callable[[Path, dict], None]:
    """A chain of `levels` folders in the submission."""
    return lambda folder, paths: make_deep_tree(folder, levels)


def strange_names(folder: Path, paths: dict) -> None:
    """File names with escape sequences, a forged line and a right-to-left override; one of
    them a FIFO, so that the grader names it in its notes."""
    score = FAKE_SCORE.replace("/", "\u2215")  # a file name holds no slash; the division slash looks the same
    for name in ("\x1b[2J\x1b[Hclear.txt", f"x\n{score}.txt", "\u202etxt.py"):
        (folder / name).write_text("data")
    os.mkfifo(folder / f"\x1b]0;pwned\x07pipe\n{score}")


# --- resources: memory, tmpfs, memfd, disk, inodes, processes -----------------------------------

FILL = """import os
chunk = b"x" * (64 << 20)
for index in range(32):  # 4 GiB in files of 128 MiB (one file may hold 256 MiB), more than a job may write
    with open(f"{where}/fill{{{{index}}}}-{{{{os.getpid()}}}}.bin", "wb") as out:
        out.write(chunk)
        out.write(chunk)
"""

MANY_FILES = """import os
os.makedirs("many", exist_ok=True)
for index in range(10**6):
    open(f"many/{{index}}", "w").close()
"""

MEMFD_HOG = """import os
chunk = b"x" * (64 << 20)
kept = []
for _ in range(40):  # 40 memfds of 192 MiB: past the job's memory cap, while no process maps much
    kept.append(os.memfd_create("hog"))
    for _ in range(3):
        os.write(kept[-1], chunk)
"""

PROCESS_HOGS = """import os, time
def hog():
    block = bytearray(3 << 30)  # under one process's address-space limit, not under the job's memory cap
    for at in range(0, len(block), 4096):
        block[at] = 1
    return block
for _ in range(2):
    if os.fork() == 0:
        kept = hog()
        time.sleep(5)
        os._exit(0)
kept = hog()
time.sleep(5)
"""

THREAD_BOMB = """import threading, time
threading.stack_size(1 << 16)  # small stacks: the process cap, not the address space, is what stops it
while True:
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
"""

DEEP_WORK_TREE = """import os
if int(os.environ["RANK"]) == 0:
    here = os.open(".", os.O_RDONLY)
    for _ in range(1100):
        os.mkdir("deep", dir_fd=here)
        inner = os.open("deep", os.O_RDONLY, dir_fd=here)
        os.close(here)
        here = inner
    os.close(here)
"""

# --- text the submission controls --------------------------------------------------------------

ESCAPING_TYPE = """Boom = type("Boom\\n\\x1b[2J\\x1b[H" + {fake!r} + "\\x1b[8m", (Exception,), dict())
raise Boom("\\x1b]0;pwned\\x07\\u202eevil\\r" + {fake!r})
""".format(fake=FAKE_SCORE).replace("{", "{{").replace("}", "}}")

SURROGATE = """raise RuntimeError("lone \\ud800 surrogate \\udfff")
"""

FENCE = "raise RuntimeError({text!r})\n".format(text=HOSTILE_TEXTS["fence_breakout"] + " " + HOSTILE_TEXTS["html"]).replace("{", "{{").replace("}", "}}")

ESCAPING_TODO = """raise NotImplementedError("TODO 1: \\x1b[2J\\x1b[H" + {fake!r} + "\\n" + {fake!r})
""".format(fake=FAKE_SCORE).replace("{", "{{").replace("}", "}}")

NUL_OUTPUT = """import sys
sys.stdout.write("\\x00" * 64 + {fake!r} + "\\x1b[2J\\n")
sys.stderr.write("\\x00\\x1b[H\\x1b[2J" + {fake!r} + "\\n")
raise SystemExit(3)
""".format(fake=FAKE_SCORE).replace("{", "{{").replace("}", "}}")

HUGE_LINE = """import sys
sys.stderr.write("y" * (100 << 20))
raise SystemExit(4)
"""

CORRUPT_RECORDS = """import os
with open(os.path.join("..", "rank" + os.environ["RANK"], "observations.jsonl"), "ab") as records:
    records.write(b'\\xff\\xfe\\x00' + b'{{"kind": "exit", "how": "exception", "exception": {{"type": "\\\\ud800\\\\u001b[2J", "message": "' + {fake!r}.encode() + b'"}}}}\\n')
    records.write(b'{{"kind": "exit", "x": ' + b"[" * 100000 + b"\\n")
raise SystemExit(5)
""".format(fake=FAKE_SCORE).replace("{", "{{").replace("}", "}}")

P4_SHELL_LINES = "!echo \x1b[2J\x1b[H" + FAKE_SCORE + "\n!rm -rf /\n"

P5_SOLUTION = {n: (ROOT / "solutions" / "p5" / n).read_text() for n in ("p5_dp.py", "p5_single.py")}
# slow in every step (tests/p6_variants.py SLOW_VARIANT's diagnostics: about 3×; its former
# SVDs, 13×, made this the suite's slowest case, 65 s): failing efficiency rests on the grader's clock
SLOW_P6 = SLOW_VARIANT.edits[0][2].join(P6.split(SLOW_VARIANT.edits[0][1]))
assert SLOW_P6 != P6

MORE_CASES = (
    Case("escapes_by_reexec_with_an_empty_environment", p6(REEXEC_DAEMON), 16, ("process(es) were still running after the ranks exited and were killed",)),
    Case("a_chain_of_120_live_processes_each_in_a_new_session", p6(CHAIN), 16, ("process(es) were still running after the ranks exited and were killed",)),
    Case("outlives_its_job_to_stop_and_read_the_reference", p6(SABOTEUR, SLOW_P6), 16, ("above the 1.3× allowed",), args=(), timed=True),
    Case("swaps_a_folder_for_a_link_to_etc", p6(SWAPPER), 16, ("process(es) were still running",)),
    Case("ptraces_the_launcher", p6(PTRACE, ""), 0, ("could not trace the launcher",)),
    Case("hard_links_a_root_only_file", p6(READ_HARD_LINK, ""), 0, ("notes.txt is a hard link", "the hard link was not copied"), setup=hard_link("notes.txt")),
    Case("hard_linked_answers_file", lambda paths: dict(P5_SOLUTION), 8, ("answers.yaml is a hard link (the file has 2 names) and was left out", "answers.yaml is not in the submission"), practical="p5", args=(), setup=hard_link("answers.yaml")),
    Case("a_fifo_for_an_answers_file", lambda paths: dict(P5_SOLUTION), 8, ("answers.yaml is a FIFO and was left out", "answers.yaml is not in the submission"), practical="p5", args=(), setup=fifo("answers.yaml")),
    Case("fills_tmp", p6(FILL.format(where="/tmp"), ""), 0, ("your program's files filled the 2 GiB it may write",)),
    Case("fills_dev_shm", p6(FILL.format(where="/dev/shm"), ""), 0, ("your program's files filled the 2 GiB it may write",)),
    Case("fills_the_work_folder", p6(FILL.format(where="."), ""), 0, ("your program's files filled the 2 GiB it may write",)),
    Case("a_million_empty_files", p6(MANY_FILES, ""), 0, ("your program's files filled the 2 GiB it may write",)),
    Case("memfd_past_the_memory_cap", p6(MEMFD_HOG, ""), 0, ("your processes used more than 6 GiB of memory",), args=("--world-size", "2", "--timeout", "30")),
    Case("processes_together_past_the_memory_cap", p6(PROCESS_HOGS, ""), 0, ("your processes used more than 6 GiB of memory",), args=("--world-size", "2", "--timeout", "30")),
    Case("a_thread_bomb", p6(THREAD_BOMB, ""), 0, ("more than 512 processes and threads",)),
    Case("leaves_a_1100_level_tree_in_its_work_folder", p6(DEEP_WORK_TREE), 18, ("passed",)),
    Case("submits_a_1100_level_deep_folder", p6(), 0, ("nested more than 32 levels deep",), setup=deep_tree(1100)),
    Case("exception_type_with_escapes_and_lines", p6(ESCAPING_TYPE, ""), 0, ("raised Boom",)),
    Case("a_lone_surrogate_in_an_exception", p6(SURROGATE, ""), 0, ("raised RuntimeError: lone",)),
    Case("closes_the_markdown_fence", p6(FENCE, ""), 0, ("raised RuntimeError: ```",)),
    Case("a_todo_message_with_escapes", p6(ESCAPING_TODO, ""), 0, ("stops at TODO 1:",)),
    Case("nul_bytes_and_escapes_in_output", p6(NUL_OUTPUT, ""), 0, ("exited with status 3",)),
    Case("a_100_mb_line_on_stderr", p6(HUGE_LINE, ""), 0, ("exited with status 4",)),
    Case("corrupts_its_own_records", p6(CORRUPT_RECORDS, ""), 0, ("exited with status 5",)),
    Case("file_names_that_act_on_a_terminal", p6(), 18, ("is a FIFO and was left out",), setup=strange_names),
    Case("an_answers_alias_bomb", lambda paths: {**P5_SOLUTION, "answers.yaml": BILLION_LAUGHS}, 8, ("anchors",), practical="p5", args=()),
    Case("notebook_shell_lines_with_escapes", lambda paths: {"p4_concepts.ipynb": p4_notebook(None, P4_SHELL_LINES)}, 14, ("is IPython syntax and was not run",), practical="p4", args=()),
)

CASES = CASES + MORE_CASES


# --- found by attacking the sandbox as it was (a red team): IPC, /dev, keyrings, the folder itself

SYSV_SHM = """import ctypes, ctypes.util, os
if int(os.environ["RANK"]) == 0:
    with open("/proc/sysvipc/shm") as table:
        if len(table.read().splitlines()) > 1:
            raise RuntimeError("a shared-memory segment of an earlier job is still there")
    libc = ctypes.CDLL(None, use_errno=True)
    rt = ctypes.CDLL(ctypes.util.find_library("rt") or None, use_errno=True)  # POSIX message queues (libc itself since glibc 2.34)
    if rt.mq_open(b"/left-behind", os.O_RDONLY) >= 0:
        raise RuntimeError("a POSIX message queue of an earlier job is still there")
    queue = rt.mq_open(b"/left-behind", os.O_CREAT | os.O_RDWR, 0o600, None)
    if queue < 0 or rt.mq_send(queue, b"from an earlier job", 19, 0) != 0:
        raise RuntimeError(f"mq_open or mq_send failed: errno {{ctypes.get_errno()}}")
    libc.shmat.restype = ctypes.c_void_p
    segment = libc.shmget(0, ctypes.c_size_t(64 << 20), 0o1600)  # IPC_PRIVATE, IPC_CREAT | 0600
    address = libc.shmat(segment, None, 0)
    ctypes.memset(ctypes.c_void_p(address), 1, 64 << 20)  # 64 MiB touched, then detached: the segment stays
    libc.shmdt(ctypes.c_void_p(address))
"""

WRITE_DEV = """try:
    with open("/dev/fill.bin", "wb") as out:  # bwrap's /dev: a tmpfs of the sandbox's user, without a cap
        out.write(b"x" * (64 << 20))
except OSError as exc:
    raise RuntimeError(f"/dev stayed read-only: {{type(exc).__name__}}")
"""

KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219)}  # add_key, keyctl

READ_KEYRING = """import ctypes, os
add_key, keyctl = {numbers}
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
found = libc.syscall(keyctl, 10, -3, b"user", b"pdl-grader-canary", 0)  # KEYCTL_SEARCH the session keyring
if found < 0:
    raise RuntimeError("no key of the grader's session keyring in reach")
buffer = ctypes.create_string_buffer(4096)
size = libc.syscall(keyctl, 11, ctypes.c_long(found), buffer, 4096)  # KEYCTL_READ
raise RuntimeError("KEY " + buffer.raw[:max(size, 0)].decode(errors="replace"))
""".format(numbers=KEYCTL.get(os.uname().machine, (-1, -1)))


def grader_session_keyring(folder: Path, paths: dict) -> None:
    """The grader runs with a session keyring of its own holding a key (a systemd service, a
    PAM login): the root-only canary's text, under the name the submission looks for."""
    import ctypes

    add_key, keyctl = KEYCTL[os.uname().machine]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    assert libc.syscall(keyctl, 1, b"pdl-grader-test-session") >= 0  # KEYCTL_JOIN_SESSION_KEYRING
    payload = paths["root_secret"].read_bytes()
    assert libc.syscall(add_key, b"user", b"pdl-grader-canary", payload, len(payload), -3) >= 0


def a_students_link_to_the_solutions(folder: Path, paths: dict) -> None:
    """The folder to grade is the student's link to the course's solutions."""
    folder.rename(folder.with_name("parked"))
    folder.symlink_to(ROOT / "solutions" / "p6")
    os.lchown(folder, 65534, 65534)


def swap_after_the_first_job(folder: Path, paths: dict) -> None:
    """A process of the student's, outside the grader, swaps the submission folder for a link
    to the course's solutions once the grading has begun (the student can write the folder's
    parent: a shared home, an inbox). The grading takes the folder once, at its start, and
    follows no link of another user: it grades what was there, or nothing."""
    import subprocess
    import sys

    parked = folder.with_name("parked")
    watcher = f"""
import os, time
end = time.time() + 60
def first_job_started():
    base = "/var/tmp/pdl-grader-0"
    for grading in os.listdir(base):
        try:
            if grading.startswith("grader-p6-") and any(n.startswith("01-") for n in os.listdir(os.path.join(base, grading))):
                return True
        except OSError:
            pass
    return False
while time.time() < end and not first_job_started():
    time.sleep(0.01)
os.rename({str(folder)!r}, {str(parked)!r})
os.symlink({str(ROOT / "solutions" / "p6")!r}, {str(folder)!r})
os.lchown({str(folder)!r}, 65534, 65534)  # the student's link, not root's
"""
    subprocess.Popen([sys.executable, "-c", watcher], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


OBSERVATION_FLOOD = """import os
with open(os.path.join("..", "rank" + os.environ["RANK"], "observations.jsonl"), "a") as records:
    records.write("{{}}\\n" * (5 << 20))  # 15 MiB of empty records: millions of objects, were they all read
raise SystemExit(6)
"""

LONG_NAMES_IN_TMP = """import os
if int(os.environ["RANK"]) == 0:
    for index in range(30_000):  # 6 MB of names: more than one command line holds, for whatever empties /tmp afterwards
        open(f"/tmp/{{index:05d}}" + "n" * 200, "w").close()
"""

RED_TEAM_CASES = (
    Case("thirty_thousand_long_names_in_tmp", p6(LONG_NAMES_IN_TMP), 18, ("passed",)),
    Case("sysv_and_posix_ipc_outlive_their_job", p6(SYSV_SHM), 18, ("passed",), args=()),
    Case("writes_into_dev", p6(WRITE_DEV), 0, ("/dev stayed read-only: OSError",)),
    Case("floods_its_records_with_tiny_objects", p6(OBSERVATION_FLOOD, ""), 0, ("exited with status 6",), args=("--world-size", "4"), within_s=30),
    Case("reads_the_graders_session_keyring", p6(READ_KEYRING, ""), 0, ("no key of the grader's session keyring in reach",), setup=grader_session_keyring),
    Case("the_submission_folder_swapped_for_a_link_to_the_solutions", p6("raise SystemExit('nothing was done')\n", ""), 0, ("nothing was done",), setup=swap_after_the_first_job),
    Case("the_submission_folder_is_a_link_to_the_solutions", p6("raise SystemExit('nothing was done')\n", ""), 0, ("is a symbolic link of another user (uid 65534)",), setup=a_students_link_to_the_solutions),
)

CASES = CASES + RED_TEAM_CASES

P5_ANSWERS = (ROOT / "solutions" / "p5" / "answers.yaml").read_text()
HEX_ANSWER = P5_ANSWERS.replace("  faster: No.", "  faster: 0x" + "F" * 5000 + "  # No.")
HUGE_TIME = P5_ANSWERS.replace("    total_time: 0.41", "    total_time: 1" + "0" * 400)
NOT_A_NUMBER = P5_ANSWERS.replace("    total_time: 0.41", "    total_time: .inf").replace("    total_time: 0.55", "    total_time: .inf").replace("  speedup: 0.75", "  speedup: 12345")
assert HEX_ANSWER != P5_ANSWERS and HUGE_TIME != P5_ANSWERS and NOT_A_NUMBER.count(".inf") == 2

def p4_with_cell_ids(cell_id: str) -> str:
    """The reference notebook whose first cells all carry `cell_id` (nbformat warns for each)."""
    import json

    notebook = json.loads((ROOT / "solutions" / "p4" / "p4_concepts.ipynb").read_text())
    for cell in notebook["cells"][:6]:
        cell["id"] = cell_id
    return json.dumps(notebook)


ANSWER_CASES = (
    Case("a_notebook_with_duplicate_megabyte_cell_ids", lambda paths: {"p4_concepts.ipynb": p4_with_cell_ids("A" * (1 << 20))}, 14, ("passed",), practical="p4", args=()),
    Case("a_5000_digit_hex_number_as_a_free_text_answer", lambda paths: {**P5_SOLUTION, "answers.yaml": HEX_ANSWER}, 13, ("0xFFFFFFFF",), practical="p5", args=()),
    Case("a_400_digit_time_in_the_timing_table", lambda paths: {**P5_SOLUTION, "answers.yaml": HUGE_TIME}, 11, ("fill in single_gpu.total_time with positive numbers",), practical="p5", args=()),
    Case("infinite_times_and_any_speedup", lambda paths: {**P5_SOLUTION, "answers.yaml": NOT_A_NUMBER}, 11, ("fill in single_gpu.total_time, data_parallel.total_time with positive numbers",), practical="p5", args=()),
)

CASES = CASES + ANSWER_CASES


# --- issue 49, attacked again by someone who did not write the fixes ---------------------------

# A process group whose name (c10d's, the one the transport registers and each operation names) is
# 8,000 characters, then thousands of barriers on it: each carried operation names its group in
# the hub's report. (14,000 barriers took the grader's own process to 837 MiB before the report cut
# names; measured after the fix, the grader peaked at 282 MiB with 14,000, 248 MiB grading the
# reference. 3,000 here keep the case to a few seconds.)
LONG_GROUP_NAME = P6.replace("    dist.init_process_group(backend=backend)\n", """    dist.init_process_group(backend=backend)
    import torch.distributed.distributed_c10d as c10d_internals
    c10d_internals._process_group_name = lambda ranks, use_hashed_name: "g" * 8000  # what new_group names its group
    long_named = dist.new_group([0, 1])
    assert len(long_named.group_name) == 8000, long_named.group_name[:80]
    for _ in range(3_000):
        dist.barrier(group=long_named)
""")
assert LONG_GROUP_NAME != P6

# Rank 0 hands its connection to the grader's hub (its process groups' socket: the default group's
# `_channel`, or the Unix socket among /proc/self/fd) to rank 1 with SCM_RIGHTS once DDP is built,
# then trains alone: both shards' gradients, averaged, under no_sync, so it never communicates
# again. Rank 1 computes rank 0's gradients on a copy of the model and, from a comm hook, writes
# rank 0's all-reduce on the handed socket beside its own: were it credited to rank 0, the hub's
# record would hold the all-reduces of a correct DDP program. The hub ends rank 0's connection.
HAND_ON_THE_SOCKET = '''    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    import copy, socket as socket_module
    meeting = "\\0p6-hand-" + os.environ["MASTER_PORT"]
    def hub_fd():
        channel = getattr(dist.group.WORLD, "_channel", None)
        if channel is not None:
            return channel.sock.fileno()
        for name in sorted(os.listdir("/proc/self/fd"), key=int):
            if os.readlink("/proc/self/fd/" + name).startswith("socket:"):
                if socket_module.socket(fileno=os.dup(int(name))).family == socket_module.AF_UNIX:
                    return int(name)
        raise RuntimeError("no connection to hand on")
    if rank == 0:
        line = socket_module.socket(socket_module.AF_UNIX)
        for _ in range(200):  # until rank 1 listens
            try:
                line.connect(meeting)
                break
            except OSError:
                time.sleep(0.05)
        socket_module.send_fds(line, [b"x"], [hub_fd()])
        line.close()
    else:
        listener = socket_module.socket(socket_module.AF_UNIX)
        listener.bind(meeting)
        listener.listen(1)
        connection, _ = listener.accept()
        _, (stolen,), _, _ = socket_module.recv_fds(connection, 1, 1)
        as_rank0 = type(dist.group.WORLD._channel)(socket_module.socket(fileno=stolen))
        twin = copy.deepcopy(model.module)  # rank 0's replica, computed here
        def make_rank0_calls(state, bucket):
            twins = dict(zip(map(id, model.module.parameters()), twin.parameters()))
            theirs = torch.cat([twins[id(p)].grad.reshape(-1) for p in bucket.parameters()])
            forged = as_rank0.call("0", "all_reduce", [theirs], [theirs], reduce="SUM")
            own = dist.all_reduce(bucket.buffer(), async_op=True)
            forged.wait()
            forged.get_future().value()
            return own.get_future().then(lambda f: f.value()[0] / world_size)
        model.register_comm_hook(None, make_rank0_calls)
'''
BOTH_SHARDS = '''    x_other = x[(1 - rank) * shard : (2 - rank) * shard].to(device)
    y_other = y[(1 - rank) * shard : (2 - rank) * shard].to(device)
    x = x[rank * shard : (rank + 1) * shard].to(device)
'''
RANK0_ALONE = '''    if rank == 0:  # never communicates again
        with model.no_sync():
            loss = (loss_fn(model(x), y) + loss_fn(model(x_other), y_other)) / 2
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
    else:
        twin.load_state_dict(model.module.state_dict())
        twin.zero_grad(set_to_none=True)
        loss_fn(twin(x_other), y_other).backward()
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
'''
HANDS_ITS_SOCKET = (
    P6.replace('    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)\n', HAND_ON_THE_SOCKET)
    .replace("    x = x[rank * shard : (rank + 1) * shard].to(device)\n", BOTH_SHARDS)
    .replace("    loss = loss_fn(model(x), y)\n    optimizer.zero_grad(set_to_none=True)\n    loss.backward()  # DDP synchronises the gradients here, bucket by bucket\n", RANK0_ALONE)
)
assert HANDS_ITS_SOCKET.count("x_other") == 3 and "make_rank0_calls" in HANDS_ITS_SOCKET

ISSUE_49_CASES = (
    Case("a_group_named_with_8000_characters_and_3000_barriers", p6("", LONG_GROUP_NAME), 18, ("passed",), within_s=30),
    # 4 points: ranks and devices right; the shard check fails too (each rank feeds both shards)
    Case("rank_0_hands_its_hub_socket_to_rank_1", p6("", HANDS_ITS_SOCKET), 4, ("rank 0's connection to the grader's hub was written by another process than the one that used it first",)),
)

CASES = CASES + ISSUE_49_CASES
