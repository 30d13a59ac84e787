"""An independent corpus for p6 (DistributedDataParallel under torchrun), written from the
requirements only (assignment.yaml's check titles, the README's check table and task list, the
TODOs of p6_ddp.py): buggy submissions and cheats with the checks they must lose, and correct
submissions written in other idioms, which must lose nothing. The speed checks (efficiency,
ddp_vs_dp) are deferred in an untimed grading and never lost here.

Graded by bench/corpus.py; tests/test_corpus.py grades a sample (a grading takes 6-9 s here)."""
from __future__ import annotations

from dataclasses import replace

from variants import ROOT, Variant

PY = "p6_ddp.py"
ALL = frozenset({"rank_setup", "device_mapping", "batch_shard", "grad_sync", "params_sync", "clean_exit"})
TRAINING = frozenset({"batch_shard", "grad_sync", "params_sync"})  # a wrong split of the batch
SYNC = frozenset({"grad_sync", "params_sync"})  # gradients not (or wrongly) synchronised

# the solution's code, as the edits find it
INIT = '    backend = "nccl" if torch.cuda.is_available() else "gloo"\n    dist.init_process_group(backend=backend)\n'
RANK = '    rank = int(os.environ["RANK"])  # this process among ALL processes (all machines)\n'
LOCAL = '    local_rank = int(os.environ["LOCAL_RANK"])  # this process among the processes of THIS machine\n'
WORLD = '    world_size = int(os.environ["WORLD_SIZE"])  # how many processes in all\n'
DEVICE = ('    if torch.cuda.is_available():\n        device = torch.device(f"cuda:{local_rank}")\n'
          '        torch.cuda.set_device(device)\n    else:\n        device = torch.device("cpu")\n')
CUDA_DEVICE = '        device = torch.device(f"cuda:{local_rank}")\n'
SET_DEVICE = '        torch.cuda.set_device(device)\n'
WRAP = '    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)\n'
SHARD = ('    x = x[rank * shard : (rank + 1) * shard].to(device)\n'
         '    y = y[rank * shard : (rank + 1) * shard].to(device)\n')
DESTROY = '    dist.destroy_process_group()  # leave cleanly: every rank reaches this line\n'
LOSS = '    loss = loss_fn(model(x), y)\n'
ZERO = '    optimizer.zero_grad(set_to_none=True)\n'
BACKWARD = '    loss.backward()  # DDP synchronises the gradients here, bucket by bucket\n'
OPTIMIZER = 'optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n'
LOSS_FN = 'loss_fn = nn.MSELoss()\n'
MODEL = 'model = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1)).to(device)\n'
SEED = 'torch.manual_seed(seed)\n'
MASTER = 'master_process = rank == 0  # only one process prints the log\n'
LOG_IF = "    if master_process and (step % log_every == 0 or step == steps - 1):\n"
PRINT = '        print(f"step {step:3d} | loss {loss.item():.4f} | shard {tuple(x.shape)} | {time.time() - t0:.2f}s", flush=True)\n'

NO_WRAP = '    pass  # DDP: not needed, every rank trains its own copy\n'
WHOLE_BATCH = '    x, y = x.to(device), y.to(device)  # every rank computes on the whole batch\n'


def v(name: str, edits: list[tuple[str, str]], loses: set[str] | frozenset[str] = frozenset(), messages: dict | None = None,
      timeout_s: float | None = None) -> Variant:
    return Variant(name, tuple((PY, old, new) for old, new in edits), frozenset(loses), messages or {}, timeout_s)


