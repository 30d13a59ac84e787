"""Small programs whose behaviour on real CUDA GPUs is known, for comparing virtual GPUs with
real ones. Standalone: it imports only torch, so it runs unchanged

    on N virtual GPUs:   python -m grader run --virtual-gpus N -- python tests/fidelity/cases.py
    on a real GPU node:  python tests/fidelity/cases.py

It prints one JSON object per case: {"case", "needs" (GPUs), and "value" or "error"}. A case
that needs more GPUs than are visible prints {"case", "skipped"}. The expected observations,
from PyTorch's sources and measurements (shared/notes/facts.md), are in test_fidelity.py.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn

CASES = []


def case(needs: int):
    def register(function):
        CASES.append((function.__name__, needs, function))
        return function

    return register


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else ""


def replica_rows(batch: int, gpus: int) -> list[list]:
    """(device, rows) of each replica's forward when DataParallel splits `batch` rows."""
    seen = []
    model = nn.Linear(4, 3).to("cuda:0")
    model.register_forward_pre_hook(lambda module, args: seen.append([str(args[0].device), args[0].shape[0]]))
    out = nn.DataParallel(model, device_ids=list(range(gpus)))(torch.randn(batch, 4, device="cuda:0"))
    seen.append(["output", str(out.device), list(out.shape)])
    return seen


@case(needs=2)
def dataparallel_64_over_2():
    return replica_rows(64, 2)


@case(needs=3)
def dataparallel_64_over_3():
    return replica_rows(64, 3)


@case(needs=5)
def dataparallel_64_over_5():
    return replica_rows(64, 5)


@case(needs=4)
def dataparallel_6_over_4_uses_3():
    return replica_rows(6, 4)


@case(needs=4)
def dataparallel_10_over_4():
    return replica_rows(10, 4)


@case(needs=2)
def dataparallel_1_over_2():
    return replica_rows(1, 2)


@case(needs=2)
def dataparallel_matches_one_device():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)).to("cuda:0")
    x = torch.randn(10, 8, device="cuda:0")
    single = model(x)
    single.sum().backward()
    grad = model[0].weight.grad.clone()
    model.zero_grad()
    parallel = nn.DataParallel(model, device_ids=[0, 1])(x)
    parallel.sum().backward()
    return [bool(torch.allclose(single, parallel, atol=1e-5)), bool(torch.allclose(grad, model[0].weight.grad, atol=1e-5)), str(model[0].weight.grad.device)]


@case(needs=2)
def dataparallel_needs_the_model_on_device_0():
    nn.DataParallel(nn.Linear(2, 2), device_ids=[0, 1])(torch.randn(4, 2, device="cuda:0"))


@case(needs=2)
def mixing_two_gpus():
    torch.ones(3, device="cuda:0") + torch.ones(3, device="cuda:1")


@case(needs=1)
def linear_on_gpu_input_on_cpu():
    nn.Linear(2, 2).to("cuda:0")(torch.randn(3, 2))


@case(needs=1)
def cpu_scalar_with_gpu_tensor():
    out = torch.tensor(2.0) * torch.ones(3, device="cuda:0")
    return str(out.device)


@case(needs=1)
def device_ordinal_out_of_range():
    torch.zeros(1).to(f"cuda:{torch.cuda.device_count()}")


@case(needs=1)
def set_device_out_of_range():
    torch.cuda.set_device(torch.cuda.device_count())


@case(needs=1)
def numpy_of_a_gpu_tensor():
    torch.ones(2, device="cuda:0").numpy()


@case(needs=2)
def placement_and_current_device():
    x = torch.randn(2, 3)
    y = x.to("cuda:1")
    z = x.cuda()
    layer = nn.Linear(3, 1).to("cuda:1")
    torch.cuda.set_device(1)
    current = torch.zeros(1, device="cuda")
    with torch.cuda.device(0):
        inside = torch.cuda.current_device()
    torch.cuda.set_device(0)
    return {
        "x": str(x.device),
        "y": [str(y.device), y.is_cuda, y.get_device()],
        "z": str(z.device),
        "params": sorted({str(p.device) for p in layer.parameters()}),
        "output": str(layer(y).device),
        "current": [str(current.device), inside],
        "back": [str(y.cpu().device), y.cpu().get_device()],
        "repr": "device='cuda:1'" in repr(y),
    }


