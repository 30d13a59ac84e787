"""Buggy versions of the p6 reference solution and the checks each must lose."""
from __future__ import annotations

import textwrap

from variants import ROOT, Variant

SCRIPT = "p6_ddp.py"
ALL_CHECKS = ("rank_setup", "device_mapping", "batch_shard", "grad_sync", "params_sync", "clean_exit")


WRAP = '    model = DDP(model, device_ids=[local_rank] if device.type == "cuda" else None)\n'
SHARD = "    x = x[rank * shard : (rank + 1) * shard].to(device)\n    y = y[rank * shard : (rank + 1) * shard].to(device)\n"
LOSS = "    loss = loss_fn(model(x), y)\n"
SAMPLED = (  # the shard through a DataLoader with a DistributedSampler (drop_last: every shard the same size)
    "    data = TensorDataset(x, y)\n"
    "    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, {shuffle}drop_last=True)\n"
    "    x, y = next(iter(DataLoader(data, batch_size=shard, sampler=sampler)))\n"
    "    x, y = x.to(device), y.to(device)\n"
)

VARIANTS = (
    Variant(
        "not_wrapped",
        ((SCRIPT, WRAP, "    pass  # the model is never wrapped in DDP\n"),),
        frozenset({"grad_sync", "params_sync"}),
        {"grad_sync": "no all-reduce at all: is the model wrapped in DistributedDataParallel?", "params_sync": "your ranks made no all-reduce that could carry its gradients"},
    ),
    Variant(
        "full_batch_everywhere",
        ((SCRIPT, SHARD, "    x, y = x.to(device), y.to(device)\n"),),
        # each rank sends the whole batch's gradient, not its shard's: the split is wrong, the
        # training (DDP's average of the same gradient) is single-process training's on every row
        frozenset({"batch_shard"}),
        {"batch_shard": "every rank trains on the whole batch"},
    ),
    Variant(
        "every_shard_on_every_rank",
        (
            (SCRIPT, SHARD, "    x, y = x[: shard * world_size].to(device), y[: shard * world_size].to(device)\n"),
            (
                SCRIPT,
                LOSS + "    optimizer.zero_grad(set_to_none=True)\n    loss.backward()  #",
                # each call is a shard's size, but the rank feeds them all: only the last syncs
                "    optimizer.zero_grad(set_to_none=True)\n"
                "    for i, (xs, ys) in enumerate(zip(x.split(shard), y.split(shard))):\n"
                "        with model.no_sync() if ddp and i < world_size - 1 else contextlib.nullcontext():\n"
                "            loss = loss_fn(model(xs), ys) / world_size\n"
                "            loss.backward()  #",
            ),
            (SCRIPT, "import os\n", "import contextlib\nimport os\n"),
        ),
        frozenset({"batch_shard", "grad_sync", "params_sync"}),
        {"batch_shard": " rows in step 0 (rows 0–"},
    ),
    Variant(
        "local_rank_from_rank",
        ((SCRIPT, 'local_rank = int(os.environ["LOCAL_RANK"])', 'local_rank = int(os.environ["RANK"])'),),
        # on the second simulated node, cuda:2 does not exist: the ranks there crash
        frozenset({"rank_setup", "device_mapping", "batch_shard", "grad_sync", "params_sync", "clean_exit"}),
        {"rank_setup": "local_rank = 2, expected 0 (LOCAL_RANK", "device_mapping": "GPUs follow LOCAL_RANK"},
    ),
    Variant(
        "device_from_rank",
        ((SCRIPT, 'device = torch.device(f"cuda:{local_rank}")', 'device = torch.device(f"cuda:{rank}")'),),
        frozenset({"device_mapping", "batch_shard", "grad_sync", "params_sync", "clean_exit"}),
        {"device_mapping": "there is no GPU with that number on this node (a rank's GPUs follow LOCAL_RANK", "clean_exit": "invalid device ordinal"},
    ),
    Variant(
        "averaged_twice",
        ((SCRIPT, LOSS, "    loss = loss_fn(model(x), y) / world_size\n"),),
        frozenset({"grad_sync", "params_sync"}),
        {"grad_sync": "1/2 of it: averaged twice", "params_sync": "step 1's gradients were computed at other parameters than single-process training's"},
    ),
    Variant(
        "rank1_skips_backward",
        ((SCRIPT, "    loss.backward()  #", "    if rank != 1:\n        loss.backward()  #"),),
        frozenset({"grad_sync", "params_sync", "clean_exit"}),
        {"clean_exit": "rank 0 lost contact with the other ranks in a collective at p6_ddp.py:"},
    ),
    Variant(
        "rank1_skips_backward_then_barrier",
        (
            (SCRIPT, "    loss.backward()  #", "    if rank != 1:\n        loss.backward()  #"),
            (SCRIPT, "    dist.destroy_process_group()  #", "    dist.barrier()\n    dist.destroy_process_group()  #"),
        ),
        # the grader's hub sees rank 1's barrier where rank 0 all-reduces: no hang, both are told
        frozenset({"grad_sync", "params_sync", "clean_exit"}),
        {"clean_exit": "rank 0 called all_reduce SUM([2177] float32) where rank 1 called barrier()", "grad_sync": "rank 0 lost contact with the other ranks in a collective at p6_ddp.py:"},
        timeout_s=5,
    ),
    Variant(
        "rank1_raises",
        ((SCRIPT, "t0 = time.time()\n", 't0 = time.time()\nif rank == 1:\n    raise RuntimeError("rank 1 gives up")\n'),),
        frozenset({"batch_shard", "grad_sync", "params_sync", "clean_exit"}),
        {"clean_exit": "rank 1 raised RuntimeError: rank 1 gives up at p6_ddp.py", "batch_shard": "rank 1 never ran the model"},
    ),
    Variant(
        "gloo_and_no_current_gpu",
        (
            (SCRIPT, '    backend = "nccl" if torch.cuda.is_available() else "gloo"\n', '    backend = "gloo"  # works everywhere, so why not\n'),
            (SCRIPT, "        torch.cuda.set_device(device)\n", ""),
        ),
        # only the simulated GPU nodes (2x2) tell: gloo on GPUs runs, and local rank 0 is current anyway
        frozenset({"rank_setup", "device_mapping"}),
        {
            "rank_setup": "rank 0: init_process_group(backend='gloo') with GPUs, expected 'nccl'",
            "device_mapping": "rank 1: the current CUDA device was cuda:0 when DDP was built, expected cuda:1",
        },
    ),
    Variant(
        "average_by_hand_instead_of_ddp",
        (
            (SCRIPT, WRAP, "    pass  # no DDP: the gradients are averaged by hand after backward\n"),
            (
                SCRIPT,
                "    optimizer.step()\n",
                "    if ddp:\n        for p in model.parameters():\n            dist.all_reduce(p.grad)\n            p.grad /= world_size\n    optimizer.step()\n",
            ),
        ),
        # right gradients and parameters, but the TODO asks for DDP: no broadcast of rank 0's weights
        frozenset({"grad_sync"}),
        {"grad_sync": "ws2 (1 node × 2 ranks): the gradients are right, but no DistributedDataParallel of the model was built"},
    ),
    Variant(
        "never_destroyed",
        ((SCRIPT, "    dist.destroy_process_group()  #", "    pass  #"),),
        frozenset({"clean_exit"}),
        {"clean_exit": "never called dist.destroy_process_group()"},
    ),
    Variant(
        "world_size_hardcoded",
        ((SCRIPT, 'world_size = int(os.environ["WORLD_SIZE"])', "world_size = 2"),),
        frozenset({"rank_setup", "batch_shard", "grad_sync", "params_sync"}),
        {"rank_setup": "world_size = 2, expected 4", "batch_shard": " // 3)"},
    ),
)


