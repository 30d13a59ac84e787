"""
Practical 6: data-parallel training with DistributedDataParallel (DDP).

Run on one machine with N processes (one per GPU, or N CPU processes without GPUs):
$ torchrun --nproc_per_node=2 p6_ddp.py

Run as a plain single process (no torchrun):
$ python p6_ddp.py

Any setting below can be overridden on the command line, e.g.
$ torchrun --nproc_per_node=4 p6_ddp.py --batch_size=128 --steps=20
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

# -----------------------------------------------------------------------------
# settings
batch_size = 64  # the GLOBAL batch: all ranks together process this many samples per step
dim = 32  # input features
hidden = 64  # hidden units
steps = 10  # optimizer steps
lr = 0.05
seed = 1337  # the same on every rank, so every rank builds the same model and data
log_every = 5
# override any of the above from the command line: --name=value
for arg in sys.argv[1:]:
    key, _, value = arg.removeprefix("--").partition("=")
    if key not in globals() or not value:
        raise SystemExit(f"unknown setting {arg!r}; use --name=value with one of: batch_size, dim, hidden, steps, lr, seed, log_every")
    globals()[key] = type(globals()[key])(value)
# -----------------------------------------------------------------------------


def get_batch(step):
    """The global batch of one step. Every rank builds the same one and keeps its own shard."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    x = torch.randn(batch_size, dim, generator=g)
    y = torch.randn(batch_size, 1, generator=g)
    return x, y


# distributed setup: torchrun tells each process who it is through the environment
ddp = int(os.environ.get("RANK", -1)) != -1  # launched by torchrun?
if ddp:
    # BEGIN SOLUTION TODO 1: initialise the process group and read rank, local_rank, world_size
    #: TODO 1: initialise the default process group with dist.init_process_group: backend "nccl"
    #: when CUDA is available, "gloo" otherwise. Then read who this process is from the
    #: environment torchrun sets: rank (RANK), local_rank (LOCAL_RANK), world_size (WORLD_SIZE).
    # NCCL is the backend for GPUs; gloo works on CPUs (and on GPUs, more slowly)
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend=backend)
    rank = int(os.environ["RANK"])  # this process among ALL processes (all machines)
    local_rank = int(os.environ["LOCAL_RANK"])  # this process among the processes of THIS machine
    world_size = int(os.environ["WORLD_SIZE"])  # how many processes in all
    # END SOLUTION
    # BEGIN SOLUTION TODO 2: pick this rank's device
    #: TODO 2: pick this rank's device: cuda:<local_rank> when CUDA is available (and make it
    #: the current CUDA device), else the CPU. Store it in `device`.
    # GPU numbers restart at 0 on every machine, so the GPU follows the LOCAL rank
    if torch.cuda.is_available():
        device = torch.device(f"cuda:{local_rank}")
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    # END SOLUTION
else:
    rank, local_rank, world_size = 0, 0, 1
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
master_process = rank == 0  # only one process prints the log
print(f"Rank: {rank} | Local Rank: {local_rank} | World size: {world_size} | Device: {device}", flush=True)

# the model: seeded identically on every rank (DDP also copies rank 0's weights to all ranks)
torch.manual_seed(seed)
model = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1)).to(device)
if ddp:
    # BEGIN SOLUTION TODO 3: wrap the model in DDP
    #: TODO 3: wrap the model in DistributedDataParallel. device_ids names the one device this
    #: process trains on; it must be None when the model is on the CPU.
    # DDP all-reduces (averages) the gradients across ranks during backward();
    # device_ids names the ONE device this process trains on (None on the CPU)
    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
    # END SOLUTION
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
loss_fn = nn.MSELoss()

# each rank takes an equal shard of the global batch; a remainder (batch_size % world_size)
# is dropped so that every rank's shard has the same size and the average stays exact
shard = batch_size // world_size
t0 = time.time()
for step in range(steps):
    x, y = get_batch(step)
    # BEGIN SOLUTION TODO 4: keep this rank's shard of x and y, moved to its device
    #: TODO 4: keep this rank's shard of the global batch: `shard` rows starting at row
    #: rank * shard, of x and of y, moved to `device`.
    x = x[rank * shard : (rank + 1) * shard].to(device)
    y = y[rank * shard : (rank + 1) * shard].to(device)
    # END SOLUTION
    loss = loss_fn(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # DDP synchronises the gradients here, bucket by bucket
    optimizer.step()
    if master_process and (step % log_every == 0 or step == steps - 1):
        print(f"step {step:3d} | loss {loss.item():.4f} | shard {tuple(x.shape)} | {time.time() - t0:.2f}s", flush=True)

if ddp:
    # BEGIN SOLUTION TODO 5: destroy the process group
    #: TODO 5: leave cleanly: destroy the process group.
    dist.destroy_process_group()  # leave cleanly: every rank reaches this line
    # END SOLUTION
