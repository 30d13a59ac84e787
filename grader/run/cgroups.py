"""Per-job control groups: every process of a job ends with it, and the job's memory and
process count are capped, whatever the processes do to hide.

Mechanism (Linux, as root). A grading gets a parent group, `pdl-grader-<pid>-<name>` (the
grader's pid in the name says whose it is); each job gets a child group of it. A job's first
process is moved in before it runs anything (started blocked, moved, then released): its
children, however they detach (setsid, double fork, re-exec with an empty environment, deep
chains where each parent exits), are born into the group and cannot leave it (the cgroup files
belong to root and are not even mounted in the sandbox). At the end:

  * kill: the group is frozen so that nothing in it can fork any more, every process listed in
    it gets SIGKILL, the group is thawed (a frozen process dies only once thawed) and the
    killing goes on until the group lists no process (cgroup v2 with `cgroup.kill` does all of
    that in the kernel);
  * usage: whether the kernel enforced a cap — the memory controller's OOM kills (and its count
    of charges refused at the cap), the pids controller's count of forks refused at the cap;
  * remove: rmdir of the (empty) group.

Memory counts every page the job's processes charge: their own memory and the tmpfs and memfd
pages they write (shmem is charged to the writer's group, and stays charged while the file
exists). Swap is not allowed to stretch the cap.

cgroup v1 (separate hierarchies under /sys/fs/cgroup/<controller>): the parent is made under
this process's own group in each of the memory, pids and (when mounted) freezer hierarchies, as
read from /proc/self/cgroup; a job writes memory.limit_in_bytes, then memory.memsw.limit_in_bytes
(memory + swap, must be set after and not below it; absent without swap accounting),
memory.kmem.tcp.limit_in_bytes (v1 keeps TCP buffers apart from memory and charges them to no
cap unless this is set: 1.3 GiB of unread loopback data went uncounted; once set, UDP buffers
are charged there too, and unix sockets' buffers go to memory with the rest) and pids.max;
freezer.state FROZEN/THAWED for the kill (without a freezer the killing loop alone ends a group:
pids.max bounds how many it can start); memory.oom_control's `oom_kill`, memory.failcnt,
memory.max_usage_in_bytes and pids.events' `max` for the usage (Linux 6.18 leaves memory.failcnt at 0
even through an OOM kill: there, the OOM kills alone say the memory cap was hit). Processes are moved by writing
their pid to cgroup.procs in every hierarchy.

cgroup v2 (one hierarchy; /sys/fs/cgroup/cgroup.controllers lists memory and pids): a group can
either hold processes or pass controllers on to child groups ("no internal processes"), and the
grader's own group holds the grader. So the parent goes next to our own group, in its parent,
which holds no process of its own and, when our group has memory and pids, already enables them
for its children; this keeps the jobs inside whatever limits and accounting the grader itself
runs under (a Slurm job, a systemd service), as v1 does. Where that group cannot be used (not
writable, controllers not enabled), the hierarchy's root (exempt from the rule) is tried; a grader
whose own group is the root uses the root. The parent enables +memory +pids in its
cgroup.subtree_control; a job writes memory.max, memory.swap.max=0 (when present) and pids.max;
the kill writes cgroup.kill (or cgroup.freeze 1/0 around the SIGKILLs); usage reads memory.events
(`oom_kill`, `max`), pids.events (`max`) and memory.peak (when present). v2 charges socket
buffers to memory.current: they count against the job's memory cap.

Every read and write goes through `Files`, the one interface to the kernel, so that the v2 logic
can be tested against a directory of ordinary files on a machine that has only v1.

Left-overs: `open_cgroups` removes the groups of earlier graders that died without closing
theirs (their pid is gone) — only groups that hold no process: a group whose processes still
run is left for an operator to see.
"""
from __future__ import annotations

import errno
import os
import re
import signal
import sys
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from grader.run import procs

