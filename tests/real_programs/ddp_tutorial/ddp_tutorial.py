# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: pytorch/tutorials, intermediate_source/ddp_tutorial.rst @ 0168169 ("Getting Started
# with Distributed Data Parallel", Shen Li), BSD-3-Clause. A rewritten equivalent of the
# tutorial's code blocks: demo_basic, demo_checkpoint and demo_model_parallel launched with
# mp.spawn, with the same calls in the same forms (ToyModel().to(rank), DDP(device_ids=[rank]),
# an input left on the CPU, torch.load with map_location={'cuda:0': 'cuda:<rank>'},
# ToyMpModel(dev0, dev1) with int devices, DDP(mp_model)) and the same printed lines.
# Changed for this machine: MASTER_PORT may come from the environment (parallel test runs);
# the checkpoint lives in tempfile.gettempdir() as in the tutorial (the tests point TMPDIR at
# their own folder). Nothing else.
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP


def setup(rank, world_size):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = os.environ.get("MASTER_PORT", "12355")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def cleanup():
    dist.destroy_process_group()


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.net1 = nn.Linear(10, 10)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(10, 5)

    def forward(self, x):
        return self.net2(self.relu(self.net1(x)))


def train_one_step(ddp_model, label_device):
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    optimizer.zero_grad()
    outputs = ddp_model(torch.randn(20, 10))
    labels = torch.randn(20, 5).to(label_device)
    loss_fn(outputs, labels).backward()
    optimizer.step()


def demo_basic(rank, world_size):
    print(f"Running basic DDP example on rank {rank}.")
    setup(rank, world_size)
    model = ToyModel().to(rank)  # the GPU numbered rank
    ddp_model = DDP(model, device_ids=[rank])
    train_one_step(ddp_model, rank)
    cleanup()


def demo_checkpoint(rank, world_size):
    print(f"Running DDP checkpoint example on rank {rank}.")
    setup(rank, world_size)
    model = ToyModel().to(rank)
    ddp_model = DDP(model, device_ids=[rank])
    path = tempfile.gettempdir() + "/model.checkpoint"
    if rank == 0:
        torch.save(ddp_model.state_dict(), path)  # one process saves, all load
    dist.barrier()
    map_location = {"cuda:%d" % 0: "cuda:%d" % rank}
    ddp_model.load_state_dict(torch.load(path, map_location=map_location))
    train_one_step(ddp_model, rank)
    if rank == 0:
        os.remove(path)
    cleanup()


class ToyMpModel(nn.Module):
    def __init__(self, dev0, dev1):
        super().__init__()
        self.dev0 = dev0
        self.dev1 = dev1
        self.net1 = torch.nn.Linear(10, 10).to(dev0)
        self.relu = torch.nn.ReLU()
        self.net2 = torch.nn.Linear(10, 5).to(dev1)

    def forward(self, x):
        x = x.to(self.dev0)
        x = self.relu(self.net1(x))
        x = x.to(self.dev1)
        return self.net2(x)


def demo_model_parallel(rank, world_size):
    print(f"Running DDP with model parallel example on rank {rank}.")
    setup(rank, world_size)
    dev0 = (rank * 2) % world_size
    dev1 = (rank * 2 + 1) % world_size
    ddp_mp_model = DDP(ToyMpModel(dev0, dev1))  # a model on two devices: no device_ids
    train_one_step(ddp_mp_model, dev1)
    cleanup()


def run_demo(demo_fn, world_size):
    mp.spawn(demo_fn, args=(world_size,), nprocs=world_size, join=True)


if __name__ == "__main__":
    n_gpus = torch.cuda.device_count()
    assert n_gpus >= 2, f"Requires at least 2 GPUs to run, but got {n_gpus}"
    world_size = n_gpus
    run_demo(demo_basic, world_size)
    run_demo(demo_checkpoint, world_size)
    world_size = n_gpus // 2
    run_demo(demo_model_parallel, world_size)
