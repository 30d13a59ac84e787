"""`python -m grader run --virtual-gpus N -- CMD`: any script, unmodified, on virtual GPUs."""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import ROOT, run_cli

DATAPARALLEL = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        print(f"Inside model on device {x.device}, shape: {x.shape}")
        return self.fc(x)

model = nn.DataParallel(Model().to("cuda:0"))
out = model(torch.randn(64, 8).to("cuda:0"))
print("gathered on", out.device, "GPUs:", torch.cuda.device_count(), torch.cuda.is_available())
x = torch.arange(6.0, device="cuda:1")  # CUDA takes an index (or a mask) on the CPU: it moves it to x's device
picked = x[torch.tensor([0, 2])]
print("indexed by the cpu:", picked.tolist(), picked.device, x[torch.arange(6) > 3].device)
try:
    torch.arange(3.0)[torch.tensor([0], device="cuda:1")]
except RuntimeError:
    print("a gpu index into a cpu tensor is refused")
"""


def test_a_dataparallel_script_sees_five_gpus(tmp_path: Path) -> None:
    script = tmp_path / "dp.py"
    script.write_text(textwrap.dedent(DATAPARALLEL))
    done = run_cli("run", "--virtual-gpus", "5", "--", sys.executable, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = [13, 13, 13, 13, 12]
    expected = [f"Inside model on device cuda:{i}, shape: torch.Size([{r}, 8])" for i, r in enumerate(rows)]
    assert done.stdout.splitlines() == [*expected, "gathered on cuda:0 GPUs: 5 True", "indexed by the cpu: [0.0, 2.0] cuda:1 cuda:1", "a gpu index into a cpu tensor is refused"]


def test_exit_codes_pass_through_and_a_missing_command_is_explained(tmp_path: Path) -> None:
    failing = tmp_path / "fail.py"
    failing.write_text("import torch\ntorch.zeros(1).to('cuda:3')\n")
    done = run_cli("run", "--virtual-gpus", "2", "--", sys.executable, str(failing), cwd=tmp_path)
    assert done.returncode == 1 and "CUDA error: invalid device ordinal" in done.stderr
    assert run_cli("run", "--virtual-gpus", "2", "--", "no-such-command-here").returncode == 127
    unsaid = run_cli("run", "--", sys.executable, "-c", "pass")  # no silent default: observe's is 0, run exists for N > 0
    assert unsaid.returncode == 2 and "--virtual-gpus" in unsaid.stderr
    assert run_cli("run").returncode == 2


@pytest.mark.slow
def test_torchrun_workers_see_the_gpus_and_nccl_runs_on_gloo() -> None:
    script = ROOT / "solutions" / "p6" / "p6_ddp.py"
    done = run_cli("run", "--virtual-gpus", "2", "--", sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", str(script), "--steps=2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Rank: 0 | Local Rank: 0 | World size: 2 | Device: cuda:0" in done.stdout
    assert "Rank: 1 | Local Rank: 1 | World size: 2 | Device: cuda:1" in done.stdout


def test_threads_started_by_the_script_see_the_virtual_devices(tmp_path: Path) -> None:
    script = tmp_path / "threads.py"
    script.write_text(
        "import threading, torch\n"
        "seen = []\n"
        "worker = threading.Thread(target=lambda: seen.append(str(torch.ones(2).to('cuda:1').device)))\n"
        "worker.start(); worker.join()\n"
        "print(seen[0], torch.cuda.memory_allocated(1) >= 0)\n"
    )
    done = run_cli("run", "--virtual-gpus", "2", "--", sys.executable, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "cuda:1 True"
    assert done.stderr.count("virtual GPUs count the memory of every tensor's storage") == 1  # not a silent wrong number: said once, where the script reads it


BOUND_BARRIER = """
import os, torch, torch.distributed as dist
rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl", device_id=torch.device(f"cuda:{rank}"))
dist.barrier()
dist.barrier(device_ids=[rank])
group = dist.new_group([0, 1])
dist.barrier(group=group)
total = torch.full((2,), rank + 1.0, device="cuda")
dist.all_reduce(total, group=group)
try:
    dist.barrier(device_ids=[2])
except RuntimeError as error:
    print(f"rank {rank}: barrier on cuda:2: {str(error).splitlines()[0]}", flush=True)