# Correct, but slow: it computes a diagnostic of every weight matrix each step (the norm of
# W Wᵀ, three times; once at the end would do: 3.2-3.6× measured; one ‖WᵀW‖ cost only 1.13×).
# Spectral norms, an SVD each, cost 13× and made the timed gradings' 3 × longer launches take
# seconds each). The gradients, the sync and the parameters stay right, so only the
# efficiency check may lose.
# Slow, and hiding it: every clock of its own process runs at a third of the speed, so its
# records (the recorder's step times among them) say its steps are fast. The grader times the
# step by its hub's clock, in another process.
SLOW_VARIANT = Variant(
    "weight_norms_every_step_behind_a_slowed_clock",
    (
        (SCRIPT, LOSS, LOSS + "    with torch.no_grad():  # diagnostics every step instead of once at the end\n        norms = [torch.linalg.matrix_norm(p @ p.T) for p in model.parameters() if p.dim() == 2 for _ in range(3)]\n"),
        (SCRIPT, "import time\n", "import time\n\nfor _name in ('monotonic', 'perf_counter', 'time'):\n    setattr(time, _name, lambda real=getattr(time, _name), start=getattr(time, _name)(): start + (real() - start) / 3)\n"),
    ),
    frozenset({"efficiency"}),
    {"efficiency": "above the 1.3× allowed"},
)


