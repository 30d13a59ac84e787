# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/examples, distributed/tensor_parallelism/fsdp_tp_example.py @ 77f55b9 (2-D
# parallelism: FSDP2 across the "dp" mesh dimension, tensor and sequence parallelism across
# "tp"), BSD-3-Clause. A rewritten equivalent with the same calls in the same forms:
# init_device_mesh(device_type, (dp, tp), mesh_dim_names=("dp", "tp")), the Llama model
# .to(device_type) and init_weights(), parallelize_module with RowwiseParallel,
# SequenceParallel, PrepareModuleInput and ColwiseParallel(use_local_output=False) on every
# block, fully_shard(model, mesh=dp_mesh), AdamW(foreach=True); the same log lines.
# Changed for this machine: a small model (dim 32, 2 layers, 4 heads, vocabulary 320) and
# input (8 sequences of 16 tokens) instead of dim 256, 16 heads, vocabulary 32000, 256 tokens.
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel, parallelize_module

from llama2_model import ModelArgs, Transformer
from log_utils import get_logger, rank_log, verify_min_gpu_count

_min_gpu_count = 4
if not verify_min_gpu_count(min_gpus=_min_gpu_count):
    print(f"Unable to locate sufficient {_min_gpu_count} gpus to run this example. Exiting.")
    sys.exit()

tp_size = 2
logger = get_logger()
_rank = int(os.environ["RANK"])
_world_size = int(os.environ["WORLD_SIZE"])
print(f"Starting PyTorch 2D (FSDP + TP) example on rank {_rank}.")
assert _world_size % tp_size == 0, f"World size {_world_size} needs to be divisible by TP size {tp_size}"
dp_size = _world_size // tp_size

device_type = torch.accelerator.current_accelerator().type
device_mesh = init_device_mesh(device_type, (dp_size, tp_size), mesh_dim_names=("dp", "tp"))
rank_log(_rank, logger, f"Device Mesh created: {device_mesh=}")
tp_mesh = device_mesh["tp"]
dp_mesh = device_mesh["dp"]
dp_rank = dp_mesh.get_local_rank()

model = Transformer.from_model_args(ModelArgs(dim=32, n_layers=2, n_heads=4, vocab_size=320, max_seq_len=64, multiple_of=16)).to(
    device_type
)
model.init_weights()
model = parallelize_module(
    model,
    tp_mesh,
    {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        "output": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    },
)
for transformer_block in model.layers:
    layer_tp_plan = {
        "attention_norm": SequenceParallel(),
        "attention": PrepareModuleInput(input_layouts=(Shard(1), Replicate()), desired_input_layouts=(Replicate(), Replicate())),
        "attention.wq": ColwiseParallel(use_local_output=False),
        "attention.wk": ColwiseParallel(use_local_output=False),
        "attention.wv": ColwiseParallel(use_local_output=False),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        "feed_forward.w3": ColwiseParallel(),
    }
    parallelize_module(module=transformer_block, device_mesh=tp_mesh, parallelize_plan=layer_tp_plan)

sharded_model = fully_shard(model, mesh=dp_mesh)
lr = 3e-3
rank_log(_rank, logger, f"Creating AdamW optimizer with learning rate {lr}")
optimizer = torch.optim.AdamW(sharded_model.parameters(), lr=lr, foreach=True)

rank_log(_rank, logger, "\nStarting 2D training...")
for i in range(10):
    torch.manual_seed(i + dp_rank)  # the same input across a TP group
    inp = torch.randint(320, (8, 16), device=device_type)
    output = sharded_model(inp)
    output.sum().backward()
    optimizer.step()
    rank_log(_rank, logger, f"2D iter {i} complete")
rank_log(_rank, logger, "2D training successfully completed!")

if dist.is_initialized():
    dist.destroy_process_group()
