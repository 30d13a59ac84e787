"""How a grading job is started and watched: the one narrow interface where the outside
world starts (a detached local process, or a Slurm batch job).

Every job runs `python -m grader --course-root ROOT work --results-dir DIR KEY`; what it
leaves in the store is the truth about its submission. A backend only starts jobs and says
what state they are in.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Protocol

from grader.submit.queue import Submission

LOG_MODE = 0o640  # a grading job's log is the staff's (it holds the whole feedback); not a umask:
# the job itself must make files the sandbox's uid can read


class JobState(str, Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    NODE_FAIL = "NODE_FAIL"
    UNKNOWN = "UNKNOWN"  # the backend has no record of it (any more)

    @property
    def finished(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING)


@dataclass(frozen=True)
class JobSize:
    """What a grading job asks of a node."""

    cpus: int
    memory_mb: int


def fit(wanted: JobSize, largest: JobSize | None) -> tuple[JobSize, str | None]:
    """`wanted`, cut down to the largest node there is (a request no node can hold is refused
    by the scheduler, and would never run); with a note saying so when it was cut."""
    if largest is None or (wanted.cpus <= largest.cpus and wanted.memory_mb <= largest.memory_mb):
        return wanted, None
    given = JobSize(min(wanted.cpus, largest.cpus), min(wanted.memory_mb, largest.memory_mb))
    return given, (f"the grading wants {wanted.cpus} CPUs and {wanted.memory_mb} MB; the largest node has {largest.cpus} CPUs and "
                   f"{largest.memory_mb} MB, so it asks for {given.cpus} CPUs and {given.memory_mb} MB (speed checks may then time ranks sharing CPUs)")


class BackendDown(Exception):
    """The backend cannot take jobs now (e.g. the Slurm controller does not answer)."""


class Backend(Protocol):
    name: str
    slots: int | None  # gradings it runs at once (None: its scheduler decides)

    def dispatch(self, submission: Submission, command: list[str], log: Path) -> str:
        """Start the job; return its id. BackendDown when it cannot."""

    def state(self, job: str) -> JobState:
        """The job's state now."""

    def cancel(self, job: str) -> None:
        """Stop the job (if it still runs)."""


def work_command(course_root: Path, results_dir: Path, key: str, then_dispatch: str | None = None) -> list[str]:
    """The grading job's command; with `then_dispatch` (a backend's name) it ends with one
    dispatch pass on that backend, so a submission waiting for its slot starts then."""
    follow = ["--then-dispatch", then_dispatch] if then_dispatch else []
    return [sys.executable, "-m", "grader", "--course-root", str(course_root), "work", "--results-dir", str(results_dir), *follow, key]


class LocalBackend:
    """Jobs as detached processes on this machine (a course server, a laptop, the tests), one
    at a time: two gradings sharing the CPUs would disturb each other's timed launches (a
    correct submission's speed check failed that way)."""

    name = "local"
    slots = 1

    def dispatch(self, submission: Submission, command: list[str], log: Path) -> str:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, LOG_MODE), "ab") as handle:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
        return f"local-{process.pid}"

    def state(self, job: str) -> JobState:
        pid = int(job.removeprefix("local-"))
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                zombie = stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        except OSError:
            return JobState.UNKNOWN
        if zombie:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return JobState.UNKNOWN
        return JobState.RUNNING

    def cancel(self, job: str) -> None:
        try:
            os.killpg(int(job.removeprefix("local-")), 9)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass
class SlurmBackend:
    """Batch jobs on a Slurm cluster: sbatch, states from scontrol (and the job-completion log
    once scontrol has forgotten a job), scancel. GPUs are asked for as GRES."""

    partition: str | None = None  # when a submission names none
    time_min: int = 30  # when a submission names none (the dispatcher always sets one)
    cpus: int = 1  # when a submission names none (the dispatcher sizes every job from its spec)
    memory_mb: int = 0  # likewise; 0: Slurm's default
    env: dict | None = None  # e.g. SLURM_CONF for a private cluster
    timeout_s: float = 30  # a Slurm command that takes longer: the controller is down
    name: str = "slurm"
    slots: int | None = None  # Slurm schedules; each job has CPUs of its own

    def _run(self, command: list[str]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(command, capture_output=True, text=True, timeout=self.timeout_s, env=self.env)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BackendDown(f"{command[0]}: {exc}") from None

    def largest_node(self, partition: str | None) -> JobSize | None:
        """The CPUs and memory of the partition's largest node (None when sinfo cannot say)."""
        done = self._run(["sinfo", "-h", "-N", "-o", "%c %m", *(["-p", partition] if partition else [])])
        sizes = []
        for line in done.stdout.splitlines() if done.returncode == 0 else []:
            parts = line.replace("+", "").split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
                sizes.append(JobSize(int(parts[0]), int(parts[1])))
        return max(sizes, key=lambda size: (size.cpus, size.memory_mb)) if sizes else None

    def script(self, submission: Submission, command: list[str], log: Path, largest: JobSize | None = None) -> str:
        """The job's sbatch script; its size cut to `largest` (a node's) where it is more."""
        options = submission.options
        size, cut = fit(JobSize(int(options.get("cpus") or self.cpus), int(options.get("mem_mb") or self.memory_mb)), largest)
        lines = [
            "#!/bin/bash",
            f"#SBATCH --job-name=grade-{submission.practical}-{submission.student}-{submission.commit[:7]}",
            f"#SBATCH --output={log}",
            f"#SBATCH --chdir={log.parent}",  # the store is on the shared file system; the submitter's folder may not be
            f"#SBATCH --time={int(options.get('time_min') or self.time_min)}",
            f"#SBATCH --cpus-per-task={size.cpus}",
        ]
        if size.memory_mb:
            lines.append(f"#SBATCH --mem={size.memory_mb}M")
        if cut:
            lines.append(f"# {cut}")
        if options.get("gpus"):
            lines.append(f"#SBATCH --gres=gpu:{int(options['gpus'])}")
        partition = options.get("partition") or self.partition
        if partition:
            lines.append(f"#SBATCH --partition={partition}")
        if cut:
            lines.append(f"echo {shlex.quote(cut)}")
        lines.append("exec " + " ".join(shlex.quote(part) for part in command))
        return "\n".join(lines) + "\n"

    def dispatch(self, submission: Submission, command: list[str], log: Path) -> str:
        log.parent.mkdir(parents=True, exist_ok=True)
        script = log.with_suffix(".sbatch")
        script.write_text(self.script(submission, command, log, self.largest_node(submission.options.get("partition") or self.partition)))
        done = self._run(["sbatch", "--parsable", str(script)])
        if done.returncode != 0:
            raise BackendDown(f"sbatch: {done.stderr.strip()[:300]}")
        return done.stdout.strip().split(";")[0]

    def state(self, job: str) -> JobState:
        done = self._run(["scontrol", "show", "job", job, "-o"])
        text = done.stdout if done.returncode == 0 else ""
        if not text:
            text = self._completion_record(job)
        for entry in text.split():
            if entry.startswith("JobState="):
                value = entry.split("=", 1)[1]
                if value in ("CONFIGURING", "REQUEUED", "SUSPENDED", "RESIZING"):
                    return JobState.PENDING
                if value in ("COMPLETING",):
                    return JobState.RUNNING
                if value in ("BOOT_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "DEADLINE"):
                    return JobState.NODE_FAIL
                try:
                    return JobState(value)
                except ValueError:
                    return JobState.UNKNOWN
        return JobState.UNKNOWN

    def _completion_record(self, job: str) -> str:
        """The job-completion log's line for `job` (sacct -c reads the same file)."""
        done = self._run(["scontrol", "show", "config"])
        location = next((line.split("=", 1)[1].strip() for line in done.stdout.splitlines() if line.startswith("JobCompLoc")), "")
        try:
            with open(location, encoding="utf-8", errors="replace") as handle:
                return next((line for line in reversed(handle.readlines()) if line.startswith(f"JobId={job} ")), "")
        except OSError:
            return ""

    def cancel(self, job: str) -> None:
        self._run(["scancel", job])


def named_backend(name: str) -> Backend:
    """The backend a command line or course.yaml names: "slurm" or "local"."""
    return SlurmBackend() if name == "slurm" else LocalBackend()


@dataclass
class FakeBackend:
    """A backend for tests: a job is a record, not a process. A test decides what each job
    does (`finish`, or run the worker itself) and whether the backend is `down`."""

    down: bool = False
    name: str = "fake"
    slots: int | None = None
    jobs: dict = field(default_factory=dict)  # job id -> the command it would run
    states: dict = field(default_factory=dict)  # job id -> JobState

    def dispatch(self, submission: Submission, command: list[str], log: Path) -> str:
        if self.down:
            raise BackendDown("the fake backend is down")
        job = f"fake-{len(self.jobs) + 1}"
        self.jobs[job] = command
        self.states[job] = JobState.PENDING
        return job

    def state(self, job: str) -> JobState:
        return self.states.get(job, JobState.UNKNOWN)

    def cancel(self, job: str) -> None:
        self.finish(job, JobState.CANCELLED)

    def finish(self, job: str, state: JobState = JobState.COMPLETED) -> None:
        """Say how the job `job` ended."""
        self.states[job] = state