# A cheat of the speed check: the script trains on one row when it sees the timed workload's
# batch (its inputs differ from the checked runs'), so its timed steps are fast. What its ranks
# all-reduce in the launch shows other training than the grader's own on those inputs.
SKIPS_WORK_WHEN_TIMED = Variant(
    "one_row_when_the_batch_looks_timed",
    ((SCRIPT, LOSS, "    loss = loss_fn(model(x[:1]), y[:1]) if batch_size >= 256 else loss_fn(model(x), y)  # fast where it is timed\n"),),
    frozenset({"efficiency"}),
    {"efficiency": "your script could not be timed: the grader's hub could not time it: what your ranks' all-reduces carried in this launch is not the grader's own training on its inputs"},
)


# each step's work moved ahead of the loop (precompute, then replay, as the clock sees it): for
# every step asked, two forward and backward passes of the whole batch (no all-reduce) before
# step 0. Forward passes alone were too cheap: six a step cost 3.75 ms against a step of 19 ms,
# under the 1.3x limit even when charged in full, and passed in a full run (0.90x)
HOISTED_WORK = Variant(
    "each_steps_work_done_before_the_first_step",
    ((SCRIPT, "t0 = time.time()\n", "plain = getattr(model, 'module', model)  # each step's forward and backward passes, twice, on the whole batch, ahead of the loop\nfor s in range(steps):\n    for _ in range(2):\n        loss_fn(plain(get_batch(s)[0].to(device)), get_batch(s)[1].to(device)).backward()\noptimizer.zero_grad(set_to_none=True)\nt0 = time.time()\n"),),
    frozenset({"efficiency"}),
    {"efficiency": "of work done before the first timed step that grows with the steps asked"},
)
# correct: a second of set-up before the loop that does not grow with the steps (what
# torch.compile's compilation costs a long training: once)
CONSTANT_START = Variant("a_second_of_set_up_before_the_first_step", ((SCRIPT, "t0 = time.time()\n", "time.sleep(1.0)  # set-up that does not grow with the steps\nt0 = time.time()\n"),), frozenset())


# Correct, written as PyTorch's DDP tutorial writes it: the GPU named by an int (device =
# local_rank, so model.to(local_rank) and x.to(local_rank)). CUDA takes an int for cuda:k; so
# must the virtual GPUs of the 2x2 run: it loses nothing.
TUTORIAL_VARIANT = Variant(
    "tutorial_int_devices",
    (
        (SCRIPT, 'device = torch.device(f"cuda:{local_rank}")', "device = local_rank  # an int, as in PyTorch's DDP tutorial"),
        (SCRIPT, WRAP, WRAP.replace('device.type == "cuda"', "torch.cuda.is_available()")),
    ),
    frozenset(),
)


