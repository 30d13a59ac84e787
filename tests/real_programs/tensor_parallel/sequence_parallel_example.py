# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/examples, distributed/tensor_parallelism/sequence_parallel_example.py @
# 77f55b9, BSD-3-Clause. A rewritten equivalent with the same calls in the same forms:
# init_device_mesh(torch.accelerator.current_accelerator().type, (WORLD_SIZE,)),
# ToyModel().to(device_type), ColwiseParallel(input_layouts=Shard(0)) and
# RowwiseParallel(output_layouts=Shard(0)), AdamW(foreach=True); the same log lines.
# Changed for this machine: nothing.
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from log_utils import get_logger, rank_log, verify_min_gpu_count

_min_gpu_count = 2
if not verify_min_gpu_count(min_gpus=_min_gpu_count):
    print(f"Unable to locate sufficient {_min_gpu_count} gpus to run this example. Exiting.")
    sys.exit()

from torch.distributed.device_mesh import init_device_mesh  # noqa: E402


class ToyModel(nn.Module):
    """MLP based model"""

    def __init__(self):
        super().__init__()
        self.in_proj = nn.Linear(10, 32)
        self.relu = nn.ReLU()
        self.out_proj = nn.Linear(32, 5)

    def forward(self, x):
        return self.out_proj(self.relu(self.in_proj(x)))


logger = get_logger()
device_type = torch.accelerator.current_accelerator().type
device_mesh = init_device_mesh(device_type=device_type, mesh_shape=(int(os.environ["WORLD_SIZE"]),))
_rank = device_mesh.get_rank()
print(f"Starting PyTorch Sequence Parallel example on rank {_rank}.")
rank_log(_rank, logger, f"Device Mesh created: {device_mesh=}")

model = ToyModel().to(device_type)
sp_model = parallelize_module(
    module=model,
    device_mesh=device_mesh,
    parallelize_plan={"in_proj": ColwiseParallel(input_layouts=Shard(0)), "out_proj": RowwiseParallel(output_layouts=Shard(0))},
)
optimizer = torch.optim.AdamW(sp_model.parameters(), lr=0.25, foreach=True)

num_iters = 10
rank_log(_rank, logger, "Sequence Parallel training starting...")
for i in range(num_iters):
    inp = torch.rand(20, 10, device=device_type)  # may differ from rank to rank
    output = sp_model(inp)
    output.sum().backward()
    optimizer.step()
    rank_log(_rank, logger, f"Sequence Parallel iter {i} completed")
rank_log(_rank, logger, "Sequence Parallel training completed!")

if dist.is_initialized():
    dist.destroy_process_group()
