"""
Practical 5, part 2: the same training with nn.DataParallel.

One process drives every visible GPU: each step, DataParallel splits the batch into one chunk
per GPU, copies the model to every GPU, runs the chunks in parallel and gathers the outputs on
the first GPU. Compare its step time with p5_single.py.

$ python p5_dp.py                        # all visible GPUs (CPU only: runs like p5_single.py)
$ CUDA_VISIBLE_DEVICES=0,1,2 python p5_dp.py
$ python -m grader run --virtual-gpus 3 -- python p5_dp.py   # no GPU? pretend three
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
        # BEGIN SOLUTION TODO 3: print this replica's device and input shape
        #: TODO 3: every replica runs this forward on its own chunk of the batch. Print the
        #: device x is on (x.device, e.g. cuda:1) and the shape of x, then remove the raise.
        # every replica runs this forward on its own chunk of the batch: show which GPU it is
        # on and how many rows it got
        print(f"Inside model on device {x.device}, shape: {tuple(x.shape)}", flush=True)
        # END SOLUTION
        return self.layers(x)


def synchronize():
    """Wait for the GPU: CUDA runs asynchronously, so a timer must wait for the work to end."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()


torch.manual_seed(seed)
# DataParallel keeps the master copy of the model on the first GPU, device_ids[0] = cuda:0:
# the inputs start there, the outputs are gathered there, the gradients are summed there
model = Net()
# BEGIN SOLUTION TODO 1: choose the first device and move the model to it
#: TODO 1: choose `device`: the first GPU (cuda:0) when CUDA is available, else the CPU, and
#: move the model there.
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
model = model.to(device)
# END SOLUTION
# BEGIN SOLUTION TODO 2: wrap the model in DataParallel when there are several GPUs
#: TODO 2: when more than one GPU is visible, wrap the model in nn.DataParallel (all GPUs).
if torch.cuda.device_count() > 1:
    model = nn.DataParallel(model)  # all visible GPUs
# END SOLUTION
print(f"GPUs visible: {torch.cuda.device_count()}", flush=True)
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
