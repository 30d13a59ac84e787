"""Buggy versions of the p10 reference solution and the checks each must lose."""
from __future__ import annotations

from variants import Variant

SCRIPT = "p10_hybrid.py"
ALL_CHECKS = ("stage_placement", "passes_per_step", "sync_pattern", "grad_sync", "params_sync", "clean_exit", "hybrid_answers")
STAGE2 = 'stage2_device = torch.device(f"cuda:{local_rank + local_world_size}")'
LOSS = "            loss = loss_fn(out, my.to(stage2_device)) / shard\n"
MEAN = 'loss_fn = nn.MSELoss(reduction="sum")'
SPLIT = "    pieces = list(zip(x.tensor_split(micro_batches), y.tensor_split(micro_batches)))\n"

VARIANTS = (
    Variant(
        "both_stages_on_one_device",
        ((SCRIPT, STAGE2, 'stage2_device = torch.device(f"cuda:{local_rank}")'),),
        frozenset({"stage_placement", "hybrid_answers"}),
        {"stage_placement": "rank 0 (local rank 0): stage 2 on cuda:0, expected cuda:2; rank 0: both stages on cuda:0 — model parallelism needs two devices"},
    ),
    Variant(
        "optimizer_step_per_micro_batch",
        ((SCRIPT, "            loss.backward()\n    # END SOLUTION\n    optimizer.step()\n", "            loss.backward()\n        optimizer.step()\n    # END SOLUTION\n"),),
        # one all-reduce per training step, in its last micro-batch: the sync pattern is right
        frozenset({"passes_per_step", "grad_sync", "params_sync", "hybrid_answers"}),
        {"passes_per_step": "rank 0 took 8 optimizer steps for 2 training steps — is optimizer.step() inside the micro-batch loop?"},
    ),
    Variant(
        "sync_on_every_micro_batch",
        ((SCRIPT, "        with model.no_sync() if ddp and not last else nullcontext():\n", "        with nullcontext():\n"),),
        frozenset({"sync_pattern"}),
        {"sync_pattern": "an all-reduce in every micro-batch (4 per step, as the grader's hub carried them) (your rank 0's records: all-reduces per micro-batch [1, 1, 1, 1]): the gradients are right, but 3 of 4 are wasted"},
    ),
    Variant(
        "loss_not_scaled",
        ((SCRIPT, MEAN, "loss_fn = nn.MSELoss()"), (SCRIPT, LOSS, "            loss = loss_fn(out, my.to(stage2_device))\n")),
        frozenset({"grad_sync", "params_sync"}),
        {"grad_sync": "step 0: none of your ranks' "},  # micro-batches of unequal size (drawn batch sizes): not even a multiple
    ),
    Variant(
        "mean_per_micro_batch_divided_by_their_number",
        ((SCRIPT, MEAN, "loss_fn = nn.MSELoss()"), (SCRIPT, LOSS, "            loss = loss_fn(out, my.to(stage2_device)) / len(pieces)\n")),
        frozenset({"grad_sync", "params_sync"}),
        {"grad_sync": "step 0: none of your ranks' "},
    ),
    Variant(
        "micro_batch_count_wrong",
        ((SCRIPT, SPLIT, "    pieces = list(zip(x.tensor_split(2), y.tensor_split(2)))\n"),),
        frozenset({"passes_per_step", "hybrid_answers"}),
        {"passes_per_step": "rank 0, step 0: 2 forward and 2 backward passes, expected 4 each (micro_batches 4)"},
    ),
    Variant(
        "torch_chunk_gives_fewer_pieces",
        ((SCRIPT, SPLIT, "    pieces = list(zip(x.chunk(micro_batches), y.chunk(micro_batches)))\n"),),
        # right on 32 rows in 4; m8's 20 rows in 8 come out as 7 pieces of 3 and 2
        frozenset({"passes_per_step", "hybrid_answers"}),
        {"passes_per_step": "rank 0, step 0: 7 forward and 7 backward passes, expected 8 each (micro_batches 8) — torch.chunk gives 7 pieces of a 20-row shard, not 8: use tensor_split"},
    ),
    Variant(
        "empty_micro_batches_and_the_whole_shard",
        ((SCRIPT, SPLIT, "    pieces = [(x[:0], y[:0])] * (micro_batches - 1) + [(x, y)]\n"),),
        frozenset({"passes_per_step"}),
        {"passes_per_step": "rows (3 empty), expected 4 non-empty parts of its"},
    ),
    Variant(
        "two_ranks_on_one_gpu",
        ((SCRIPT, 'stage1_device = torch.device(f"cuda:{local_rank}")', 'stage1_device = torch.device("cuda:0")'),),
        frozenset({"stage_placement", "hybrid_answers"}),
        {"stage_placement": "ranks 0, 1 share cuda:0 on node 0"},
    ),
    Variant(
        "activation_not_moved",
        ((SCRIPT, "return self.stage2(activation.to(stage2_device))", "return self.stage2(activation)"),),
        frozenset({"passes_per_step", "sync_pattern", "grad_sync", "params_sync", "clean_exit", "hybrid_answers"}),
        {"clean_exit": "mat1 is on cuda:0, different from other tensors on cuda:2 (when checking argument in method wrapper_CUDA_addmm) at p10_hybrid.py:"},
    ),
)


