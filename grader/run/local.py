"""Run jobs as real processes on this machine, through the probe's fork server, inside the
sandbox (grader/run/sandbox.py) when one is given.

Trust domains: the submission's jobs and the grader's own trusted jobs (a reference
solution: `JobSpec.private`) run in two domains that share nothing — each has its own
grading folder, its own sandbox (another uid, pid namespace, /tmp and /dev/shm) and its own
warm launcher, so no process of the submission can see, read or slow down the reference.

Each job gets a fresh copy of the submission as its working directory (made through directory
descriptors, grader/run/tree.py: links are copied as links, never followed; hard links,
FIFOs and devices are left out) and one folder per rank for stdout, stderr, the fault-handler
dump and the observations. The rank folders belong to the grader and their files are created
beforehand, so the submission can write into the files but cannot replace them with links.

Containment: where the kernel offers control groups (grader/run/cgroups.py), every job has a
cgroup of its own. The launcher forks the job's leader held at a gate; the grader moves the
leader into the job's cgroup, then opens the gate, so every process of the job is born in it
and none can leave it. When the job ends — every rank exited, or its timeout passed (then each
live rank is first asked for its stack: SIGUSR1, answered by the fault handler) — the cgroup is
frozen and every process in it killed, however it hid (setsid, double forks, an emptied
environment). The cgroup also caps the job's memory (processes and the tmpfs pages they write
together) and its processes, and says afterwards whether a cap was hit. Without cgroups a
sandboxed domain's launcher is restarted after every job (its pid namespace goes with it), and
processes carrying the job's token in their environment are killed. Then the job's folder and
the domain's /tmp and /dev/shm are emptied, so the next job starts clean. In the sandbox's
unprivileged-uid tier (no bubblewrap: no namespaces) a domain's uid is its own, so every
process of it but the launcher is killed after each job, and its files in the machine's shared
/tmp, /var/tmp and /dev/shm and its SysV IPC objects are removed (Sandbox.clear_uid).

Pids reported from inside the sandbox's pid namespace are mapped to host pids. With a GPU
source (grader/run/telemetry.py), GPU memory and utilisation are sampled from the grader's
side while each job runs.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from grader.probe.messages import (
    Abort,
    Answer,
    BadMessage,
    Exited,
    Forked,
    Go,
    JobRequest,
    LauncherError,
    LeaderExited,
    RankConfig,
    RankExited,
    Ready,
    Request,
    Started,
    TrafficPart,
    parse_answer,
    request_line,
)
from grader.probe.transport.traffic import MAX_REPORT_PARTS, TrafficReport
from grader.probe.transport.traffic import unpack as unpack_traffic
from grader.probe.typed import Malformed
from grader.probe.zygote import children_of
from grader.run import procs
from grader.run.cgroups import Caps, Cgroups, JobGroup, Usage, open_cgroups
from grader.run.job import JobResult, JobSpec, RankResult
from grader.run.load import SAMPLE_S, LoadMeter, allowed_cpus
from grader.run.records import read_records
from grader.run.safeio import read_text_tail
from grader.run.sandbox import IDENTITY, NO_ISOLATION, SCRATCH, UID_TIER, Limits, Sandbox, size_text
from grader.run.stacks import student_frames
from grader.run.telemetry import GpuSource, Sampler
from grader.run.torchrun_env import rank_environment
from grader.run.tree import TreeLimits, TreeRefused, copy_tree, empty_folder, remove_tree

GRADER_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the grader package
TOKEN_VARIABLE = "TORCHELASTIC_RUN_ID"  # the run id torchrun gives its workers: here the job's token, by which the grader finds what a job left behind
RANK_FILES = ("stdout", "stderr", "faults", "observations.jsonl")
ZYGOTE = "import sys; from grader.probe.zygote import main; sys.exit(main(sys.argv[1:]))"  # not -m: no module frame of the grader's under the ranks' scripts
IPC_REMOVED = "ipcrm --all; mount -t mqueue none /mnt && find /mnt -mindepth 1 -delete"  # SysV objects, then POSIX queues (in a mount namespace of its own)
DISK_FULL_BYTES = 1 << 20  # a grading folder with less free space than this after a job was filled by it


IDLE_TICKS = 2  # CPU time (clock ticks, 10 ms each) a job may use in its stall window and still count as idle: a hung job's threads waking up now and then
REAL_GPU_STALL_FACTOR = 4  # ranks on a real GPU may wait for its kernels without using the CPU


@dataclass
class IdleWatch:
    """Whether a job has stopped using the CPU: the CPU time of the launcher and every process
    below it (the kernel's count, as the load meter samples it every SAMPLE_S:
    grader/run/load.py `LoadMeter.ticks`). A job whose
    processes all sleep for `window_s` (ranks waiting in a collective that never comes, a
    `time.sleep` or a read that never returns) is hung: the grader stops it then instead of at
    the run's time limit. A busy hang keeps the CPU busy and runs to the limit. A job stopped at
    its time limit after half the window without CPU is named hung all the same (`stalled_s`):
    a limit shorter than the window, e.g. a run's pace (grader/grade/options.py), comes first."""

    meter: LoadMeter  # the job's, sampled as the job runs
    window_s: float
    _ticks: int = -1
    _since: float = 0.0

    def idle(self) -> bool:
        """Whether the job used at most IDLE_TICKS of CPU in the last `window_s` seconds."""
        now, ticks = time.monotonic(), self.meter.ticks
        if self._ticks < 0 or ticks - self._ticks > IDLE_TICKS:
            self._ticks, self._since = ticks, now
        return now - self._since >= self.window_s

    def idle_s(self) -> float:
        """How long, as of now, the job has used at most IDLE_TICKS of CPU."""
        self.idle()
        return time.monotonic() - self._since


