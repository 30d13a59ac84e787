# Real-program corpus for virtual GPUs (tests/test_real_programs.py).
# Origin: Lightning-AI/pytorch-lightning, what `Trainer(accelerator="gpu", devices=2,
# strategy="ddp").fit(model)` does (src/lightning/pytorch/strategies/ddp.py,
# launchers/subprocess_script.py, lightning/fabric/utilities/distributed.py), Apache-2.0.
# A Lightning-free equivalent with the same torch calls in the same forms and order: the
# script relaunches itself once per further local rank (LOCAL_RANK, NODE_RANK, WORLD_SIZE,
# MASTER_ADDR, MASTER_PORT in the environment), or runs under torchrun;
# torch.cuda.set_device(root_device); init_process_group("nccl", rank=, world_size=,
# timeout=, device_id=root_device) (Lightning passes device_id since torch 2.3); a barrier
# after setup, as Lightning's: barrier(device_ids=[index]) when get_backend() is "nccl", else
# barrier(); model.to(root_device), DDP(device_ids=[index]), DistributedSampler; a barrier
# at the end of fit; Lightning's own log lines.
# Changed for this machine: random data; MASTER_PORT may come from the environment.
import os
import socket
import subprocess
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

DEVICES = 2


def launch_other_ranks() -> list:
    """_SubprocessScriptLauncher: rank 0 is this process; the others run this script again."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(probe.getsockname()[1])
    os.environ.update({"NODE_RANK": "0", "WORLD_SIZE": str(DEVICES)})
    children = []
    for local_rank in range(1, DEVICES):
        env = {**os.environ, "LOCAL_RANK": str(local_rank)}
        children.append(subprocess.Popen([sys.executable, *sys.argv], env=env))
    os.environ["LOCAL_RANK"] = "0"
    return children


def barrier(root_device: torch.device) -> None:
    """DDPStrategy.barrier (device ids: determine_ddp_device_ids)."""
    if dist.get_backend() == "nccl":
        dist.barrier(device_ids=[root_device.index])
    else:
        dist.barrier()


class BoringModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(32, 2)

    def forward(self, x):
        return self.layer(x)


def main() -> None:
    children = [] if "LOCAL_RANK" in os.environ else launch_other_ranks()
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    global_rank = int(os.environ.get("RANK", int(os.environ.get("NODE_RANK", 0)) * DEVICES + local_rank))
    if global_rank == 0:
        print(f"GPU available: {torch.cuda.is_available()} (cuda), used: True")
    root_device = torch.device("cuda", local_rank)
    torch.cuda.set_device(root_device)
    print(f"Initializing distributed: GLOBAL_RANK: {global_rank}, MEMBER: {global_rank + 1}/{world_size}")
    dist.init_process_group("nccl", rank=global_rank, world_size=world_size, timeout=timedelta(seconds=1800), device_id=root_device)
    if global_rank == 0:
        print(
            "----------------------------------------------------------------------------------------------------\n"
            f"distributed_backend={dist.get_backend()}\n"
            f"All distributed processes registered. Starting with {world_size} processes\n"
            "----------------------------------------------------------------------------------------------------\n"
        )
    barrier(root_device)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", ",".join(str(i) for i in range(torch.cuda.device_count())))
    print(f"LOCAL_RANK: {local_rank} - CUDA_VISIBLE_DEVICES: [{visible}]")

    torch.manual_seed(42)
    model = BoringModel().to(root_device)
    model = DistributedDataParallel(model, device_ids=[root_device.index])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = TensorDataset(torch.randn(64, 32), torch.randn(64, 2))
    loader = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, num_replicas=world_size, rank=global_rank))
    for epoch in range(2):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.mse_loss(model(x.to(root_device)), y.to(root_device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"Epoch {epoch}: rank {global_rank} loss={loss.item():.4f} on {loss.device}")
    barrier(root_device)
    if global_rank == 0:
        print("`Trainer.fit` stopped: `max_epochs=2` reached.")
    dist.destroy_process_group()
    for child in children:
        if child.wait() != 0:
            sys.exit(child.returncode)


if __name__ == "__main__":
    main()
