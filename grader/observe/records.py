"""The event files of an observed run read back through the grader's one reader
(grader.run.records: typed, validated events, in the order they began), put on one time axis:
seconds from the earliest thing any process recorded."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator, Mapping

from grader.probe.recorder.events import MAX_FILE_BYTES, E, Event, InitPg, Process, Span, plain
from grader.probe.typed import field_names
from grader.run.records import ProcessRecord, read_records

MAX_EVENTS = 1_000_000  # a long training run observed (the grader's cap for graded ranks is lower)


@dataclass(frozen=True)
class Timed(Mapping[str, Any]):
    """An event placed on the run's time axis: `start` and `end` in seconds from the run's
    origin (equal for an instant). The typed event is `event`; as a Mapping, a Timed reads as
    the event's line in its file, with `start` and `end` added (for readers that go by field
    name: the timeline and the trace)."""

    event: Event
    start: float
    end: float

    @cached_property
    def _names(self) -> tuple[str, ...]:
        return ("kind", *field_names(type(self.event)), "start", "end")

    def __getitem__(self, key: str) -> Any:  # one field made plain at a time: most are never read
        if key == "kind":
            return self.event.kind
        if key in ("start", "end"):
            return self.start if key == "start" else self.end
        if key not in self._names:
            raise KeyError(key)
        return plain(getattr(self.event, key))

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@dataclass(frozen=True)
class ObservedProcess:
    """One process: what it recorded (the record the checks read too) and its events on the
    run's time axis, in the order they began."""

    record: ProcessRecord
    events: tuple[Timed, ...] = ()

    @property
    def header(self) -> Process:
        assert self.record.header is not None  # read_processes keeps files with a header only
        return self.record.header

    def of_kind(self, kind: type[E], **match: object) -> list[Timed]:
        """The placed events of one kind whose fields equal `match`."""
        return [e for e in self.events if type(e.event) is kind and all(getattr(e.event, k) == v for k, v in match.items())]

    def _process_group(self) -> InitPg | None:
        return self.record.first(InitPg)

    @property
    def rank(self) -> int | None:
        """The rank in the default process group, else torchrun's RANK, else None."""
        group = self._process_group()
        return group.rank if group is not None else self.header.rank

    @property
    def world_size(self) -> int | None:
        group = self._process_group()
        return group.world_size if group is not None else self.header.world_size

    @property
    def local_rank(self) -> int | None:
        return self.header.local_rank

    @property
    def pid(self) -> int:
        return self.header.pid

    @property
    def host(self) -> str:
        return self.header.host

    @property
    def ppid(self) -> int | None:
        """The parent's pid (the launcher or the `mp.spawn` caller)."""
        return self.header.ppid

    @property
    def name(self) -> str:
        """"rank 1" where the process has a rank, "pid 4242" otherwise."""
        return f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}"

    @property
    def label(self) -> str:
        """"rank 1 · pid 4242" where the process has a rank, "pid 4242" otherwise."""
        return f"rank {self.rank} · pid {self.pid}" if self.rank is not None else self.name

    @property
    def first_start(self) -> float:
        """When the process's first event began (infinity when it has none)."""
        return min((e.start for e in self.events), default=float("inf"))


def spawn_groups(processes: list[ObservedProcess]) -> list[int | None]:
    """For each process, the number (1, 2, ...) of its spawn group: the ranked processes that
    one parent (one host and ppid) started together. A parent's processes are taken in order of
    first appearance; one whose rank is already in its parent's latest group, or whose world
    size differs, starts a new group (the script called mp.spawn again, torchrun restarted its
    workers). Groups are numbered in order of first appearance; None for every process where
    there is only one group, and for the processes without a rank."""
    ranked = sorted((i for i, p in enumerate(processes) if p.rank is not None), key=lambda i: (processes[i].first_start, processes[i].pid))
    latest: dict[tuple[str, int | None], int] = {}
    groups: list[tuple[set, int | None]] = []  # (ranks, world size) of each group
    numbers: dict[int, int] = {}
    for index in ranked:
        process = processes[index]
        parent = (process.host, process.ppid)
        group = latest.get(parent)
        if group is None or process.rank in groups[group][0] or process.world_size != groups[group][1]:
            group = latest[parent] = len(groups)
            groups.append((set(), process.world_size))
        groups[group][0].add(process.rank)
        numbers[index] = group + 1
    return [numbers.get(index) if len(groups) > 1 else None for index in range(len(processes))]


def spawn_order(processes: list[ObservedProcess]) -> list[int]:
    """The indices of `processes`, those of one spawn group together (groups in order of first
    appearance), each group in the order given."""
    groups = spawn_groups(processes)
    return sorted(range(len(processes)), key=lambda index: groups[index] or 0)


def input_device(event: dict) -> str:
    """The device of a forward call's first tensor argument, "?" where it had none."""
    inputs = event.get("inputs")
    first = inputs[0] if isinstance(inputs, list) and inputs and isinstance(inputs[0], dict) else {}
    return str(first.get("device", "?"))


def distinct_labels(processes: list[ObservedProcess]) -> list[str]:
    """A label per process that no other process of the run has, for the timeline and the trace:
    "rank 0 · pid 4242", led by "spawn 2 · " where the ranked processes form several spawn
    groups (`spawn_groups`) and followed by " · host" where they come from several hosts."""
    several_hosts = len({p.host for p in processes}) > 1
    labels = []
    for process, group in zip(processes, spawn_groups(processes)):
        parts = [f"spawn {group}"] if group is not None else []
        parts.append(process.label)
        if several_hosts:
            parts.append(process.host or "unknown host")
        labels.append(" · ".join(parts))
    return labels


def align(records: list[ProcessRecord]) -> list[ObservedProcess]:
    """Put the events of several processes on one axis: `start` and `end` in seconds from the
    earliest start, using each header's wall-clock time. Records without a header are left
    out. Sorted by rank, then host, then pid."""
    placed = []
    for record in records:
        if record.header is None:
            continue
        wall0 = record.header.wall - record.header.t
        placed.append((record, [(wall0 + e.t, wall0 + e.t + (e.dur if isinstance(e, Span) else 0.0)) for e in record.events]))
    starts = [start for _, times in placed for start, _ in times] or [record.header.wall for record, _ in placed] or [0.0]
    origin = min(starts)
    processes = []
    for record, times in placed:
        events = tuple(Timed(e, round(start - origin, 6), round(end - origin, 6)) for e, (start, end) in zip(record.events, times))
        processes.append(ObservedProcess(record, events))
    return sorted(processes, key=lambda p: (p.rank is None, p.rank or 0, p.host, p.pid))


def read_processes(folder: Path) -> list[ObservedProcess]:
    """Every process that wrote an event file (events-*.jsonl) into `folder`."""
    paths = sorted(folder.glob("events-*.jsonl")) if folder.is_dir() else []
    return align([read_records(path, MAX_FILE_BYTES, MAX_EVENTS) for path in paths])
