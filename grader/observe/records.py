"""The event files of an observed run read back (grader.observe.events wrote them), on one
time axis: seconds from the earliest thing any process recorded."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

SPAN_KINDS = ("forward", "backward", "allreduce", "optimizer")


@dataclass
class ObservedProcess:
    """One process: its `process` header and its other events, in the order written. Every
    event has `start` and `end` in seconds from the run's origin (equal for an instant)."""

    header: dict
    events: list[dict] = field(default_factory=list)

    def of_kind(self, kind: str, **match: object) -> list[dict]:
        """The events of one kind whose fields equal `match`."""
        return [e for e in self.events if e.get("kind") == kind and all(e.get(k) == v for k, v in match.items())]

    def _from_process_group(self, key: str) -> int | None:
        groups = self.of_kind("init_pg")
        return groups[0].get(key) if groups else None

    @property
    def rank(self) -> int | None:
        """The rank in the default process group, else torchrun's RANK, else None."""
        found = self._from_process_group("rank")
        return found if found is not None else self.header.get("rank")

    @property
    def world_size(self) -> int | None:
        found = self._from_process_group("world_size")
        return found if found is not None else self.header.get("world_size")

    @property
    def local_rank(self) -> int | None:
        return self.header.get("local_rank")

    @property
    def pid(self) -> int:
        return int(self.header.get("pid", 0))

    @property
    def host(self) -> str:
        return str(self.header.get("host", ""))

    @property
    def ppid(self) -> int | None:
        """The parent's pid (the launcher or the `mp.spawn` caller), None in older event files."""
        found = self.header.get("ppid")
        return found if isinstance(found, int) else None

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
        return min((float(e.get("start", 0.0)) for e in self.events), default=float("inf"))


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


def parse_lines(lines: Iterable[str]) -> tuple[dict | None, list[dict]]:
    """The header and the other events of one file, times still the file's own (`t`). A line
    that is not JSON (the last one of a killed process, cut short) is passed over."""
    header, events = None, []
    for line in lines:
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("kind") == "process" and header is None:
            header = event
        else:
            events.append(event)
    return header, events


def align(files: list[tuple[dict, list[dict]]]) -> list[ObservedProcess]:
    """Put the events of several files on one axis: `start` and `end` in seconds from the
    earliest start, using each file's wall-clock time of its header. Sorted by rank, then pid."""
    placed = []
    for header, events in files:
        wall0 = float(header.get("wall", 0.0)) - float(header.get("t", 0.0))
        timed = []
        for event in events:
            end = wall0 + float(event.get("t", 0.0))
            timed.append({**event, "start": end - float(event.get("dur", 0.0)), "end": end})
        placed.append((header, timed))
    starts = [e["start"] for _, events in placed for e in events] or [float(h.get("wall", 0.0)) for h, _ in placed] or [0.0]
    origin = min(starts)
    processes = []
    for header, events in placed:
        for event in events:
            event["start"] = round(event["start"] - origin, 6)
            event["end"] = round(event["end"] - origin, 6)
        processes.append(ObservedProcess(header, events))
    return sorted(processes, key=lambda p: (p.rank is None, p.rank or 0, str(p.header.get("host", "")), p.pid))


def read_processes(folder: Path) -> list[ObservedProcess]:
    """Every process that wrote an event file (events-*.jsonl) into `folder`."""
    files = []
    for path in sorted(folder.glob("events-*.jsonl")) if folder.is_dir() else []:
        with open(path, encoding="utf-8", errors="replace") as handle:
            header, events = parse_lines(handle)
        if header is not None:
            files.append((header, events))
    return align(files)
