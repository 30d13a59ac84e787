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
    there). /tmp and /dev/shm are folders of the grading folder (emptied by the grader after
    every job), not tmpfs mounts of their own. The sandbox dies with the grader
    (--die-with-parent) and killing its outer process ends every process in it (pid namespace);
  * `prlimit` caps CPU seconds, address space (not on GPU nodes: CUDA reserves far more than
    it uses; the job's memory cgroup bounds memory there), processes, file size and open
    files, and disables core dumps;
  * the grading folder itself, when the grader is root, is a tmpfs mounted for it with a size
    and an inode cap: everything the submission writes (its work folder, /tmp, /dev/shm, its
    output) shares `Limits.disk_mb`, and the pages count towards the job's memory cgroup too
    (grader/run/cgroups.py). Without root it is a plain folder: only each file is capped.
A leased uid goes back to the pool only when no process of it is left alive; the grader's
trusted code (the reference solution) runs in a `sibling` sandbox: another uid, another pid
namespace, another grading folder.
Inherited descriptors: the launcher gets only stdin, stdout and stderr. On GPU nodes the
NVIDIA device files are passed through.

Where bubblewrap cannot run (Gradescope's image and Docker without user namespaces, CI
runners) but the grader is root, `open_sandbox(fallback=True)` gives the second tier, the
*unprivileged uid*: the same prlimit and setpriv, without bwrap. The submission then shares the
machine's file system, network, /tmp and process list, so what it must not see is closed to it
instead: its grading folder and the trusted domain's are root's, mode 0750, open to their own
uid's group alone (the reference's copy and its outputs lie in the trusted one; nothing the grader
made there can be renamed by the submission), the course's files (solutions, answer
keys, the grader) are made unreadable by other users (`hide_from_others`; the Python
environment stays readable), and it cannot signal, trace or read the memory of processes of
other uids. What a job leaves behind is found by its uid, which the grading holds alone: after
every job every process of the uid but the launcher is killed, and its files in the shared
scratch folders (SHARED_SCRATCH) and its SysV IPC objects are removed (`clear_uid`). No
seccomp filter (bwrap loads it) and no network isolation: docs/admins.md#isolation-tiers says
what each tier protects against.

