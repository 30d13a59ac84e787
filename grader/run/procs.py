"""Process-tree utilities (Linux /proc): find a job's processes by the token in their
environment and kill them, whatever session or process group they moved to."""
from __future__ import annotations

import os
import signal
import socket
import time


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


def kill_by_env(name: str, value: str, wait_s: float) -> int:
    """SIGKILL every process whose environment holds `name=value`, again and again until none
    is alive (a dying process can start or hand over another), for at most `wait_s` seconds.
    Returns how many distinct processes were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + wait_s
    while True:
        found = pids_with_env(name, value)
        if not found or time.monotonic() > deadline:
            return len(killed)
        for pid in found:
            kill_quietly(pid)
        killed.update(found)
        time.sleep(0.02)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
