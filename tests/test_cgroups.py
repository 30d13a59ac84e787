"""Per-job control groups: real cgroups (where the machine has them) with real processes that
hide, fork without end or eat memory; the cgroup v2 logic against a directory that mimics it."""
from __future__ import annotations

import errno
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest

from grader.run import procs
from grader.run.cgroups import Caps, Cgroups, Files, JobGroup, Usage, V1Cgroups, V2Cgroups, open_cgroups
from helpers import ROOT, needs

MiB = 1 << 20
Opener = Callable[..., Cgroups]  # the `grading` fixture: opens a real grading's groups


def _cgroup_problem() -> str | None:
    """Why real per-job cgroups cannot be had here, or None."""
    opened = open_cgroups(f"probe-{uuid.uuid4().hex[:8]}", Caps(64 * MiB, 8))
    if isinstance(opened, str):
        return opened
    opened.close()
    return None


real_cgroups = needs("cgroup", _cgroup_problem())

CHAIN = """
import os, sys, time
sys.stdin.readline()
for level in range(int(sys.argv[1])):
    if os.fork():
        os._exit(0)  # each parent exits: the chain's end is an orphan, far from where it began
    print(os.getpid(), flush=True)
print("done", flush=True)
time.sleep(60)
"""

TREE = """
import os, sys, time
sys.stdin.readline()
for level in range(int(sys.argv[1])):
    child = os.fork()
    if child:
        os.waitpid(child, 0)  # each parent stays: every level of the chain is alive
        os._exit(0)
    print(os.getpid(), flush=True)
print("done", flush=True)
time.sleep(60)
"""

REEXEC = """
import os, sys
sys.stdin.readline()
if os.fork():
    os._exit(0)
os.setsid()
if os.fork():
    os._exit(0)
code = "import os, time; print(os.getpid(), flush=True); print('done', flush=True); time.sleep(60)"
os.execve(sys.executable, [sys.executable, "-c", code], {})  # an empty environment, a new session
"""

FORK_BOMB = """
import os, sys, time
sys.stdin.readline()
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.001)
"""

HOGS = {
    "anonymous memory": """
import sys
sys.stdin.readline()
kept = []
for mib in range(1, 301):
    kept.append(b"x" * (1 << 20))
    print(mib, flush=True)
print("survived", flush=True)
""",
    "a tmpfs file": """
import sys
sys.stdin.readline()
with open(sys.argv[1], "wb", buffering=0) as handle:
    for mib in range(1, 301):
        try:
            handle.write(b"x" * (1 << 20))
        except OSError as exc:
            print("refused", exc.errno, flush=True)
            sys.exit(3)
        print(mib, flush=True)
print("survived", flush=True)
""",
    "a memfd": """
import os, sys
sys.stdin.readline()
memfd = os.memfd_create("hog")
for mib in range(1, 301):
    try:
        os.write(memfd, b"x" * (1 << 20))
    except OSError as exc:
        print("refused", exc.errno, flush=True)
        sys.exit(3)
    print(mib, flush=True)
print("survived", flush=True)
""",
}


@pytest.fixture
def grading() -> Iterator[Opener]:
    """Opens real gradings' groups (`grading(caps)`); closes them all at the end, whatever happened."""
    opened: list[Cgroups] = []

    def open_one(caps: Caps = Caps(256 * MiB, 64)) -> Cgroups:
        cgroups = open_cgroups(f"test-{uuid.uuid4().hex[:8]}", caps)
        assert not isinstance(cgroups, str), cgroups
        opened.append(cgroups)
        return cgroups

    yield open_one
    for cgroups in opened:
        cgroups.close()


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen]]:
    """Processes the test starts: killed and reaped at the end, whatever happened."""
    processes: list[subprocess.Popen] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream:
                stream.close()


def start_blocked(started: list[subprocess.Popen], code: str, *args: str) -> subprocess.Popen:
    """`python -c code args`, waiting for a line on stdin before it does anything."""
    process = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    started.append(process)
    return process


def release(process: subprocess.Popen) -> None:
    process.stdin.write(b"go\n")
    process.stdin.close()