PREFIX = "pdl-grader-"
KILL_WAIT_S = 10.0  # for a killed group to empty
FREEZE_WAIT_S = 1.0  # for a group to report frozen (a process in uninterruptible sleep may delay it)
POLL_S = 0.005
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
OWNED = re.compile(re.escape(PREFIX) + r"(\d+)-.*")
V1_CONTROLLERS = ("memory", "pids", "freezer")  # the freezer is optional
V2_CONTROLLERS = ("memory", "pids")
TCP_LIMIT, TCP_PEAK, TCP_FAILCNT = "memory.kmem.tcp.limit_in_bytes", "memory.kmem.tcp.max_usage_in_bytes", "memory.kmem.tcp.failcnt"  # cgroup v1
TCP_NEAR = 1 << 20  # a socket-buffer peak this close to the cap reached it (a datagram that would pass it was dropped)


def _size(count: int) -> str:
    """4294967296 -> '4 GiB'."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):g} {unit}"
    return f"{count} bytes"


def _keyed(text: str) -> dict[str, int]:
    """'max 3\\noom_kill 1' -> {'max': 3, 'oom_kill': 1} (the format of *.events, memory.oom_control)."""
    pairs = (line.split() for line in text.splitlines())
    return {pair[0]: int(pair[1]) for pair in pairs if len(pair) == 2 and pair[1].isdigit()}


@dataclass(frozen=True)
class Caps:
    """What each job of a grading may use."""

    memory_bytes: int  # all processes of a job + the tmpfs/memfd pages they write
    processes: int  # pids.max: threads count
    tcp_bytes: int = 1 << 30  # cgroup v1: TCP and UDP buffers, which v1 keeps apart from memory (v2 charges them to memory)

    def describe(self) -> str:
        return f"memory {_size(self.memory_bytes)}, {self.processes} processes"


@dataclass(frozen=True)
class Usage:
    """What the kernel saw of a job's caps."""

    peak_memory_bytes: int | None  # None where the kernel does not say (v2 without memory.peak)
    oom_kills: int  # processes the kernel killed for the memory cap
    memory_cap_hit: bool  # the cap refused a charge (v1 memory.failcnt, v2 memory.events max: reclaim, a failed write) or killed
    process_cap_hit: bool  # a fork or thread was refused at the process cap
    tcp_cap_hit: bool = False  # v1: the TCP and UDP buffers reached their cap (a refused charge, or their peak at it)

    def message(self, caps: Caps) -> str:
        """What to tell the student about the caps the job ran into ('' when none). A job may
        reach its memory cap harmlessly (the kernel reclaims file cache): say it only for a job
        that failed."""
        said = []
        memory = f"{_size(caps.memory_bytes)} of memory (processes and files in /tmp together)"
        if self.oom_kills:
            said.append(f"your processes used more than {memory}; the kernel stopped them")
        elif self.memory_cap_hit:
            said.append(f"your processes reached the cap of {memory}; the kernel refused them more")
        if self.process_cap_hit:
            said.append(f"your program started more than {caps.processes} processes and threads; the kernel refused the rest")
        if self.tcp_cap_hit:
            said.append(f"your processes' socket buffers (TCP and UDP) reached the {_size(caps.tcp_bytes)} a job may hold (data sent and not yet read); the kernel held back the rest")
        return "; ".join(said)


class Files:
    """The cgroup filesystem: the only way this module touches the kernel."""

    def read(self, path: Path) -> str:
        return path.read_text()

    def write(self, path: Path, text: str) -> None:
        """One write() of `text` into an existing file (cgroup files take one value per write)."""
        handle = os.open(path, os.O_WRONLY)
        try:
            os.write(handle, text.encode())
        finally:
            os.close(handle)

    def exists(self, path: Path) -> bool:
        return path.exists()

    def mkdir(self, path: Path) -> None:
        path.mkdir()

    def rmdir(self, path: Path) -> None:
        path.rmdir()

    def children(self, path: Path) -> list[Path]:
        """The child groups of `path`."""
        try:
            return sorted(entry for entry in path.iterdir() if entry.is_dir())
        except FileNotFoundError:
            return []


