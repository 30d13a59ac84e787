"""How much other load disturbed a launch, by the kernel's counts: what a speed check may
believe about the machine while a launch ran (grader/speed/measure.py sets disturbed steps and
launches aside).

Everything here is read by the grader's own process from /proc, which the submission cannot
write:

- the busy time of the CPUs the grader may use (/proc/stat's lines of those CPUs: user, nice,
  system and steal time; a Slurm job's cpuset, not the whole node);
- the job's own CPU time: the launcher's process tree, reaped children included
  (`procs.tree_schedstats`: the ranks, the grader's hub and everything they started, which the
  launcher's job leader reaps as a subreaper), and each of its tasks' schedstat (time on a
  CPU, time runnable but waiting for one);
- the grader's own CPU time (this process), which is not other load either.

What the rest of the machine used (`LaunchLoad.others_cpu_s`) is the busy time less the job's
and the grader's. Over the whole launch, more than DISTURBED_SHARE of the machine makes it
disturbed (`LaunchLoad.disturbed`: launches timed by the grader's clock); every SAMPLE_S, more
than SPAN_SHARE of the CPUs makes the interval a busy span (`LaunchLoad.busy_spans`: steps
timed by the hub's clock), widened by the samples on either side: a burst that began late in a
sample, or ended early in one, may leave it under SPAN_SHARE though the steps in it ran beside
the burst (without that margin, two correct variants with one collective more per step read
1.31× and 1.35× on their "quiet" steps in 90 gradings beside bursts: bench/RESULTS.md). The derivation is in docs/design.md (speed checks: steps and
launches disturbed by other load).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from grader.run import procs

TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
BUSY_FIELDS = (0, 1, 2, 7)  # of a /proc/stat cpu line: user, nice, system, steal (guest time is inside user)
SAMPLE_S = 0.2  # how often a running launch's tasks' schedstat is read
SPAN_SHARE = 0.25  # of the CPUs over one sample's interval: more taken by other load makes the interval a busy span (/proc/stat counts in 10 ms ticks: a 0.2 s interval of 2 CPUs reads to within about 10 %)
DISTURBED_SHARE = 0.1  # the rest of the machine took more than this share of its CPU time during a launch: the launch was disturbed (docs/design.md)


@dataclass(frozen=True)
class LaunchLoad:
    """What the kernel counted while one launch ran."""

    wall_s: float
    cpus: int  # CPUs this process may run on
    job_cpu_s: float  # the job's processes (launcher, ranks, hub and what they started)
    others_cpu_s: float  # the rest of the machine, the grader's own process left out
    waited_s: float  # the job's tasks runnable but waiting for a CPU (as sampled)
    ran_s: float  # the job's tasks on a CPU (as sampled, beside waited_s)
    busy_spans: tuple[tuple[float, float], ...] = ()  # the intervals (CLOCK_MONOTONIC) in which other load took more than SPAN_SHARE of the CPUs, each with the samples on either side

    @property
    def others_share(self) -> float:
        """Of the CPU time the machine had during the launch, the share the rest of it used."""
        return self.others_cpu_s / (self.wall_s * self.cpus) if self.wall_s > 0 and self.cpus > 0 else 0.0

    @property
    def wait_share(self) -> float:
        """Of the time the job's tasks wanted a CPU, the share they waited for one."""
        wanted = self.waited_s + self.ran_s
        return self.waited_s / wanted if wanted > 0 else 0.0

    @property
    def disturbed(self) -> bool:
        """Whether other load took more than DISTURBED_SHARE of the machine during the launch."""
        return self.others_share > DISTURBED_SHARE

    def as_data(self) -> dict:
        return {
            "wall_s": round(self.wall_s, 4),
            "cpus": self.cpus,
            "job_cpu_s": round(self.job_cpu_s, 4),
            "others_cpu_s": round(self.others_cpu_s, 4),
            "others_share": round(self.others_share, 4),
            "waited_s": round(self.waited_s, 4),
            "wait_share": round(self.wait_share, 4),
            "disturbed": self.disturbed,
            "busy_s": round(sum(end - start for start, end in self.busy_spans), 4),
        }


def machine_busy_s(cpus: frozenset[int], stat: str = "/proc/stat") -> float:
    """The busy time since boot of the CPUs `cpus`, in seconds (/proc/stat's per-CPU lines:
    user, nice, system and steal; interrupts are left out, as they are out of every process's
    count: a job's own loopback traffic must not read as other load)."""
    total = 0
    with open(stat, "rb") as handle:
        for line in handle:
            fields = line.split()
            if not fields or not fields[0].startswith(b"cpu"):
                break
            name = fields[0][3:]
            if name.isdigit() and int(name) in cpus:
                total += sum(int(fields[1 + i]) for i in BUSY_FIELDS if 1 + i < len(fields))
    return total * TICK_S