`open_sandbox` says why when neither is possible (no bubblewrap, no user namespaces, not root, a
Python environment other users cannot read); callers decide whether to refuse or to warn.
"""
from __future__ import annotations

import errno
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
from typing import IO, Any

from grader.run import procs, seccomp

UID_POOL = range(61000, 61500)
# The sandbox's uids have no entry in /etc/passwd: getpass.getuser() falls back on pwd and
# raises KeyError unless these are set (a CUDA build of torch 2.11 calls it on import, for
# inductor's cache folder: every launch on an H100 node failed so)
IDENTITY = {"USER": "student", "LOGNAME": "student"}
SCRATCH = ("tmp", "shm")  # folders of the grading folder that are the sandbox's /tmp and /dev/shm
SCRATCH_MOUNTS = ("/tmp", "/dev/shm")  # replaced inside the sandbox: nothing it needs may live there
MOUNT_SOURCE = "pdl-grader-"  # the tmpfs of a grading folder, then the grader's pid
RELEASE_WAIT_S = 10.0  # for the processes of a leased uid to exit
LOCK_DIR = Path(tempfile.gettempdir()) / "pdl-grader-uids"
# Grading folders live outside /tmp: the sandbox's /tmp is a folder of the grading folder, and a
# grading folder inside /tmp would be hidden under it.
GRADINGS = Path("/var/tmp") / f"pdl-grader-{os.geteuid()}"
PROBE_SOURCE = Path(__file__).resolve().parents[1]  # the grader package
SHARED_SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock")  # writable by every user: cleared of a uid's files in the uid tier
SYSV_TABLES = {"shm": "-m", "sem": "-s", "msg": "-q"}  # /proc/sysvipc/NAME -> ipcrm's option for its ids
BUBBLEWRAP, UID_TIER, NO_ISOLATION = "bubblewrap", "unprivileged uid", "none"  # the isolation tiers, as results and the doctor name them


@dataclass(frozen=True)
class Limits:
    """Resource limits inside the sandbox: per process (prlimit), and per job (cgroup, tmpfs)."""

    cpu_s: int = 900
    memory_mb: int = 4096  # address space of one process
    processes: int = 512  # per job where cgroups are available (twice that per uid): threads count too
    file_mb: int = 256  # largest file a process may write (stdout included)
    open_files: int = 1024
    job_memory_mb: int = 6144  # every process of a job and the files it writes to tmpfs, together
    disk_mb: int = 2048  # everything a job writes: work folder, /tmp, /dev/shm, output
    inodes: int = 100_000  # files and folders in the grading folder


def size_text(mib: int) -> str:
    """'6 GiB', '512 MiB'."""
    return f"{mib / 1024:g} GiB" if mib >= 1024 else f"{mib} MiB"


@dataclass
class Sandbox:
    """A leased uid and how to start commands with it: under bubblewrap, or (`bwrap` None: the
    unprivileged-uid tier) with limits and the uid alone."""

    bwrap: str | None
    uid: int
    drop: bool  # setpriv to `uid` (the grader is root)
    python: str
    read_only: tuple[str, ...]
    devices: tuple[str, ...]
    limits: Limits = field(default_factory=Limits)
    _lease: IO | None = None
    _mounts: list[Path] = field(default_factory=list)
    disk_cap: str = "each file only (the grading folder is not a capped tmpfs)"
    no_bubblewrap: str = ""  # the uid tier: why bubblewrap could not be used

    @property
    def tier(self) -> str:
        """BUBBLEWRAP or UID_TIER."""
        return BUBBLEWRAP if self.bwrap else UID_TIER

    def describe(self) -> str:
        """The tier first, then what it gives (for results' `environment.isolation` and the doctor)."""
        if self.bwrap is None:
            return (
                f"{UID_TIER} {self.uid} (no bubblewrap: {self.no_bubblewrap}): resource limits, a session of its own, its folders and the course's files closed to it; "
                f"no namespaces: it shares the network, /tmp and the process list; {seccomp.describe()}; files written: {self.disk_cap}"
            )
        who = f"uid {self.uid}" if self.drop else f"the grader's own uid {self.uid}"
        return f"{BUBBLEWRAP} sandbox as {who}, loopback only, read-only system, {seccomp.describe()}; files written: {self.disk_cap}"

    @property
    def private_scratch(self) -> bool:
        """Whether /tmp and /dev/shm inside are the grading folder's own (bubblewrap)."""
        return self.bwrap is not None

    @property
    def owner(self) -> int | None:
        """The uid that files made for the submission are handed to (None: the grader's own)."""
        return self.uid if self.drop else None

    def new_root(self, prefix: str) -> Path:
        """A new, empty grading folder for this sandbox (see GRADINGS)."""
        return Path(tempfile.mkdtemp(prefix=prefix, dir=private_folder(GRADINGS, 0o711)))

    @property
    def mounts(self) -> tuple[Path, ...]:
        """The grading folders this sandbox mounted a capped tmpfs on."""
        return tuple(self._mounts)

    def prepare_root(self, root: Path, mount: bool = True) -> Path:
        """Make `root` (an empty grading folder) usable inside: a capped tmpfs when the grader
        is root (and `mount`), a read-only copy of the probe in root/lib, and root/tmp and
        root/shm, the sandbox's /tmp and /dev/shm. Returns the lib folder."""
        if self.drop:
            closed = [p for p in Path(root).resolve().parents if not p.stat().st_mode & stat.S_IXOTH]
            if closed:
                raise ValueError(f"the grading folder {root} must be reachable by the sandbox's user, but {closed[0]} is not searchable by others")
        hidden = [inside for inside in SCRATCH_MOUNTS if Path(root).resolve().is_relative_to(inside)]
        if hidden:
            raise ValueError(f"the grading folder {root} must not be inside {hidden[0]}, which the sandbox replaces (make it with Sandbox.new_root)")
        if self.drop:
            if mount:
                self._mount_tmpfs(root)
        lib = root / "lib"
        package = lib / "grader"
        shutil.copytree(PROBE_SOURCE / "probe", package / "probe", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(PROBE_SOURCE / "__init__.py", package / "__init__.py")
        for path in (root, *lib.rglob("*"), lib):  # all made just now by the grader: no links
            path.chmod(0o755 if path.is_dir() else 0o644)
        for name in SCRATCH:
            (root / name).mkdir()
            (root / name).chmod(0o1777)
        if self.bwrap is None and self.drop:
            # no mount namespace hides it: only root and the sandbox's uid (its group) may enter,
            # and only root may write there, so that no entry the grader made (lib, a job's
            # folder, the rank folders) can be renamed or swapped for a link by the submission
            os.chown(root, 0, self.uid)
            root.chmod(0o750)
        return lib

    def _mount_tmpfs(self, root: Path) -> None:
        limits = self.limits
        options = f"size={limits.disk_mb}m,nr_inodes={limits.inodes},mode=0755,nosuid,nodev"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, f"{MOUNT_SOURCE}{os.getpid()}", str(root)], capture_output=True, text=True)
        if done.returncode == 0:
            self._mounts.append(root)
            self.disk_cap = f"{size_text(limits.disk_mb)} per job in all (tmpfs), {size_text(limits.file_mb)} per file"
        else:
            self.disk_cap = f"each file only ({size_text(limits.file_mb)}); a tmpfs could not be mounted: {done.stderr.strip()[:200]}"

    def sibling(self) -> "Sandbox | str":
        """Another sandbox like this one with a uid of its own (for the grader's trusted code),
        or why there cannot be one."""
        lease = _lease_uid() if self.drop else (self.uid, None)
        if lease is None:
            return f"every sandbox uid of {UID_POOL.start}-{UID_POOL.stop - 1} is in use"
        return Sandbox(
            bwrap=self.bwrap, uid=lease[0], drop=self.drop, python=self.python, read_only=self.read_only, devices=self.devices, limits=self.limits, _lease=lease[1], no_bubblewrap=self.no_bubblewrap
        )

    def spawn(self, argv: list[str], root: Path, **popen: Any) -> subprocess.Popen:
        """Start `argv` in the sandbox (see `command`), its seccomp filter handed to bwrap through
        a descriptor of its own."""
        rules = seccomp.program() if self.bwrap or self.drop else None  # the uid tier loads it itself (seccomp.LOADER)
        if rules is None:
            return subprocess.Popen(self.command(argv, root), **popen)
        handle = os.memfd_create("pdl-grader-seccomp", 0)
        try:
            os.write(handle, rules)
            os.lseek(handle, 0, os.SEEK_SET)
            return subprocess.Popen(self.command(argv, root, seccomp_fd=handle), pass_fds=(handle,), **popen)
        finally:
            os.close(handle)

    def command(self, argv: list[str], root: Path, seccomp_fd: int | None = None) -> list[str]:
        """`argv` (starting with the sandbox's python) wrapped in limits, uid drop and bwrap,
        with `root` bound read-write at the same path; bwrap loads its seccomp filter from
        `seccomp_fd` when one is given (grader/run/seccomp.py)."""
        limits = self.limits
        # no address-space cap where GPUs are passed through: CUDA reserves address space far
        # beyond what it uses (on an H100 node, 4 GiB of it made cuInit fail, so torch saw no
        # GPU, and a CUDA build of torch on virtual GPUs died of SIGSEGV); the job's memory
        # cgroup bounds memory there
        address_space = [] if self.devices else [f"--as={limits.memory_mb << 20}"]
        wrapped = [
            "prlimit",
            f"--cpu={limits.cpu_s}",
            *address_space,
            f"--nproc={2 * limits.processes}",  # per uid, a backstop: the job's cgroup, where there is one, stops it at `processes`
            f"--fsize={limits.file_mb << 20}",
            f"--nofile={limits.open_files}",
            "--core=0",
            "--",
        ]
        if self.drop:
            wrapped += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"]
        if self.bwrap is None:  # the uid tier: the caller's Popen gives the session (start_new_session); the filter is loaded after the uid drop
            return [*wrapped, *(seccomp.loader_command(self.python, seccomp_fd, argv) if seccomp_fd is not None else argv)]
        # --as-pid-1: the command (the launcher, which makes itself not dumpable before any rank
        # exists) is the pid namespace's init; bwrap's own init would be dumpable, of the ranks'
        # uid, and outside every job's cgroup: a process a rank could take over
        wrapped += [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent", "--new-session", "--as-pid-1"]
        if seccomp_fd is not None:
            wrapped += ["--seccomp", str(seccomp_fd)]
        wrapped += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                wrapped += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        for path in self.read_only:
            wrapped += ["--ro-bind", path, path]
        wrapped += ["--bind", str(root), str(root), "--ro-bind", str(root / "lib"), str(root / "lib")]
        wrapped += ["--proc", "/proc", "--dev", "/dev", "--bind", str(root / "tmp"), "/tmp", "--bind", str(root / "shm"), "/dev/shm"]
        for device in self.devices:  # before /dev turns read-only: a folder of them (/dev/nvidia-caps) is made in it
            wrapped += ["--dev-bind", device, device]
        wrapped += ["--remount-ro", "/dev"]  # bwrap's /dev is a tmpfs of the sandbox's user, without a cap: only /dev/shm stays writable
        wrapped += ["--remount-ro", "/", "--chdir", str(root), "--", *argv]
        return wrapped

    def release(self) -> None:
        """Give the leased uid back, once no process of it is left: killed processes of a
        sandbox can take a moment to exit (its pid namespace's init waits for the last of
        them), and the next grading that leases the uid must start with none. Then unmount
        the tmpfs of its grading folder."""
        if self._lease is not None:
            if self.drop:
                procs.kill_by_uid(self.uid, RELEASE_WAIT_S)
                if self.bwrap is None:
                    self.clear_uid()
                    # and from the inside: kill(-1) as the uid signals every process of it in one
                    # walk of the kernel's, which a process forking faster than /proc is read cannot escape
                    subprocess.run(["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", self.python, "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"], capture_output=True, timeout=30)
            self._lease.close()
            self._lease = None
        for root in list(self._mounts):
            self.unmount(root)

    def unmount(self, root: Path) -> None:
        """Unmount the tmpfs of the grading folder `root`, if this sandbox mounted one."""
        if root in self._mounts:
            self._mounts.remove(root)
            _unmount(root)

    def end_processes(self, keep: int | None = None, wait_s: float = RELEASE_WAIT_S) -> int:
        """The uid tier: kill every process of the uid but `keep` (the launcher); how many. The
        uid is this grading's alone, so all of them are the job's. (Bubblewrap's namespaces make
        this the launcher's and the grader's business: nothing to do there.)"""
        if self.bwrap is not None or not self.drop:
            return 0
        return procs.kill_until_gone(lambda: [pid for pid in procs.pids_of_uids(range(self.uid, self.uid + 1)) if pid != keep], wait_s)

    def clear_uid(self, keep: int | None = None) -> None:
        """The uid tier's end of a job: its processes ended (`end_processes`), then the uid's
        files in the shared scratch folders, its SysV IPC objects and POSIX queues removed, and
        its keyrings emptied (the seccomp filter refuses keyrings; this is for a machine whose
        call numbers it does not know). docs/admins.md lists what a uid can leave behind."""
        if self.bwrap is not None or not self.drop:
            return
        self.end_processes(keep)
        remove_files_of(self.uid, SHARED_SCRATCH)
        remove_sysv_of(self.uid)
        remove_message_queues_of(self.uid)
        clear = seccomp.clear_keyrings_command(self.python)
        if clear is not None:
            subprocess.run(["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", *clear], capture_output=True, timeout=30)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _unmount(root: Path | str) -> None:
    subprocess.run(["umount", "--lazy", str(root)], capture_output=True)


def _sweep_stale_mounts(mounts: Path = Path("/proc/self/mounts")) -> None:
    """Unmount the grading folders' tmpfs mounts left by graders that are gone (killed before
    they could unmount): their memory would stay taken."""
    try:
        lines = mounts.read_text().splitlines()
    except OSError:
        return
    for line in lines:
        source, target = (line.split() + ["", ""])[:2]
        owner = source[len(MOUNT_SOURCE):]
        if source.startswith(MOUNT_SOURCE) and owner.isdigit() and not procs.alive(int(owner)):
            _unmount(target.replace("\\040", " "))


def private_folder(path: Path, mode: int) -> Path:
    """`path`, made with `mode` if absent; refused (OSError) unless it is a folder of the
    grader's own uid that no other user may write: in a shared /tmp or /var/tmp a submission of
    the uid tier could have made it first, or left a link there."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    found = os.lstat(path)
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o022:
        raise OSError(errno.EPERM, f"{path} is not a folder of the grader's own that only it may write (made by someone else?): remove it", str(path))
    return path


def remove_files_of(uid: int, folders: tuple[str, ...]) -> None:
    """Remove each entry of `folders` that `uid` owns, whole, never following a link (its
    processes must all be gone: none may swap an entry meanwhile)."""
    from grader.run.tree import remove_tree  # tree imports this module's neighbours; kept local

    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        owned = []
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid == uid:
                    owned.append(Path(entry.path))
            except OSError:
                continue
        remove_tree(*owned)


def remove_sysv_of(uid: int, tables: Path = Path("/proc/sysvipc")) -> None:
    """Remove the SysV shared memory, semaphores and message queues that `uid` made or owns (the
    table's `cuid` and `uid` columns: its creator may hand an object to another owner, root
    included, with IPC_SET, and it stays)."""
    for name, option in SYSV_TABLES.items():
        try:
            header, *rows = (tables / name).read_text().splitlines()
        except (OSError, ValueError):
            continue
        columns = header.split()
        if "uid" not in columns:
            continue
        owners = [columns.index(name) for name in ("uid", "cuid") if name in columns]
        ids = [fields[1] for fields in map(str.split, rows) if len(fields) == len(columns) and str(uid) in (fields[i] for i in owners)]
        for start in range(0, len(ids), 256):
            subprocess.run(["ipcrm", *(part for i in ids[start:start + 256] for part in (option, i))], capture_output=True, timeout=30)


def remove_message_queues_of(uid: int) -> None:
    """Remove the POSIX message queues of `uid`, through a mqueue file system mounted in a mount
    namespace of the clearing command's own (the machine need not have /dev/mqueue mounted; a
    container without CAP_SYS_ADMIN cannot do this, and /dev/mqueue, where mounted, is cleared
    with the shared scratch folders)."""
    clear = f"mount -t mqueue none /mnt && find /mnt -mindepth 1 -user {int(uid)} -delete"
    try:
        subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", clear], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        pass


def hide_from_others(root: Path, keep: tuple[str, ...]) -> list[Path]:
    """The uid tier's shield for the course's files: take every permission of group and others
    from each entry of `root` (the solutions, answer keys, the grader, .git), but for the
    entries that hold one of `keep` (the Python environment the submission runs with), which
    are walked into instead. Nothing of `root` inside a kept path is touched. Returns what was
    closed. Links are left alone (the course's own folder: nothing of a student's is there)."""
    kept = [Path(path).resolve() for path in keep]
    root = root.resolve()
    if any(root.is_relative_to(path) for path in kept):
        return []
    closed = []
    for entry in sorted(root.iterdir()):
        if entry.is_symlink():
            continue
        inner = [path for path in kept if path.is_relative_to(entry)]
        if inner and entry.is_dir():
            closed += hide_from_others(entry, tuple(map(str, inner)))
        elif not inner:
            mode = stat.S_IMODE(entry.lstat().st_mode)
            if mode & 0o077:
                entry.chmod(mode & ~0o077)
                closed.append(entry)
    return closed


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
    private_folder(LOCK_DIR, 0o700)
    for uid in UID_POOL:
        handle = os.fdopen(os.open(LOCK_DIR / str(uid), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600), "w")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        return uid, handle
    return None


def _works(sandbox: Sandbox) -> str | None:
    """Start `python -c pass` in the sandbox: None if it works, else what went wrong."""
    root = sandbox.new_root("grader-sandbox-check-")
    try:
        sandbox.prepare_root(root, mount=False)
        process = sandbox.spawn([sandbox.python, "-c", "import grader.probe"], root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root / "lib")})
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    finally:
        sandbox.unmount(root)
        shutil.rmtree(root, ignore_errors=True)
    return None if process.returncode == 0 else (stderr.strip().splitlines() or ["no output"])[-1][:300]


class SandboxMissing(str):
    """Why this machine has no sandbox at all (not a passing shortage, such as every uid of the
    pool in use): grading here cannot succeed until staff fix the machine."""


def open_sandbox(limits: Limits | None = None, python: str = sys.executable, fallback: bool = False) -> Sandbox | str:
    """A ready sandbox (with a leased uid), or the reason there cannot be one here. With
    `fallback`, where bubblewrap cannot run but the grader is root, the unprivileged-uid tier
    (see the module's docstring)."""
    if not sys.platform.startswith("linux"):
        return SandboxMissing(f"bubblewrap needs Linux (this is {sys.platform})")
    bwrap = shutil.which("bwrap")
    missing = "bubblewrap (bwrap) is not installed; on Debian/Ubuntu: apt-get install bubblewrap" if bwrap is None else None
    if missing and not fallback:
        return SandboxMissing(missing)
    for tool in ("prlimit", "setpriv"):
        if shutil.which(tool) is None:
            return SandboxMissing(missing or f"{tool} (util-linux) is not installed")  # both tiers need it
    prefixes = sorted({sys.prefix, sys.base_prefix, str(Path(python).resolve().parent.parent)} - {"/usr"})
    hidden = [p for p in prefixes if any(Path(p).resolve().is_relative_to(place) for place in SCRATCH_MOUNTS)]
    if hidden:
        return SandboxMissing(f"the Python environment ({', '.join(hidden)}) is under /tmp or /dev/shm, which the sandbox replaces by its own: put the repository (and its .venv) elsewhere")
    drop = os.geteuid() == 0
    if drop:
        unreadable = [p for p in prefixes if not _readable_by_others(p)]
        if unreadable:
            return SandboxMissing(f"the Python environment ({', '.join(unreadable)}) cannot be read by the sandbox's unprivileged user; install it in a world-readable place (scripts/setup.sh uses the system Python)")
        _sweep_stale_mounts()
    devices = tuple(sorted(glob.glob("/dev/nvidia*")))
    read_only = tuple(p for p in prefixes if not p.startswith("/usr/"))
    if bwrap is not None:
        opened = _started(Sandbox(bwrap=bwrap, uid=0, drop=drop, python=python, read_only=read_only, devices=devices, limits=limits or Limits()))
        if not isinstance(opened, SandboxMissing):
            return opened
        missing = f"bubblewrap cannot start a sandbox here (are unprivileged user namespaces allowed?): {opened}"
    if not (fallback and drop):  # the uid tier needs root (to take another uid)
        return SandboxMissing(missing)
    opened = _started(Sandbox(bwrap=None, uid=0, drop=True, python=python, read_only=read_only, devices=devices, limits=limits or Limits(), no_bubblewrap=missing))
    return SandboxMissing(f"{missing}; and Python does not start as an unprivileged uid either: {opened}") if isinstance(opened, SandboxMissing) else opened


def _started(sandbox: Sandbox) -> Sandbox | str:
    """`sandbox` with a uid leased (the grader's own where it is not root) once Python starts
    in it; or why not (SandboxMissing, with what Python said, when it cannot start at all)."""
    lease = _lease_uid() if sandbox.drop else (os.getuid(), None)
    if lease is None:
        return f"every sandbox uid of {UID_POOL.start}-{UID_POOL.stop - 1} is in use"
    sandbox.uid, sandbox._lease = lease
    if sandbox.bwrap is None:
        sandbox.clear_uid()  # what a grader killed before its release left under this uid
    problem = _works(sandbox)
    if problem:
        sandbox.release()
        return SandboxMissing(problem)
    return sandbox
