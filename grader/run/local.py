"""Run jobs as real processes on this machine, through the probe's fork server, inside the
sandbox (grader/run/sandbox.py) when one is given.

Each job gets a fresh copy of the submission as its working directory (the submission's
only writable place, with its own tmp) and one folder per rank for stdout, stderr, the
fault-handler dump and the observations. Those folders belong to the grader and their files
are created beforehand, so the submission can write into the files but cannot replace them
with links. A job ends when every rank has exited or when its timeout passes; then every rank
still alive is asked for its stack (SIGUSR1, answered by the fault handler), the job's whole
session is killed, and any process still carrying the job's token in its environment is
killed too. Pids reported from inside the sandbox's pid namespace are mapped to host pids.
With a GPU source (grader/run/telemetry.py), GPU memory and utilisation are sampled from
the grader's side while each job runs. A private job (a reference solution) has its folder
removed as soon as its results are read, so no later job of the grading can see its files.
"""
from __future__ import annotations

import json
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from grader.run import procs
from grader.run.job import JobResult, JobSpec, RankResult
from grader.run.safeio import read_json_lines, read_text_tail
from grader.run.sandbox import Sandbox
from grader.run.stacks import student_frames
from grader.run.telemetry import GpuSource, Sampler
from grader.run.torchrun_env import rank_environment

GRADER_ROOT = Path(__file__).resolve().parents[2]  # the folder that holds the grader package
TOKEN_VARIABLE = "GRADER_JOB_TOKEN"
RANK_FILES = ("stdout", "stderr", "faults", "observations.jsonl")


class SubmissionTooLarge(Exception):
    """The submission folder exceeds the size the runner accepts."""


def copy_submission(source: Path, target: Path, max_bytes: int) -> list[Path]:
    """Copy folders, regular files and symbolic links (as links, never followed); leave out
    anything else (a FIFO would block the copy), .git and caches. Returns what was made."""
    made = [target]
    total = 0
    target.mkdir()
    for folder, dirs, files in os.walk(source):
        dirs[:] = [d for d in dirs if d not in (".git", "__pycache__") and not os.path.islink(os.path.join(folder, d))]
        here = target / os.path.relpath(folder, source)
        for name in dirs:
            (here / name).mkdir()
            made.append(here / name)
        for name in files + [d for d in os.listdir(folder) if os.path.islink(os.path.join(folder, d)) and os.path.isdir(os.path.join(folder, d))]:
            path = os.path.join(folder, name)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(path), here / name)
            elif stat.S_ISREG(info.st_mode):
                total += info.st_size
                if total > max_bytes:
                    raise SubmissionTooLarge(f"the submission holds more than {max_bytes >> 20} MiB")
                shutil.copyfile(path, here / name, follow_symlinks=False)
            else:
                continue
            made.append(here / name)
    return made


@dataclass(frozen=True)
class LocalRunnerOptions:
    """Knobs of the local runner; the defaults suit the course's small practicals."""

    python: str = sys.executable
    warm_modules: tuple[str, ...] = (
        "torch",
        "torch.distributed",
        "torch.nn.parallel",
        "torch._dynamo",  # DistributedDataParallel imports it on first construction (~2 s)
        "grader.probe.rank",
        "grader.probe.observers",
        "grader.probe.virtual",
    )
    ready_timeout_s: float = 180.0
    stack_wait_s: float = 2.0
    kill_wait_s: float = 10.0
    output_tail_bytes: int = 4096
    observation_bytes: int = 16 << 20
    max_submission_bytes: int = 50 << 20
    extra_env: dict[str, str] = field(default_factory=dict)


class _Zygote:
    """The fork-server process and its line protocol."""

    def __init__(self, options: LocalRunnerOptions, root: Path, sandbox: Sandbox | None) -> None:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "PYTHONPATH": str(root / "lib") if sandbox else str(GRADER_ROOT),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": str(root),
        }
        command = [sandbox.python if sandbox else options.python, "-m", "grader.probe.zygote", *options.warm_modules]
        if sandbox:
            command = sandbox.command(command, root)
        self.log = root / f"zygote-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=root,
                env=env,
                start_new_session=True,
            )
        self._buffer = b""
        self.ready = False

    def send(self, message: dict) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def next_event(self, deadline: float) -> dict | None:
        """The next event line, or None at the deadline or when the zygote is gone."""
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
            return json.loads(line)
        except ValueError:
            return {"event": "garbage", "line": line[:200].decode(errors="replace")}

    def wait_ready(self, timeout_s: float) -> str | None:
        """None when warm, else why not."""
        if self.ready:
            return None
        event = self.next_event(time.monotonic() + timeout_s)
        if event and event.get("event") == "ready":
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