# Correct but unusual: each must keep every point (untimed). DDP's options change which
# collectives it makes; the grader's hub carries whichever it makes.
UNUSUAL_VARIANTS = (
    Variant(  # one process has nobody to synchronise with: DDP only where there are several
        "ddp_only_for_several_processes",
        ((SCRIPT, "    model = DDP(model, device_ids=[local_rank] if device.type == \"cuda\" else None)\n", "    if world_size > 1:\n        model = DDP(model, device_ids=[local_rank] if device.type == \"cuda\" else None)\n"),),
        frozenset(),
    ),
    Variant(
        "find_unused_parameters_per_rank_seeds_get_rank_and_chatty_ranks",
        (
            (SCRIPT, WRAP, WRAP.replace("else None)", "else None, find_unused_parameters=True)")),
            (SCRIPT, "torch.manual_seed(seed)\n", "torch.manual_seed(seed + rank)  # DDP copies rank 0's weights to every rank\n"),
            (SCRIPT, 'rank = int(os.environ["RANK"])', "rank = dist.get_rank()"),
            (SCRIPT, "    if master_process and (step % log_every == 0 or step == steps - 1):\n", "    print(f'rank {rank} step {step}', flush=True)\n    if master_process and (step % log_every == 0 or step == steps - 1):\n"),
            (SCRIPT, SHARD, SAMPLED.format(shuffle="shuffle=False, ")),  # rank r takes rows r, r + world_size, ...
            (SCRIPT, "import os\n", "import os\n\nfrom torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n"),
        ),
        frozenset(),
    ),
    Variant(
        "static_graph_bucket_views_tiny_buckets_a_sampler_of_the_scripts_seed_shuffling_each_step_then_a_barrier",
        (
            (SCRIPT, WRAP, WRAP.replace("else None)", "else None, static_graph=True, gradient_as_bucket_view=True, bucket_cap_mb=0.001)")),
            (SCRIPT, "    dist.destroy_process_group()", "    dist.barrier()  # wait for every rank before leaving\n    dist.destroy_process_group()"),
            # DistributedSampler seeded with the script's seed, a new shuffle each step (set_epoch): disjoint shards all the same
            (SCRIPT, SHARD, SAMPLED.format(shuffle="seed=seed, ").replace("    x, y = next(", "    sampler.set_epoch(step)\n    x, y = next(")),
            (SCRIPT, "import os\n", "import os\n\nfrom torch.utils.data import DataLoader, DistributedSampler, TensorDataset\n"),
        ),
        frozenset(),
    ),
)


# Correct, with the training in a main() function (its variables are locals of main, not the
# module's) and the loss all-reduced for the log every step, beside DDP's gradient all-reduces.
_TAIL = (ROOT / "solutions" / "p6" / SCRIPT).read_text().split("# distributed setup", 1)[1]
_LOGGED = "    loss.backward()  # DDP synchronises the gradients here, bucket by bucket\n"
IN_MAIN_VARIANT = Variant(
    "training_in_main_with_the_loss_all_reduced_for_the_log",
    (
        (
            SCRIPT,
            "# distributed setup" + _TAIL,
            "def main():\n"
            + textwrap.indent("# distributed setup" + _TAIL.replace(_LOGGED, _LOGGED + "    if ddp:\n        logged = loss.detach().clone()\n        dist.all_reduce(logged)  # the mean loss over ranks, for the log\n        logged /= world_size\n"), "    ")
            + "\n\nif __name__ == \"__main__\":\n    main()\n",
        ),
    ),
    frozenset(),
)
UNUSUAL_VARIANTS = (*UNUSUAL_VARIANTS, IN_MAIN_VARIANT)
