"""
Practical 10: hybrid parallelism. Data parallelism across processes (DDP), model parallelism
inside each process (the model in two stages on two GPUs), and micro-batches.

On a node with 4 GPUs, 2 processes: rank 0 uses GPUs 0 and 2, rank 1 uses GPUs 1 and 3.
$ torchrun --nproc_per_node=2 p10_hybrid.py
$ torchrun --nproc_per_node=2 p10_hybrid.py --micro_batches=8 --batch_size=128
$ torchrun --nproc_per_node=1 p10_hybrid.py
No GPUs? Both stages run on the CPU, or pretend there are four:
$ python -m grader run --virtual-gpus 4 -- torchrun --nproc_per_node=2 p10_hybrid.py
"""
import os
import sys
import time
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

# -----------------------------------------------------------------------------
# settings
batch_size = 64  # the GLOBAL batch of one step, split over the ranks
micro_batches = 4  # each rank's share is processed in this many micro-batches
dim = 32
hidden = 64
steps = 10
lr = 0.05
seed = 1337
log_every = 5
# override any of the above from the command line: --name=value
for arg in sys.argv[1:]:
    key, _, value = arg.removeprefix("--").partition("=")
    if key not in globals() or not value:
        raise SystemExit(f"unknown setting {arg!r}; use --name=value with one of: batch_size, micro_batches, dim, hidden, steps, lr, seed, log_every")
    globals()[key] = type(globals()[key])(value)
# -----------------------------------------------------------------------------


def get_batch(step):
    """The global batch of one step. Every rank builds the same one and keeps its own shard."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    x = torch.randn(batch_size, dim, generator=g)
    y = torch.randn(batch_size, 1, generator=g)
    return x, y


# data parallelism: one process per pair of GPUs, set up by torchrun
ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_world_size = int(os.environ["LOCAL_WORLD_SIZE"])  # processes on this node
else:
    rank, local_rank, world_size, local_world_size = 0, 0, 1, 1

# model parallelism: the two stages of this rank on two different GPUs. The ranks of a node
# take the first GPUs for stage 1 and the next ones for stage 2, so no GPU is shared:
# with 2 ranks on 4 GPUs, rank 0 -> (0, 2) and rank 1 -> (1, 3)
# BEGIN SOLUTION TODO 1: pick the two stage devices of this rank
#: TODO 1: set stage1_device to cuda:<local_rank> and stage2_device to
#: cuda:<local_rank + local_world_size> when CUDA is available; both the CPU otherwise.
if torch.cuda.is_available():
    stage1_device = torch.device(f"cuda:{local_rank}")
    stage2_device = torch.device(f"cuda:{local_rank + local_world_size}")
else:
    stage1_device = stage2_device = torch.device("cpu")
# END SOLUTION
print(f"[Rank {rank}] stage 1 on {stage1_device}, stage 2 on {stage2_device}", flush=True)


class TwoStageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.stage1 = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU())
        self.stage2 = nn.Linear(hidden, 1)
        # BEGIN SOLUTION TODO 2: place the stages on their devices
        #: TODO 2: place stage1 on stage1_device and stage2 on stage2_device.
        self.stage1.to(stage1_device)
        self.stage2.to(stage2_device)
        # END SOLUTION

    def forward(self, x):
        activation = self.stage1(x.to(stage1_device))
        # the activation crosses from the first GPU to the second: model parallelism's cost
        return self.stage2(activation.to(stage2_device))


torch.manual_seed(seed)
model = TwoStageModel()
if ddp:
    # the model spans two devices, so DDP must not be told one device: device_ids=None
    model = DDP(model, device_ids=None)
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
# summed over the samples, divided by the rank's sample count below: exact however the
# micro-batches are sized (a mean per micro-batch divided by their number is not)
loss_fn = nn.MSELoss(reduction="sum")

shard = batch_size // world_size
t0 = time.time()
for step in range(steps):
    x, y = get_batch(step)
    x, y = x[rank * shard : (rank + 1) * shard], y[rank * shard : (rank + 1) * shard]
    # BEGIN SOLUTION TODO 3: split the shard into micro-batches
    #: TODO 3: split this rank's x and y into `micro_batches` pieces: pieces = [(mx, my), ...].
    #: Use tensor_split, which always gives that many pieces (torch.chunk may give fewer).
    # micro-batches: always `micro_batches` pieces (their sizes differ by one at most)
    pieces = list(zip(x.tensor_split(micro_batches), y.tensor_split(micro_batches)))
    # END SOLUTION
    optimizer.zero_grad(set_to_none=True)
    # BEGIN SOLUTION TODO 4: the micro-batch loop: no_sync, loss scaling, backward
    #: TODO 4: for each micro-batch: forward, loss (summed, divided by `shard`, the rank's
    #: sample count), backward. Run all but the last micro-batch inside model.no_sync() (when
    #: ddp), so that DDP all-reduces the accumulated gradients only once per step.
    for i, (mx, my) in enumerate(pieces):
        last = i == len(pieces) - 1
        # no_sync: accumulate the gradients locally; DDP all-reduces them once, in the last
        # micro-batch's backward
        with model.no_sync() if ddp and not last else nullcontext():
            out = model(mx)
            loss = loss_fn(out, my.to(stage2_device)) / shard
            loss.backward()
    # END SOLUTION
    optimizer.step()
    if rank == 0 and (step % log_every == 0 or step == steps - 1):
        print(f"[Rank 0] step {step} | {len(pieces)} micro-batches | loss {loss.item() * shard:.4f} | {time.time() - t0:.2f}s", flush=True)

if ddp:
    dist.destroy_process_group()
