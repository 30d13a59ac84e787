"""The messages between the grader (grader/run/local.py), its rank launcher (the zygote,
grader/probe/zygote.py) and the ranks (grader/probe/rank.py), defined once; standard library
only. Each is a JSON line (grader.probe.typed), checked where it arrives: a message that is
not one of these raises BadMessage with a one-sentence reason, never a KeyError.

Requests, grader to launcher ("op"): `job` (the ranks to start, each with its RankConfig;
with `hold`, the leader waits at a gate), then for a held job `go` or `abort`.
Answers, launcher to grader ("event"): `ready` once warm; per job `forked` (a held job's
leader), `started` (the ranks' pids), `rank_exit` per rank, `exited` (every rank ended) and
`leader_exit` (the leader is gone, however it ended); `error` for a request it could not read.
Statuses are "exit:N" or "signal:N".

The grader's hub (grader/probe/transport/hub.py), which the launcher forks for a job whose
process groups it carries, reports through the launcher's channel too: its TrafficReport,
compressed, base64-encoded and cut into `traffic` answers short enough that each is one atomic
write on the pipe.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Mapping, Union, cast

from grader.probe.transport.traffic import CarrierPlan
from grader.probe.typed import Malformed, dumps, loads, parse_tagged


class BadMessage(Malformed):
    """A message is not one the grader, the launcher or the rank writes."""


@dataclass(frozen=True)
class DdpOptions:
    """The DistributedDataParallel options a script chose (its rank 0's, as the traffic confirms
    them: grader/speed/measure.py); the reference solution's timed launches are built with the
    submission's costly ones, so that an option DDP offers costs the submission nothing in a
    speed check."""

    find_unused_parameters: bool = False
    static_graph: bool = False
    gradient_as_bucket_view: bool = False
    bucket_cap_mb: float | None = None  # None: DDP's default

    def as_kwargs(self) -> dict[str, bool | float]:
        """The options as DistributedDataParallel's keyword arguments (a bucket size that is
        not a positive number left to DDP's default)."""
        kwargs: dict[str, bool | float] = {"find_unused_parameters": self.find_unused_parameters, "static_graph": self.static_graph, "gradient_as_bucket_view": self.gradient_as_bucket_view}
        if self.bucket_cap_mb is not None and math.isfinite(self.bucket_cap_mb) and self.bucket_cap_mb > 0:
            kwargs["bucket_cap_mb"] = self.bucket_cap_mb
        return kwargs

    def costly_part(self) -> "DdpOptions":
        """The options that cost a DDP time in every step, which the reference's timed launches
        take on: find_unused_parameters (a walk of the graph and one more all-reduce) and
        bucket_cap_mb (how many all-reduces). static_graph and gradient_as_bucket_view only save
        time, and static_graph trips an assert of torch's reducer under no_sync (p10's
        reference): they are not taken on."""
        return DdpOptions(find_unused_parameters=self.find_unused_parameters, bucket_cap_mb=self.bucket_cap_mb)

    def describe(self) -> str:
        """The options that are not DDP's defaults, as keyword arguments ('' for none)."""
        return ", ".join(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}" for key, value in self.as_kwargs().items() if value is not False)


@dataclass(frozen=True)
class RankConfig:
    """What one rank is told: the script to run, as whom, where its files go, and what the
    recorder takes."""

    rank: int
    script: str  # its path in the job's working folder
    argv: tuple[str, ...]
    cwd: str
    env: dict[str, str]  # the whole environment (torchrun's variables among it)
    stdout: str
    stderr: str
    faults: str  # the fault handler's dump (stacks on SIGUSR1 and on a crash)
    observations: str  # the recorder's event file
    watch_globals: tuple[str, ...]
    virtual_gpus: int
    driver: bool  # the script is a grader driver: it gets the recorder's emit
    pg_timeout_s: float  # the process groups' timeout where the script gives none
    max_observation_bytes: int
    ddp_options: DdpOptions | None = None  # every DDP the script builds takes these options (only for the reference solution's timed launches)


