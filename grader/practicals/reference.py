"""The grader's own training for the data-parallel practicals (p6, p10): one process, the
whole batch, the same model, data, loss and optimizer as the templates. Every rank of a
submission must match it."""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from grader.checks.distributed import Trajectory
from grader.probe.messages import WitnessPlan
from grader.probe.witness import global_batch, sampler_layout, shard_rows
from grader.spec.model import RunDef

SETTINGS = ("seed", "batch_size", "dim", "hidden", "steps", "lr")


def sgd_trajectory(build: Callable[[], Any], *, seed: int, batch_size: int, dim: int, steps: int, lr: float, used: Sequence[Sequence[int]], **_: Any) -> Trajectory:
    """Train `build()` (made under torch.manual_seed(seed)) with SGD on the rows `used[step]` of
    each step's global batch (the last entry for the steps after it): x, y ~ N(0, 1) from a
    generator seeded with seed*1000+step, mean squared error."""
    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def values(tensors: dict) -> dict[str, list[float]]:
        return {name: t.detach().double().reshape(-1).tolist() for name, t in tensors.items()}

    initial = values(dict(model.named_parameters()))
    grads, params, batches = [], [], []
    for step in range(steps):
        x, y = global_batch(seed, step, batch_size, dim)
        batches.append(x.double().sum(1).tolist())
        rows = torch.tensor(list(used[min(step, len(used) - 1)]), dtype=torch.long)
        loss = nn.functional.mse_loss(model(x[rows]), y[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grads.append(values({n: p.grad for n, p in model.named_parameters()}))
        optimizer.step()
        params.append(values(dict(model.named_parameters())))
    return Trajectory(initial=initial, grads=grads, params=params, samples=len(used[0]), batches=batches)


def sampled_rows(key: int, batch: int, world: int) -> tuple[int, ...]:
    """The rows DistributedSampler's shuffle `key` (seed + epoch) keeps of a batch, over every rank."""
    return tuple(sorted(row for rank in range(world) for row in shard_rows(sampler_layout(key), batch, world, rank)))


def data_parallel_references(args: Mapping[str, Any], runs: Sequence[RunDef], build: Callable[[int, int], Any]) -> dict[str, tuple[Trajectory, ...]]:
    """The acceptable trajectories of each run: training on the samples that world_size equal
    shards cover (the templates drop the remainder of batch_size % world_size: the last rows;
    DistributedSampler's shuffle drops others: those of its default shuffle, of one seeded with
    the script's seed, each with set_epoch(step) or not), and, when that is fewer than the whole
    batch, training on the whole batch (a submission that gives every rank the full batch is
    wrong about the split, which batch_shard reports, not about sync). `build(dim, hidden)`
    makes the template's model for a run's widths."""
    cache: dict[tuple, Trajectory] = {}
    result = {}
    for run in runs:
        settings = {key: {**args, **run.args}[key] for key in SETTINGS}
        batch, world, steps, seed = int(settings["batch_size"]), run.layout.world_size, int(settings["steps"]), int(settings["seed"])
        shards = [(tuple(range(world * (batch // world))),)]
        if len(shards[0][0]) < batch:
            for keys in ((0,), tuple(range(steps)), (seed,), tuple(seed + step for step in range(steps))):
                shards.append(tuple(sampled_rows(key, batch, world) for key in keys))
            shards.append((tuple(range(batch)),))
        shards = list(dict.fromkeys(shards))
        for rows in shards:
            key = (tuple(settings.items()), rows)
            if key not in cache:
                widths = int(settings["dim"]), int(settings["hidden"])
                cache[key] = sgd_trajectory(lambda: build(*widths), used=rows, **settings)
        result[run.name] = tuple(cache[(tuple(settings.items()), rows)] for rows in shards)
    return result


WITNESS_WAIT_S = 10.0  # the longest the witness waits for one of rank 0's records or in one collective (a step takes milliseconds)


def data_parallel_witness(args: Mapping[str, Any], run: RunDef, timeout_s: float, model: str) -> WitnessPlan:
    """The witness of a run (grader/probe/witness.py): the last rank, training the template's
    `model` on the last shard of every global batch; gradients and parameters reported for
    models of at most 65536 first-layer weights (the correctness runs), only step times for the
    larger timed workloads."""
    world, batch = run.layout.world_size, int(args["batch_size"])
    shard = batch // world
    return WitnessPlan(
        seed=int(args["seed"]),
        batch_size=batch,
        dim=int(args["dim"]),
        hidden=int(args["hidden"]),
        steps=int(args["steps"]),
        lr=float(args["lr"]),
        world_size=world,
        rows=shard,
        micro_batches=int(args.get("micro_batches", 1)),
        values=int(args["dim"]) * int(args["hidden"]) <= 1 << 16,
        model=model,
        peer_records="",
        wait_s=min(timeout_s / 3, WITNESS_WAIT_S),
    )