def _stalled_s(watch: IdleWatch, stopped_idle: bool) -> float | None:
    """How long a stopped job had been without CPU, where it counts as hung (IdleWatch)."""
    if stopped_idle:
        return watch.window_s
    idle = watch.idle_s()
    return round(idle, 1) if idle >= watch.window_s / 2 else None


DDP_WARM_MODULE = "torch._dynamo"  # DistributedDataParallel imports it on first construction (~2 s)


@dataclass(frozen=True)
class LocalRunnerOptions:
    """Knobs of the local runner; the defaults suit the course's small practicals."""

    python: str = sys.executable
    warm_modules: tuple[str, ...] = (
        "torch",
        "torch.distributed",
        "torch.nn.parallel",
        DDP_WARM_MODULE,
        "grader.probe.rank",
        "grader.probe.recorder.observers",
        "grader.probe.vgpu.install",
        "grader.probe.transport.client",
        "grader.probe.transport.hub",
    )
    ready_timeout_s: float = 180.0
    stack_wait_s: float = 2.0
    kill_wait_s: float = 10.0
    output_tail_bytes: int = 4096
    observation_bytes: int = 16 << 20
    submission: TreeLimits = TreeLimits()
    extra_env: dict[str, str] = field(default_factory=dict)
    cgroups: bool = True  # a cgroup per job where the machine offers them
    stall_s: float = 4.0  # a job none of whose processes used the CPU for this long is stopped as hung (IdleWatch)
    keep_files: bool = False  # keep every job's folder (for debugging; the grading folder is then not a capped tmpfs)