try:
    dist.split_group(split_ranks=[[0], [1]])
except RuntimeError as error:
    print(f"rank {rank}: split: {str(error)[:90]}", flush=True)
print(f"rank {rank}: {total.tolist()} on {total.device}", flush=True)
flat = torch.zeros(4, device="cuda")  # NCCL takes any output of world x the input's elements (accelerate's gather)
dist.all_gather_into_tensor(flat, torch.full((1, 2), float(rank), device="cuda"))
print(f"rank {rank}: gathered {flat.tolist()} on {flat.device}", flush=True)
try:
    dist.all_gather_into_tensor(torch.zeros(3, device="cuda"), torch.ones(1, 2, device="cuda"))
except (RuntimeError, ValueError) as error:
    print(f"rank {rank}: a wrong size is refused", flush=True)
dist.destroy_process_group()
"""


def torchrun_on_two_virtual_gpus(script: Path, source: str) -> "subprocess.CompletedProcess":
    """`source` written to `script`, run by torchrun as 2 ranks under `grader run --virtual-gpus 2`; it must exit 0."""
    script.write_text(source)
    command = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script))
    done = run_cli("run", "--virtual-gpus", "2", "--", *command, cwd=script.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_barriers_of_a_group_bound_to_its_gpu_run_as_under_nccl(tmp_path: Path) -> None:
    """init_process_group(device_id=cuda:k) binds the group to a GPU, and C++ makes each barrier's
    token tensor there (Lightning's DDP does this); barrier(device_ids=[k]) names it too. They
    synchronize as on CUDA, and a GPU that is not there is CUDA's error. Splitting such a group
    (gloo's split) is not emulated and says so. An all-gather into a flat output of the group's
    size times the input's elements works as on NCCL; another size is refused."""
    done = torchrun_on_two_virtual_gpus(tmp_path / "bound.py", BOUND_BARRIER)
    for rank in (0, 1):
        assert f"rank {rank}: [3.0, 3.0] on cuda:{rank}" in done.stdout, done.stdout
        assert f"rank {rank}: barrier on cuda:2: CUDA error: invalid device ordinal" in done.stdout, done.stdout
        assert f"rank {rank}: split: not emulated on virtual GPUs: dist.split_group of a process group bound" in done.stdout, done.stdout
        assert f"rank {rank}: gathered [0.0, 0.0, 1.0, 1.0] on cuda:{rank}" in done.stdout and f"rank {rank}: a wrong size is refused" in done.stdout, done.stdout


DTENSOR = """
import os, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
mesh = init_device_mesh("cuda", (2,))
x = distribute_tensor(torch.randn(1, 2, 4, 8, device="cuda"), mesh, [Replicate()])
freqs = distribute_tensor(torch.polar(torch.ones(4, 4, device="cuda"), torch.zeros(4, 4, device="cuda")), mesh, [Replicate()])
rotated = torch.view_as_real(torch.view_as_complex(x.reshape(1, 2, 4, 4, 2)) * freqs).reshape(1, 2, 4, 8)
attended = torch.nn.functional.scaled_dot_product_attention(rotated, x, x)  # rotary embeddings, then attention: llama's
sharded = distribute_tensor(torch.randn(4, 8, device="cuda"), mesh, [Shard(0)]) @ distribute_tensor(torch.randn(8, 2, device="cuda"), mesh, [Replicate()])
print(f"rank {rank}: local results on {rotated.to_local().device}, {attended.to_local().device}, {sharded.to_local().device}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_dtensor_local_results_are_on_the_ranks_gpu(tmp_path: Path) -> None:
    """DTensor computes each op's local result below the device layer: the result is put on the
    rank's GPU where DTensor wraps it, so rotary embeddings (view_as_complex) and attention
    against a tensor of the GPU run as on CUDA."""
    done = torchrun_on_two_virtual_gpus(tmp_path / "dtensor.py", DTENSOR)
    for rank in (0, 1):
        assert f"rank {rank}: local results on cuda:{rank}, cuda:{rank}, cuda:{rank}" in done.stdout, done.stdout


HOGWILD = """
import torch, torch.multiprocessing as mp, torch.nn as nn, torch.nn.functional as F

def train(rank, model, device, queue):
    x = torch.randn(4, 1, 6, 6).to(device)
    loss = F.cross_entropy(model(x), torch.tensor([0, 1, 2, 0], device=device))
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    sent = queue.get()
    sent.add_(1)
    print(f"process {rank}: weight on {model[0].weight.device}, loss on {loss.device}, queued on {sent.device}", flush=True)

if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    device = torch.device("cuda:1")
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(32, 3)).to(device)
    model.share_memory()
    before = model[2].bias.detach().clone()
    queue = mp.Queue()
    counter = torch.zeros(1, device=device)
    processes = [mp.Process(target=train, args=(rank, model, device, queue)) for rank in range(2)]
    for p in processes:
        p.start()
        queue.put(counter)
    for p in processes:
        p.join()
    print("exit codes", [p.exitcode for p in processes])
    print("updated in place:", not torch.equal(before, model[2].bias.detach()), model[2].bias.device, counter.tolist())
"""


def test_a_gpu_model_shared_with_spawned_processes_stays_on_its_gpu(tmp_path: Path) -> None:
    """PyTorch's Hogwild pattern: a CUDA model's share_memory(), passed to mp.Process (spawn),
    and a CUDA tensor through an mp.Queue arrive on their GPU, and what the processes write is
    the parent's memory (CUDA's IPC shares it the same way)."""
    script = tmp_path / "hogwild.py"
    script.write_text(HOGWILD)
    done = run_cli("run", "--virtual-gpus", "2", "--", sys.executable, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert sorted(lines[:2]) == [f"process {rank}: weight on cuda:1, loss on cuda:1, queued on cuda:1" for rank in (0, 1)], done.stdout + done.stderr
    assert lines[2:] == ["exit codes [0, 0]", "updated in place: True cuda:1 [2.0]"]


RPC = """
import os, torch, torch.distributed.rpc as rpc