@case(needs=2)
def model_parallel_needs_the_move():
    layer1, layer2 = nn.Linear(4, 8).to("cuda:0"), nn.Linear(8, 2).to("cuda:1")
    hidden = layer1(torch.randn(5, 4, device="cuda:0"))
    moved = layer2(hidden.to("cuda:1"))
    try:
        layer2(hidden)
        unmoved = "no error"
    except RuntimeError as exc:
        unmoved = "same-device error" if first_line(exc).startswith("Expected all tensors to be on the same device") else first_line(exc)
    return [str(moved.device), list(moved.shape), unmoved]


@case(needs=2)
def optimizer_over_two_devices():
    model = nn.Sequential(nn.Linear(4, 4).to("cuda:0"), nn.Linear(4, 1).to("cuda:1"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    out = model[1](model[0](torch.randn(2, 4, device="cuda:0")).to("cuda:1"))
    out.sum().backward()
    optimizer.step()
    return [sorted({str(p.device) for p in model.parameters()}), sorted({str(p.grad.device) for p in model.parameters()})]


@case(needs=2)
def memory_statistics():
    torch.cuda.reset_peak_memory_stats(0)
    before = torch.cuda.memory_allocated(0)
    block = torch.empty(1 << 20, dtype=torch.uint8, device="cuda:0")
    during = torch.cuda.memory_allocated(0)
    del block
    after = torch.cuda.memory_allocated(0)
    return [during - before >= 1 << 20, after <= before + 4096, torch.cuda.max_memory_allocated(0) >= during, torch.cuda.memory_allocated(1) < 1 << 20]


@case(needs=1)
def memory_counted_in_the_caching_allocators_blocks():
    """A request is counted as the block the caching allocator gives it: 16,000,000 bytes take a
    whole 16 MiB segment, 12,000,000 a whole 12 MiB one (what is left, under 1 MiB, is not split
    off), 1,000 bytes a block of 1,024 (cache emptied first, so that every request gets a new segment)."""
    torch.cuda.empty_cache()
    kept, grew = [], []
    for size in (16_000_000, 12_000_000, 1_000):
        before = torch.cuda.memory_allocated(0)
        kept.append(torch.empty(size, dtype=torch.uint8, device="cuda:0"))
        grew.append(torch.cuda.memory_allocated(0) - before)
    return [grew, torch.cuda.memory_reserved(0) >= torch.cuda.memory_allocated(0)]


@case(needs=1)
def memory_of_ddp_buckets_and_gradients():
    """Memory torch's C++ code allocates counts: DDP's gradient buckets (a second copy of the
    gradients) once DDP is built, the gradients once backward() has made them."""
    torch.cuda.set_device(0)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 1024)).to("cuda:0")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    start = torch.cuda.memory_allocated(0)
    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group(init_method=f"file://{folder}/store", rank=0, world_size=1)
        ddp = nn.parallel.DistributedDataParallel(model, device_ids=[0])
        built = torch.cuda.memory_allocated(0)
        ddp(torch.randn(8, 1024, device="cuda:0")).sum().backward()
        trained = torch.cuda.memory_allocated(0)
        dist.destroy_process_group()
    return [params <= built - start < 2 * params, trained - built >= params]


@case(needs=1)
def sharded_tensor_on_the_current_gpu():
    """ShardedTensor's code names the current GPU by its index (torch.device(k)): .cuda() of a
    sharded tensor and torch.equal of two (an all-reduce of the result on the GPU) work."""
    from torch.distributed._shard import sharded_tensor
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec

    with tempfile.TemporaryDirectory() as folder:
        dist.init_process_group(init_method=f"file://{folder}/store", rank=0, world_size=1)
        torch.cuda.set_device(0)
        tensor = sharded_tensor.ones(ChunkShardingSpec(dim=0, placements=["rank:0/cuda:0"]), 4, 4)
        seen = [str(tensor.cpu().cuda().local_shards()[0].tensor.device), torch.equal(tensor, tensor)]
        dist.destroy_process_group()
    return seen


