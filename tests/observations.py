"""Synthetic observations for testing checks without processes, built through the recorder's
own event types (grader.probe.recorder.events) and read back through the grader's reader
(grader.run.records), and through the hub's own report types (grader.probe.transport.traffic),
so that they cannot drift from what the recorder and the hub write.

`ddp_run` builds the events a correct DDP submission records and the traffic the grader's hub
carries for it, on a made-up training whose gradients are cheap and known (`FakeWorkload`);
tests then break one thing.
"""
from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import base64
import math
from typing import Sequence

import torch

from grader.observe.records import ObservedProcess, Timed
from grader.practicals.reference import DataParallelReference
from grader.probe.transport.traffic import Carried, CarrierPlan, GroupRecord, Part, RankEnd, TrafficReport
from grader.probe.transport.wire import TensorMeta
from grader.probe.recorder.events import (
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


def forward(batch: int, device: str, call: int, rows: tuple[float, ...] | None = None) -> dict:
    """The fields of a DDP model's outermost call."""
    return {
        "module": "DistributedDataParallel", "name": None, "label": "DistributedDataParallel(Sequential)", "role": "model", "depth": 0,
        "call": call, "has_params": True, "replica": False, "inputs": (TensorInfo(shape=(batch, 3), device=device),), "devices": None, "rows": rows,
    }


class FakeWorkload:
    """A made-up training (grader.traffic.training.Workload) of two tensors, 0.weight (3) and
    0.bias (1): each row of a step's batch pulls them its own way, and a set of rows' gradient
    is the mean of their pulls plus half the parameters (so that where training stands shows).
    Each row of step s sums to s * 100 + row / 2, as the recorder's row sums say."""

    names = ("0.weight", "0.bias")

    def __init__(self, world: int, batch: int = 64, steps: int = 3, lr: float = 0.1) -> None:
        self.world, self.batch_size, self.steps, self.lr = world, batch, steps, lr

    def row_sums(self, step: int) -> list[float]:
        return [step * 100 + row * 0.5 for row in range(self.batch_size)]

    def _pull(self, step: int, row: int) -> torch.Tensor:
        return torch.tensor([math.sin(row + 3 * step), math.cos(2 * row + step), row / 64 - 0.5 + 0.1 * step, 0.1 * (row % 5) + 0.05 * (step + 1)], dtype=torch.float64)

    def gradient(self, theta, step: int, rows: Sequence[int]) -> dict:
        flat = torch.cat([theta[n].reshape(-1).double() for n in self.names])
        pull = torch.stack([self._pull(step, r) for r in rows]).mean(0) + 0.5 * flat
        return {"0.weight": pull[:3].clone(), "0.bias": pull[3:].clone()}

    def gradients(self, theta, step: int, rows: Sequence[int]) -> list[dict]:
        return [self.gradient(theta, step, rows)]  # a linear model: no kink for rounding to cross

    def parameters(self, used: Sequence[Sequence[int]]) -> dict:
        theta = {"0.weight": torch.tensor([0.5, -0.25, 0.125], dtype=torch.float64), "0.bias": torch.tensor([0.0], dtype=torch.float64)}
        for step, rows in enumerate(used):
            grads = self.gradient(theta, step, rows)
            theta = {name: theta[name] - self.lr * grads[name] for name in self.names}
        return theta


def contiguous(world: int, batch: int = 64) -> Callable[[int, int], list[int]]:
    shard = batch // world
    return lambda rank, step: list(range(rank * shard, (rank + 1) * shard))


def _part(rank: int, values: Sequence[torch.Tensor], at: float) -> Part:
    tensors = [v.to(torch.float32).reshape(-1) for v in values]
    data = base64.b64encode(b"".join(t.numpy().tobytes() for t in tensors)).decode()
    return Part(rank, at, tuple(TensorMeta("float32", tuple(t.shape)) for t in tensors), data, tuple(float(t.sum()) for t in tensors))


def ddp_traffic(workload: FakeWorkload, rows_of: Callable[[int, int], list[int]], *, ddp: bool = True, scale: float = 1.0, steps: int | None = None, accumulate: bool = False, used_map: bool = False, buckets: int = 1, logged_loss: bool = False) -> TrafficReport:
    """What the grader's hub carries for DDP training `workload` with each rank feeding
    `rows_of(rank, step)`: rank 0's initial parameters broadcast (`ddp`), then one all-reduce
    per step, each rank sending its rows' gradient × `scale` / world size (DDP divides before
    it sums), flattened as DDP's bucket is; with `accumulate`, gradients never zeroed (each
    step sends the sum of every step's so far). The update is single-process training's on
    the delivered gradient. `used_map`: an all-reduce of whole numbers before each step's
    (find_unused_parameters' map of the parameters used); `buckets`: 2 splits the gradient into
    two all-reduces (a small bucket_cap_mb); `logged_loss`: an all-reduce of one float after
    each step's gradients (the loss averaged over the ranks for the log)."""
    world = workload.world
    carried, clock = [], 0.0
    theta = workload.parameters([])
    if ddp:
        carried.append(Carried("0", 0, "broadcast", "", 0, 0.01, (_part(0, [theta[n] for n in workload.names], 0.005),) + tuple(Part(r, 0.005, (), "", ()) for r in range(1, world)), None))
    held = {r: {n: torch.zeros_like(theta[n]) for n in workload.names} for r in range(world)}
    for step in range(workload.steps if steps is None else steps):
        clock += 0.1
        parts, delivered = [], {n: torch.zeros_like(theta[n]) for n in workload.names}
        for rank in range(world):
            mine = workload.gradient(theta, step, rows_of(rank, step))
            held[rank] = {n: (held[rank][n] if accumulate else 0) + mine[n] * scale for n in workload.names}
            sent = [held[rank][n] / world for n in workload.names]
            parts.append([torch.cat(sent)] if buckets == 1 else sent)
            for name, value in zip(workload.names, sent):
                delivered[name] = delivered[name] + value.to(torch.float32).double()
        if used_map:
            unused = tuple(Part(rank, clock, (TensorMeta("int64", (2,)),), "", (0.0,)) for rank in range(world))
            carried.append(Carried("0", len(carried), "all_reduce", "SUM", -1, clock, unused, None))
        for bucket in range(len(parts[0])):
            members = tuple(_part(rank, [parts[rank][bucket]], clock) for rank in range(world))
            carried.append(Carried("0", len(carried), "all_reduce", "SUM", -1, clock + 0.01 * (bucket + 1), members, None))
        if logged_loss:
            carried.append(Carried("0", len(carried), "all_reduce", "SUM", -1, clock + 0.05, tuple(_part(rank, [torch.tensor([0.5])], clock + 0.05) for rank in range(world)), None))
        theta = {n: theta[n] - workload.lr * delivered[n] for n in workload.names}
    report = TrafficReport(world, (GroupRecord("0", tuple(range(world)), tuple(range(world))),), tuple(carried), tuple(RankEnd(r, clock + 0.1, "closed") for r in range(world)), 0, 0)
    return report


def trained(workload: FakeWorkload, rows_of: Callable[[int, int], list[int]]) -> tuple[dict, list[dict], list[dict]]:
    """Single-process training's start, each step's full-batch gradient and the parameters after it."""
    used, grads, params = [], [], []
    for step in range(workload.steps):
        theta = workload.parameters(used)
        rows = sorted(r for rank in range(workload.world) for r in rows_of(rank, step))
        grads.append(workload.gradient(theta, step, rows))
        used.append(rows)
        params.append(workload.parameters(used))
    return workload.parameters([]), grads, params


def _values(named: dict) -> tuple:
    return tuple(tuple(float(v) for v in named[n]) for n in NAMES)


def ddp_rank(rank: int, layout: Layout, workload: FakeWorkload | None = None, *, batch: int = 64, steps: int = 3, device: str = "cpu", rows_of: Callable[[int, int], list[int]] | None = None) -> RankResult:
    world = layout.world_size
    workload = workload or FakeWorkload(world, steps=steps)
    rows_of = rows_of or contiguous(world)
    initial, grads, params = trained(workload, rows_of)
    local = layout.local_rank_of(rank)
    log = Recording()
    log.add(InitPg, requested="gloo", backend="gloo", rank=rank, world_size=world)
    log.add(Ddp, device_ids=None if device == "cpu" else (str(local),), param_devices=(device,))
    log.add(Model, when="ddp", label="DistributedDataParallel(Sequential)", names=tuple(NAMES), shapes=((1, 3), (1,)), devices=(device, device), params=4, values=_values(initial))
    log.add(Globals, when="ddp", values={"rank": rank, "local_rank": local, "world_size": world, "device": device})
    for step in range(steps):
        shard = batch // world
        sums = workload.row_sums(step)
        fed = rows_of(rank, step) if batch == workload.batch_size else list(range(shard))
        log.add(Forward, step, **forward(shard, device, step + 1, tuple(sums[i] for i in fed)))
        loss = TensorInfo(shape=(batch // world, 1), device=device)
        if step < 2:  # the recorder's detail steps: every call, the loss's too
            log.add(Forward, step, module="MSELoss", name=None, label="MSELoss", role=None, depth=0, call=None, has_params=False, replica=False, inputs=(loss, loss), devices=None)
        log.add(Backward, step)
        log.add(AllReduce, step, source="ddp", numel=4, bytes=16, bucket=0, async_op=True)
        log.add(OptGrads, step, names=tuple(NAMES), grads=_values(grads[step]))
        log.add(Optimizer, step, optimizer="SGD", names=tuple(NAMES), values=_values(params[step]))
    log.add(DestroyPg, steps, default_group=True)
    log.add(Memory, steps, peak=None, why="no CUDA device: memory not measured")
    log.add(EndState, steps, pg_initialized=False, steps=steps)
    log.add(Exit, steps, how="returned", code=0)
    record = record_of(log.events, header(rank, world, pid=4000 + rank))
    return RankResult(rank=rank, local_rank=local, node=layout.node_of(rank), status="exit:0", record=record)


def job(name: str, layout: Layout, timeout_s: float = 60) -> JobSpec:
    return JobSpec(name=name, submission=Path("/nonexistent"), script="p6_ddp.py", argv=(), layout=layout, timeout_s=timeout_s)


def ddp_run(name: str = "ws2", layout: Layout = Layout(1, 2), *, traffic: TrafficReport | None = None, workload: FakeWorkload | None = None, **kwargs) -> JobResult:
    """The JobResult of a correct run, its records and the traffic the hub carried for it (of
    `workload`'s training: a script that trains otherwise than the grader)."""
    workload = workload or FakeWorkload(layout.world_size, steps=kwargs.get("steps", 3))
    rows_of = kwargs.get("rows_of") or contiguous(layout.world_size)
    carried = traffic if traffic is not None else ddp_traffic(workload, rows_of)
    spec = replace(job(name, layout), carrier=CarrierPlan(60.0, 1 << 20))
    return JobResult(spec=spec, ranks=[ddp_rank(r, layout, workload, **kwargs) for r in range(layout.world_size)], wall_s=0.5, traffic=carried)


def references(*runs: JobResult, steps: int = 3) -> dict[str, DataParallelReference]:
    """The grader's side of each run: its fake workload."""
    return {run.spec.name: DataParallelReference(FakeWorkload(run.layout.world_size, steps=steps)) for run in runs}


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