def on_gpu(k):
    t = torch.ones(2, device=f"cuda:{k}") * 2
    return f"{t.device} {torch.cuda.device_count()}", t.cpu()

rank = int(os.environ["RANK"])
rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2)
if rank == 0:
    where, value = rpc.rpc_sync("worker1", on_gpu, args=(1,))
    print(f"remote: {where} {value.tolist()} on {value.device}", flush=True)
    try:
        rpc.rpc_sync("worker1", torch.add, args=(torch.ones(1, device="cuda:0"), 1))
    except RuntimeError as error:
        print(f"sent: {str(error).splitlines()[0][:80]}", flush=True)
rpc.shutdown()
"""


@pytest.mark.slow
def test_a_function_run_for_a_remote_caller_sees_the_gpus(tmp_path: Path) -> None:
    """torch.distributed.rpc runs a caller's function on a thread of its C++ agent: it sees the
    virtual GPUs there too. A GPU tensor sent over RPC (TensorPipe's device maps) is not emulated
    and says so."""
    script = tmp_path / "rpc.py"
    script.write_text(RPC)
    command = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(script))
    done = run_cli("run", "--virtual-gpus", "2", "--", *command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "remote: cuda:1 2 [2.0, 2.0] on cpu" in done.stdout, done.stdout + done.stderr[-3000:]
    assert "sent: not emulated on virtual GPUs: sending a tensor on cuda:0 over" in done.stdout, done.stdout


FORKS = """
import multiprocessing as mp, torch
from torch.utils.data import DataLoader, TensorDataset

def use_cuda(queue):
    try:
        queue.put(str((torch.ones(2, device="cuda") * 2).device))
    except RuntimeError as error:
        queue.put(str(error))

def in_child(method):
    context = mp.get_context(method)
    queue = context.Queue()
    child = context.Process(target=use_cuda, args=(queue,))
    child.start()
    said = queue.get()
    child.join()
    return f"{said} (exit {child.exitcode})"

if __name__ == "__main__":
    print("fork before CUDA:", in_child("fork"), flush=True)
    model = torch.nn.Linear(4, 1).cuda()
    print("fork after CUDA:", in_child("fork"), flush=True)
    print("spawn after CUDA:", in_child("spawn"), flush=True)
    data = TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    losses = [torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()) for x, y in DataLoader(data, batch_size=8, num_workers=2)]
    print("forked DataLoader workers:", len(losses), "batches, losses on", losses[0].device)