def fsdp1_memory_of_a_rank(rank: int, folder: str) -> None:
    """One of two ranks: a model's memory before FSDP1, once wrapped (its shard), and after a backward (shard and gradients)."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    dist.init_process_group(init_method=f"file://{folder}/store", rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.Linear(1024, 1024)).to(rank)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    wrapped = FullyShardedDataParallel(model, device_id=rank)
    held = torch.cuda.memory_allocated(rank)
    wrapped(torch.randn(8, 1024, device=rank)).sum().backward()
    trained = torch.cuda.memory_allocated(rank)
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as out:
        json.dump([held / params, trained / params], out)
    dist.destroy_process_group()


@case(needs=2)
def memory_of_fsdp1_shards():
    """FSDP1 over two ranks keeps half of the flat parameter on each GPU and frees the rest by
    resizing storages to 0: a rank holds half the model once wrapped, and its gradients' half too after backward."""
    with tempfile.TemporaryDirectory() as folder:
        torch.multiprocessing.spawn(fsdp1_memory_of_a_rank, args=(folder,), nprocs=2)
        shares = [json.load(open(os.path.join(folder, f"rank{rank}.json"))) for rank in range(2)]
    return [[0.45 < held < 0.6, 0.9 < trained < 1.25] for held, trained in shares]


@case(needs=2)
def gpu0_carries_more_under_dataparallel():
    for device in range(2):
        torch.cuda.reset_peak_memory_stats(device)
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).to("cuda:0")
    out = nn.DataParallel(model, device_ids=[0, 1])(torch.randn(256, 256, device="cuda:0"))
    out.sum().backward()
    return torch.cuda.max_memory_allocated(0) > torch.cuda.max_memory_allocated(1)


@case(needs=1)
def timing_events():
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.ones(100, 100, device="cuda:0").matmul(torch.ones(100, 100, device="cuda:0"))
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) >= 0


@case(needs=2)
def every_way_of_naming_a_device():
    """An int, a string, a torch.device; positional or keyword; Module.to, Tensor.to, cuda(), factories."""
    def where(module):
        return str(next(module.parameters()).device)

    return {
        "Module.to(1)": where(nn.Linear(2, 2).to(1)),
        "Module.to(device=1)": where(nn.Linear(2, 2).to(device=1)),
        "Module.to(device='cuda:1')": where(nn.Linear(2, 2).to(device="cuda:1")),
        "Module.to(device=torch.device)": where(nn.Linear(2, 2).to(device=torch.device("cuda", 1))),
        "Module.to(torch.device, dtype)": where(nn.Linear(2, 2).to(torch.device("cuda:1"), torch.float64)),
        "Module.cuda(1)": where(nn.Linear(2, 2).cuda(1)),
        "Module.to_empty(device=1)": where(nn.Linear(2, 2).to_empty(device=1)),
        "Tensor.to(1)": str(torch.ones(1).to(1).device),
        "Tensor.to(device=1)": str(torch.ones(1).to(device=1).device),
        "Tensor.cuda(device=1)": str(torch.ones(1).cuda(device=1).device),
        "zeros(device=1)": str(torch.zeros(1, device=1).device),
        "new_ones(device=1)": str(torch.ones(1).new_ones(2, device=1).device),
    }


@case(needs=2)
def generator_on_a_gpu():
    generator = torch.Generator(device="cuda:1")
    generator.manual_seed(0)
    drawn = torch.randn(3, device="cuda:1", generator=generator)
    return [str(generator.device), str(drawn.device), isinstance(torch.default_generator, torch.Generator)]