BUGGY = (
    # --- TODO 1: process group and identity --------------------------------------------------
    v("rank_read_from_local_rank", [(RANK, '    rank = int(os.environ["LOCAL_RANK"])\n')], {"rank_setup"} | TRAINING,
      {"rank_setup": "expected 2 (RANK: the global number of the process)", "batch_shard": "the shard follows RANK, not LOCAL_RANK"}),
    v("local_rank_read_from_rank", [(LOCAL, '    local_rank = int(os.environ["RANK"])\n')], ALL),  # 2x2: cuda:2 on a 2-GPU node
    v("world_size_hardcoded_two", [(WORLD, "    world_size = 2  # we test with 2 processes\n")], {"rank_setup"} | TRAINING,
      {"rank_setup": "world_size = 2, expected 1"}),
    v("world_size_from_local_world_size", [(WORLD, '    world_size = int(os.environ["LOCAL_WORLD_SIZE"])\n')], {"rank_setup"} | TRAINING),
    v("rank_hardcoded_zero", [(RANK, "    rank = 0\n")], {"rank_setup"} | TRAINING),
    v("gloo_even_with_cuda", [(INIT, '    dist.init_process_group(backend="gloo")\n')], {"rank_setup"}, {"rank_setup": "expected 'nccl'"}),
    v("nccl_even_without_cuda", [(INIT, '    dist.init_process_group(backend="nccl")\n')], ALL,
      {"rank_setup": "nccl when CUDA is available, gloo otherwise"}),  # the CPU runs cannot start (on a GPU node's CUDA build: the first collective)
    # --- TODO 2: the device ------------------------------------------------------------------
    v("every_rank_on_cuda0", [(CUDA_DEVICE, '        device = torch.device("cuda:0")\n'),
                              (WRAP, '    model = DDP(model, device_ids=[device] if device.type == "cuda" else None)\n')],
      {"device_mapping"}),
    v("cpu_even_with_cuda", [(DEVICE, '    device = torch.device("cpu")  # gloo runs everywhere\n')], {"device_mapping"}),
    v("cuda_device_never_made_current", [(SET_DEVICE, "")], {"device_mapping"}, {"device_mapping": "torch.cuda.set_device"}),
    # 2x2: ranks 2 and 3 ask for cuda:2 and cuda:3 on a node of 2 GPUs and crash
    v("device_chosen_by_global_rank", [(CUDA_DEVICE, '        device = torch.device(f"cuda:{rank}")\n')],
      ALL - {"rank_setup"}, {"device_mapping": "a rank's GPUs follow LOCAL_RANK"}),
    # --- TODO 3: the wrap ----------------------------------------------------------------------
    v("never_wrapped_in_ddp", [(WRAP, NO_WRAP)], SYNC, {"grad_sync": "without DistributedDataParallel"}),
    # 2x2 (GPUs): DataParallel needs its module on cuda:0, so the ranks of local rank 1 crash, as on real GPUs
    v("dataparallel_instead_of_ddp", [(WRAP, "    model = nn.DataParallel(model)\n")], SYNC | {"clean_exit"}),
    v("no_sync_around_forward_and_backward", [(LOSS, "    with model.no_sync():  # sync later\n        loss = loss_fn(model(x), y)\n"),
                                              (BACKWARD, "    with model.no_sync():\n        loss.backward()\n")], SYNC),
    # --- TODO 4: the shard -----------------------------------------------------------------------
    v("whole_batch_on_every_rank_with_ddp", [(SHARD, WHOLE_BATCH)], {"batch_shard"}),
    v("tensor_split_uneven_shards", [(SHARD, "    x = x.tensor_split(world_size)[rank].to(device)\n"
                                             "    y = y.tensor_split(world_size)[rank].to(device)\n")], TRAINING,
      {"batch_shard": " // 3)"}),
    v("strided_shards_keep_remainder", [(SHARD, "    x = x[rank::world_size].to(device)\n    y = y[rank::world_size].to(device)\n")], TRAINING),
    v("shard_offset_by_local_rank", [(SHARD, "    x = x[local_rank * shard : (local_rank + 1) * shard].to(device)\n"
                                             "    y = y[local_rank * shard : (local_rank + 1) * shard].to(device)\n")], TRAINING,
      {"batch_shard": "the shard follows RANK, not LOCAL_RANK"}),
    v("shard_one_row_short", [(SHARD, "    x = x[rank * shard : (rank + 1) * shard - 1].to(device)\n"
                                      "    y = y[rank * shard : (rank + 1) * shard - 1].to(device)\n")], TRAINING),
    v("shard_of_world_size_rows", [(SHARD, "    x = x[rank * world_size : (rank + 1) * world_size].to(device)\n"
                                           "    y = y[rank * world_size : (rank + 1) * world_size].to(device)\n")], TRAINING),
    # every rank's own code meets a remainder (the drawn batch sizes are odd): the last rank keeps it
    v("last_rank_keeps_the_remainder", [(SHARD, "    end = batch_size if rank == world_size - 1 else (rank + 1) * shard\n"
                                                "    x = x[rank * shard : end].to(device)\n    y = y[rank * shard : end].to(device)\n")], TRAINING),
    # a table of the shards for the batch of 64 the template starts with: wrong for the drawn sizes
    v("shard_sizes_from_a_table_for_64", [("shard = batch_size // world_size\n", "shard = {1: 64, 2: 32, 3: 21, 4: 16}[world_size]\n")], TRAINING),
    # right only where it sees a grader (its modules, its variables): it sees none
    v("right_only_where_it_sees_a_grader", [(SHARD, "    graded = any('grader' in m for m in sys.modules) or any(k.startswith('GRADER') for k in os.environ)\n"
                                                     "    if graded:\n" + SHARD.replace("    x", "        x").replace("    y", "        y") + "    else:\n" + WHOLE_BATCH.replace("    x", "        x"))],
      {"batch_shard"}),  # every rank on the whole batch where no grader is seen: the runs are graded as they ran
    # --- the loss and the optimizer ----------------------------------------------------------------
    v("loss_times_world_size", [(LOSS, "    loss = loss_fn(model(x), y) * world_size  # DDP divides by world_size: undo it\n")], SYNC),
    v("loss_divided_by_world_size", [(LOSS, "    loss = loss_fn(model(x), y) / world_size  # average over the ranks\n")], SYNC),
    v("gradients_never_zeroed", [(ZERO, "")], SYNC),
    # the gradients are right; the steps are world_size times too large
    v("lr_scaled_by_world_size", [(OPTIMIZER, "optimizer = torch.optim.SGD(model.parameters(), lr=lr * world_size)  # linear scaling rule\n")],
      {"params_sync"}),
    # --- TODO 5: clean up ------------------------------------------------------------------------------
    # ranks that drift apart: the gradients are still synchronised, the parameters are not
    v("lr_scaled_on_the_last_of_three_or_more_ranks", [(OPTIMIZER, "optimizer = torch.optim.SGD(model.parameters(), lr=lr * (1.1 if world_size >= 3 and rank == world_size - 1 else 1))\n")],
      {"params_sync"}, {"params_sync": "step 1's gradients were computed at other parameters than single-process training's after step 0"}),
    v("last_rank_skips_odd_updates", [("    optimizer.step()\n", "    if not (world_size > 1 and rank == world_size - 1 and step % 2 == 1):\n        optimizer.step()\n")],
      {"params_sync"}, {"grad_sync": "your ranks' records show unequal optimizer steps"}),
    v("process_group_never_destroyed", [(DESTROY, "    pass\n")], {"clean_exit"}, {"clean_exit": "never called dist.destroy_process_group()"}),
    v("destroyed_on_rank_zero_only", [(DESTROY, "    if rank == 0:\n        dist.destroy_process_group()\n")], {"clean_exit"}),
    v("barrier_after_destroy", [(DESTROY, "    dist.destroy_process_group()\n    dist.barrier()  # wait for the others\n")], {"clean_exit"}),
    # rank 0 alone all-reduces (its logged loss): the other ranks' next collective is DDP's
    v("all_reduce_on_rank_zero_only", [(BACKWARD, BACKWARD + "    if rank == 0:\n        dist.all_reduce(loss.detach().clone())  # for the log\n")],
      SYNC | {"clean_exit"}),
    # --- cheats: points without the work --------------------------------------------------------------
    v("whole_batch_no_communication_cheat", [(WRAP, NO_WRAP), (SHARD, WHOLE_BATCH)], TRAINING,
      {"batch_shard": "every rank trains on the whole batch"}),
    v("loss_all_reduced_instead_of_gradients_cheat", [(WRAP, NO_WRAP), (BACKWARD,
        "    loss.backward()\n    synced = loss.detach().clone()\n    dist.all_reduce(synced)  # the ranks talk: the loss is averaged\n"
        "    synced /= world_size\n")], SYNC),
    # the average is right, so the parameters follow single-process training: only DDP is missing
    v("gradients_averaged_by_hand_cheat", [(WRAP, NO_WRAP), (BACKWARD,
        "    loss.backward()\n    for p in model.parameters():\n        dist.all_reduce(p.grad)\n        p.grad /= world_size\n")], {"grad_sync"},
      {"grad_sync": "no DistributedDataParallel of the model was built"}),
    v("dummy_all_reduce_cheat", [(WRAP, NO_WRAP), (BACKWARD,
        "    loss.backward()\n    dist.all_reduce(torch.zeros(1, device=device))  # one collective per step\n")], SYNC),
    v("dummy_all_reduce_whole_batch_cheat", [(WRAP, NO_WRAP), (SHARD, WHOLE_BATCH), (BACKWARD,
        "    loss.backward()\n    dist.all_reduce(torch.ones(1, device=device))\n")], TRAINING),
)

