# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/examples, distributed/FSDP2/utils.py @ 77f55b9, BSD-3-Clause. A rewritten
# equivalent: rank 0 prints the model; every parameter is a DTensor sharded on dim 0 (and in
# bfloat16 while unsharded under mixed precision).
import torch
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import Shard

from model import Transformer


def inspect_model(model: FSDPModule):
    assert isinstance(model, Transformer)
    assert isinstance(model, FSDPModule)
    if torch.distributed.get_rank() == 0:
        print(model)
    for param in model.parameters():
        assert param.placements == (Shard(0),)
        assert param.dtype == torch.float32


def inspect_mixed_precision(model: FSDPModule):
    model.unshard()
    for param in model.parameters(recurse=False):
        assert param.dtype == torch.bfloat16
    model.reshard()
