"""Synthetic observations for testing checks without processes, built through the recorder's
own event types (grader.probe.events) and read back through the grader's reader
(grader.run.records), so that they cannot drift from what the recorder writes.

`ddp_run` builds the events a correct DDP submission records; tests then break one thing.
"""
from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from grader.checks.distributed import Trajectory
from grader.observe.records import ObservedProcess, Timed
from grader.probe.events import (
    EVENTS,
    EVENTS_VERSION,
    AllReduce,
    Backward,
    Ddp,
    DestroyPg,
    EndState,
    Event,
    Exit,
    Forward,
    Frame,
    Globals,
    InitPg,
    Memory,
    Model,
    OptGrads,
    Optimizer,
    Process,
    Raised,
    Span,
    TensorInfo,
    to_json,
)
from grader.run.job import JobResult, JobSpec, Layout, RankResult
from grader.run.records import ProcessRecord, parse_records

NAMES = ["0.weight", "0.bias"]


class Recording:
    """The events of one synthetic process, numbered in the order they are added (`seq`) and
    a millisecond apart (spans last a millisecond)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, kind: type[Event], step: int = 0, **fields: Any) -> None:
        seq = len(self.events) + 1
        if issubclass(kind, Span):
            fields.setdefault("dur", 0.001)
        self.events.append(kind(t=seq / 1000, seq=seq, step=step, **fields))


def header(rank: int | None = 0, world_size: int | None = 1, pid: int = 4000, ppid: int = 1, host: str = "node", wall: float = 1000.0) -> Process:
    """A process header of the current format."""
    local = rank if rank is not None else None
    return Process(
        t=0.0, seq=0, step=0, version=EVENTS_VERSION, pid=pid, ppid=ppid, host=host, argv=("p6_ddp.py",), rank=rank,
        local_rank=local, world_size=world_size, virtual_gpus=0, cuda=False, wall=wall, torch="2.13.0",
    )


def record_of(events: list[Event], head: Process | None = None) -> ProcessRecord:
    """The record the grader reads from a file holding `head` and `events` (written and read
    back, so every fixture is a valid event file)."""
    return parse_records([to_json(head or header()), *(to_json(e) for e in events)])


def _values(named: dict) -> tuple:
    return tuple(tuple(named[n]) for n in NAMES)


def forward(batch: int, device: str, call: int, rows: tuple[float, ...] | None = None) -> dict:
    """The fields of a DDP model's outermost call."""
    return {
        "module": "DistributedDataParallel", "name": None, "label": "DistributedDataParallel(Sequential)", "role": "model", "depth": 0,
        "call": call, "has_params": True, "replica": False, "inputs": (TensorInfo(shape=(batch, 3), device=device),), "devices": None, "rows": rows,
    }