# Correct, written as PyTorch's DDP tutorial writes its model-parallel demo (ToyMpModel(dev0,
# dev1) with int devices): self.stage1.to(local_rank), activation.to(local_rank + 2). It loses nothing.
TUTORIAL_VARIANT = Variant(
    "tutorial_int_devices",
    (
        (SCRIPT, 'stage1_device = torch.device(f"cuda:{local_rank}")', "stage1_device = local_rank  # ints, as in PyTorch's DDP tutorial"),
        (SCRIPT, STAGE2, "stage2_device = local_rank + local_world_size"),
    ),
    frozenset(),
)

WRAP = "    model = DDP(model, device_ids=None)\n"
MICRO_BATCH = (
    "        with model.no_sync() if ddp and not last else nullcontext():\n"
    "            out = model(mx)\n"
    "            loss = loss_fn(out, my.to(stage2_device)) / shard\n"
    "            loss.backward()\n"
)

# Correct, written other ways than the reference: each keeps every point (untimed: 18), as what
# their ranks all-reduce shows.
UNUSUAL_VARIANTS = (
    Variant(  # one process has nobody to synchronise with: DDP only where there are several
        "ddp_only_for_several_processes",
        (
            (SCRIPT, "if ddp:\n    # the model spans two devices", "if ddp and world_size > 1:\n    # the model spans two devices"),
            (SCRIPT, "with model.no_sync() if ddp and not last else nullcontext():", "with model.no_sync() if isinstance(model, DDP) and not last else nullcontext():"),
        ),
        frozenset(),
    ),
    Variant(
        "find_unused_parameters_per_rank_seeds_get_rank_chatty_ranks_and_a_logged_loss",
        (
            (SCRIPT, WRAP, "    model = DDP(model, device_ids=None, find_unused_parameters=True, bucket_cap_mb=1)\n"),
            (SCRIPT, "torch.manual_seed(seed)\n", "torch.manual_seed(seed + rank)  # DDP copies rank 0's weights to every rank\n"),
            (SCRIPT, 'rank = int(os.environ["RANK"])', "rank = dist.get_rank()"),
            (SCRIPT, "    optimizer.step()\n", "    print(f'rank {rank} step {step}', flush=True)\n    optimizer.step()\n"),
            (
                SCRIPT,
                "            loss.backward()\n    # END SOLUTION\n",
                "            loss.backward()\n    if ddp:\n        logged = loss.detach().clone()\n        dist.all_reduce(logged)  # the last micro-batch's loss summed over ranks, for the log\n    # END SOLUTION\n",
            ),
        ),
        frozenset(),
    ),
    Variant(
        "bucket_views_no_sync_as_an_if_and_a_barrier",  # (static_graph with no_sync trips an internal assert of torch 2.13's reducer)
        (
            (SCRIPT, WRAP, "    model = DDP(model, device_ids=None, gradient_as_bucket_view=True)\n"),
            (
                SCRIPT,
                MICRO_BATCH,
                "        if ddp and not last:\n            with model.no_sync():\n                loss = loss_fn(model(mx), my.to(stage2_device)) / shard\n                loss.backward()\n"
                "        else:\n            loss = loss_fn(model(mx), my.to(stage2_device)) / shard\n            loss.backward()\n",
            ),
            (SCRIPT, "    dist.destroy_process_group()", "    dist.barrier()  # wait for every rank before leaving\n    dist.destroy_process_group()"),
        ),
        frozenset(),
    ),
)
