"""The sandbox every run of student code goes through, when the machine allows it.

Mechanism (Linux): the rank launcher (the zygote, and everything it forks) is started as

    prlimit <limits> -- setpriv <drop to an unprivileged uid> -- bwrap <a new world> -- python …

  * `setpriv` drops to a uid leased from a pool, distinct for every concurrent grading
    (RLIMIT_NPROC counts per uid), with no capabilities and no supplementary groups; when the
    grader does not run as root it is already unprivileged and nothing is dropped;
  * `bwrap` (bubblewrap, unprivileged user namespaces) gives new user, pid, network, IPC, UTS
    and cgroup namespaces — only a loopback interface, so gloo and torchrun work but nothing
    else is reachable — and a read-only view built from an allow-list: /usr, /etc, the Python
    environment, a copy of the grader's probe, and the grading folder (the one writable place;
    the grader's other files, the solutions, hidden checks and other submissions are simply not
    there). /tmp is a private tmpfs. The sandbox dies with the grader (--die-with-parent) and
    killing its outer process ends every process in it (pid namespace);
  * `prlimit` caps CPU seconds, address space, processes, file size and open files, and
    disables core dumps.
A leased uid goes back to the pool only when no process of it is left alive.
Inherited descriptors: the launcher gets only stdin, stdout and stderr. On GPU nodes the
NVIDIA device files are passed through.

`open_sandbox` says why when this is not possible (no bubblewrap, no user namespaces, a
Python environment other users cannot read); callers decide whether to refuse or to warn.
"""
from __future__ import annotations

import fcntl
import glob
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from grader.run import procs

UID_POOL = range(61000, 61500)
RELEASE_WAIT_S = 10.0  # for the processes of a leased uid to exit
LOCK_DIR = Path(tempfile.gettempdir()) / "pdl-grader-uids"
PROBE_SOURCE = Path(__file__).resolve().parents[1]  # the grader package


@dataclass(frozen=True)
class Limits:
    """Per-process resource limits inside the sandbox."""

    cpu_s: int = 900
    memory_mb: int = 4096
    processes: int = 512  # per uid: threads count too
    file_mb: int = 256  # largest file a process may write (stdout included)
    open_files: int = 1024


