# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/examples, distributed/tensor_parallelism/tensor_parallel_example.py @ 77f55b9,
# BSD-3-Clause. A rewritten equivalent with the same calls in the same forms: the GPU check
# through torch.accelerator, device_type = torch.accelerator.current_accelerator().type,
# init_device_mesh(device_type, (WORLD_SIZE,)) (which creates the process group itself),
# ToyModel().to(device_type), parallelize_module with ColwiseParallel / RowwiseParallel
# (Megatron-style), AdamW(foreach=True), inputs made with device=device_type; the same log lines.
# Changed for this machine: nothing.
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
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
_world_size = int(os.environ["WORLD_SIZE"])
device_type = torch.accelerator.current_accelerator().type
device_mesh = init_device_mesh(device_type=device_type, mesh_shape=(_world_size,))
_rank = device_mesh.get_rank()
print(f"Starting PyTorch TP example on rank {_rank}.")
assert _world_size % 2 == 0, f"TP examples require even number of GPUs, but got {_world_size} gpus"
rank_log(_rank, logger, f"Device Mesh created: {device_mesh=}")

tp_model = ToyModel().to(device_type)  # the mesh has set each rank's GPU
tp_model = parallelize_module(
    module=tp_model,
    device_mesh=device_mesh,
    parallelize_plan={"in_proj": ColwiseParallel(), "out_proj": RowwiseParallel()},
)
optimizer = torch.optim.AdamW(tp_model.parameters(), lr=0.25, foreach=True)

num_iters = 10
rank_log(_rank, logger, "Tensor Parallel training starting...")
for i in range(num_iters):
    torch.manual_seed(i)  # the same input on every rank, as a data loader would give
    inp = torch.rand(20, 10, device=device_type)
    output = tp_model(inp)
    output.sum().backward()
    optimizer.step()
    rank_log(_rank, logger, f"Tensor Parallel iter {i} completed")
rank_log(_rank, logger, "Tensor Parallel training completed!")

if dist.is_initialized():
    dist.destroy_process_group()