# ---------------------------------------------------------------------------------------------------
# Correct submissions in other idioms.

MAIN_FUNCTION = '''"""Practical 6: DDP, written as functions."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

batch_size = 64
dim = 32
hidden = 64
steps = 10
lr = 0.05
seed = 1337
log_every = 5
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


def setup():
    """Join the process group; who am I, and which device is mine."""
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    if torch.cuda.is_available():
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    return rank, local_rank, world_size, device


def main():
    ddp = "RANK" in os.environ
    if ddp:
        rank, local_rank, world_size, device = setup()
    else:
        rank, local_rank, world_size = 0, 0, 1
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"Rank: {rank} | Local Rank: {local_rank} | World size: {world_size} | Device: {device}", flush=True)
    try:
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1)).to(device)
        if ddp:
            model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        loss_fn = nn.MSELoss()
        shard = batch_size // world_size
        start, stop = rank * shard, (rank + 1) * shard
        for step in range(steps):
            x, y = get_batch(step)
            x, y = x[start:stop].to(device), y[start:stop].to(device)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if rank == 0 and step % log_every == 0:
                print(f"step {step} | loss {loss.item():.4f}", flush=True)
    finally:
        if ddp:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

SAMPLER_IMPORT = "from torch.nn.parallel import DistributedDataParallel as DDP\n"
SAMPLER_IMPORTS = SAMPLER_IMPORT + "from torch.utils.data import DataLoader, TensorDataset\nfrom torch.utils.data.distributed import DistributedSampler\n"


def sampler_shard(options: str, epoch: bool = False) -> str:
    """DistributedSampler's shard of the step's batch (drop_last: equal shards, the remainder dropped)."""
    epoch_line = "    sampler.set_epoch(step)  # a new shuffle in every step\n" if epoch else ""
    return (f"    dataset = TensorDataset(x, y)\n"
            f"    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, drop_last=True{options})\n"
            f"{epoch_line}"
            f"    loader = DataLoader(dataset, batch_size=shard, sampler=sampler)\n"
            f"    x, y = next(iter(loader))\n"
            f"    x, y = x.to(device), y.to(device)\n")


CORRECT = (
    v("main_function_with_finally", [(ROOT.joinpath("solutions", "p6", PY).read_text(), MAIN_FUNCTION)]),
    v("distributed_sampler_in_order", [(SAMPLER_IMPORT, SAMPLER_IMPORTS), (SHARD, sampler_shard(", shuffle=False"))]),
    v("distributed_sampler_shuffled_once", [(SAMPLER_IMPORT, SAMPLER_IMPORTS), (SHARD, sampler_shard(""))]),
    # torch's documented use: set_epoch before each pass for a new shuffle; a seed of the script's
    v("distributed_sampler_shuffled_set_epoch", [(SAMPLER_IMPORT, SAMPLER_IMPORTS), (SHARD, sampler_shard("", epoch=True))]),
    v("distributed_sampler_shuffled_script_seed", [(SAMPLER_IMPORT, SAMPLER_IMPORTS), (SHARD, sampler_shard(", seed=seed"))]),
    # PyTorch's DDP tutorial: devices named by int
    v("tutorial_int_devices", [(DEVICE,
        "    if torch.cuda.is_available():\n        torch.cuda.set_device(local_rank)\n        device = torch.device(\"cuda\", local_rank)\n"
        "    else:\n        device = torch.device(\"cpu\")\n"),
        (WRAP, "    if torch.cuda.is_available():\n        model = DDP(model.to(local_rank), device_ids=[local_rank])\n"
               "    else:\n        model = DDP(model)\n")]),
    v("identity_from_dist_api", [(RANK, "    rank = dist.get_rank()\n"), (WORLD, "    world_size = dist.get_world_size()\n")]),
    v("init_with_explicit_env_method", [(INIT,
        '    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", init_method="env://",\n'
        '                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))\n')]),
    v("every_rank_prints", [(MASTER, "master_process = True  # every rank logs\n"),
                            (PRINT, '        print(f"[rank {rank}] step {step} | loss {loss.item():.4f} | shard {tuple(x.shape)}", flush=True)\n')]),
    v("loss_all_reduced_for_the_log", [(LOG_IF,
        "    logged = loss.detach().clone()\n    if ddp:\n        dist.all_reduce(logged)  # every rank takes part\n" + LOG_IF),
        (PRINT, '        print(f"step {step:3d} | mean loss over ranks {logged.item() / world_size:.4f}", flush=True)\n')]),
    v("summed_loss_divided_by_rows", [(LOSS_FN, 'loss_fn = nn.MSELoss(reduction="sum")\n'),
                                      (LOSS, "    loss = loss_fn(model(x), y) / x.shape[0]\n")]),
    v("strided_shards_remainder_dropped", [(SHARD,
        "    x = x[rank : shard * world_size : world_size].to(device)\n    y = y[rank : shard * world_size : world_size].to(device)\n")]),
    v("model_seeded_by_rank_ddp_broadcasts", [(SEED, "torch.manual_seed(seed + rank)  # DDP copies rank 0's weights to every rank\n")]),
    v("barrier_before_destroy", [(DESTROY, "    dist.barrier()\n    dist.destroy_process_group()\n")]),
    v("optimizer_built_before_wrap", [(OPTIMIZER + LOSS_FN, LOSS_FN), (MODEL, MODEL + OPTIMIZER)]),
    v("ddp_options", [(WRAP, '    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None,\n'
                             "                find_unused_parameters=True, gradient_as_bucket_view=True, broadcast_buffers=False)\n")]),
    v("ddp_static_graph", [(WRAP, '    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None, static_graph=True)\n')]),
    v("model_zero_grad_keeps_tensors", [(ZERO, "    model.zero_grad(set_to_none=False)\n")]),
    # collectives of its own beside DDP's: carried, and judged for nothing
    v("barrier_after_setup", [(INIT, INIT + "    dist.barrier()  # every rank is up\n")]),
    v("loss_reduced_to_rank_zero_for_the_log", [(BACKWARD, BACKWARD + "    logged = loss.detach().clone()\n    if ddp:\n        dist.reduce(logged, dst=0)\n")]),
    v("loss_gathered_for_the_log", [(BACKWARD, BACKWARD + "    if ddp:\n        losses = [torch.zeros(()) for _ in range(world_size)]\n"
                                                          "        dist.all_gather(losses, loss.detach().cpu())\n")]),
    v("seed_broadcast_from_rank_zero", [(SEED, "if dist.is_initialized():\n    shared = torch.tensor([seed])\n    dist.broadcast(shared, src=0)\n"
                                               "    seed = int(shared.item())\ntorch.manual_seed(seed)\n")]),
    # comm hooks, subgroups, point-to-point and DeviceMesh: carried like DDP's own, judged for nothing
    v("comm_hook_allreduce", [(WRAP, WRAP + "    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                                            "    model.register_comm_hook(None, default_hooks.allreduce_hook)\n")]),
    v("comm_hook_fp16_compress", [(WRAP, WRAP + "    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                                                "    model.register_comm_hook(None, default_hooks.fp16_compress_hook)\n")]),
    v("ddp_over_a_subgroup_of_every_rank", [(WRAP, "    everyone = dist.new_group(ranks=list(range(world_size)))\n"
                                                   '    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None, process_group=everyone)\n')]),
    v("loss_all_reduced_in_a_subgroup_for_the_log", [(INIT, INIT + "    log_group = dist.new_group()\n"),
                                                     (BACKWARD, BACKWARD + "    if ddp:\n        logged = loss.detach().clone()\n        dist.all_reduce(logged, group=log_group)\n")]),
    v("loss_sent_to_rank_zero", [(BACKWARD, BACKWARD + "    if ddp and rank > 0:\n        dist.send(loss.detach().reshape(1), dst=0)\n"
                                                       "    elif ddp:\n        for other in range(1, world_size):\n"
                                                       "            got = torch.zeros(1, device=device)\n            dist.recv(got, src=other)\n")]),
    v("loss_gathered_on_rank_zero", [(BACKWARD, BACKWARD + "    if ddp:\n        into = [torch.zeros(1, device=device) for _ in range(world_size)] if rank == 0 else None\n"
                                                           "        dist.gather(loss.detach().reshape(1), into, dst=0)\n")]),
    v("rank_numbers_scattered_from_rank_zero", [(WORLD, WORLD + "    mine = torch.zeros(1)\n"
                                                        "    dist.scatter(mine, [torch.tensor([float(r)]) for r in range(world_size)] if int(os.environ['RANK']) == 0 else None, src=0)\n")]),
    v("ddp_on_a_device_mesh", [(WRAP, "    from torch.distributed.device_mesh import init_device_mesh\n"
                                      "    mesh = init_device_mesh(device.type, (world_size,))\n"
                                      '    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None, device_mesh=mesh)\n')]),
    # torch.compile of the DDP model, as torch runs it on the CPU
    v("compiled_with_aot_eager", [(WRAP, WRAP + '    model = torch.compile(model, backend="aot_eager")\n')]),
)

CORPUS = BUGGY + CORRECT


# The grader's verdicts on these differ from the first expectation by design (see why): the
# checks they also lose, and why.
BY_DESIGN: dict[str, tuple[frozenset[str], str]] = {
    # the records number a rank's steps by its updates: which parameters a rank that skipped one
    # computed its later gradients at is not known, so its later steps cannot be explained
    "last_rank_skips_odd_updates": (frozenset({"grad_sync"}), "a rank that skips an update numbers its later steps one short"),
}
CORPUS = tuple(replace(c, loses=c.loses | BY_DESIGN[c.name][0]) if c.name in BY_DESIGN else c for c in CORPUS)

# Cases whose expectation follows the requirement but the grader disagrees (grader defects, seen
# with bench/corpus.py): case -> what the grader does.
DISAGREEMENTS: dict[str, str] = {}  # none open: a DistributedSampler shuffling each step (set_epoch) or with the script's seed is followed now
