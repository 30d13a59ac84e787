# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/tutorials, recipes_source/distributed_checkpoint_recipe.rst ("Getting Started
# with Distributed Checkpoint (DCP)", its FSDP version), BSD-3-Clause. A rewritten equivalent
# with the same calls in the same forms: an AppState (Stateful) whose state_dict comes from
# torch.distributed.checkpoint.state_dict's get_state_dict / set_state_dict, ToyModel().to(rank)
# wrapped in FullyShardedDataParallel (FSDP1), Adam, one step, dcp.save; then, as the recipe's
# second script does, a fresh FSDP model and optimizer restored with dcp.load. The recipe's two
# scripts run here one after the other (two mp.spawn), each printing its lines; the load also
# prints whether the restored weights equal the saved ones.
# Changed for this machine: MASTER_PORT comes from the environment when set (the recipe fixes
# 12355); the checkpoint folder is taken from the command line (default "checkpoint").
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

CHECKPOINT_DIR = sys.argv[1] if len(sys.argv) > 1 else "checkpoint"


class AppState(Stateful):
    """The model and optimizer, saved and loaded as one Stateful (DCP calls state_dict and load_state_dict)."""

    def __init__(self, model, optimizer=None):
        self.model = model
        self.optimizer = optimizer

    def state_dict(self):
        model_state_dict, optimizer_state_dict = get_state_dict(self.model, self.optimizer)
        return {"model": model_state_dict, "optim": optimizer_state_dict}

    def load_state_dict(self, state_dict):
        set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"], optim_state_dict=state_dict["optim"])


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(16, 16)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(16, 8)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ.setdefault("MASTER_PORT", "12355")
    dist.init_process_group("nccl", rank=rank, world_size=world_size)
    torch.cuda.set_device(rank)


def cleanup():
    dist.destroy_process_group()


def run_fsdp_checkpoint_save_example(rank, world_size):
    print(f"Running basic FSDP checkpoint saving example on rank {rank}.")
    setup(rank, world_size)
    model = ToyModel().to(rank)
    model = FSDP(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    optimizer.zero_grad()
    model(torch.rand(8, 16, device="cuda")).sum().backward()
    optimizer.step()
    state_dict = {"app": AppState(model, optimizer)}
    dcp.save(state_dict, checkpoint_id=CHECKPOINT_DIR)
    with FSDP.summon_full_params(model):
        torch.save([p.detach().cpu() for p in model.parameters()], os.path.join(CHECKPOINT_DIR, f"saved_rank{rank}.pt"))
    cleanup()


def run_fsdp_checkpoint_load_example(rank, world_size):
    print(f"Running basic FSDP checkpoint loading example on rank {rank}.")
    setup(rank, world_size)
    model = ToyModel().to(rank)
    model = FSDP(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    state_dict = {"app": AppState(model, optimizer)}
    dcp.load(state_dict=state_dict, checkpoint_id=CHECKPOINT_DIR)
    saved = torch.load(os.path.join(CHECKPOINT_DIR, f"saved_rank{rank}.pt"))
    with FSDP.summon_full_params(model):
        restored = all(torch.equal(a.cpu(), b) for a, b in zip(model.parameters(), saved))
        device = next(model.parameters()).device
    steps = [int(s["step"]) for s in optimizer.state.values()]
    print(f"rank {rank}: weights restored {restored} on {device}, optimizer steps {sorted(set(steps))}")
    cleanup()


if __name__ == "__main__":
    world_size = torch.cuda.device_count()
    print(f"Running fsdp checkpoint example on {world_size} devices.")
    mp.spawn(run_fsdp_checkpoint_save_example, args=(world_size,), nprocs=world_size, join=True)
    mp.spawn(run_fsdp_checkpoint_load_example, args=(world_size,), nprocs=world_size, join=True)
