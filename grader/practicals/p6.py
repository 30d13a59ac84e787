"""p6: DistributedDataParallel under torchrun.

The grader's own copy of the training the template performs (model, data, loss, optimizer),
run as ONE process on the whole batch: the reference every rank of a submission must match.
It duplicates the template's model on purpose: the verdict must not depend on student code.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from grader.checks.distributed import CHECKS, Trajectory
from grader.spec.model import RunDef

__all__ = ["CHECKS", "references", "trajectory"]


def trajectory(*, seed: int, batch_size: int, dim: int, hidden: int, steps: int, lr: float, used: int) -> Trajectory:
    """Single-process training on the first `used` samples of every global batch."""
    import torch
    from torch import nn
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()

    def values(tensors: dict[str, torch.Tensor]) -> dict[str, list[float]]:
        return {name: t.detach().double().reshape(-1).tolist() for name, t in tensors.items()}

    initial = values(dict(model.named_parameters()))
    grads, params = [], []
    for step in range(steps):
        g = torch.Generator().manual_seed(seed * 1000 + step)
        x = torch.randn(batch_size, dim, generator=g)
        y = torch.randn(batch_size, 1, generator=g)
        loss = loss_fn(model(x[:used]), y[:used])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads.append(values({n: p.grad for n, p in model.named_parameters()}))
        optimizer.step()
        params.append(values(dict(model.named_parameters())))
    return Trajectory(initial=initial, grads=grads, params=params, samples=used)


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, tuple[Trajectory, ...]]:
    """The acceptable trajectories of each run: training on the samples that world_size equal
    shards cover (the template drops the remainder of batch_size % world_size), and, when that
    is fewer than the whole batch, training on the whole batch (a submission that gives every
    rank the full batch is wrong about the split, which batch_shard reports, not about sync)."""
    settings = {key: args[key] for key in ("seed", "batch_size", "dim", "hidden", "steps", "lr")}
    batch = int(settings["batch_size"])
    cache: dict[int, Trajectory] = {}

    def of(used: int) -> Trajectory:
        if used not in cache:
            cache[used] = trajectory(used=used, **settings)
        return cache[used]

    result = {}
    for run in runs:
        world = run.layout.world_size
        used = world * (batch // world)
        result[run.name] = (of(used),) if used == batch else (of(used), of(batch))
    return result