class LocalRunner:
    """Runs jobs as processes on this machine. Use as a context manager, or call close()."""

    def __init__(self, root: Path, options: LocalRunnerOptions | None = None, sandbox: Sandbox | None = None, gpus: GpuSource | str | None = None) -> None:
        """`gpus`: the source of GPU telemetry, or why there is none (a string, for the results)."""
        self.root = root
        self.options = options or LocalRunnerOptions()
        self.sandbox = sandbox
        self.isolation = sandbox.describe() if sandbox else "none: the submission ran with the grader's rights"
        self.gpus = None if gpus is None or isinstance(gpus, str) else gpus
        self.telemetry = gpus if isinstance(gpus, str) else "off" if gpus is None else f"NVML, {len(gpus.names)} GPU(s), sampled every 0.05 s"
        self._zygote: _Zygote | None = None
        self._count = 0
        if sandbox:
            sandbox.prepare_root(root)

    def __enter__(self) -> "LocalRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the fork server; it warms up while the caller does other work."""
        if self._zygote is None or not self._zygote.alive():
            if self._zygote is not None:
                self._zygote.close()
            self._zygote = _Zygote(self.options, self.root, self.sandbox)

    def _stop_launcher(self) -> None:
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def close(self) -> None:
        """Stop the fork server and release the GPU source."""
        self._stop_launcher()
        if self.gpus is not None:
            self.gpus.close()
            self.gpus = None

    # ------------------------------------------------------------------ jobs
    def _prepare(self, job: JobSpec) -> Path:
        """The job's folders: work (a copy of the submission) and tmp, handed to the sandbox's
        user; rank folders kept by the grader, with their files made beforehand."""
        self._count += 1
        job_dir = self.root / f"{self._count:02d}-{job.name}"
        job_dir.mkdir(mode=0o755)
        copied = copy_submission(job.submission, job_dir / "work", self.options.max_submission_bytes)
        (job_dir / "tmp").mkdir()
        give = self.sandbox.give if self.sandbox else (lambda *paths: None)
        give(*copied, job_dir / "tmp")
        for rank in range(job.layout.world_size):
            folder = job_dir / f"rank{rank}"
            folder.mkdir(mode=0o755)
            for name in RANK_FILES:
                (folder / name).touch(mode=0o600)
                give(folder / name)
        return job_dir

    def _rank_configs(self, job: JobSpec, job_dir: Path, token: str) -> list[dict]:
        work = job_dir / "work"
        port = procs.free_port()
        base = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            "HOME": str(work),
            "TMPDIR": str(job_dir / "tmp"),
            "PYTHONDONTWRITEBYTECODE": "1",
            **self.options.extra_env,
            **job.env,
            TOKEN_VARIABLE: token,
        }
        configs = []
        for rank in range(job.layout.world_size):
            folder = job_dir / f"rank{rank}"
            configs.append(
                {
                    "rank": rank,
                    "script": str(work / job.script),
                    "argv": list(job.argv),
                    "cwd": str(work),
                    "env": {**base, **rank_environment(job.layout, rank, port, token[:12])},
                    "stdout": str(folder / "stdout"),
                    "stderr": str(folder / "stderr"),
                    "faults": str(folder / "faults"),
                    "observations": str(folder / "observations.jsonl"),
                    "watch_globals": list(job.watch_globals),
                    "virtual_gpus": job.virtual_gpus,
                    "driver": job.driver,
                    "pg_timeout_s": job.timeout_s + 30,
                    "max_observation_bytes": self.options.observation_bytes,
                }
            )
        return configs

    def run(self, job: JobSpec) -> JobResult:
        """Run `job`; infrastructure trouble is reported in `JobResult.error`, never raised."""
        self.start()
        assert self._zygote is not None
        problem = self._zygote.wait_ready(self.options.ready_timeout_s)
        if problem:
            self._stop_launcher()
            return JobResult(spec=job, ranks=[], error=problem)
        try:
            job_dir = self._prepare(job)
        except SubmissionTooLarge as exc:
            return JobResult(spec=job, ranks=[], skipped=str(exc))
        token = uuid.uuid4().hex
        sampler = Sampler(self.gpus) if self.gpus is not None else None
        if sampler is not None:
            sampler.start()
        started = time.monotonic()
        deadline = started + job.timeout_s
        self._zygote.send({"op": "job", "id": job.name, "ranks": self._rank_configs(job, job_dir, token)})
        pids: dict[int, int] = {}
        leader = 0
        status: dict[int, str] = {}
        leftovers = 0
        leader_gone = False
        timed_out = False
        while True:
            event = self._zygote.next_event(deadline)
            if event is None:
                if not self._zygote.alive():
                    break
                timed_out = True
                break
            kind = event.get("event")
            if kind == "started":
                pids = {int(rank): pid for rank, pid in event["pids"].items()}
                leader = int(event["leader"])
            elif kind == "rank_exit":
                status[int(event["rank"])] = event["status"]
            elif kind == "exited":
                leftovers = int(event.get("leftovers", 0))
            elif kind == "leader_exit":
                leftovers += int(event.get("orphans", 0))
                leader_gone = True
                break
        wall = time.monotonic() - started
        if timed_out:
            # the launcher reports pids as seen inside the sandbox's pid namespace
            host = procs.host_pids(self._zygote.proc.pid, {*pids.values(), leader})
            pids = {rank: host[pid] for rank, pid in pids.items() if pid in host}
            self._dump_stacks(pids, status, job_dir)
            for pid in pids.values():
                procs.kill_quietly(pid)
            if leader in host:
                procs.kill_group_quietly(host[leader])  # the leader's session: ranks and their children
            leader_gone, orphans = self._await_leader(job.name)
            leftovers += orphans
        stray = procs.kill_by_env(TOKEN_VARIABLE, token, self.options.kill_wait_s)
        telemetry = sampler.stop() if sampler is not None else None
        launcher_lost = not leader_gone and not self._zygote.alive()
        if launcher_lost:
            self._stop_launcher()  # the next job starts a new launcher
        ranks = [self._rank_result(job, job_dir, rank, status.get(rank)) for rank in range(job.layout.world_size)]
        if job.private:
            shutil.rmtree(job_dir, ignore_errors=True)
        return JobResult(
            spec=job, ranks=ranks, timed_out=timed_out and not launcher_lost, wall_s=wall, leftovers=leftovers + stray, launcher_lost=launcher_lost, telemetry=telemetry
        )

    def _await_leader(self, name: str) -> tuple[bool, int]:
        """Wait for the killed leader's exit: (seen, orphans the zygote killed)."""
        assert self._zygote is not None
        deadline = time.monotonic() + self.options.kill_wait_s
        while True:
            event = self._zygote.next_event(deadline)
            if event is None:
                return False, 0
            if event.get("event") == "leader_exit" and event.get("job") == name:
                return True, int(event.get("orphans", 0))

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

    def _rank_result(self, job: JobSpec, job_dir: Path, rank: int, status: str | None) -> RankResult:
        folder = job_dir / f"rank{rank}"
        events, lost = read_json_lines(folder / "observations.jsonl", self.options.observation_bytes)
        faults = read_text_tail(folder / "faults", 64 << 10)
        return RankResult(
            rank=rank,
            local_rank=job.layout.local_rank_of(rank),
            node=job.layout.node_of(rank),
            status=status,
            events=events,
            stdout_tail=read_text_tail(folder / "stdout", self.options.output_tail_bytes),
            stderr_tail=read_text_tail(folder / "stderr", self.options.output_tail_bytes),
            stack=student_frames(faults, job_dir / "work") if faults else None,
            observations_truncated=lost or any(e.get("kind") == "truncated" for e in events),
        )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