def _wait_until(done: Callable[[], bool], seconds: float) -> None:
    """Poll `done` until it holds, for at most `seconds`."""
    deadline = time.monotonic() + seconds
    while not done() and time.monotonic() < deadline:
        time.sleep(POLL_S)


def _listed(files: Files, group: Path) -> list[int]:
    """The processes in `group` itself (none once it is gone)."""
    try:
        return [int(line) for line in files.read(group / "cgroup.procs").split()]
    except FileNotFoundError:
        return []


def _rmdir(files: Files, group: Path, deadline: float) -> None:
    """Remove `group`, already gone or not; a group whose last processes are still exiting is
    busy for a moment: retried until `deadline`."""
    while True:
        try:
            files.rmdir(group)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise
        time.sleep(POLL_S)


def _remove_if_empty(files: Files, group: Path) -> None:
    """rmdir `group` and its empty child groups; any that holds a process (or a busy one) stays."""
    for child in files.children(group):
        _remove_if_empty(files, child)
    if _listed(files, group):
        return
    try:
        files.rmdir(group)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.EBUSY, errno.ENOTEMPTY):
            raise


def _remove_stale(files: Files, base: Path) -> None:
    """Remove what graders that died without closing left in `base`: their groups that hold no process."""
    for group in files.children(base):
        owner = OWNED.fullmatch(group.name)
        if owner and int(owner.group(1)) != os.getpid() and not procs.alive(int(owner.group(1))):
            _remove_if_empty(files, group)


class JobGroup(ABC):
    """One job's group, in every hierarchy used (`dirs`: controller -> directory)."""

    def __init__(self, files: Files, dirs: dict[str, Path]) -> None:
        self.files = files
        self.dirs = dirs

    @abstractmethod
    def limit(self, caps: Caps) -> None:
        """Set the caps (a new, empty group)."""

    @abstractmethod
    def usage(self) -> Usage:
        """What the kernel counted; read it before remove()."""

    @abstractmethod
    def _freeze(self, frozen: bool) -> None:
        """Freeze (nothing in the group runs, so nothing forks) or thaw the group."""

    def _kernel_kill(self) -> bool:
        """Have the kernel kill the whole group, where it can (v2's cgroup.kill)."""
        return False

    def add(self, pid: int) -> None:
        """Move process `pid` (of this pid namespace) into the group, in every hierarchy: its
        future children are born in it. Move it before it runs untrusted code."""
        for group in self.dirs.values():
            self.files.write(group / "cgroup.procs", str(pid))

    def pids(self) -> list[int]:
        """The processes in the group now."""
        return sorted({pid for group in self.dirs.values() for pid in _listed(self.files, group)})

    def kill(self, wait_s: float) -> int:
        """SIGKILL every process of the group and wait, at most `wait_s` seconds, until the
        group is empty. Returns how many processes were killed."""
        found = set(self.pids())
        if not found:
            return 0
        deadline = time.monotonic() + wait_s
        if not self._kernel_kill():
            self._freeze(True)
            try:
                for pid in self.pids():
                    found.add(pid)
                    procs.kill_quietly(pid, signal.SIGKILL)
            finally:
                self._freeze(False)
        while (left := self.pids()) and time.monotonic() < deadline:
            found.update(left)
            for pid in left:
                procs.kill_quietly(pid, signal.SIGKILL)
            time.sleep(POLL_S)
        return len(found)

    def remove(self, wait_s: float = KILL_WAIT_S) -> None:
        """Kill what is left and remove the group; a group already gone is fine. Raises OSError
        when the group cannot be removed (processes that would not die within `wait_s`)."""
        deadline = time.monotonic() + wait_s
        self.kill(wait_s)
        for group in self.dirs.values():
            _rmdir(self.files, group, deadline)


