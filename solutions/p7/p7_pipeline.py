"""
Practical 7: pipeline parallelism. The model is cut into stages, one process per stage; the
batch of a step is cut into micro-batches that flow through the stages: activations forward
with dist.send/dist.recv, their gradients backward. Two schedules: GPipe and 1F1B.

$ torchrun --nproc_per_node=2 p7_pipeline.py --schedule=gpipe
$ torchrun --nproc_per_node=2 p7_pipeline.py --schedule=1f1b
$ torchrun --nproc_per_node=3 p7_pipeline.py --schedule=1f1b --micro_batches=6
On a node with GPUs each stage runs on cuda:LOCAL_RANK; without, every stage on the CPU
(or pretend: python -m grader run --virtual-gpus 2 -- torchrun --nproc_per_node=2 p7_pipeline.py).
"""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

# -----------------------------------------------------------------------------
# settings
batch_size = 32  # the batch of one step, cut into micro-batches
micro_batches = 4
dim = 16
layers = 4  # blocks before the head; the stages share the blocks and the head
steps = 3
lr = 0.05
seed = 1337
schedule = "1f1b"  # gpipe | 1f1b
log_every = 1
# override any of the above from the command line: --name=value
for arg in sys.argv[1:]:
    key, _, value = arg.removeprefix("--").partition("=")
    if key not in globals() or not value:
        raise SystemExit(f"unknown setting {arg!r}; use --name=value with one of: batch_size, micro_batches, dim, layers, steps, lr, seed, schedule, log_every")
    globals()[key] = type(globals()[key])(value)
if schedule not in ("gpipe", "1f1b"):
    raise SystemExit(f"--schedule must be gpipe or 1f1b, not {schedule!r}")
# -----------------------------------------------------------------------------


def get_batch(step):
    """The batch of one step. Every stage builds the same one: the first takes x, the last y."""
    g = torch.Generator().manual_seed(seed * 1000 + step)
    x = torch.randn(batch_size, dim, generator=g)
    y = torch.randn(batch_size, 1, generator=g)
    return x, y


def build_model():
    """The whole model: `layers` blocks, then a head. Activations between blocks are [rows, dim]."""
    blocks = [nn.Sequential(nn.Linear(dim, dim), nn.Tanh()) for _ in range(layers)]
    return nn.Sequential(*blocks, nn.Linear(dim, 1))


# one process per stage, started by torchrun: the rank is the stage's index
dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
world_size = int(os.environ["WORLD_SIZE"])
device = torch.device(f"cuda:{local_rank}") if torch.cuda.is_available() else torch.device("cpu")
stage, stages = rank, world_size
first, last = stage == 0, stage == stages - 1

# every stage builds the whole model from the same seed, so the stages together hold exactly
# the model one process would train, and keeps only its own part
torch.manual_seed(seed)
model = build_model()
# BEGIN SOLUTION TODO 1: keep this stage's part of the model
#: TODO 1: cut the model (an nn.Sequential of n = layers + 1 modules) into `stages` parts:
#: stage s keeps modules [s * n // stages, (s + 1) * n // stages) (slicing an nn.Sequential gives
#: one), moved to `device`. The head is the last module, so it lands on the last stage.
n = len(model)
part = model[stage * n // stages : (stage + 1) * n // stages].to(device)
# END SOLUTION
print(f"[Stage {stage}] modules {stage * len(model) // stages}..{(stage + 1) * len(model) // stages - 1} on {device}", flush=True)
optimizer = torch.optim.SGD(part.parameters(), lr=lr)
# summed over the rows, divided by the batch's row count: the micro-batches' gradients then add
# up to the whole batch's mean gradient, however the micro-batches are sized
loss_fn = nn.MSELoss(reduction="sum")


def forward(i, xs, ys, stash, pending):
    """Forward pass of micro-batch i on this stage; its input and output are kept for backward."""
    # BEGIN SOLUTION TODO 2: one micro-batch's forward pass
    #: TODO 2: take the input (the first stage: xs[i]; the others: dist.recv it from stage - 1
    #: into an empty [rows, dim] tensor, then require its gradient), run `part`, and either
    #: compute the loss (the last stage: loss_fn(out, ys[i]) / batch_size) or send the output to
    #: stage + 1 with dist.isend (append its Work to `pending`). Keep (input, output) in stash[i].
    if first:
        inp = xs[i].to(device)
    else:
        inp = torch.empty(len(xs[i]), dim, device=device)
        dist.recv(inp, src=stage - 1)
        inp.requires_grad_()  # so backward gives the gradient to send back to stage - 1
    out = part(inp)
    if last:
        out = loss_fn(out, ys[i].to(device)) / batch_size
    else:
        # isend, not send: a send may wait for its receiver, which in 1F1B may be waiting for us
        pending.append(dist.isend(out.detach(), dst=stage + 1))
    stash[i] = (inp, out)
    # END SOLUTION


def backward(i, stash, pending):
    """Backward pass of micro-batch i on this stage; frees what its forward pass kept."""
    # BEGIN SOLUTION TODO 3: one micro-batch's backward pass
    #: TODO 3: pop (input, output) from stash[i]; the last stage calls backward on its loss, the
    #: others dist.recv the output's gradient from stage + 1 and call output.backward(gradient).
    #: Every stage but the first then sends its input's gradient to stage - 1 (dist.isend).
    inp, out = stash.pop(i)
    if last:
        out.backward()
    else:
        grad = torch.empty_like(out)
        dist.recv(grad, src=stage + 1)
        out.backward(grad)
    if not first:
        pending.append(dist.isend(inp.grad, dst=stage - 1))
    # END SOLUTION


t0 = time.time()
for step in range(steps):
    x, y = get_batch(step)
    # always `micro_batches` pieces (sizes differ by one at most); torch.chunk may give fewer
    xs, ys = x.tensor_split(micro_batches), y.tensor_split(micro_batches)
    stash, pending = {}, []  # micro-batches in flight on this stage; sends not finished yet
    optimizer.zero_grad(set_to_none=True)
    if schedule == "gpipe":
        # BEGIN SOLUTION TODO 4: the GPipe schedule
        #: TODO 4: GPipe: the forward passes of all micro-batches, then all their backward passes.
        for i in range(micro_batches):
            forward(i, xs, ys, stash, pending)
        for i in range(micro_batches):
            backward(i, stash, pending)
        # END SOLUTION
    else:
        # BEGIN SOLUTION TODO 5: the 1F1B schedule
        #: TODO 5: 1F1B: warm-up: the forward passes of the first min(stages - stage - 1,
        #: micro_batches) micro-batches; steady state: one forward (the next micro-batch), one
        #: backward (the oldest in flight) until every forward ran; cool-down: the backward passes
        #: left. A stage then never holds more than stages - stage micro-batches.
        warmup = min(stages - stage - 1, micro_batches)
        for i in range(warmup):
            forward(i, xs, ys, stash, pending)
        for i in range(micro_batches - warmup):
            forward(warmup + i, xs, ys, stash, pending)
            backward(i, stash, pending)
        for i in range(micro_batches - warmup, micro_batches):
            backward(i, stash, pending)
        # END SOLUTION
    for work in pending:
        work.wait()
    # each stage updates its own parameters with the gradients of all micro-batches
    optimizer.step()
    if step % log_every == 0 or step == steps - 1:
        print(f"[Stage {stage}] step {step} | {schedule} | {micro_batches} micro-batches | {time.time() - t0:.2f}s", flush=True)

dist.destroy_process_group()
