"""What a job is and what running one yields: the one interface between the grader and the
outside world that runs student code (local processes, a sandbox, a Slurm node, or a fake)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Protocol

from grader.probe.recorder.events import E, Event, Frame
from grader.probe.messages import DdpOptions
from grader.probe.transport.traffic import CarrierPlan, TrafficReport
from grader.run.load import LaunchLoad
from grader.run.records import ProcessRecord


@dataclass(frozen=True)
class Layout:
    """How the ranks of a job are laid out: `nodes` simulated machines of `ranks_per_node` ranks."""

    nodes: int = 1
    ranks_per_node: int = 1

    @property
    def world_size(self) -> int:
        return self.nodes * self.ranks_per_node

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node

    def local_rank_of(self, rank: int) -> int:
        return rank % self.ranks_per_node

    def describe(self) -> str:
        if self.nodes == 1 and self.ranks_per_node == 1:
            return "1 process"
        nodes = "1 node" if self.nodes == 1 else f"{self.nodes} nodes"
        ranks = "1 rank" if self.ranks_per_node == 1 else f"{self.ranks_per_node} ranks"
        return f"{nodes} × {ranks}"


@dataclass(frozen=True)
class JobSpec:
    """One launch of the student's script as `layout.world_size` ranks."""

    name: str
    submission: Path
    script: str
    argv: tuple[str, ...]
    layout: Layout
    timeout_s: float
    env: Mapping[str, str] = field(default_factory=dict)
    watch_globals: tuple[str, ...] = ()
    virtual_gpus: int = 0  # CUDA devices each simulated node pretends to have (0: none)
    hide_gpus: bool = False  # the ranks see none of the machine's CUDA devices (CUDA_VISIBLE_DEVICES empty)
    driver: bool = False  # the script is a grader driver: it gets the recorder (__grader_emit__)
    private: bool = False  # the grader's own code (a reference solution): its files go as soon as it ends
    ddp_options: DdpOptions | None = None  # every DDP the script builds takes these (the reference solution's timed launches: the submission's)
    clock_steps: int | None = None  # the steps the grader asked for, in a launch it times by its own clock (grader/speed/measure.py)
    carrier: CarrierPlan | None = None  # the grader's hub carries the ranks' process groups (grader/probe/transport), on this plan

    def describe(self) -> str:
        """'2 nodes × 2 ranks, 2 virtual GPUs each'."""
        each = " each" if self.layout.nodes > 1 else ""
        gpus = f", {self.virtual_gpus} virtual GPU{'s' if self.virtual_gpus > 1 else ''}{each}" if self.virtual_gpus else ""
        return self.layout.describe() + gpus


@dataclass
class RankResult:
    """What the grader knows about one rank after the job."""

    rank: int
    local_rank: int
    node: int
    status: str | None  # "exit:N", "signal:N", or None when nobody saw it end
    record: ProcessRecord = ProcessRecord()  # what its recorder wrote (grader.run.records)
    stdout_tail: str = ""
    stderr_tail: str = ""
    stack: list[Frame] | None = None  # the student's frames from a fault dump (hang or crash)
    cpu_share: float | None = None  # stopped while running: the share of the CPU time it could have had that its processes used just before (the kernel's count), None where not stopped or not read

    @property
    def exit_code(self) -> int | None:
        if self.status and self.status.startswith("exit:"):
            return int(self.status[5:])
        return None

    @property
    def events(self) -> tuple[Event, ...]:
        """Its recorded events, in the order they began."""
        return self.record.events

    def of_kind(self, kind: type[E]) -> list[E]:
        """Its events of one kind."""
        return self.record.of_kind(kind)

    def first(self, kind: type[E]) -> E | None:
        """Its first event of one kind, or None."""
        return self.record.first(kind)


@dataclass
class JobResult:
    """How a job went. `error` is set only when the infrastructure, not the student, failed."""

    spec: JobSpec
    ranks: list[RankResult]
    timed_out: bool = False
    stalled_s: float | None = None  # the job was stopped early as hung: none of its processes had used the CPU for this long
    wall_s: float = 0.0
    leftovers: int = 0
    error: str | None = None
    skipped: str | None = None  # why the job was not run at all
    launcher_lost: bool = False  # the grader's launcher died while the job ran (killed from inside?)
    telemetry: dict | None = None  # per-GPU memory and utilisation the grader sampled (grader/run/telemetry.py)
    caps_hit: tuple[str, ...] = ()  # the job's caps the kernel saw it reach (memory, processes, disk), as messages
    notes: tuple[str, ...] = ()  # what the copy of the submission left out (hard links, FIFOs)
    traffic: TrafficReport | str | None = None  # what the hub carried, or why no report came (None: the job had no hub)
    step_ends: tuple[float, ...] | str | None = None  # a timed launch's steps by the hub's clock, or why it cannot be timed (grader/grade/timing.py carried_work)
    load: LaunchLoad | None = None  # what the kernel counted of the machine's load while it ran (grader/run/load.py); None: not measured
    reference_s: float | None = None  # the reference solution's time for the same run here, where the run was stopped at a pace set from it (grader/grade/options.py pace_limit_s)
    reference_measured: str = "on this machine"  # where reference_s was measured (the course's baselines stand in where no reference is at hand)

    @property
    def layout(self) -> Layout:
        return self.spec.layout


class JobRunner(Protocol):
    """Runs jobs. Implementations: `LocalRunner` (real processes), `FakeRunner` (tests)."""

    isolation: str  # how student code is isolated, for the results' environment
    telemetry: str  # what GPU telemetry the runner takes ("NVML, 4 GPUs") or why none

    def start(self, trusted: bool = False) -> None:
        """Get ready (e.g. warm up) without blocking the caller for long; `trusted`: the
        reference solution's launches (`JobSpec.private`) are to come, get ready for them too."""

    def run(self, job: JobSpec) -> JobResult:
        """Run one job to completion or timeout; never raises for anything the student did."""

    def close(self) -> None:
        """Release every process and file the runner holds."""