@case(needs=2)
def module_moved_by_keyword_trains_there():
    model = nn.Linear(4, 2).to(device="cuda:1")
    out = model(torch.randn(3, 4, device="cuda:1"))
    out.sum().backward()
    return [str(out.device), str(model.weight.grad.device)]


@case(needs=2)
def default_device_set_by_the_program():
    torch.set_default_device("cuda:1")
    try:
        return [str(torch.ones(1).device), str(nn.Linear(2, 2).weight.device), str(torch.get_default_device())]
    finally:
        torch.set_default_device(None)


def save_and_load(saved_on: str, **load: object) -> list[str]:
    """Save a model's state dict from `saved_on`, load it back with `load`; the devices found."""
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "checkpoint.pt")
        torch.save({"model": nn.Linear(2, 2).to(saved_on).state_dict(), "step": 3}, path)
        loaded = torch.load(path, **load)
    return sorted({str(t.device) for t in loaded["model"].values()})


@case(needs=2)
def checkpoint_map_location_in_every_form():
    return {
        "none": save_and_load("cuda:1"),
        "'cuda:1'": save_and_load("cuda:0", map_location="cuda:1"),
        "torch.device": save_and_load("cuda:0", map_location=torch.device("cuda", 1)),
        "dict": save_and_load("cuda:0", map_location={"cuda:0": "cuda:1"}),
        "function": save_and_load("cuda:0", map_location=lambda storage, location: storage.cuda(1)),
        "'cpu'": save_and_load("cuda:1", map_location="cpu"),
        "identity": save_and_load("cuda:1", map_location=lambda storage, location: storage),
        "saved on cpu": save_and_load("cpu"),
    }


@case(needs=1)
def checkpoint_onto_a_missing_gpu():
    save_and_load("cuda:0", map_location={"cuda:0": f"cuda:{torch.cuda.device_count()}"})


class TimesTwo(torch.autograd.Function):
    """A custom autograd Function whose backward looks at its gradient's device and moves it."""

    seen: list = []

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        TimesTwo.seen.append(str(grad.device))
        return grad.to("cuda:1") * 2


@case(needs=2)
def custom_function_backward_on_the_gpu():
    TimesTwo.seen = []
    x = torch.ones(3, device="cuda:1", requires_grad=True)
    TimesTwo.apply(x).sum().backward()
    return [TimesTwo.seen, str(x.grad.device), x.grad.tolist()]


@case(needs=2)
def gradient_hooks_see_the_gpu():
    seen = []
    x = torch.ones(3, device="cuda:1", requires_grad=True)
    y = x * 3
    y.register_hook(lambda grad: seen.append(["tensor hook", str(grad.device)]))
    layer = nn.Linear(3, 1).to("cuda:1")
    layer.register_full_backward_hook(lambda module, grad_in, grad_out: seen.append(["module hook", str(grad_out[0].device)]))
    layer(y).sum().backward()
    return sorted(seen)


@case(needs=2)
def accelerator_queries():
    acc = torch.accelerator
    torch.cuda.set_device(0)
    before = acc.current_device_index()
    acc.set_device_index(1)
    after = [acc.current_device_index(), torch.cuda.current_device()]
    with acc.device_index(0):
        inside = acc.current_device_index()
    torch.cuda.set_device(0)
    return {
        "available": acc.is_available(),
        "count": acc.device_count() == torch.cuda.device_count(),
        "accelerator": str(acc.current_accelerator()),
        "module": torch.get_device_module().__name__,
        "backend": dist.get_default_backend_for_device(acc.current_accelerator()),
        "index": [before, after, inside],
    }


def exchange_between_ranks(rank: int, folder: str) -> None:
    """One of two ranks: a process group with no backend named, a point-to-point exchange and an all-reduce on its GPU."""
    dist.init_process_group(init_method=f"file://{folder}/store", rank=rank, world_size=2)
    torch.cuda.set_device(rank)
    mine, theirs = torch.full((2,), float(rank), device=f"cuda:{rank}"), torch.zeros(2, device=f"cuda:{rank}")
    for work in dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, 1 - rank), dist.P2POp(dist.irecv, theirs, 1 - rank)]):
        work.wait()
    dist.all_reduce(mine)
    with open(os.path.join(folder, f"rank{rank}.json"), "w") as out:
        json.dump([str(theirs.device), theirs.tolist(), mine.tolist()], out)
    dist.destroy_process_group()


