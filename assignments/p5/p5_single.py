"""
Practical 5, part 1: the single-device baseline.

Trains a small classifier on random data on ONE device (the first GPU, or the CPU) and prints
the time of each step and of the whole run: the numbers DataParallel is compared with.

$ python p5_single.py
$ python p5_single.py --steps=50 --batch_size=128
"""
import sys
import time

import torch
import torch.nn as nn

# -----------------------------------------------------------------------------
# settings
batch_size = 64
in_features = 512
hidden = 1024
classes = 10
steps = 20
lr = 0.01
seed = 0
log_every = 5
# override any of the above from the command line: --name=value
for arg in sys.argv[1:]:
    key, _, value = arg.removeprefix("--").partition("=")
    if key not in globals() or not value:
        raise SystemExit(f"unknown setting {arg!r}; use --name=value with one of: batch_size, in_features, hidden, classes, steps, lr, seed, log_every")
    globals()[key] = type(globals()[key])(value)
# -----------------------------------------------------------------------------


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(in_features, hidden), nn.ReLU(), nn.Linear(hidden, classes))

    def forward(self, x):
        return self.layers(x)


def synchronize():
    """Wait for the GPU: CUDA runs asynchronously, so a timer must wait for the work to end."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


torch.manual_seed(seed)
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=lr)
loss_fn = nn.CrossEntropyLoss()
print(f"device: {device}", flush=True)

step_times = []
start = time.perf_counter()
for step in range(steps):
    t0 = time.perf_counter()
    x = torch.randn(batch_size, in_features, device=device)
    y = torch.randint(0, classes, (batch_size,), device=device)
    loss = loss_fn(model(x), y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    synchronize()
    step_times.append(time.perf_counter() - t0)
    if step % log_every == 0 or step == steps - 1:
        print(f"step {step:3d} | loss {loss.item():.4f} | step time {step_times[-1]:.4f} s", flush=True)
total = time.perf_counter() - start
# the first step pays for warm-up (CUDA context, kernels), so the typical step is the median
print(f"step time (median): {sorted(step_times)[len(step_times) // 2]:.4f} s | total time: {total:.3f} s", flush=True)