class _Zygote:
    """The fork-server process and its line protocol."""

    def __init__(self, options: LocalRunnerOptions, root: Path, sandbox: Sandbox | None) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(root / "lib") if sandbox else str(GRADER_ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": str(root),
            **(IDENTITY if sandbox else {}),
        }
        command = [sandbox.python if sandbox else options.python, "-c", ZYGOTE, *options.warm_modules]
        self.log = root / f"zygote-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as log:
            popen = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "stderr": log, "cwd": root, "env": env, "start_new_session": True}
            self.proc = sandbox.spawn(command, root, **popen) if sandbox else subprocess.Popen(command, **popen)
        self._buffer = b""
        self.ready = False

    def send(self, request: Request) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((request_line(request) + "\n").encode())
        self.proc.stdin.flush()

    def next_event(self, deadline: float) -> Answer | None:
        """The next answer, or None at the deadline or when the zygote is gone. A line that is
        not an answer is a LauncherError that says so."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, _, _ = select.select([fd], [], [], left)
            if not readable:
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return parse_answer(line)
        except BadMessage as exc:
            return LauncherError(message=f"the rank launcher sent something that is not an answer ({exc})")

    def wait_ready(self, timeout_s: float) -> str | None:
        """None when warm, else why not."""
        if self.ready:
            return None
        event = self.next_event(time.monotonic() + timeout_s)
        if isinstance(event, Ready):
            self.ready = True
            return None
        tail = read_text_tail(self.log, 2000)
        return f"the rank launcher did not start ({event or 'no answer'}): {tail.strip()[-600:]}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        procs.kill_group_quietly(self.proc.pid)
        if self.proc.stdout:
            self.proc.stdout.close()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class _Domain:
    """One trust domain of a grading: a folder, a sandbox (or none) and a warm launcher."""

    def __init__(self, name: str, root: Path, options: LocalRunnerOptions, sandbox: Sandbox | None, owns_sandbox: bool) -> None:
        self.name = name
        self.root = root
        self.options = options
        self.sandbox = sandbox
        self.owns_sandbox = owns_sandbox
        self.zygote: _Zygote | None = None
        self.jobs = 0
        if sandbox:
            sandbox.prepare_root(root, mount=not options.keep_files)
        else:
            for scratch in SCRATCH:
                (root / scratch).mkdir(exist_ok=True)

    def start(self) -> None:
        if self.zygote is None or not self.zygote.alive():
            if self.zygote is not None:
                self.zygote.close()
            self.zygote = _Zygote(self.options, self.root, self.sandbox)

    def stop(self) -> None:
        if self.zygote is not None:
            self.zygote.close()
            self.zygote = None

    def disk_full(self) -> bool:
        """Whether the jobs' files filled the domain's capped folder."""
        if self.sandbox is None or self.root not in self.sandbox.mounts:
            return False
        info = os.statvfs(self.root)
        return info.f_bavail * info.f_frsize < DISK_FULL_BYTES or info.f_favail < 16

    def clear(self, job_dir: Path) -> None:
        """Remove what a job left: its folder, everything in the sandbox's /tmp and /dev/shm,
        and the IPC objects of the sandbox's IPC namespace (it lives as long as the launcher,
        and each of them outlives its creator): SysV shared memory, semaphores and message
        queues (ipcrm), and POSIX message queues (unlinked through a mqueue filesystem mounted
        in a mount namespace of the clearing command's own)."""
        if not self.options.keep_files:
            remove_tree(job_dir)
        for scratch in SCRATCH:
            empty_folder(self.root / scratch)
        if self.sandbox is not None and not self.sandbox.private_scratch:
            self.sandbox.clear_uid(keep=self.zygote.proc.pid if self.zygote is not None else None)
            return
        inside = children_of(self.zygote.proc.pid) if self.sandbox is not None and self.zygote is not None and self.zygote.alive() else []
        if inside:  # bwrap's first child is in the sandbox's namespaces
            entered = ["nsenter", f"--target={inside[0]}", "--ipc", "--", "unshare", "--mount", "--propagation", "private", "--"]
            subprocess.run([*entered, "sh", "-c", IPC_REMOVED], capture_output=True, timeout=30)

    def close(self) -> None:
        self.stop()
        if self.owns_sandbox and self.sandbox is not None:
            self.sandbox.release()


class LocalRunner:
    """Runs jobs as processes on this machine. Use as a context manager, or call close()."""

    def __init__(self, root: Path, options: LocalRunnerOptions | None = None, sandbox: Sandbox | None = None, gpus: GpuSource | str | None = None) -> None:
        """`root`: an empty folder for the submission's jobs. `sandbox`: where they run (its
        release stays with the caller). `gpus`: the source of GPU telemetry, or why there is
        none (a string, for the results)."""
        self.root = root
        self.options = options or LocalRunnerOptions()
        self.sandbox = sandbox
        self.limits = sandbox.limits if sandbox else Limits()
        self.gpus = None if gpus is None or isinstance(gpus, str) else gpus
        self.telemetry = gpus if isinstance(gpus, str) else "off" if gpus is None else f"NVML, {len(gpus.names)} GPU(s), sampled every 0.05 s"
        self.caps = Caps(self.limits.job_memory_mb << 20, self.limits.processes)
        opened = open_cgroups(uuid.uuid4().hex[:8], self.caps) if self.options.cgroups else "switched off"
        self.cgroups: Cgroups | None = None if isinstance(opened, str) else opened
        self._own = _Domain("submission", root, self.options, sandbox, owns_sandbox=False)
        self.isolation = (sandbox.describe() if sandbox else f"{NO_ISOLATION}: the submission ran with the grader's rights") + "; " + self._containment(opened)
        self._trusted: _Domain | str | None = None

    def _containment(self, opened: Cgroups | str) -> str:
        if not isinstance(opened, str):
            return f"each job in a cgroup of its own ({opened.describe()}), killed whole at its end"
        if self.sandbox and self.sandbox.tier == UID_TIER:
            return f"no cgroups ({opened}): a job's processes are found by its uid; memory capped per process only"
        if self.sandbox:
            return f"no cgroups ({opened}): each job in a pid namespace of its own (the launcher is restarted after every job); memory capped per process only"
        return f"no cgroups ({opened}): a job's processes are found by their environment"

    def __enter__(self) -> "LocalRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self, trusted: bool = False) -> None:
        """Start the submission's fork server, and the reference solution's where `trusted`
        asks; they warm up while the caller does other work."""
        self._own.start()
        if trusted:
            domain = self._trusted_domain()
            if not isinstance(domain, str):
                domain.start()

    def close(self) -> None:
        """Stop the fork servers, release the trusted domain and the GPU source."""
        self._own.close()
        if isinstance(self._trusted, _Domain):
            self._trusted.close()
            remove_tree(self._trusted.root)
        self._trusted = None
        if self.cgroups is not None:
            try:
                self.cgroups.close()
            except OSError:
                pass  # a group whose process would not die stays; the next grader removes it once empty
            self.cgroups = None
        if self.gpus is not None:
            self.gpus.close()
            self.gpus = None

    def _domain(self, job: JobSpec) -> "_Domain | str":
        """The domain a job runs in: the grader's trusted code (private jobs) apart from the
        submission's, made on first use; or why it cannot be had."""
        return self._trusted_domain() if job.private else self._own

    def _trusted_domain(self) -> "_Domain | str":
        """The domain of the grader's trusted code, made on first use; or why it cannot be had."""
        if self._trusted is None:
            sandbox = self.sandbox.sibling() if self.sandbox else None
            if isinstance(sandbox, str):
                self._trusted = f"the reference solution could not get a sandbox of its own: {sandbox}"
            else:
                prefix = f"{self.root.name}-trusted-"
                root = sandbox.new_root(prefix) if sandbox else Path(tempfile.mkdtemp(prefix=prefix, dir=self.root.parent))
                self._trusted = _Domain("trusted", root, self.options, sandbox, owns_sandbox=True)
        return self._trusted

    # ------------------------------------------------------------------ jobs
    def _prepare(self, domain: _Domain, job: JobSpec) -> tuple[Path, tuple[str, ...]]:
        """The job's folders: work (a copy of the submission, handed to the sandbox's user)
        and the rank folders, kept by the grader, with their files made beforehand. Returns
        the folder and notes on what the copy left out."""
        domain.jobs += 1
        job_dir = domain.root / f"{domain.jobs:02d}-{job.name}"
        job_dir.mkdir(mode=0o755)
        owner = domain.sandbox.owner if domain.sandbox else None
        notes = copy_tree(job.submission, job_dir / "work", owner, self.options.submission)
        for rank in range(job.layout.world_size):
            folder = job_dir / f"rank{rank}"
            folder.mkdir(mode=0o755)
            handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            try:
                for name in RANK_FILES:
                    made = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=handle)
                    if owner is not None:
                        os.fchown(made, owner, owner)
                    os.close(made)
            finally:
                os.close(handle)
        return job_dir, notes

    def _rank_configs(self, job: JobSpec, job_dir: Path, token: str) -> tuple[RankConfig, ...]:
        work = job_dir / "work"
        port = procs.free_port()
        base = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": str(work),
            "TMPDIR": "/tmp" if self.sandbox and self.sandbox.private_scratch else str(job_dir.parent / "tmp"),
            "PYTHONDONTWRITEBYTECODE": "1",
            **(IDENTITY if self.sandbox else {}),
            **self.options.extra_env,
            **job.env,
            **({"CUDA_VISIBLE_DEVICES": ""} if job.hide_gpus else {}),
        }
        configs = []
        for rank in range(job.layout.world_size):
            folder = job_dir / f"rank{rank}"
            configs.append(
                RankConfig(
                    rank=rank,
                    script=str(work / job.script),
                    argv=tuple(job.argv),
                    cwd=str(work),
                    env={**base, **rank_environment(job.layout, rank, port, token)},
                    stdout=str(folder / "stdout"),
                    stderr=str(folder / "stderr"),
                    faults=str(folder / "faults"),
                    observations=str(folder / "observations.jsonl"),
                    watch_globals=tuple(job.watch_globals),
                    virtual_gpus=job.virtual_gpus,
                    driver=job.driver,
                    pg_timeout_s=float(job.timeout_s + 30),
                    max_observation_bytes=self.options.observation_bytes,
                    ddp_options=job.ddp_options,
                )
            )
        return tuple(configs)

    def run(self, job: JobSpec) -> JobResult:
        """Run `job`; infrastructure trouble is reported in `JobResult.error`, never raised."""
        domain = self._domain(job)
        if isinstance(domain, str):
            return JobResult(spec=job, ranks=[], error=domain)
        domain.start()
        assert domain.zygote is not None
        problem = domain.zygote.wait_ready(self.options.ready_timeout_s)
        if problem:
            domain.stop()
            return JobResult(spec=job, ranks=[], error=problem)
        try:
            job_dir, notes = self._prepare(domain, job)
        except (TreeRefused, OSError) as exc:  # OSError: a part of the submission cannot be read
            domain.clear(domain.root / f"{domain.jobs:02d}-{job.name}")
            return JobResult(spec=job, ranks=[], skipped=f"the submission cannot be taken: {exc}" if isinstance(exc, OSError) else str(exc))
        group = self.cgroups.job(f"{domain.name}-{domain.jobs:02d}") if self.cgroups else None
        try:
            return self._run_in(domain, job, job_dir, notes, group)
        finally:
            if group is not None:
                try:
                    group.remove()
                except OSError:
                    pass  # a process that would not die (stuck in the kernel): the group goes with close(), the uid waits for it
            domain.clear(job_dir)
            if group is None and domain.sandbox is not None and domain.sandbox.private_scratch:
                domain.stop()  # without a cgroup, only the end of the pid namespace is sure to end every process (the uid tier's clear_uid ends them by uid)

    def _run_in(self, domain: _Domain, job: JobSpec, job_dir: Path, notes: tuple[str, ...], group: JobGroup | None) -> JobResult:
        zygote = domain.zygote
        assert zygote is not None
        token = uuid.uuid4().hex
        sampler = Sampler(self.gpus) if self.gpus is not None else None
        if sampler is not None:
            sampler.start()
        meter = LoadMeter(zygote.proc.pid)
        meter.start()
        started = time.monotonic()
        deadline = started + job.timeout_s
        zygote.send(JobRequest(id=job.name, ranks=self._rank_configs(job, job_dir, token), hold=group is not None, carrier=job.carrier))
        pids: dict[int, int] = {}
        carried: list[TrafficPart] = []
        dropped = 0  # parts of the hub's report past MAX_REPORT_PARTS
        leader = 0
        forked = refused = False  # a leader exists; the launcher refused the job before any
        status: dict[int, str] = {}
        leftovers = 0
        leader_gone = False
        timed_out, stalled_s = False, None
        error = None
        watch = IdleWatch(meter, self._stall_window(job))
        while True:
            event = zygote.next_event(min(deadline, time.monotonic() + SAMPLE_S) if forked else deadline)
            meter.sample()
            if event is None:
                if not zygote.alive():
                    break
                early = time.monotonic() < deadline
                if early and not watch.idle():
                    continue
                timed_out, stalled_s = True, _stalled_s(watch, early)
                break
            if isinstance(event, Forked) and group is not None:
                forked = True
                error = self._admit(zygote, event.leader, group)
                if error:
                    break
            elif isinstance(event, Started):
                pids = {entry.rank: entry.pid for entry in event.pids}
                leader = event.leader
                forked = True
            elif isinstance(event, RankExited):
                status[event.rank] = event.status
            elif isinstance(event, TrafficPart) and event.job == job.name:
                if len(carried) < MAX_REPORT_PARTS:  # bounded as it arrives: the grader's own memory
                    carried.append(event)
                else:
                    dropped += 1
            elif isinstance(event, Exited):
                leftovers = event.leftovers
            elif isinstance(event, LeaderExited):
                leftovers += event.orphans
                leader_gone = True
                break
            elif isinstance(event, LauncherError):
                error = f"the rank launcher could not run the job: {event.message}"
                refused = not forked
                break
        wall = time.monotonic() - started
        meter.sample(force=True)
        load = meter.stop()
        shares: dict[int, float] = {}
        if timed_out:
            # the launcher reports pids as seen inside the sandbox's pid namespace
            host = procs.host_pids(zygote.proc.pid, {*pids.values(), leader})
            pids = {rank: host[pid] for rank, pid in pids.items() if pid in host}
            shares = cpu_shares({rank: pid for rank, pid in pids.items() if rank not in status})
            self._dump_stacks(pids, status, job_dir)
            if group is None:
                for pid in pids.values():
                    procs.kill_quietly(pid)
                if leader in host:
                    procs.kill_group_quietly(host[leader])  # the leader's session: ranks and their children
        stray = 0
        if group is not None:
            killed = group.kill(self.options.kill_wait_s)
            running = 1 + len([rank for rank in pids if rank not in status]) if timed_out else 0  # the leader and the stuck ranks
            stray = max(0, killed - running)
        if (timed_out or error) and not refused:
            leader_gone, orphans = self._await_leader(zygote, job.name)
            leftovers += orphans
        stray += procs.kill_by_env(TOKEN_VARIABLE, token, self.options.kill_wait_s)
        if domain.sandbox is not None:  # the uid tier: the rest of the uid's processes, counted (its files go with clear())
            stray += domain.sandbox.end_processes(keep=zygote.proc.pid, wait_s=self.options.kill_wait_s)
        telemetry = sampler.stop() if sampler is not None else None
        launcher_lost = not leader_gone and not zygote.alive()
        if launcher_lost:
            domain.stop()  # the next job starts a new launcher
        ranks = [self._rank_result(job, job_dir, rank, status.get(rank), shares.get(rank)) for rank in range(job.layout.world_size)]
        traffic = None if job.carrier is None else traffic_report(carried, timed_out, dropped)
        caps = self._caps_hit(group.usage() if group is not None else None, domain)
        return JobResult(
            spec=job,
            ranks=ranks,
            timed_out=timed_out and not launcher_lost,
            stalled_s=None if launcher_lost else stalled_s,
            wall_s=wall,
            leftovers=leftovers + stray,
            launcher_lost=launcher_lost,
            telemetry=telemetry,
            error=error,
            caps_hit=caps,
            notes=notes,
            traffic=traffic,
            load=load,
        )

    def _stall_window(self, job: JobSpec) -> float:
        """How long every process of `job` may use no CPU before the job is stopped as hung:
        longer where its ranks may wait for a real GPU's work."""
        real_gpus = self.gpus is not None and not job.hide_gpus and not job.virtual_gpus
        return self.options.stall_s * (REAL_GPU_STALL_FACTOR if real_gpus else 1)

    def _admit(self, zygote: _Zygote, leader: int, group: JobGroup) -> str | None:
        """Move the held leader into the job's cgroup and open its gate; or why not."""
        host = procs.host_pids(zygote.proc.pid, {leader}).get(leader)
        try:
            if host is None:
                raise OSError(f"the leader's pid {leader} was not found on the host")
            group.add(host)
        except OSError as exc:
            zygote.send(Abort())
            return f"the job could not be put into its cgroup: {exc}"
        zygote.send(Go())
        return None

    def _caps_hit(self, usage: Usage | None, domain: _Domain) -> tuple[str, ...]:
        """Messages for the caps the job reached, as the kernel counted them."""
        said = usage.message(self.caps) if usage is not None else ""
        hit = [said] if said else []
        if domain.disk_full():
            hit.append(f"your program's files filled the {size_text(self.limits.disk_mb)} it may write (work folder, /tmp, /dev/shm and output together)")
        return tuple(hit)

    def _await_leader(self, zygote: _Zygote, name: str) -> tuple[bool, int]:
        """Wait for the killed leader's exit: (seen, orphans the zygote killed)."""
        deadline = time.monotonic() + self.options.kill_wait_s
        while True:
            event = zygote.next_event(deadline)
            if event is None:
                return False, 0
            if isinstance(event, LeaderExited) and event.job == name:
                return True, event.orphans

    def _dump_stacks(self, pids: dict[int, int], status: dict[int, str], job_dir: Path) -> None:
        """Ask every live rank for its stack and wait until the dumps stop growing."""
        live = {rank: pid for rank, pid in pids.items() if rank not in status and procs.alive(pid)}
        for pid in live.values():
            procs.kill_quietly(pid, signal.SIGUSR1)
        deadline = time.monotonic() + self.options.stack_wait_s
        sizes: dict[int, int] = {}
        while live and time.monotonic() < deadline:
            time.sleep(0.05)
            now = {rank: _size(job_dir / f"rank{rank}" / "faults") for rank in live}
            if all(size > 0 and sizes.get(rank) == size for rank, size in now.items()):
                break
            sizes = now

    def _rank_result(self, job: JobSpec, job_dir: Path, rank: int, status: str | None, cpu_share: float | None = None) -> RankResult:
        folder = job_dir / f"rank{rank}"
        faults = read_text_tail(folder / "faults", 64 << 10)
        return RankResult(
            rank=rank,
            local_rank=job.layout.local_rank_of(rank),
            node=job.layout.node_of(rank),
            status=status,
            record=read_records(folder / "observations.jsonl", self.options.observation_bytes),
            stdout_tail=read_text_tail(folder / "stdout", self.options.output_tail_bytes),
            stderr_tail=read_text_tail(folder / "stderr", self.options.output_tail_bytes),
            stack=student_frames(faults, job_dir / "work") if faults else None,
            cpu_share=cpu_share,
        )


