"""
{{title}}

Each rank takes its shard of a batch of numbers, and the ranks compute the mean of the whole
batch together with an all-reduce.

$ torchrun --nproc_per_node=2 {{id}}.py
"""
import sys

import torch
import torch.distributed as dist

# -----------------------------------------------------------------------------
# settings
batch_size = 64
seed = 0
# override any of the above from the command line: --name=value
for arg in sys.argv[1:]:
    key, _, value = arg.removeprefix("--").partition("=")
    if key not in globals() or not value:
        raise SystemExit(f"unknown setting {arg!r}; use --name=value with one of: batch_size, seed")
    globals()[key] = type(globals()[key])(value)
# -----------------------------------------------------------------------------

dist.init_process_group(backend="gloo")  # torchrun gives every process its rank and the world size
rank, world_size = dist.get_rank(), dist.get_world_size()
data = torch.randn(batch_size, generator=torch.Generator().manual_seed(seed))  # the same on every rank
shard = batch_size // world_size  # a remainder is dropped, as in the data-parallel practicals

# BEGIN SOLUTION TODO 1: compute the mean of the whole batch with an all-reduce
#: TODO 1: sum this rank's shard of `data`, all-reduce the sums, and divide by the number of
#: samples all the shards hold; keep the mean (a Python float) in `result`.
total = data[rank * shard : (rank + 1) * shard].sum()
dist.all_reduce(total)  # every rank now holds the sum over all shards
result = (total / (shard * world_size)).item()
# END SOLUTION
print(f"rank {rank}: mean {result:.6f}", flush=True)
dist.destroy_process_group()