def ddp_rank(rank: int, layout: Layout, ref: Trajectory, *, batch: int = 64, steps: int = 3, device: str = "cpu") -> RankResult:
    world = layout.world_size
    local = layout.local_rank_of(rank)
    log = Recording()
    log.add(InitPg, requested="gloo", backend="gloo", rank=rank, world_size=world)
    log.add(Ddp, device_ids=None if device == "cpu" else (str(local),), param_devices=(device,))
    log.add(Model, when="ddp", label="DistributedDataParallel(Sequential)", names=tuple(NAMES), shapes=((1, 3), (1,)), devices=(device, device), params=4, values=_values(ref.initial))
    log.add(Globals, when="ddp", values={"rank": rank, "local_rank": local, "world_size": world, "device": device})
    for step in range(steps):
        shard = batch // world
        log.add(Forward, step, **forward(shard, device, step + 1, tuple(ref.batches[step][rank * shard : (rank + 1) * shard]) if ref.batches else None))
        loss = TensorInfo(shape=(batch // world, 1), device=device)
        if step < 2:  # the recorder's detail steps: every call, the loss's too
            log.add(Forward, step, module="MSELoss", name=None, label="MSELoss", role=None, depth=0, call=None, has_params=False, replica=False, inputs=(loss, loss), devices=None)
        log.add(Backward, step)
        log.add(AllReduce, step, source="ddp", numel=4, bytes=16, bucket=0, async_op=True)
        log.add(OptGrads, step, names=tuple(NAMES), grads=_values(ref.grads[step]))
        log.add(Optimizer, step, optimizer="SGD", names=tuple(NAMES), values=_values(ref.params[step]))
    log.add(DestroyPg, steps, default_group=True)
    log.add(Memory, steps, peak=None, why="no CUDA device: memory not measured")
    log.add(EndState, steps, pg_initialized=False, steps=steps)
    log.add(Exit, steps, how="returned", code=0)
    record = record_of(log.events, header(rank, world, pid=4000 + rank))
    return RankResult(rank=rank, local_rank=local, node=layout.node_of(rank), status="exit:0", record=record)


def trajectory(steps: int = 3) -> Trajectory:
    """A small made-up trajectory: two tensors, values changing each step."""
    initial = {"0.weight": [0.5, -0.25, 0.125], "0.bias": [0.0]}
    grads = [{"0.weight": [0.1 * (s + 1), -0.2, 0.3], "0.bias": [0.05 * (s + 1)]} for s in range(steps)]
    params = [{"0.weight": [0.5 - 0.01 * s, -0.25, 0.125], "0.bias": [0.001 * s]} for s in range(steps)]
    batches = [[step * 100 + row * 0.5 for row in range(64)] for step in range(steps)]  # each row's sum, distinct
    return Trajectory(initial=initial, grads=grads, params=params, samples=64, batches=batches)


def job(name: str, layout: Layout, timeout_s: float = 60) -> JobSpec:
    return JobSpec(name=name, submission=Path("/nonexistent"), script="p6_ddp.py", argv=(), layout=layout, timeout_s=timeout_s)


def ddp_run(name: str = "ws2", layout: Layout = Layout(1, 2), ref: Trajectory | None = None, **kwargs) -> JobResult:
    """The JobResult of a correct run."""
    ref = ref or trajectory()
    return JobResult(spec=job(name, layout), ranks=[ddp_rank(r, layout, ref, **kwargs) for r in range(layout.world_size)], wall_s=0.5)


def set_events(rank: RankResult, events: list[Event]) -> None:
    """Give a rank these events instead of its own (its header kept)."""
    rank.record = record_of(events, rank.record.header)


def replace_events(rank: RankResult, kind: type[Event], change: Callable[[Any], Event]) -> None:
    """Replace every event of `kind` of a rank by `change(event)`."""
    set_events(rank, [change(e) if type(e) is kind else e for e in rank.events])


def changed(**fields: Any) -> Callable[[Event], Event]:
    """A `change` for replace_events: the event with these fields."""
    return lambda event: replace(event, **fields)


def without(rank: RankResult, *kinds: type[Event]) -> None:
    set_events(rank, [e for e in rank.events if type(e) not in kinds])


def crashed(rank: RankResult, exc_type: str, message: str, line: int = 84, code: str = "boom()") -> None:
    """Turn a rank into one that raised right after building its model."""
    keep = [e for e in rank.events if type(e) in (InitPg, Ddp, Model, Globals)]
    last = max((e.seq for e in keep), default=0)
    frames = (Frame(file="p6_ddp.py", line=line, func="<module>", code=code),)
    set_events(
        rank,
        keep + [
            Raised(t=0.5, seq=last + 1, step=0, type=exc_type, message=message, frames=frames, library_frame=None),
            EndState(t=0.5, seq=last + 2, step=0, pg_initialized=True, steps=0),
            Exit(t=0.5, seq=last + 3, step=0, how="exception", code=1),
        ],
    )
    rank.status = "exit:1"


def clone(run: JobResult) -> JobResult:
    return copy.deepcopy(run)


# ---------------------------------------------------------------- observe
FIELD_DEFAULTS: dict[str, dict[str, Any]] = {  # what the observe tests leave out of each kind
    "forward": {"name": None, "role": None, "depth": 0, "call": None, "has_params": True, "replica": False, "inputs": (), "devices": None},
    "allreduce": {"source": "call", "numel": 1, "bytes": 4, "bucket": None, "async_op": False},
    "optimizer": {"optimizer": "SGD", "names": (), "values": None},
    "model": {"when": "first_forward", "names": (), "shapes": (), "values": None},
    "memory": {"why": None},
    "exit": {"how": "atexit", "code": None},
    "exception": {"frames": (), "library_frame": None},
}


def inputs(shape: list[int], device: str) -> tuple[TensorInfo, ...]:
    """One tensor argument."""
    return (TensorInfo(tuple(shape), device),)


def timed(kind: str, start: float, end: float | None = None, step: int = 0, **fields: Any) -> Timed:
    """An event of `kind` placed from `start` to `end` (a span) or at `start` (an instant), with
    the fields a test gives and defaults for the others."""
    cls = EVENTS[kind]
    fields = {**FIELD_DEFAULTS.get(kind, {}), **fields}
    if kind == "forward":
        fields.setdefault("module", fields.get("label", "Net"))
        fields.setdefault("label", fields["module"])
        fields["devices"] = tuple(fields["devices"]) if fields["devices"] is not None else None
    if issubclass(cls, Span):
        fields["dur"] = (start if end is None else end) - start
    event = cls(t=start, seq=0, step=step, **fields)  # in the order a test gives them: no numbering needed
    return Timed(event, start, start if end is None else end)


def observed(head: Process, *events: Timed) -> ObservedProcess:
    """A process of an observed run, its events as given (already on the run's axis)."""
    return ObservedProcess(ProcessRecord(head, tuple(t.event for t in events)), tuple(events))