class V1Job(JobGroup):
    """A job's groups in the cgroup v1 memory, pids and (when mounted) freezer hierarchies."""

    def limit(self, caps: Caps) -> None:
        memory = self.dirs["memory"]
        self.files.write(memory / "memory.limit_in_bytes", str(caps.memory_bytes))
        if self.files.exists(memory / "memory.memsw.limit_in_bytes"):
            self.files.write(memory / "memory.memsw.limit_in_bytes", str(caps.memory_bytes))
        if self.files.exists(memory / TCP_LIMIT):  # v1 charges TCP buffers to no cap unless this is set (1.3 GiB on loopback went uncounted)
            try:
                self.files.write(memory / TCP_LIMIT, str(caps.tcp_bytes))
            except OSError:
                pass  # a kernel that refuses it: the host's own TCP limits alone then bound them
        self.files.write(self.dirs["pids"] / "pids.max", str(caps.processes))

    def usage(self) -> Usage:
        memory, read = self.dirs["memory"], self.files.read
        oom_kills = _keyed(read(memory / "memory.oom_control")).get("oom_kill", 0)
        refused = int(read(memory / "memory.failcnt"))
        forks_refused = _keyed(read(self.dirs["pids"] / "pids.events")).get("max", 0)
        return Usage(int(read(memory / "memory.max_usage_in_bytes")), oom_kills, refused > 0 or oom_kills > 0, forks_refused > 0, self._tcp_cap_hit())

    def _tcp_cap_hit(self) -> bool:
        """Whether the TCP and UDP buffers reached their cap: a refused charge, or a peak within
        TCP_NEAR of it (Linux 6.18 counts no failures, as for memory: measured, 24 connections of
        unread data stopped at 9.5 MiB against a cap of 8 MiB with memory.kmem.tcp.failcnt at 0;
        UDP drops a datagram that would pass the cap, so its peak stays just below)."""
        memory, read = self.dirs["memory"], self.files.read
        if not self.files.exists(memory / TCP_LIMIT):
            return False
        try:
            limit, peak, failed = (int(read(memory / name)) for name in (TCP_LIMIT, TCP_PEAK, TCP_FAILCNT))
        except (OSError, ValueError):
            return False
        return failed > 0 or peak >= limit - TCP_NEAR

    def _freeze(self, frozen: bool) -> None:
        freezer = self.dirs.get("freezer")
        if freezer is None:
            return
        state = "FROZEN" if frozen else "THAWED"
        self.files.write(freezer / "freezer.state", state)
        _wait_until(lambda: self.files.read(freezer / "freezer.state").strip() == state, FREEZE_WAIT_S)


class V2Job(JobGroup):
    """A job's group in the cgroup v2 hierarchy."""

    @property
    def _dir(self) -> Path:
        return self.dirs["cgroup2"]

    def limit(self, caps: Caps) -> None:
        self.files.write(self._dir / "memory.max", str(caps.memory_bytes))
        if self.files.exists(self._dir / "memory.swap.max"):
            self.files.write(self._dir / "memory.swap.max", "0")
        self.files.write(self._dir / "pids.max", str(caps.processes))

    def usage(self) -> Usage:
        read = self.files.read
        events = _keyed(read(self._dir / "memory.events"))
        forks_refused = _keyed(read(self._dir / "pids.events")).get("max", 0)
        peak = int(read(self._dir / "memory.peak")) if self.files.exists(self._dir / "memory.peak") else None
        oom_kills = events.get("oom_kill", 0)
        return Usage(peak, oom_kills, events.get("max", 0) > 0 or oom_kills > 0, forks_refused > 0)

    def _kernel_kill(self) -> bool:
        if not self.files.exists(self._dir / "cgroup.kill"):
            return False
        self.files.write(self._dir / "cgroup.kill", "1")
        return True

    def _freeze(self, frozen: bool) -> None:
        self.files.write(self._dir / "cgroup.freeze", "1" if frozen else "0")
        wanted = 1 if frozen else 0
        _wait_until(lambda: _keyed(self.files.read(self._dir / "cgroup.events")).get("frozen") == wanted, FREEZE_WAIT_S)


