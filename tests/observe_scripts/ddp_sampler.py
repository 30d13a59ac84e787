"""A DDP training written for the tests of `python -m grader observe`, by nobody who knows it:
DistributedSampler + DataLoader, an explicit dist.all_reduce of the epoch's loss, and on request
a DDP communication hook of its own. CPU (gloo) or one GPU per rank (nccl), under torchrun.

$ torchrun --nproc_per_node=2 ddp_sampler.py --samples 40 --batch 8 --workers 1 --own-comm-hook [--zero]
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    parser.add_argument("--own-comm-hook", action="store_true", help="register torch's allreduce_hook on the DDP model")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU even where CUDA is available")
    parser.add_argument("--zero", action="store_true", help="shard Adam's state over the ranks (ZeroRedundancyOptimizer)")
    args = parser.parse_args()

    cuda = torch.cuda.is_available() and not args.cpu
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
    device = torch.device(f"cuda:{local_rank}") if cuda else torch.device("cpu")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(args.samples, 16), torch.randn(args.samples, 1))
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=args.batch, sampler=sampler, num_workers=args.workers)
    net = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 1)).to(device)
    model = DistributedDataParallel(net, device_ids=[local_rank] if device.type == "cuda" else None)
    if args.own_comm_hook:
        model.register_comm_hook(dist.group.WORLD, allreduce_hook)
    if args.zero:
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.Adam, lr=1e-3)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(1, device=device)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.detach()
        dist.all_reduce(total)
        if rank == 0:
            print(f"epoch {epoch}: loss summed over ranks {total.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