def own_cpu_s() -> float:
    """This process's CPU time (every thread's), in seconds."""
    times = os.times()
    return times.user + times.system


def allowed_cpus() -> frozenset[int]:
    """The CPUs this process (and so every job it launches) may run on: a Slurm job's cpuset,
    not the whole node."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


@dataclass
class LoadMeter:
    """Counts one launch's load: `start` before it, `sample` while it runs (as often as the
    caller likes; it reads only every SAMPLE_S), `stop` once its processes have ended and been
    reaped. `root` is the launcher's pid on the host: the job's processes are its descendants."""

    root: int
    cpus: frozenset[int] = field(default_factory=allowed_cpus)
    _start: tuple[float, float, float, int] = (0.0, 0.0, 0.0, 0)  # monotonic, machine busy, own CPU, the tree's ticks
    _last: tuple[float, float, float, int, int] = (0.0, 0.0, 0.0, 0, 0)  # at the last sample: monotonic, machine busy, own CPU, the job's tasks' run time (ns), the tree's ticks
    _tasks: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)  # tid -> first (run, wait), last (run, wait) in ns
    _spans: list[tuple[float, float]] = field(default_factory=list)
    _next_sample: float = 0.0

    def start(self) -> None:
        now = time.monotonic()
        ticks, tasks = procs.tree_schedstats(self.root)
        self._tasks = {tid: (ran, waited, ran, waited) for tid, (ran, waited) in tasks.items()}
        self._start = (now, machine_busy_s(self.cpus), own_cpu_s(), ticks)
        self._last = (now, self._start[1], self._start[2], self._ran_ns(), ticks)
        self._spans = []
        self._next_sample = now + SAMPLE_S

    @property
    def ticks(self) -> int:
        """The job's CPU time in clock ticks (its process tree's, reaped children included) at
        the last sample: what the runner's hang watch reads (grader/run/local.py IdleWatch)."""
        return self._last[4]

    def _ran_ns(self) -> int:
        return sum(last - first for first, _, last, _ in self._tasks.values())

    def sample(self, force: bool = False) -> None:
        """Read the schedstat of every task of the job (a task born since `start` counts from
        its birth), and what other load took since the last sample, at most every SAMPLE_S:
        an interval where it took more than SPAN_SHARE of the CPUs is a busy span."""
        now = time.monotonic()
        if now < self._next_sample and not force:
            return
        self._next_sample = now + SAMPLE_S
        ticks, tasks = procs.tree_schedstats(self.root)
        for tid, (ran, waited) in tasks.items():
            first = self._tasks.get(tid)
            self._tasks[tid] = (0, 0, ran, waited) if first is None else (first[0], first[1], ran, waited)
        busy, own, ran = machine_busy_s(self.cpus), own_cpu_s(), self._ran_ns()
        before, busy_before, own_before, ran_before, ticks_before = self._last
        job = max((ran - ran_before) / 1e9, (ticks - ticks_before) * TICK_S)  # the tasks' nanoseconds, or the tree's ticks where a task ended unseen (its reaper's count holds it)
        others = (busy - busy_before) - (own - own_before) - job
        if now > before and others > SPAN_SHARE * (now - before) * len(self.cpus):
            span = (before - (now - before), now + SAMPLE_S)  # with the samples on either side: a burst that began late in one, or ended early in one, may leave it under SPAN_SHARE
            if self._spans and self._spans[-1][1] >= span[0]:
                self._spans[-1] = (self._spans[-1][0], span[1])
            else:
                self._spans.append(span)
        self._last = (now, busy, own, ran, ticks)

    def stop(self) -> LaunchLoad:
        started, busy, own, ticks = self._start
        wall = time.monotonic() - started
        job = max(procs.tree_schedstats(self.root)[0] - ticks, 0) * TICK_S
        others = max(machine_busy_s(self.cpus) - busy - job - (own_cpu_s() - own), 0.0)
        ran = self._ran_ns() / 1e9
        waited = sum(last_wait - first_wait for _, first_wait, _, last_wait in self._tasks.values()) / 1e9
        return LaunchLoad(wall_s=wall, cpus=len(self.cpus), job_cpu_s=job, others_cpu_s=others, waited_s=waited, ran_s=ran, busy_spans=tuple(self._spans))