@case(needs=2)
def unnamed_backend_between_two_ranks():
    """init_process_group() with no backend named: a CUDA build picks the accelerator's backend."""
    with tempfile.TemporaryDirectory() as folder:
        torch.multiprocessing.spawn(exchange_between_ranks, args=(folder,), nprocs=2)
        return [json.load(open(os.path.join(folder, f"rank{rank}.json"))) for rank in range(2)]


@case(needs=2)
def visible_devices_set_by_the_program():
    """CUDA_VISIBLE_DEVICES set by the program before its first CUDA call picks the GPUs it sees."""
    program = (
        "import os; os.environ['CUDA_VISIBLE_DEVICES'] = '1'\n"
        "import torch\n"
        "print(torch.cuda.device_count(), torch.ones(1).cuda().device)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=120)
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


FORKS = """
import os, torch

def in_child(use):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            said = str(use())
        except RuntimeError as error:
            said = str(error).splitlines()[0]
        os.write(write, said.encode())
        os._exit(0)
    os.close(write)
    said = os.read(read, 4096).decode()
    os.waitpid(pid, 0)
    return said

def make():
    return torch.ones(1, device="cuda").device

seen = []
torch.cuda.device_count()
seen.append(in_child(make))
os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
torch.cuda.is_available()
seen.append(in_child(make))
del os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"]
torch.cuda.is_available()
seen.append(in_child(make))
t = torch.ones(2, device="cuda")
seen.append(in_child(lambda: (tuple(t.shape), str(t.device), torch.cuda.is_available(), torch.cuda.device_count() > 0)))
print(seen)
"""


@case(needs=1)
def cuda_in_a_forked_child():
    """A child forked after the parent initialised CUDA, or asked the driver about it
    (is_available without NVML), cannot use CUDA; device_count (NVML) leaves forks usable; the
    child may read a GPU tensor's metadata and ask what is available."""
    done = subprocess.run([sys.executable, "-c", FORKS], capture_output=True, text=True, timeout=120)
    return done.stdout.strip() or done.stderr.strip().splitlines()[-1]


@case(needs=2)
def linear_input_on_another_gpu():
    nn.Linear(2, 2).to("cuda:0")(torch.randn(3, 2, device="cuda:1"))


@case(needs=1)
def linear_without_bias_input_on_cpu():
    nn.Linear(2, 2, bias=False).to("cuda:0")(torch.randn(3, 2))


@case(needs=1)
def embedding_indices_on_cpu():
    nn.Embedding(10, 4).to("cuda:0")(torch.tensor([1, 2]))


@case(needs=1)
def cross_entropy_target_on_cpu():
    nn.functional.cross_entropy(torch.randn(3, 5, device="cuda:0"), torch.tensor([0, 1, 2]))


@case(needs=1)
def cpu_tensor_meets_gpu_tensor():
    torch.ones(3) + torch.ones(3, device="cuda:0")


@case(needs=1)
def conv_input_on_cpu():
    nn.Conv2d(1, 1, 3).to("cuda:0")(torch.randn(1, 1, 5, 5))


def main() -> None:
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    wanted = set(sys.argv[1:])
    for name, needs, function in CASES:
        if wanted and name not in wanted:
            continue
        if needs > visible:
            print(json.dumps({"case": name, "skipped": f"needs {needs} GPUs, {visible} visible"}))
            continue
        try:
            record = {"case": name, "needs": needs, "value": function()}
        except Exception as exc:  # noqa: BLE001 - the error IS the observation
            record = {"case": name, "needs": needs, "error": type(exc).__name__, "message": first_line(exc)}
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