class Cgroups(ABC):
    """A grading's parent group (`parents`: controller -> directory) and its jobs."""

    version = ""

    def __init__(self, files: Files, parents: dict[str, Path], caps: Caps) -> None:
        self.files = files
        self.parents = parents
        self.caps = caps
        self._jobs: dict[str, JobGroup] = {}
        # The parent holds the same caps: what a job leaves charged when its group goes (tmpfs
        # pages, SysV shared memory of the sandbox's IPC namespace) moves to the parent and
        # counts against every later job, so a grading as a whole stays within one job's caps.
        self._job_group(parents).limit(caps)

    @abstractmethod
    def _job_group(self, dirs: dict[str, Path]) -> JobGroup:
        """The JobGroup of this version for `dirs`."""

    def job(self, name: str) -> JobGroup:
        """A new, empty, capped group for the job `name` (letters, digits, '_', '.', '-')."""
        if not NAME.fullmatch(name) or name in self._jobs:
            raise ValueError(f"not a new job name: {name!r}")
        dirs = {controller: parent / name for controller, parent in self.parents.items()}
        made = []
        try:
            for group in dirs.values():
                self.files.mkdir(group)
                made.append(group)
            job = self._job_group(dirs)
            job.limit(self.caps)
        except OSError:
            for group in reversed(made):
                _remove_if_empty(self.files, group)
            raise
        self._jobs[name] = job
        return job

    def describe(self) -> str:
        """'cgroup v1 per job: memory 4 GiB, 512 processes'."""
        return f"{self.version} per job: {self.caps.describe()}"

    def close(self, wait_s: float = KILL_WAIT_S) -> None:
        """Kill and remove every job group left, then the parent. Raises the first OSError
        met, after trying everything."""
        failures: list[OSError] = []
        for job in self._jobs.values():
            try:
                job.remove(wait_s)
            except OSError as exc:
                failures.append(exc)
        for parent in self.parents.values():
            try:
                _rmdir(self.files, parent, time.monotonic() + wait_s)
            except OSError as exc:
                failures.append(exc)
        if failures:
            raise failures[0]


class V1Cgroups(Cgroups):
    version = "cgroup v1"

    def _job_group(self, dirs: dict[str, Path]) -> JobGroup:
        return V1Job(self.files, dirs)


class V2Cgroups(Cgroups):
    version = "cgroup v2"

    def _job_group(self, dirs: dict[str, Path]) -> JobGroup:
        return V2Job(self.files, dirs)


def _own_groups(text: str) -> list[tuple[list[str], str]]:
    """/proc/self/cgroup ('4:memory:/a/b', '0::/c') -> [(['memory'], '/a/b'), ([], '/c')]."""
    found = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            found.append((parts[1].split(",") if parts[1] else [], parts[2]))
    return found


def _make_parents(files: Files, bases: dict[str, Path], group: str) -> dict[str, Path] | str:
    """mkdir `group` under every base (after removing stale groups there), or why not."""
    made: dict[str, Path] = {}
    for controller, base in bases.items():
        _remove_stale(files, base)
        parent = base / group
        try:
            files.mkdir(parent)
        except OSError as exc:
            for done in made.values():
                _remove_if_empty(files, done)
            why = "the grader must run as root, on a writable cgroup filesystem"
            return f"cannot create the control group {parent}: {exc.strerror} ({why})"
        made[controller] = parent
    return made