def read_lines(process: subprocess.Popen, timeout: float, until: Callable[[list[str]], bool] = lambda lines: False) -> list[str]:
    """Lines `process` (and its descendants) print, until `until(lines)`, the end of the output or `timeout`."""
    lines: list[str] = []
    pending = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not until(lines):
        ready, _, _ = select.select([process.stdout], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(process.stdout.fileno(), 65536)
        if not chunk:
            break
        pending += chunk
        *complete, pending = pending.split(b"\n")
        lines += [line.decode() for line in complete]
    return lines


def assert_gone(job: JobGroup) -> None:
    assert all(not group.exists() for group in job.dirs.values()), job.dirs


@real_cgroups
def test_the_grading_group_sits_under_our_own_group_in_each_hierarchy(grading: Opener) -> None:
    cgroups = grading(Caps(4 << 30, 512))
    assert isinstance(cgroups, V1Cgroups if cgroups.version == "cgroup v1" else V2Cgroups)
    assert cgroups.describe() == f"{cgroups.version} per job: memory 4 GiB, 512 processes"
    own = {names: path for _, names, path in (line.split(":", 2) for line in Path("/proc/self/cgroup").read_text().splitlines())}
    for controller, parent in cgroups.parents.items():
        assert parent.name.startswith(f"pdl-grader-{os.getpid()}-test-")
        if cgroups.version == "cgroup v1":
            assert parent.parent == Path("/sys/fs/cgroup", controller) / own[controller].lstrip("/")
    job = cgroups.job("rank0")
    if cgroups.version == "cgroup v1":
        assert int((job.dirs["memory"] / "memory.limit_in_bytes").read_text()) == 4 << 30
        assert int((job.dirs["pids"] / "pids.max").read_text()) == 512
    assert job.pids() == [] and job.kill(1) == 0
    with pytest.raises(ValueError):
        cgroups.job("rank0")
    with pytest.raises(ValueError):
        cgroups.job("../escape")


@real_cgroups
@pytest.mark.parametrize(
    ("script", "depth"),
    [(CHAIN, 150), (TREE, 120), (REEXEC, 0)],
    ids=["150-deep chain of exiting parents", "120-deep chain of live parents", "re-exec with an empty environment in a new session"],
)
def test_kill_ends_every_process_however_it_hid(grading: Opener, started: list[subprocess.Popen], script: str, depth: int) -> None:
    job = grading(Caps(1 << 30, 512)).job("rank0")
    process = start_blocked(started, script, str(depth))
    job.add(process.pid)
    release(process)
    lines = read_lines(process, timeout=4, until=lambda lines: "done" in lines)
    assert lines[-1:] == ["done"], lines
    seen = [process.pid, *map(int, lines[:-1])]
    last = seen[-1]
    assert len(seen) == (depth + 1 if depth else 2) and procs.alive(last) and last in job.pids()
    if script is TREE:
        assert len(job.pids()) == depth + 1  # the whole chain is alive, each level a member
    if script is REEXEC:
        assert os.getsid(last) != os.getsid(0) and Path(f"/proc/{last}/environ").read_bytes() == b""

    began = time.monotonic()
    killed = job.kill(wait_s=4)
    took = time.monotonic() - began
    assert killed >= 1 and took < 2, (killed, took)
    assert job.pids() == []
    assert [pid for pid in seen if procs.alive(pid)] == []
    job.remove()
    assert_gone(job)


@real_cgroups
def test_kill_stops_a_chain_that_is_still_forking(grading: Opener, started: list[subprocess.Popen]) -> None:
    job = grading(Caps(1 << 30, 512)).job("rank0")
    process = start_blocked(started, CHAIN, "400")
    job.add(process.pid)
    release(process)
    lines = read_lines(process, timeout=4, until=lambda lines: len(lines) >= 20)
    assert "done" not in lines and len(job.pids()) >= 1
    assert job.kill(wait_s=4) >= 1
    assert job.pids() == []
    lines += read_lines(process, timeout=1)  # what the last ones printed before they died; then the pipe closes
    printed = [int(line) for line in lines if line.strip().isdigit()]  # a process killed while it printed leaves a line short
    assert "done" not in lines and [pid for pid in printed if procs.alive(pid)] == []


@real_cgroups
def test_a_fork_bomb_stops_at_the_process_cap_and_kill_ends_it(grading: Opener, started: list[subprocess.Popen]) -> None:
    job = grading(Caps(1 << 30, 32)).job("bomb")
    process = start_blocked(started, FORK_BOMB)
    job.add(process.pid)
    release(process)
    deadline = time.monotonic() + 4
    while not job.usage().process_cap_hit and time.monotonic() < deadline:
        time.sleep(0.01)
    usage = job.usage()
    assert usage.process_cap_hit and not usage.memory_cap_hit, usage
    members = job.pids()
    assert 1 < len(members) <= 32
    assert job.kill(wait_s=4) >= len(members)
    assert job.pids() == [] and [pid for pid in members if procs.alive(pid)] == []
    assert process.wait(timeout=2) == -signal.SIGKILL
    assert "more than 32 processes and threads" in usage.message(Caps(1 << 30, 32))


@pytest.fixture
def shm_folder() -> Iterator[Path]:
    """A folder on the tmpfs at /dev/shm, removed at the end (its pages stay charged while it lasts)."""
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    folder = Path(tempfile.mkdtemp(dir="/dev/shm", prefix="pdl-grader-test-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@real_cgroups
@pytest.mark.parametrize("hog", list(HOGS))
def test_memory_past_the_cap_is_stopped_and_reported(grading: Opener, started: list[subprocess.Popen], shm_folder: Path, hog: str) -> None:
    caps = Caps(200 * MiB, 64)
    job = grading(caps).job("hog")
    target = shm_folder / "hog.bin"
    process = start_blocked(started, HOGS[hog], str(target))
    job.add(process.pid)
    release(process)
    lines = read_lines(process, timeout=4)
    status = process.wait(timeout=4)
    assert "survived" not in lines
    assert status == -signal.SIGKILL or (status == 3 and lines[-1].startswith("refused")), (status, lines[-3:])
    written = max((int(line) for line in lines if line.isdigit()), default=0)
    assert 100 <= written < 200, lines[-3:]  # it got most of the cap, and no more
    if hog == "a tmpfs file":
        assert target.stat().st_size < 200 * MiB
    usage = job.usage()
    assert usage.memory_cap_hit and not usage.process_cap_hit, usage
    if status == -signal.SIGKILL:
        assert usage.oom_kills >= 1 and "the kernel stopped them" in usage.message(caps)
    assert usage.peak_memory_bytes is None or 150 * MiB < usage.peak_memory_bytes <= 200 * MiB, usage
    job.remove()
    assert_gone(job)


SOCKET_HOGS = {  # data sent and never read: each connection or socket holds its buffers
    "tcp": """
import socket, sys
sys.stdin.readline()
server = socket.create_server(("127.0.0.1", 0))
held, sent = [], 0
for _ in range(24):
    client = socket.create_connection(server.getsockname())
    held += [client, server.accept()[0]]
    client.setblocking(False)
    try:
        while True:
            sent += client.send(b"x" * 65536)
    except BlockingIOError:
        pass
print(sent, flush=True)
""",
    "udp": """
import socket, sys
sys.stdin.readline()
held = []
for _ in range(200):
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    receiver.setblocking(False)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    held += [receiver, sender]
    for _ in range(8):  # what the receive buffer cannot hold is dropped
        sender.sendto(b"x" * 60000, receiver.getsockname())
queued = 0
for receiver in held[::2]:
    try:
        while True:
            queued += len(receiver.recv(65536))
    except BlockingIOError:
        pass
print(queued, flush=True)
""",
}


@real_cgroups
@pytest.mark.parametrize("kind", ["tcp", "udp"])
def test_socket_buffers_are_bounded_per_job(kind: str) -> None:
    """cgroup v1 keeps TCP and UDP buffers apart from memory: 1.3 GiB of unread loopback data
    once went uncounted. A job's socket buffers stop at their cap (v2 charges them to memory:
    nothing to set)."""
    caps = Caps(256 * MiB, 64, tcp_bytes=8 * MiB)
    cgroups = open_cgroups(f"test-{uuid.uuid4().hex[:8]}", caps)
    assert not isinstance(cgroups, str), cgroups
    try:
        job = cgroups.job(kind)
        if not (job.dirs["memory"] / "memory.kmem.tcp.limit_in_bytes").exists():
            pytest.skip("cgroup v2 (or a v1 kernel without TCP accounting): socket buffers are charged to memory")
        process = subprocess.Popen([sys.executable, "-c", SOCKET_HOGS[kind]], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        job.add(process.pid)
        out, _ = process.communicate("go\n", timeout=60)
        assert process.returncode == 0 and int(out) < 24 * MiB, out  # unbounded, they hold far more
        usage = job.usage()
        assert usage.tcp_cap_hit and "socket buffers (TCP and UDP) reached the 8 MiB a job may hold" in usage.message(caps), usage
    finally:
        cgroups.close()


@real_cgroups
def test_what_a_job_leaves_charged_counts_against_the_next_job(grading: Opener, started: list[subprocess.Popen], shm_folder: Path) -> None:
    """A tmpfs file written by one job outlives its group; its pages move to the grading's
    parent group, which holds the same cap: the next job cannot use them again."""
    cgroups = grading(Caps(200 * MiB, 64))
    first = cgroups.job("first")
    writer = start_blocked(started, HOGS["a tmpfs file"].replace("range(1, 301)", "range(1, 151)"), str(shm_folder / "left.bin"))
    first.add(writer.pid)
    release(writer)
    assert "survived" in read_lines(writer, timeout=4) and writer.wait(timeout=4) == 0
    first.remove()
    second = cgroups.job("second")
    hog = start_blocked(started, HOGS["anonymous memory"].replace("range(1, 301)", "range(1, 121)"))
    second.add(hog.pid)
    release(hog)
    lines = read_lines(hog, timeout=4)
    assert hog.wait(timeout=4) == -signal.SIGKILL and "survived" not in lines and max(int(line) for line in lines if line.isdigit()) < 80
    if cgroups.version == "cgroup v1":
        assert int((cgroups.parents["memory"] / "memory.limit_in_bytes").read_text()) == 200 * MiB


@real_cgroups
def test_remove_of_a_group_whose_processes_are_gone(grading: Opener, started: list[subprocess.Popen]) -> None:
    job = grading().job("done")
    process = start_blocked(started, "import sys; sys.stdin.readline()")
    job.add(process.pid)
    assert job.pids() == [process.pid]
    release(process)
    assert process.wait(timeout=4) == 0
    assert job.pids() == [] and job.kill(1) == 0
    job.remove()
    assert_gone(job)
    job.remove()  # a group already gone is fine
    assert job.pids() == []


@real_cgroups
def test_close_removes_every_job_and_the_parent(grading: Opener, started: list[subprocess.Popen]) -> None:
    cgroups = grading()
    busy, empty = cgroups.job("busy"), cgroups.job("empty")
    process = start_blocked(started, "import sys; sys.stdin.readline()")
    busy.add(process.pid)
    cgroups.close()
    assert process.wait(timeout=2) == -signal.SIGKILL
    assert_gone(busy)
    assert_gone(empty)
    assert all(not parent.exists() for parent in cgroups.parents.values())
    cgroups.close()  # twice is fine


STALE_GRADER = """
import json, sys, time
from grader.run.cgroups import Caps, open_cgroups
found = {}
for name in ("stale-a", "stale-b"):
    cgroups = open_cgroups(name + sys.argv[2], Caps(64 << 20, 16))
    found[name] = {"parents": {c: str(p) for c, p in cgroups.parents.items()}}
    found[name]["empty"] = [str(p) for p in cgroups.job("empty").dirs.values()]
    if name == "stale-b":
        busy = cgroups.job("busy")
        busy.add(int(sys.argv[1]))
        found[name]["busy"] = [str(p) for p in busy.dirs.values()]
print(json.dumps(found), flush=True)
time.sleep(60)
"""


Stale = tuple[subprocess.Popen, subprocess.Popen, dict]  # the grader, the process in its group, the groups it made


@pytest.fixture
def stale_groups(started: list[subprocess.Popen]) -> Iterator[Stale]:
    """A grader that opened two gradings, one with a process in a job, and is still running;
    at the end its process and every group it made go, whatever happened."""
    sleeper = subprocess.Popen(["sleep", "60"])
    started.append(sleeper)
    argv = [sys.executable, "-c", STALE_GRADER, str(sleeper.pid), uuid.uuid4().hex[:8]]
    grader = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=ROOT)
    started.append(grader)
    lines = read_lines(grader, timeout=4, until=bool)
    made = json.loads(lines[0]) if lines else {}
    yield grader, sleeper, made
    grader.kill()
    sleeper.kill()
    sleeper.wait()
    for grading_made in made.values():
        for group in [*grading_made.get("busy", []), *grading_made["empty"], *grading_made["parents"].values()]:
            deadline = time.monotonic() + 2
            while Path(group).exists() and time.monotonic() < deadline:
                try:
                    os.rmdir(group)
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        raise
                    time.sleep(0.01)


@real_cgroups
def test_open_removes_the_empty_groups_of_dead_graders_only(grading: Opener, stale_groups: Stale) -> None:
    grader, sleeper, made = stale_groups
    assert set(made) == {"stale-a", "stale-b"}, made
    every = [Path(p) for grading_made in made.values() for p in [*grading_made["empty"], *grading_made["parents"].values()]]
    grading()  # the grader that made them is alive: nothing of its goes
    assert all(path.exists() for path in every)

    grader.send_signal(signal.SIGKILL)  # dies without closing
    grader.wait()
    grading()
    assert all(not Path(p).exists() for p in [*made["stale-a"]["parents"].values(), *made["stale-a"]["empty"], *made["stale-b"]["empty"]])
    busy = [Path(p) for p in made["stale-b"]["busy"]]
    assert all(path.exists() and str(sleeper.pid) in (path / "cgroup.procs").read_text().split() for path in busy)
    assert all(Path(p).exists() for p in made["stale-b"]["parents"].values())
    assert procs.alive(sleeper.pid)


@real_cgroups
def test_an_unprivileged_grader_is_told_why_not() -> None:
    code = "from grader.run.cgroups import Caps, open_cgroups; print(open_cgroups('unprivileged', Caps(1 << 30, 16)))"
    done = subprocess.run([sys.executable, "-c", code], user=65534, group=65534, capture_output=True, text=True, timeout=10, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "cannot create the control group" in done.stdout and "Permission denied" in done.stdout and "root" in done.stdout, done.stdout


def test_a_missing_controller_is_told() -> None:
    with tempfile.TemporaryDirectory() as folder:
        self_cgroup = Path(folder, "cgroup")
        self_cgroup.write_text("4:memory:/\n6:freezer:/\n0::/\n")
        said = open_cgroups("x", Caps(1 << 30, 16), root=Path(folder), self_cgroup=self_cgroup)
        assert said == f"no cgroup v1 pids controller here (none in /proc/self/cgroup, and no cgroup v2 at {folder})"
        self_cgroup.write_text("8:pids:/\n4:memory:/\n0::/\n")
        said = open_cgroups("x", Caps(1 << 30, 16), root=Path(folder), self_cgroup=self_cgroup)
        assert said == f"the cgroup v1 memory hierarchy is not mounted at {folder}/memory"
        assert open_cgroups("x", Caps(1 << 30, 16), root=Path(folder), self_cgroup=Path(folder, "missing")).startswith("cannot read")


def test_usage_messages() -> None:
    caps = Caps(4 << 30, 512)
    assert Usage(None, 0, False, False).message(caps) == ""
    said = Usage(5 << 30, 2, True, False).message(caps)
    assert said == "your processes used more than 4 GiB of memory (processes and files in /tmp together); the kernel stopped them"
    assert Usage(4 << 30, 0, True, True).message(caps) == (
        "your processes reached the cap of 4 GiB of memory (processes and files in /tmp together); the kernel refused them more; "
        "your program started more than 512 processes and threads; the kernel refused the rest"
    )
    assert Caps(200 * MiB, 8).describe() == "memory 200 MiB, 8 processes"


# cgroup v2, against a directory that behaves like it -------------------------------------

CORE = {
    "cgroup.procs": "",
    "cgroup.subtree_control": "",
    "cgroup.events": "populated 0\nfrozen 0\n",
    "cgroup.freeze": "0\n",
    "cgroup.kill": "",  # kernels before 5.14 lack it
}
BY_CONTROLLER = {
    "memory": {
        "memory.max": "max\n",
        "memory.swap.max": "max\n",
        "memory.peak": "0\n",
        "memory.events": "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
    },
    "pids": {"pids.max": "max\n", "pids.events": "max 0\n"},
}


class FakeCgroup2(Files):
    """Ordinary files that answer like cgroup2: a new group gets the files of the controllers
    its parent enables; cgroup.procs lists live processes; cgroup.kill SIGKILLs them (as the
    kernel would); rmdir refuses a group with processes or children. Every write is recorded."""

    def __init__(self, root: Path, kill_file: bool = True, refuse: tuple[Path, ...] = ()) -> None:
        self.root = root
        self.kill_file = kill_file
        self.refuse = refuse  # groups where this grader may not write
        self.writes: list[tuple[str, str]] = []
        root.mkdir()
        (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
        (root / "cgroup.subtree_control").write_text("memory pids\n")
        (root / "cgroup.procs").write_text("1\n")

    def _check(self, path: Path) -> None:
        if any(path == group or group in path.parents for group in self.refuse):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    def read(self, path: Path) -> str:
        text = path.read_text()
        if path.name == "cgroup.procs":
            return "".join(f"{pid}\n" for pid in text.split() if procs.alive(int(pid)))
        return text

    def write(self, path: Path, text: str) -> None:
        self._check(path.parent)
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        self.writes.append((str(path.relative_to(self.root)), text))
        if path.name == "cgroup.procs":
            path.write_text(path.read_text() + text + "\n")
        elif path.name == "cgroup.kill":
            for pid in self.read(path.parent / "cgroup.procs").split():
                procs.kill_quietly(int(pid))
        elif path.name == "cgroup.freeze":
            path.write_text(text)
            (path.parent / "cgroup.events").write_text(f"populated 1\nfrozen {text}\n")
        elif path.name == "cgroup.subtree_control":
            enabled = set(path.read_text().split())
            for token in text.split():
                (enabled.add if token[0] == "+" else enabled.discard)(token[1:])
            path.write_text(" ".join(sorted(enabled)) + "\n")
        else:
            path.write_text(text)

    def mkdir(self, path: Path) -> None:
        self._check(path.parent)
        path.mkdir()
        files = dict(CORE)
        for controller in path.parent.joinpath("cgroup.subtree_control").read_text().split():
            files.update(BY_CONTROLLER.get(controller, {}))
        if not self.kill_file:
            del files["cgroup.kill"]
        for name, text in files.items():
            (path / name).write_text(text)

    def rmdir(self, path: Path) -> None:
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
        self._check(path.parent)
        if self.children(path) or self.read(path / "cgroup.procs").split():
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
        shutil.rmtree(path)


@pytest.fixture
def fake_tree(tmp_path: Path) -> tuple[FakeCgroup2, Path]:
    """A cgroup2 tree where the grader runs in system.slice/grader.service, and the file
    that says so."""
    files = FakeCgroup2(tmp_path / "cgroup")
    files.mkdir(files.root / "system.slice")
    files.write(files.root / "system.slice" / "cgroup.subtree_control", "+memory +pids")
    files.mkdir(files.root / "system.slice" / "grader.service")
    files.write(files.root / "system.slice" / "grader.service" / "cgroup.procs", str(os.getpid()))
    self_cgroup = tmp_path / "self-cgroup"
    self_cgroup.write_text("0::/system.slice/grader.service\n")
    files.writes.clear()
    return files, self_cgroup


@pytest.fixture
def sleeper(started: list[subprocess.Popen]) -> subprocess.Popen:
    process = subprocess.Popen(["sleep", "60"])
    started.append(process)
    return process


def open_fake(files: FakeCgroup2, self_cgroup: Path, caps: Caps = Caps(4 << 30, 512)) -> Cgroups:
    cgroups = open_cgroups("g", caps, root=files.root, self_cgroup=self_cgroup, files=files)
    assert isinstance(cgroups, V2Cgroups), cgroups
    return cgroups


def test_v2_puts_the_grading_next_to_our_group_and_caps_each_job(fake_tree: tuple[FakeCgroup2, Path]) -> None:
    files, self_cgroup = fake_tree
    cgroups = open_fake(files, self_cgroup)
    parent = f"system.slice/pdl-grader-{os.getpid()}-g"
    assert cgroups.version == "cgroup v2" and cgroups.parents == {"cgroup2": files.root / parent}
    assert cgroups.describe() == "cgroup v2 per job: memory 4 GiB, 512 processes"
    job = cgroups.job("rank0")
    assert job.dirs == {"cgroup2": files.root / parent / "rank0"}
    assert files.writes == [
        (f"{parent}/cgroup.subtree_control", "+memory +pids"),
        (f"{parent}/memory.max", str(4 << 30)),  # the grading as a whole: what a job leaves charged counts for the next
        (f"{parent}/memory.swap.max", "0"),
        (f"{parent}/pids.max", "512"),
        (f"{parent}/rank0/memory.max", str(4 << 30)),
        (f"{parent}/rank0/memory.swap.max", "0"),
        (f"{parent}/rank0/pids.max", "512"),
    ]
    cgroups.close()
    assert not (files.root / parent).exists() and (files.root / "system.slice" / "grader.service").exists()


@pytest.mark.parametrize("kill_file", [True, False], ids=["cgroup.kill", "freeze, SIGKILL, thaw"])
def test_v2_adds_kills_and_removes(fake_tree: tuple[FakeCgroup2, Path], sleeper: subprocess.Popen, kill_file: bool) -> None:
    files, self_cgroup = fake_tree
    files.kill_file = kill_file
    cgroups = open_fake(files, self_cgroup)
    job = cgroups.job("rank0")
    files.writes.clear()
    job.add(sleeper.pid)
    assert job.pids() == [sleeper.pid]
    assert job.kill(wait_s=2) == 1
    assert sleeper.wait(timeout=2) == -signal.SIGKILL and job.pids() == []
    group = f"system.slice/pdl-grader-{os.getpid()}-g/rank0"
    killing = [(f"{group}/cgroup.kill", "1")] if kill_file else [(f"{group}/cgroup.freeze", "1"), (f"{group}/cgroup.freeze", "0")]
    assert files.writes == [(f"{group}/cgroup.procs", str(sleeper.pid)), *killing]
    job.remove()
    assert_gone(job)
    job.remove()
    cgroups.close()


def test_v2_usage_comes_from_the_events_files(fake_tree: tuple[FakeCgroup2, Path]) -> None:
    files, self_cgroup = fake_tree
    job = open_fake(files, self_cgroup).job("rank0")
    group = job.dirs["cgroup2"]
    assert job.usage() == Usage(0, 0, False, False)
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n")
    (group / "pids.events").write_text("max 3\n")
    (group / "memory.peak").write_text(f"{200 * MiB}\n")
    assert job.usage() == Usage(200 * MiB, 1, True, True)
    (group / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 0\noom_kill 0\noom_group_kill 0\n")
    (group / "memory.peak").unlink()  # kernels before 5.19
    assert job.usage() == Usage(None, 0, True, True)


def test_v2_where_the_parent_goes(tmp_path: Path) -> None:
    at_root = FakeCgroup2(tmp_path / "a")
    (tmp_path / "self-a").write_text("0::/\n")
    assert open_fake(at_root, tmp_path / "self-a").parents == {"cgroup2": at_root.root / f"pdl-grader-{os.getpid()}-g"}

    refused = FakeCgroup2(tmp_path / "b")
    refused.mkdir(refused.root / "user.slice")  # its subtree_control enables nothing, and we may not change that
    refused.mkdir(refused.root / "user.slice" / "me.scope")
    refused.refuse = (refused.root / "user.slice",)
    (tmp_path / "self-b").write_text("0::/user.slice/me.scope\n")
    assert open_fake(refused, tmp_path / "self-b").parents == {"cgroup2": refused.root / f"pdl-grader-{os.getpid()}-g"}

    refused.refuse = (refused.root,)
    problem = open_cgroups("h", Caps(1 << 30, 16), root=refused.root, self_cgroup=tmp_path / "self-b", files=refused)
    assert isinstance(problem, str) and "user.slice: Permission denied" in problem, problem
    assert f"pdl-grader-{os.getpid()}-h: Permission denied" in problem, problem

    (refused.root / "cgroup.controllers").write_text("cpu io memory\n")
    said = open_cgroups("i", Caps(1 << 30, 16), root=refused.root, self_cgroup=tmp_path / "self-b", files=refused)
    assert said == f"cgroup v2 at {refused.root} without the pids controller"


def test_v2_open_removes_the_empty_groups_of_dead_graders_only(fake_tree: tuple[FakeCgroup2, Path], sleeper: subprocess.Popen) -> None:
    files, self_cgroup = fake_tree
    dead = subprocess.Popen(["true"])  # a grader that has ended
    dead.wait()
    slice_ = files.root / "system.slice"
    old, gone, live = f"pdl-grader-{dead.pid}-old", f"pdl-grader-{dead.pid}-gone", f"pdl-grader-{sleeper.pid}-live"
    for name in (old, f"{old}/empty", f"{old}/busy", gone, f"{gone}/empty", live, "other.service"):
        files.mkdir(slice_ / name)
    files.write(slice_ / old / "busy" / "cgroup.procs", str(sleeper.pid))
    open_fake(files, self_cgroup)
    kept = sorted(["grader.service", "other.service", old, live, f"pdl-grader-{os.getpid()}-g"])
    assert sorted(p.name for p in files.children(slice_)) == kept
    assert [p.name for p in files.children(slice_ / old)] == ["busy"]
