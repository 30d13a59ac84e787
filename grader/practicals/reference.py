"""The grader's own training for the data-parallel practicals (p6, p10): one process, the
whole batch, the same model, data, loss and optimizer as the templates. Every rank of a
submission must match it."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from grader.checks.distributed import Trajectory
from grader.probe.messages import Digest, WitnessPlan
from grader.probe.witness import global_batch, sampler_layout, shard_rows, training_digest
from grader.spec.model import RunDef

SETTINGS = ("seed", "batch_size", "dim", "hidden", "steps", "lr")


def sgd_training(build: Callable[[], Any], *, seed: int, batch_size: int, dim: int, steps: int, lr: float, used: Sequence[Sequence[int]], each_step: Callable[[Any, Any], None] = lambda model, x: None, **_: Any) -> Any:
    """Train `build()` (made under torch.manual_seed(seed)) with SGD on the rows `used[step]` of
    each step's global batch (the last entry for the steps after it): x, y ~ N(0, 1) from a
    generator seeded with seed*1000+step, mean squared error. `each_step(model, x)` sees each
    step's gradients, before its optimizer step; the trained model is returned."""
    import torch
    from torch import nn

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        x, y = global_batch(seed, step, batch_size, dim)
        rows = torch.tensor(list(used[min(step, len(used) - 1)]), dtype=torch.long)
        loss = nn.functional.mse_loss(model(x[rows]), y[rows])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        each_step(model, x)
        optimizer.step()
    return model


def sgd_trajectory(build: Callable[[], Any], **settings: Any) -> Trajectory:
    """sgd_training's every step: its global batch, gradients and parameters after it."""

    def values(tensors: Iterable[tuple[str, Any]]) -> dict[str, list[float]]:
        return {name: t.detach().double().reshape(-1).tolist() for name, t in tensors}

    grads: list[dict[str, list[float]]] = []
    params: list[dict[str, list[float]]] = []  # before each step: the initial ones, then after each step but the last
    batches: list[list[float]] = []

    def seen(model: Any, x: Any) -> None:
        params.append(values(model.named_parameters()))
        batches.append(x.double().sum(1).tolist())
        grads.append(values((n, p.grad) for n, p in model.named_parameters()))

    model = sgd_training(build, each_step=seen, **settings)
    initial = params.pop(0) if params else values(model.named_parameters())
    if grads:
        params.append(values(model.named_parameters()))
    return Trajectory(initial=initial, grads=grads, params=params, samples=len(settings["used"][0]), batches=batches)


def sampled_rows(key: int, batch: int, world: int) -> tuple[int, ...]:
    """The rows DistributedSampler's shuffle `key` (seed + epoch) keeps of a batch, over every rank."""
    return tuple(sorted(row for rank in range(world) for row in shard_rows(sampler_layout(key), batch, world, rank)))


def acceptable_rows(settings: Mapping[str, Any], world: int) -> list[tuple[tuple[int, ...], ...]]:
    """The rows each step may train on (per step; the last entry for the steps after it):
    those that world_size equal shards cover (the templates drop the remainder of
    batch_size % world_size: the last rows; DistributedSampler's shuffle drops others: those of
    its default shuffle, of one seeded with the script's seed, each with set_epoch(step) or
    not), and, when that is fewer than the whole batch, the whole batch (a submission that
    gives every rank the full batch is wrong about the split, which batch_shard reports, not
    about sync)."""
    batch, steps, seed = int(settings["batch_size"]), int(settings["steps"]), int(settings["seed"])
    shards = [(tuple(range(world * (batch // world))),)]
    if len(shards[0][0]) < batch:
        for keys in ((0,), tuple(range(steps)), (seed,), tuple(seed + step for step in range(steps))):
            shards.append(tuple(sampled_rows(key, batch, world) for key in keys))
        shards.append((tuple(range(batch)),))
    return list(dict.fromkeys(shards))


def data_parallel_references(args: Mapping[str, Any], runs: Sequence[RunDef], build: Callable[[int, int], Any]) -> dict[str, tuple[Trajectory, ...]]:
    """The acceptable trajectories of each run, one per acceptable_rows. `build(dim, hidden)`
    makes the template's model for a run's widths."""
    cache: dict[tuple, Trajectory] = {}
    result = {}
    for run in runs:
        settings = {key: {**args, **run.args}[key] for key in SETTINGS}
        shards = acceptable_rows(settings, run.layout.world_size)
        for rows in shards:
            key = (tuple(settings.items()), rows)
            if key not in cache:
                widths = int(settings["dim"]), int(settings["hidden"])
                cache[key] = sgd_trajectory(lambda: build(*widths), used=rows, **settings)
        result[run.name] = tuple(cache[(tuple(settings.items()), rows)] for rows in shards)
    return result


def data_parallel_digests(args: Mapping[str, Any], runs: Sequence[RunDef], build: Callable[[int, int], Any]) -> dict[str, tuple[Digest, ...]]:
    """For each (timed) run, the parameter digest after the grader's own training on each of
    acceptable_rows: what the witness's parameters must show after a launch whose ranks did
    the work (a timed launch is checked, not only timed)."""
    result = {}
    for run in runs:
        settings = {key: {**args, **run.args}[key] for key in SETTINGS}
        widths = int(settings["dim"]), int(settings["hidden"])
        digests = []
        for rows in acceptable_rows(settings, run.layout.world_size):
            start: list[Any] = []
            trained = sgd_training(lambda: build(*widths), used=rows, each_step=lambda model, x: start or start.extend(p.detach().clone() for p in model.parameters()), **settings)
            digests.append(training_digest(start, trained.parameters()))
        result[run.name] = tuple(digests)
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
