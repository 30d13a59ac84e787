"""Synthetic observations shaped like the probe's, for testing checks without processes.

`ddp_run` builds the events a correct DDP submission produces; tests then break one thing.
"""
from __future__ import annotations

import copy
from pathlib import Path

from grader.checks.distributed import Trajectory
from grader.run.job import JobResult, JobSpec, Layout, RankResult

NAMES = ["0.weight", "0.bias"]


def trajectory(steps: int = 3) -> Trajectory:
    """A small made-up trajectory: two tensors, values changing each step."""
    initial = {"0.weight": [0.5, -0.25, 0.125], "0.bias": [0.0]}
    grads = [{"0.weight": [0.1 * (s + 1), -0.2, 0.3], "0.bias": [0.05 * (s + 1)]} for s in range(steps)]
    params = [{"0.weight": [0.5 - 0.01 * s, -0.25, 0.125], "0.bias": [0.001 * s]} for s in range(steps)]
    return Trajectory(initial=initial, grads=grads, params=params, samples=64)


def _values(named: dict) -> list:
    return [named[n] for n in NAMES]


def ddp_rank(rank: int, layout: Layout, ref: Trajectory, *, batch: int = 64, steps: int = 3, device: str = "cpu") -> RankResult:
    world = layout.world_size
    local = layout.local_rank_of(rank)
    events: list[dict] = [
        {"kind": "start", "step": 0},
        {"kind": "init_pg", "requested": "gloo", "backend": "gloo", "rank": rank, "world_size": world, "step": 0},
        {"kind": "ddp", "device_ids": None if device == "cpu" else [str(local)], "param_devices": [device], "step": 0},
        {"kind": "model", "when": "ddp", "names": NAMES, "devices": [device, device], "values": _values(ref.initial), "step": 0},
        {"kind": "globals", "when": "ddp", "values": {"rank": rank, "local_rank": local, "world_size": world, "device": device}, "step": 0},
    ]
    for step in range(steps):
        events += [
            {"kind": "forward", "module": "DistributedDataParallel", "has_params": True, "inputs": [{"shape": [batch // world, 3], "device": device}], "step": step},
            {"kind": "forward", "module": "MSELoss", "has_params": False, "inputs": [{"shape": [batch // world, 1], "device": device}] * 2, "step": step},
            {"kind": "allreduce", "source": "ddp", "numel": 4, "step": step},
            {"kind": "opt_grads", "names": NAMES, "grads": _values(ref.grads[step]), "step": step},
            {"kind": "opt_params", "names": NAMES, "values": _values(ref.params[step]), "step": step},
        ]
    events += [
        {"kind": "destroy_pg", "default_group": True, "step": steps},
        {"kind": "exit", "how": "returned", "code": 0, "step": steps},
        {"kind": "end_state", "pg_initialized": False, "steps": steps},
    ]
    return RankResult(rank=rank, local_rank=local, node=layout.node_of(rank), status="exit:0", events=events)


def job(name: str, layout: Layout, timeout_s: float = 60) -> JobSpec:
    return JobSpec(name=name, submission=Path("/nonexistent"), script="p6_ddp.py", argv=(), layout=layout, timeout_s=timeout_s)


def ddp_run(name: str = "ws2", layout: Layout = Layout(1, 2), ref: Trajectory | None = None, **kwargs) -> JobResult:
    """The JobResult of a correct run."""
    ref = ref or trajectory()
    return JobResult(spec=job(name, layout), ranks=[ddp_rank(r, layout, ref, **kwargs) for r in range(layout.world_size)], wall_s=0.5)


def replace_events(rank: RankResult, kind: str, change) -> None:
    """Apply `change(event)` to every event of `kind` of a rank (in place)."""
    for event in rank.of_kind(kind):
        change(event)


def without(rank: RankResult, *kinds: str) -> None:
    rank.events[:] = [e for e in rank.events if e.get("kind") not in kinds]


def crashed(rank: RankResult, exc_type: str, message: str, line: int = 84, code: str = "boom()") -> None:
    """Turn a rank into one that raised right after building its model."""
    keep = [e for e in rank.events if e["kind"] in ("start", "init_pg", "ddp", "model", "globals")]
    rank.events[:] = keep + [
        {
            "kind": "exit",
            "how": "exception",
            "code": 1,
            "exception": {"type": exc_type, "message": message, "frames": [{"file": "p6_ddp.py", "line": line, "func": "<module>", "code": code}]},
            "step": 0,
        }
    ]
    rank.status = "exit:1"


def clone(run: JobResult) -> JobResult:
    return copy.deepcopy(run)