# ------------------------------------------------------------------ requests
@dataclass(frozen=True)
class JobRequest:
    """Start a job's ranks (held at a gate until `go` with `hold`)."""

    op: ClassVar[str] = "job"
    id: str
    ranks: tuple[RankConfig, ...]
    hold: bool
    carrier: CarrierPlan | None = None  # the grader's hub carries the ranks' process groups (grader.probe.transport)


@dataclass(frozen=True)
class Go:
    """Open a held job's gate: its leader was moved into the job's cgroup."""

    op: ClassVar[str] = "go"


@dataclass(frozen=True)
class Abort:
    """Do not start a held job: its leader exits at once."""

    op: ClassVar[str] = "abort"


Request = Union[JobRequest, Go, Abort]
REQUESTS: Mapping[str, type] = MappingProxyType({cls.op: cls for cls in (JobRequest, Go, Abort)})


# ------------------------------------------------------------------ answers
@dataclass(frozen=True)
class RankPid:
    """A rank and the pid it runs as (inside the sandbox's pid namespace)."""

    rank: int
    pid: int


@dataclass(frozen=True)
class Ready:
    """The launcher is warm."""

    event: ClassVar[str] = "ready"
    pid: int


@dataclass(frozen=True)
class LauncherError:
    """The launcher could not read a request (the grader also reads an answer it cannot
    read as one)."""

    event: ClassVar[str] = "error"
    message: str


@dataclass(frozen=True)
class Forked:
    """A held job's leader exists and waits at its gate."""

    event: ClassVar[str] = "forked"
    job: str
    leader: int


@dataclass(frozen=True)
class Started:
    """The job's ranks were forked."""

    event: ClassVar[str] = "started"
    job: str
    leader: int
    pids: tuple[RankPid, ...]


@dataclass(frozen=True)
class RankExited:
    """One rank ended."""

    event: ClassVar[str] = "rank_exit"
    job: str
    rank: int
    status: str


@dataclass(frozen=True)
class Exited:
    """Every rank ended; `leftovers` processes they left behind were killed."""

    event: ClassVar[str] = "exited"
    job: str
    status: dict[str, str]
    leftovers: int


@dataclass(frozen=True)
class LeaderExited:
    """The job's leader is gone; `orphans` processes the job left were killed then."""

    event: ClassVar[str] = "leader_exit"
    job: str
    status: str
    orphans: int


@dataclass(frozen=True)
class TrafficPart:
    """A part of the hub's report (grader.probe.transport.traffic.pack)."""

    event: ClassVar[str] = "traffic"
    job: str
    part: int
    parts: int
    data: str  # base64


Answer = Union[Ready, LauncherError, Forked, Started, RankExited, Exited, LeaderExited, TrafficPart]
ANSWERS: Mapping[str, type] = MappingProxyType({cls.event: cls for cls in (Ready, LauncherError, Forked, Started, RankExited, Exited, LeaderExited, TrafficPart)})


# ------------------------------------------------------------------ lines
def request_line(request: Request) -> str:
    """The line (without its newline) of a request."""
    return dumps(request, "op", request.op)


def answer_line(answer: Answer) -> str:
    """The line (without its newline) of an answer."""
    return dumps(answer, "event", answer.event)


def _parse(line: str | bytes, tag_key: str, classes: Mapping[str, type], noun: str) -> object:
    try:
        return parse_tagged(loads(line, noun), tag_key, classes, noun)
    except Malformed as exc:
        raise BadMessage(str(exc)) from None


def parse_request(line: str | bytes) -> Request:
    """The request a line holds; BadMessage when it is not one."""
    return cast(Request, _parse(line, "op", REQUESTS, "request"))


def parse_answer(line: str | bytes) -> Answer:
    """The answer a line holds; BadMessage when it is not one."""
    return cast(Answer, _parse(line, "event", ANSWERS, "answer"))