@dataclass
class Sandbox:
    """A leased uid and how to start commands under bubblewrap with it."""

    bwrap: str
    uid: int
    drop: bool  # setpriv to `uid` (the grader is root)
    python: str
    read_only: tuple[str, ...]
    devices: tuple[str, ...]
    limits: Limits = field(default_factory=Limits)
    _lease: IO | None = None

    def describe(self) -> str:
        who = f"uid {self.uid}" if self.drop else f"the grader's own uid {self.uid}"
        return f"bubblewrap sandbox as {who}, loopback only, read-only system"

    def prepare_root(self, root: Path) -> Path:
        """Make `root` (the grading folder) usable inside: a read-only copy of the probe in
        root/lib, and the folder itself traversable. Returns the lib folder."""
        if self.drop:
            closed = [p for p in Path(root).resolve().parents if not p.stat().st_mode & stat.S_IXOTH]
            if closed:
                raise ValueError(f"the grading folder {root} must be reachable by the sandbox's user, but {closed[0]} is not searchable by others")
        lib = root / "lib"
        package = lib / "grader"
        shutil.copytree(PROBE_SOURCE / "probe", package / "probe", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(PROBE_SOURCE / "__init__.py", package / "__init__.py")
        for path in (root, *lib.rglob("*"), lib):  # all made just now by the grader: no links
            path.chmod(0o755 if path.is_dir() else 0o644)
        return lib

    def give(self, *paths: Path) -> None:
        """Hand `paths` over to the sandbox's uid (what the submission may write). Links are
        changed themselves, never followed: a submission's `x -> /etc/shadow` must not hand
        /etc/shadow over (os.chown follows links; os.lchown does not)."""
        if not self.drop:
            return
        for path in paths:
            os.lchown(path, self.uid, self.uid)

    def command(self, argv: list[str], root: Path) -> list[str]:
        """`argv` (starting with the sandbox's python) wrapped in limits, uid drop and bwrap,
        with `root` bound read-write at the same path."""
        limits = self.limits
        wrapped = [
            "prlimit",
            f"--cpu={limits.cpu_s}",
            f"--as={limits.memory_mb << 20}",
            f"--nproc={limits.processes}",
            f"--fsize={limits.file_mb << 20}",
            f"--nofile={limits.open_files}",
            "--core=0",
            "--",
        ]
        if self.drop:
            wrapped += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"]
        wrapped += [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session"]
        wrapped += ["--tmpfs", "/tmp", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                wrapped += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        for path in self.read_only:
            wrapped += ["--ro-bind", path, path]
        wrapped += ["--bind", str(root), str(root), "--ro-bind", str(root / "lib"), str(root / "lib")]
        wrapped += ["--proc", "/proc", "--dev", "/dev"]
        for device in self.devices:
            wrapped += ["--dev-bind", device, device]
        wrapped += ["--remount-ro", "/", "--chdir", str(root), "--", *argv]
        return wrapped

    def release(self) -> None:
        """Give the leased uid back, once no process of it is left: killed processes of a
        sandbox can take a moment to exit (its pid namespace's init waits for the last of
        them), and the next grading that leases the uid must start with none."""
        if self._lease is not None:
            if self.drop:
                procs.kill_by_uid(self.uid, RELEASE_WAIT_S)
            self._lease.close()
            self._lease = None

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _readable_by_others(path: str) -> bool:
    """Whether another, unprivileged user can reach `path` (every directory on the way
    searchable by others, the path itself readable)."""
    current = Path(path).resolve()
    for part in (*reversed(current.parents), current):
        try:
            mode = part.stat().st_mode
        except OSError:
            return False
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return False
    return bool(current.stat().st_mode & stat.S_IROTH)


def _lease_uid() -> tuple[int, IO] | None:
    LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
    for uid in UID_POOL:
        handle = open(LOCK_DIR / str(uid), "w")  # noqa: SIM115 - held for the lease
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return uid, handle
    return None


def _works(sandbox: Sandbox) -> str | None:
    """Start `python -c pass` in the sandbox: None if it works, else what went wrong."""
    root = Path(tempfile.mkdtemp(prefix="grader-sandbox-check-"))
    try:
        sandbox.prepare_root(root)
        done = subprocess.run(sandbox.command([sandbox.python, "-c", "import grader.probe"], root), capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / "lib")})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["no output"])[-1][:300]


def open_sandbox(limits: Limits | None = None, python: str = sys.executable) -> Sandbox | str:
    """A ready sandbox (with a leased uid), or the reason there cannot be one here."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap needs Linux (this is {sys.platform})"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed; on Debian/Ubuntu: apt-get install bubblewrap"
    for tool in ("prlimit", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    prefixes = sorted({sys.prefix, sys.base_prefix, str(Path(python).resolve().parent.parent)} - {"/usr"})
    drop = os.geteuid() == 0
    if drop:
        unreadable = [p for p in prefixes if not _readable_by_others(p)]
        if unreadable:
            return f"the Python environment ({', '.join(unreadable)}) cannot be read by the sandbox's unprivileged user; install it in a world-readable place (scripts/setup.sh uses the system Python)"
    lease = _lease_uid() if drop else (os.getuid(), None)
    if lease is None:
        return f"every sandbox uid of {UID_POOL.start}-{UID_POOL.stop - 1} is in use"
    devices = tuple(sorted(glob.glob("/dev/nvidia*")))
    sandbox = Sandbox(bwrap=bwrap, uid=lease[0], drop=drop, python=python, read_only=tuple(p for p in prefixes if not p.startswith("/usr/")), devices=devices, limits=limits or Limits(), _lease=lease[1])
    problem = _works(sandbox)
    if problem:
        sandbox.release()
        return f"bubblewrap cannot start a sandbox here (are unprivileged user namespaces allowed?): {problem}"
    return sandbox