BUSY_WINDOW_S = 0.3  # how long a stopped job's ranks are watched for CPU before their stacks are asked for


def cpu_shares(pids: dict[int, int], window_s: float = BUSY_WINDOW_S) -> dict[int, float]:
    """rank -> the share of the CPU time it could have had over `window_s` (a CPU, or its share
    of the CPUs where the ranks outnumber them) that its process and those below it used (the
    kernel's schedstat): a rank stopped at its time limit that is still computing reads near 1,
    one waiting for a peer or a message near 0."""
    fair_ns = min(1.0, len(allowed_cpus()) / max(len(pids), 1)) * 1e9
    before = {rank: procs.tree_run_ns(pid) for rank, pid in pids.items()}
    started = time.monotonic()
    time.sleep(window_s)
    elapsed = time.monotonic() - started
    return {rank: max(0, procs.tree_run_ns(pid) - before[rank]) / (elapsed * fair_ns) for rank, pid in pids.items()}


WAITED_FOR = {
    "": "your ranks to start the process group (init_process_group)",
    "joined": "your rank 0 to build its DistributedDataParallel",
    "ddp": "your ranks' all-reduces in backward",
}


def traffic_report(parts: list[TrafficPart], timed_out: bool, dropped: int = 0) -> TrafficReport | str:
    """The hub's report from its parts, or why there is none (`dropped`: parts past
    MAX_REPORT_PARTS, not kept)."""
    if dropped:
        return f"the grader's hub's report came in more than {MAX_REPORT_PARTS} parts ({dropped} more were dropped): what did your ranks send?"
    if not parts:
        return "the job was stopped before the grader's hub could report" if timed_out else "the grader's hub sent no report (was it killed?)"
    total = parts[0].parts
    chunks = {part.part: part.data for part in parts if part.parts == total}
    if total < 1 or sorted(chunks) != list(range(total)):
        return f"the grader's hub sent {len(chunks)} of {total} parts of its report"
    try:
        return unpack_traffic([chunks[i] for i in range(total)])
    except Malformed as exc:
        return f"the grader's hub's report could not be read: {exc}"


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