def _open_v1(files: Files, root: Path, own: list[tuple[list[str], str]], group: str, caps: Caps) -> Cgroups | str:
    listed = {controller: (names, path) for names, path in own for controller in names if controller in V1_CONTROLLERS}
    missing = [controller for controller in V1_CONTROLLERS[:2] if controller not in listed]
    if missing:
        return f"no cgroup v1 {' and '.join(missing)} controller here (none in /proc/self/cgroup, and no cgroup v2 at {root})"
    bases = {}
    for controller in (name for name in V1_CONTROLLERS if name in listed):
        names, path = listed[controller]
        hierarchy = root / ",".join(names)
        if not files.exists(hierarchy / path.lstrip("/") / "cgroup.procs"):
            return f"the cgroup v1 {controller} hierarchy is not mounted at {hierarchy}"
        bases[controller] = hierarchy / path.lstrip("/")
    parents = _make_parents(files, bases, group)
    return parents if isinstance(parents, str) else V1Cgroups(files, parents, caps)


def _enable(files: Files, group: Path) -> str | None:
    """Let the child groups of `group` have the memory and pids controllers: None, or why not."""
    control = group / "cgroup.subtree_control"
    try:
        if not set(V2_CONTROLLERS) <= set(files.read(control).split()):
            files.write(control, " ".join(f"+{name}" for name in V2_CONTROLLERS))
    except OSError as exc:
        return f"cannot enable the memory and pids controllers for the child groups of {group}: {exc.strerror}"
    return None


def _v2_parent(files: Files, base: Path, group: str) -> dict[str, Path] | str:
    """The grading's parent group under `base`, its child groups given memory and pids; or why not."""
    problem = _enable(files, base)
    if problem:
        return problem
    made = _make_parents(files, {"cgroup2": base}, group)
    if isinstance(made, str):
        return made
    problem = _enable(files, made["cgroup2"])
    if problem:
        _remove_if_empty(files, made["cgroup2"])
        return problem
    return made


def _open_v2(files: Files, root: Path, own: list[tuple[list[str], str]], group: str, caps: Caps) -> Cgroups | str:
    available = files.read(root / "cgroup.controllers").split()
    missing = [name for name in V2_CONTROLLERS if name not in available]
    if missing:
        return f"cgroup v2 at {root} without the {' and '.join(missing)} controller{'s' if len(missing) > 1 else ''}"
    mine = [path for names, path in own if not names]
    if not mine:
        return "no cgroup v2 entry ('0::') in /proc/self/cgroup"
    own_dir = root / mine[0].lstrip("/")
    problems = []
    for base in dict.fromkeys([own_dir.parent if own_dir != root else root, root]):
        made = _v2_parent(files, base, group)
        if isinstance(made, dict):
            return V2Cgroups(files, made, caps)
        problems.append(made)
    return "; ".join(problems)


def open_cgroups(
    name: str, caps: Caps, root: Path = Path("/sys/fs/cgroup"), self_cgroup: Path = Path("/proc/self/cgroup"), files: Files | None = None
) -> Cgroups | str:
    """The grading `name`'s parent group, ready for jobs capped at `caps`, or why there cannot
    be one here (not root, no memory or pids controller, a read-only cgroup filesystem…).
    `files` replaces the kernel's files in tests."""
    if not sys.platform.startswith("linux"):
        return f"control groups need Linux (this is {sys.platform})"
    if not NAME.fullmatch(name):
        raise ValueError(f"not a grading name: {name!r}")
    files = files or Files()
    try:
        own = _own_groups(files.read(self_cgroup))
    except OSError as exc:
        return f"cannot read {self_cgroup}: {exc.strerror}"
    group = f"{PREFIX}{os.getpid()}-{name}"
    try:
        if files.exists(root / "cgroup.controllers"):
            return _open_v2(files, root, own, group, caps)
        return _open_v1(files, root, own, group, caps)
    except OSError as exc:
        return f"cannot use the control groups under {root}: {exc}"
