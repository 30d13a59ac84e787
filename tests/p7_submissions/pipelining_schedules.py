"""
Practical 7 written with torch.distributed.pipelining: each rank builds a PipelineStage of its
slice of the model and runs ScheduleGPipe or Schedule1F1B, which send the activations and
their gradients between the stages.

$ torchrun --nproc_per_node=2 p7_pipeline.py --schedule=gpipe
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

batch_size = 32
micro_batches = 4
dim = 16
layers = 4
steps = 3
lr = 0.05
seed = 1337
schedule = "1f1b"
log_every = 1
for arg in sys.argv[1:]:
    key, _, value = arg.removeprefix("--").partition("=")
    if key not in globals() or not value:
        raise SystemExit(f"unknown setting {arg!r}")
    globals()[key] = type(globals()[key])(value)


def get_batch(step):
    g = torch.Generator().manual_seed(seed * 1000 + step)
    x = torch.randn(batch_size, dim, generator=g)
    y = torch.randn(batch_size, 1, generator=g)
    return x, y


dist.init_process_group(backend="gloo")
stage, stages = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
device = torch.device("cpu")

torch.manual_seed(seed)
model = nn.Sequential(*[nn.Sequential(nn.Linear(dim, dim), nn.Tanh()) for _ in range(layers)], nn.Linear(dim, 1))
n = len(model)
part = model[stage * n // stages : (stage + 1) * n // stages]
optimizer = torch.optim.SGD(part.parameters(), lr=lr)


def loss_fn(output, target):
    """Summed over the micro-batch's rows, divided by the whole batch's: the gradients add up to the batch's mean."""
    return nn.functional.mse_loss(output, target, reduction="sum") / batch_size


pipe = PipelineStage(part, stage, stages, device)
kind = ScheduleGPipe if schedule == "gpipe" else Schedule1F1B
runner = kind(pipe, n_microbatches=micro_batches, loss_fn=loss_fn, scale_grads=False)

for step in range(steps):
    x, y = get_batch(step)
    optimizer.zero_grad(set_to_none=True)
    if stage == 0:
        runner.step(x)
    elif stage == stages - 1:
        losses = []
        runner.step(target=y, losses=losses)
        if step % log_every == 0:
            print(f"step {step} | loss {sum(l.item() for l in losses):.4f}", flush=True)
    else:
        runner.step()
    optimizer.step()

dist.destroy_process_group()
