"""Process-tree utilities (Linux /proc): find a job's processes by the token in their
environment and kill them, whatever session or process group they moved to."""
from __future__ import annotations

import os
import signal
import socket
import time
from typing import Callable


def alive(pid: int) -> bool:
    """Whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in (b"Z", b"X")


def all_pids() -> list[int]:
    """Every process id in /proc except this process."""
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit() and int(entry) != os.getpid()]


def cmdline(pid: int) -> str:
    """The command line of `pid`, space-separated ('' if gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _environ(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


def pids_of_uids(uids: range) -> list[int]:
    """Live processes whose real uid is in `uids`."""
    found = []
    for pid in all_pids():
        try:
            with open(f"/proc/{pid}/status", "rb") as handle:
                uid = next(int(line.split()[1]) for line in handle if line.startswith(b"Uid:"))
        except (OSError, StopIteration, ValueError):
            continue
        if uid in uids and alive(pid):
            found.append(pid)
    return found


def pids_with_env(name: str, value: str) -> list[int]:
    """Live processes whose environment holds `name=value` (readable ones only)."""
    needle = f"{name}={value}".encode()
    return [pid for pid in all_pids() if needle in _environ(pid) and alive(pid)]


def pids_with_env_name(name: str) -> list[int]:
    """Live processes whose environment defines `name`, whatever its value."""
    prefix = f"{name}=".encode()
    return [pid for pid in all_pids() if any(v.startswith(prefix) for v in _environ(pid)) and alive(pid)]


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send a signal, ignoring processes that are already gone."""
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group_quietly(pgid: int) -> None:
    """SIGKILL a whole process group, ignoring one that is already gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _stat_table() -> dict[int, tuple[int, int]]:
    """pid -> (its parent's pid, its CPU ticks: user and system, its reaped children's included)
    for every process in /proc but this one, from /proc/<pid>/stat."""
    table: dict[int, tuple[int, int]] = {}
    for pid in all_pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            table[pid] = int(fields[1]), sum(int(field) for field in fields[11:15])  # ppid; utime, stime, cutime, cstime
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return table


def _below(table: dict[int, tuple[int, int]], ancestor: int) -> list[int]:
    """The pids of `table` that are `ancestor` or below it."""
    found = []
    for pid in table:
        step, seen = pid, 0
        while step > 1 and seen < 64:
            if step == ancestor:
                found.append(pid)
                break
            step, seen = table.get(step, (0, 0))[0], seen + 1
    return found


def tree_schedstats(ancestor: int) -> tuple[int, dict[int, tuple[int, int]]]:
    """The CPU time, in clock ticks, that `ancestor` and every process below it have used (user
    and system, their reaped children's included, from /proc/<pid>/stat), and per task
    (thread) of them: nanoseconds on a CPU and nanoseconds runnable but waiting for one, from
    /proc/<pid>/task/<tid>/schedstat; the kernel's counts, which the processes cannot write,
    in one pass over /proc."""
    table = _stat_table()
    below = _below(table, ancestor)
    found: dict[int, tuple[int, int]] = {}
    for pid in below:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as handle:
                    ran, waited = handle.read().split()[:2]
                found[int(tid)] = int(ran), int(waited)
            except (OSError, ValueError):
                continue
    return sum(table[pid][1] for pid in below), found


def tree_run_ns(ancestor: int) -> int:
    """The nanoseconds on a CPU of every task (thread) of `ancestor` and the processes below it
    that are alive now (the kernel's schedstat)."""
    return sum(ran for ran, _ in tree_schedstats(ancestor)[1].values())


def _parent_and_nspids(pid: int) -> tuple[int, list[int]] | None:
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            text = handle.read().decode(errors="replace")
    except OSError:
        return None
    parent, nspids = -1, [pid]
    for line in text.splitlines():
        if line.startswith("PPid:"):
            parent = int(line.split()[1])
        elif line.startswith("NSpid:"):
            nspids = [int(x) for x in line.split()[1:]]
    return parent, nspids


def host_pids(ancestor: int, inner: set[int]) -> dict[int, int]:
    """Map pids seen inside a pid namespace (the innermost ones, as the processes themselves
    see them) to host pids, among the descendants of `ancestor`."""
    table = {pid: info for pid in all_pids() if (info := _parent_and_nspids(pid)) is not None}
    found = {}
    for pid, (_, nspids) in table.items():
        if nspids[-1] not in inner:
            continue
        step, seen = pid, 0
        while step > 1 and seen < 64:
            step, seen = table.get(step, (0, []))[0], seen + 1
            if step == ancestor:
                found[nspids[-1]] = pid
                break
    return found


def kill_until_gone(find: Callable[[], list[int]], wait_s: float) -> int:
    """SIGKILL whatever `find` returns, again and again until it finds nothing (a dying process
    can start or hand over another), for at most `wait_s` seconds. Returns how many distinct
    processes were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + wait_s
    while True:
        found = find()
        if not found or time.monotonic() > deadline:
            return len(killed)
        for pid in found:
            kill_quietly(pid)
        killed.update(found)
        time.sleep(0.02)


def kill_by_env(name: str, value: str, wait_s: float) -> int:
    """SIGKILL every process whose environment holds `name=value` until none is alive, for at
    most `wait_s` seconds. Returns how many distinct processes were killed."""
    return kill_until_gone(lambda: pids_with_env(name, value), wait_s)


def kill_by_uid(uid: int, wait_s: float) -> int:
    """SIGKILL every process whose real uid is `uid` until none is alive, for at most `wait_s`
    seconds. A process already dying counts as alive until it has exited: a pid namespace's
    init, for one, waits for its last children before it goes. Returns how many distinct
    processes were signalled."""
    return kill_until_gone(lambda: pids_of_uids(range(uid, uid + 1)), wait_s)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
