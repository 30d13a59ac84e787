"""How the ranks of a data-parallel run split each global batch: the layouts a correct
script may use (grader.traffic.training tries them on what each rank contributed), and the
rows each rank keeps under each."""
from __future__ import annotations

SHARD_LAYOUTS = ("contiguous", "strided", "sampler")
WHOLE_BATCH = "whole batch"  # not a split: every rank trains on every row (tried last; batch_shard fails it, the training is right)


def sampler_key(layout: str) -> int | None:
    """The shuffle (DistributedSampler's seed + epoch) of a "sampler" or "sampler:K" layout."""
    if layout == "sampler":
        return 0
    name, _, key = layout.partition(":")
    return int(key) if name == "sampler" and key.isdigit() and len(key) <= 18 else None


def sampler_layout(key: int) -> str:
    """The layout of DistributedSampler's shuffle `key` (seed + epoch): "sampler" for the default."""
    return "sampler" if key == 0 else f"sampler:{key}"


def shard_rows(layout: str, batch: int, world: int, rank: int) -> list[int]:
    """The rows of the global batch a rank keeps when the ranks split it `layout`'s way:
    "contiguous" (the templates' TODO: shard rows from rank * shard), "strided" (as
    DistributedSampler(shuffle=False) does: every world-th row from the rank's number),
    "sampler" (DistributedSampler's default: a shuffle seeded 0, epoch 0, the remainder
    dropped) or "sampler:K" (its shuffle with seed + epoch = K: `seed=` given, or `set_epoch`).
    Any of them is a right split."""
    shard = batch // world
    if layout == "strided":
        return list(range(rank, shard * world, world))
    key = sampler_key(layout)
    if key is not None:
        import torch

        return torch.randperm(batch, generator=torch.Generator().manual_seed(key)).tolist()[: shard * world][rank::world]
    return list(range(rank * shard, (rank + 1) * shard))