"""


def test_a_child_forked_after_cuda_cannot_use_it(tmp_path: Path) -> None:
    """CUDA's state does not survive a fork: a child forked after the parent used CUDA raises
    torch's error at its first CUDA call, as on a GPU; a child forked before, a spawned one, and
    forked DataLoader workers that stay on the CPU work."""
    script = tmp_path / "forks.py"
    script.write_text(FORKS)
    done = run_cli("run", "--virtual-gpus", "2", "--", sys.executable, str(script), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "fork before CUDA: cuda:0 (exit 0)",
        "fork after CUDA: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, "
        "you must use the 'spawn' start method (exit 0)",
        "spawn after CUDA: cuda:0 (exit 0)",
        "forked DataLoader workers: 4 batches, losses on cuda:0",
    ], done.stdout + done.stderr[-3000:]


FSDP1 = """
import functools, os, torch, torch.nn as nn, torch.nn.functional as F, torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy
from batch import batch, model

rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(rank)
dist.init_process_group("nccl")
wrap = functools.partial(size_based_auto_wrap_policy, min_num_params=100)
fsdp = FSDP(model().to(rank), auto_wrap_policy=wrap, device_id=rank)
optimizer = torch.optim.AdamW(fsdp.parameters(), lr=0.01)
x, y = batch()
for step in range(3):
    loss = F.cross_entropy(fsdp(x[rank::2].to(rank)), y[rank::2].to(rank))
    optimizer.zero_grad()
    loss.backward()
    norm = fsdp.clip_grad_norm_(1.0)
    optimizer.step()
    mean = loss.detach().clone()
    dist.all_reduce(mean)
    if rank == 0:
        print(f"step {step}: loss {mean.item() / 2:.6f} grad norm {norm.item():.6f} on {loss.device}", flush=True)
weights = fsdp.state_dict()
if rank == 0:
    print(f"weights {sum(w.sum().item() for w in weights.values()):.6f} on {sorted({str(w.device) for w in weights.values()})}", flush=True)
dist.destroy_process_group()
"""

BATCH = """
import torch

def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))

def batch():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(16, 8, generator=generator), torch.randint(0, 4, (16,), generator=generator)
"""


def one_process_training(folder: Path) -> list[str]:
    """What FSDP1 on two GPUs must print: one process training on both halves of the batch
    (FSDP averages the ranks' gradients), on the CPU."""
    import importlib.util

    import torch
    import torch.nn.functional as F

    spec = importlib.util.spec_from_file_location("fsdp1_batch", folder / "batch.py")
    shared = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shared)
    model = shared.model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    x, y = shared.batch()
    lines = []
    for step in range(3):
        loss = sum(F.cross_entropy(model(x[rank::2]), y[rank::2]) for rank in (0, 1)) / 2
        optimizer.zero_grad()
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        lines.append(f"step {step}: loss {loss.item():.6f} grad norm {norm.item():.6f} on cuda:0")
    return [*lines, f"weights {sum(w.sum().item() for w in model.state_dict().values()):.6f} on ['cuda:0']"]


def numbers(line: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+\.\d+", line)]


@pytest.mark.slow
def test_fsdp1_on_two_gpus_trains_as_one_process_does(tmp_path: Path) -> None:
    """FullyShardedDataParallel (FSDP1) over 2 virtual GPUs, as its docs write it: an int
    device_id, a size-based auto wrap that leaves the root no parameters of its own (FSDP then
    takes the current GPU), clip_grad_norm_, the full state dict. Its losses, gradient norms
    and weights are one process's on the whole batch."""
    (tmp_path / "fsdp1.py").write_text(FSDP1)
    (tmp_path / "batch.py").write_text(BATCH)
    command = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "fsdp1.py")
    done = run_cli("run", "--virtual-gpus", "2", "--", *command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    found = [line for line in done.stdout.splitlines() if line.startswith(("step ", "weights "))]
    expected = one_process_training(tmp_path)
    assert [re.sub(r"-?\d+\.\d+", "#", line) for line in found] == [re.sub(r"-?\d+\.\d+", "#", line) for line in expected], done.stdout
    assert [numbers(line) for line in found] == [pytest.approx(numbers(line), rel=1e-5, abs=1e-5) for line in expected], (found, expected)
