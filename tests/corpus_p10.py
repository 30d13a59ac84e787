"""An independent corpus for p10 (hybrid parallelism: DDP across ranks, a two-stage model on two
GPUs per rank, micro-batches with gradient accumulation), written from the requirements only
(assignment.yaml's check titles, the README's check table and its notes on loss scaling and
no_sync, the TODOs of p10_hybrid.py, answers.yaml): buggy submissions and cheats with the checks
they must lose, and correct submissions written in other idioms, which must lose nothing. The
speed check (efficiency) is deferred in an untimed grading and never lost here.

The answers stay the reference's unless a case edits them, so a program that does something else
than the reference (other GPUs, another number of passes) also loses hybrid_answers: its answers
no longer agree with what it did.

Graded by bench/corpus.py; tests/test_corpus.py grades a sample (a grading takes 6-9 s here)."""
from __future__ import annotations

from dataclasses import replace

from variants import ROOT, Variant

PY = "p10_hybrid.py"
ANS = "answers.yaml"
ALL = frozenset({"stage_placement", "passes_per_step", "sync_pattern", "grad_sync", "params_sync", "clean_exit", "hybrid_answers"})
RESULT = frozenset({"grad_sync", "params_sync"})  # the step's gradients are wrong
CRASH_2X2 = frozenset({"stage_placement", "grad_sync", "params_sync", "clean_exit"})  # the checks graded on the 2x2 run
SPLIT = frozenset({"passes_per_step", "hybrid_answers"})  # another number of passes than micro_batches (the answers say it)
NO_DDP = frozenset({"sync_pattern", "grad_sync", "params_sync"})  # no gradient all-reduce by DDP

# the solution's code, as the edits find it
RANK = '    rank = int(os.environ["RANK"])\n'
LOCAL = '    local_rank = int(os.environ["LOCAL_RANK"])\n'
WORLD = '    world_size = int(os.environ["WORLD_SIZE"])\n'
STAGE1 = '    stage1_device = torch.device(f"cuda:{local_rank}")\n'
STAGE2 = '    stage2_device = torch.device(f"cuda:{local_rank + local_world_size}")\n'
PLACE = "        self.stage1.to(stage1_device)\n        self.stage2.to(stage2_device)\n"
SEED_MODEL = "torch.manual_seed(seed)\nmodel = TwoStageModel()\n"
WRAP = "    model = DDP(model, device_ids=None)\n"
OPTIMIZER = "optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n"
LOSS_FN = 'loss_fn = nn.MSELoss(reduction="sum")\n'
SHARD = "    x, y = x[rank * shard : (rank + 1) * shard], y[rank * shard : (rank + 1) * shard]\n"
PIECES = "    pieces = list(zip(x.tensor_split(micro_batches), y.tensor_split(micro_batches)))\n"
ZERO = "    optimizer.zero_grad(set_to_none=True)\n"
FOR = "    for i, (mx, my) in enumerate(pieces):\n"
CONTEXT = "        with model.no_sync() if ddp and not last else nullcontext():\n"
BODY = ("        with model.no_sync() if ddp and not last else nullcontext():\n"
        "            out = model(mx)\n"
        "            loss = loss_fn(out, my.to(stage2_device)) / shard\n"
        "            loss.backward()\n")
LOSS = "            loss = loss_fn(out, my.to(stage2_device)) / shard\n"
BACKWARD = "            loss.backward()\n"
STEP = "    optimizer.step()\n"
DESTROY = "    dist.destroy_process_group()\n"
LOG = '        print(f"[Rank 0] step {step} | {len(pieces)} micro-batches | loss {loss.item() * shard:.4f} | {time.time() - t0:.2f}s", flush=True)\n'
LOG_IF = "    if rank == 0 and (step % log_every == 0 or step == steps - 1):\n"

# answers.yaml, as the edits find it
A_PROCESSES = "  processes: 2 "
A_RANK0 = "    rank0: [0, 2]"
A_RANK1 = "    rank1: [1, 3]"
A_PASSES = "    m2: 2  # TEMPLATE: m2:\n    m4: 4  # TEMPLATE: m4:\n    m8: 8  # TEMPLATE: m8:\n"

NO_WRAP = "    pass  # no DDP: each rank keeps its own copy\n"
NO_CONTEXT = "        with nullcontext():\n"


def v(name: str, edits: list[tuple[str, str] | tuple[str, str, str]], loses: set[str] | frozenset[str] = frozenset(),
      messages: dict | None = None, timeout_s: float | None = None) -> Variant:
    """Edits of the script as (old, new), of another file as (file, old, new)."""
    return Variant(name, tuple(e if len(e) == 3 else (PY, *e) for e in edits), frozenset(loses), messages or {}, timeout_s)


BUGGY = (
    # --- TODO 1: the stage devices --------------------------------------------------------------
    v("stage2_on_the_same_gpu", [(STAGE2, '    stage2_device = torch.device(f"cuda:{local_rank}")\n')],
      {"stage_placement", "hybrid_answers"}, {"stage_placement": "model parallelism needs two devices"}),
    v("stage2_on_the_same_gpu_answered_as_seen", [(STAGE2, '    stage2_device = torch.device(f"cuda:{local_rank}")\n'),
                                                  (ANS, A_RANK0, "    rank0: [0]"), (ANS, A_RANK1, "    rank1: [1]")],
      {"stage_placement"}),
    v("stage2_on_the_next_gpu_shared", [(STAGE2, '    stage2_device = torch.device(f"cuda:{local_rank + 1}")\n')],
      {"stage_placement", "hybrid_answers"}),
    v("stages_swapped", [(STAGE1, '    stage1_device = torch.device(f"cuda:{local_rank + local_world_size}")\n'),
                         (STAGE2, '    stage2_device = torch.device(f"cuda:{local_rank}")\n')], {"stage_placement"},
      {"stage_placement": "stage 1 on cuda:2, expected cuda:0"}),
    # single: 1 rank on 4 GPUs must use cuda:0 and cuda:1, not cuda:0 and cuda:2
    v("stage2_offset_by_half_the_gpus", [(STAGE2, '    stage2_device = torch.device(f"cuda:{local_rank + torch.cuda.device_count() // 2}")\n')],
      {"stage_placement"}),
    # 2x2: ranks 2 and 3 ask for cuda:4 and cuda:5 on a node of 4 GPUs and crash
    v("stage_devices_by_global_rank", [(STAGE1, '    stage1_device = torch.device(f"cuda:{rank}")\n'),
                                       (STAGE2, '    stage2_device = torch.device(f"cuda:{rank + local_world_size}")\n')], CRASH_2X2),
    v("stage2_offset_by_world_size", [(STAGE2, '    stage2_device = torch.device(f"cuda:{local_rank + world_size}")\n')], CRASH_2X2),
    v("local_rank_read_from_rank", [(LOCAL, '    local_rank = int(os.environ["RANK"])\n')], CRASH_2X2),
    # --- TODO 2: placing the stages -------------------------------------------------------------------
    v("stages_never_placed", [(PLACE, "        pass  # the forward pass moves the data\n")], ALL),
    # --- the ranks' shards ----------------------------------------------------------------------------------
    v("rank_read_from_local_rank", [(RANK, '    rank = int(os.environ["LOCAL_RANK"])\n')], RESULT),  # 2x2: shards fed twice
    v("world_size_hardcoded_two", [(WORLD, "    world_size = 2  # 2 processes on the 4-GPU node\n")], {"passes_per_step"} | RESULT),
    # --- TODO 3: the micro-batches ----------------------------------------------------------------------------
    v("chunk_instead_of_tensor_split", [(PIECES, "    pieces = list(zip(x.chunk(micro_batches), y.chunk(micro_batches)))\n")], SPLIT,
      {"passes_per_step": "use tensor_split"}),
    v("split_by_size_micro_batches", [(PIECES, "    pieces = list(zip(x.split(micro_batches), y.split(micro_batches)))\n")], SPLIT),
    v("micro_batches_hardcoded_four", [(PIECES, "    pieces = list(zip(x.tensor_split(4), y.tensor_split(4)))\n")], SPLIT),
    # --- TODO 4: the loss scaling ---------------------------------------------------------------------------------
    v("mean_loss_divided_by_micro_batches", [(LOSS_FN, "loss_fn = nn.MSELoss()\n"),
                                             (LOSS, "            loss = loss_fn(out, my.to(stage2_device)) / micro_batches\n")], RESULT,
      {"grad_sync": "sum the loss and divide by the rank's sample count"}),
    v("summed_loss_not_divided", [(LOSS, "            loss = loss_fn(out, my.to(stage2_device))\n")], RESULT),
    v("mean_loss_not_scaled", [(LOSS_FN, "loss_fn = nn.MSELoss()\n"), (LOSS, "            loss = loss_fn(out, my.to(stage2_device))\n")], RESULT),
    v("summed_loss_divided_by_global_batch", [(LOSS, "            loss = loss_fn(out, my.to(stage2_device)) / batch_size\n")], RESULT),
    v("gradients_zeroed_in_every_micro_batch", [(ZERO, ""), (FOR, FOR + "        optimizer.zero_grad()\n")], RESULT),
    # --- TODO 4: no_sync ----------------------------------------------------------------------------------------------
    v("no_sync_skipped", [(CONTEXT, NO_CONTEXT)], {"sync_pattern"}, {"sync_pattern": "wrap all but the last micro-batch in model.no_sync()"}),  # [1, 1, 1, 1]: half of the check
    # DDP decides in forward whether the backward all-reduces (torch's no_sync docstring: "The forward
    # pass should be included inside the context manager, or else gradients will still be synchronized")
    v("no_sync_around_backward_only", [(BODY,
        "        out = model(mx)\n"
        "        loss = loss_fn(out, my.to(stage2_device)) / shard\n"
        "        with model.no_sync() if ddp and not last else nullcontext():\n"
        "            loss.backward()\n")], {"sync_pattern"},
      {"sync_pattern": "an all-reduce in every micro-batch (4 per step, as the grader's hub carried them) (your rank 0's records: all-reduces per micro-batch [1, 1, 1, 1])"}),
    v("no_sync_on_every_micro_batch", [(CONTEXT, "        with model.no_sync() if ddp else nullcontext():\n")], NO_DDP),
    v("all_reduce_in_first_micro_batch", [(CONTEXT, "        with model.no_sync() if ddp and i > 0 else nullcontext():\n")], NO_DDP,
      {"sync_pattern": "no all-reduce in the last micro-batch"}),
    v("no_sync_on_first_micro_batch_only", [(CONTEXT, "        with model.no_sync() if ddp and i == 0 else nullcontext():\n")],
      {"sync_pattern"}),
    # --- clean up ---------------------------------------------------------------------------------------------------------
    v("process_group_never_destroyed", [(DESTROY, "    pass\n")], {"clean_exit"}, {"clean_exit": "never called dist.destroy_process_group()"}),
    # --- answers.yaml --------------------------------------------------------------------------------------------------------
    v("answers_gpus_of_the_two_stages_swapped_between_ranks", [(ANS, A_RANK0, "    rank0: [0, 1]"), (ANS, A_RANK1, "    rank1: [2, 3]")],
      {"hybrid_answers"}),
    v("answers_processes_counts_gpus", [(ANS, A_PROCESSES, "  processes: 4 ")], {"hybrid_answers"},
      {"hybrid_answers": "you answered 4, your program showed 2"}),
    v("answers_passes_count_forward_and_backward", [(ANS, A_PASSES, "    m2: 4\n    m4: 8\n    m8: 16\n")], {"hybrid_answers"}),
    # --- cheats: points without the work ----------------------------------------------------------------------------------------
    # passes that feed nothing: the count is right, the work is all in the last
    v("empty_micro_batches_cheat", [(PIECES, "    pieces = [(x[:0], y[:0])] * (micro_batches - 1) + [(x, y)]\n")], {"passes_per_step"},
      {"passes_per_step": "3 empty"}),
    # every rank feeds the whole global batch (the right gradient, no data parallelism)
    v("whole_batch_on_every_rank_cheat", [(SHARD, "    shard = x.shape[0]  # every rank: the whole batch\n")], {"passes_per_step"}),
    v("whole_batch_no_communication_cheat", [(WRAP, NO_WRAP), (CONTEXT, NO_CONTEXT),
                                             (SHARD, "    shard = x.shape[0]  # every rank: the whole batch\n")],
      {"passes_per_step"} | NO_DDP),
    v("loss_all_reduced_instead_of_gradients_cheat", [(WRAP, NO_WRAP), (CONTEXT, NO_CONTEXT), (STEP,
        "    synced = loss.detach().clone()\n    dist.all_reduce(synced)\n" + STEP)], NO_DDP),
    # the average is right and made once per step, after the last micro-batch: only DDP is missing
    v("gradients_averaged_by_hand_cheat", [(WRAP, NO_WRAP), (CONTEXT, NO_CONTEXT), (STEP,
        "    for p in model.parameters():\n        dist.all_reduce(p.grad)\n        p.grad /= world_size\n" + STEP)], {"grad_sync"},
      {"grad_sync": "no DistributedDataParallel of the model was built"}),
    v("dummy_all_reduce_in_last_micro_batch_cheat", [(WRAP, NO_WRAP), (CONTEXT, NO_CONTEXT), (BACKWARD,
        BACKWARD + "            if last:\n                dist.all_reduce(torch.zeros(1))  # one collective, in the last micro-batch\n")], NO_DDP),
    # one backward pass for every micro-batch's loss: the right gradients, but not a pass per micro-batch
    v("one_backward_for_all_micro_batches", [(BODY,
        "        out = model(mx)\n"
        "        total = loss_fn(out, my.to(stage2_device)) / shard + (total if i else 0)\n"),
        (STEP, "    total.backward()\n    loss = total\n" + STEP)], {"passes_per_step"}),
)

# ---------------------------------------------------------------------------------------------------
# Correct submissions in other idioms.

MAIN_FUNCTION = '''"""Practical 10: hybrid parallelism, written as functions."""
import os
import sys
from contextlib import nullcontext

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

batch_size = 64
micro_batches = 4
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


class TwoStageModel(nn.Module):
    def __init__(self, first, second):
        super().__init__()
        self.first, self.second = first, second
        self.stage1 = nn.Sequential(nn.Linear(dim, hidden), nn.ReLU()).to(first)
        self.stage2 = nn.Linear(hidden, 1).to(second)

    def forward(self, x):
        return self.stage2(self.stage1(x.to(self.first)).to(self.second))


def main():
    ddp = "RANK" in os.environ
    if ddp:
        dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank, per_node = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    else:
        rank, world_size, local_rank, per_node = 0, 1, 0, 1
    if torch.cuda.is_available():
        first, second = torch.device("cuda", local_rank), torch.device("cuda", local_rank + per_node)
    else:
        first = second = torch.device("cpu")
    print(f"[Rank {rank}] stage 1 on {first}, stage 2 on {second}", flush=True)
    try:
        torch.manual_seed(seed)
        model = TwoStageModel(first, second)
        if ddp:
            model = DDP(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        shard = batch_size // world_size
        for step in range(steps):
            x, y = get_batch(step)
            x, y = x[rank * shard : (rank + 1) * shard], y[rank * shard : (rank + 1) * shard]
            optimizer.zero_grad()
            for i, (mx, my) in enumerate(zip(x.tensor_split(micro_batches), y.tensor_split(micro_batches))):
                sync = not ddp or i == micro_batches - 1
                with nullcontext() if sync else model.no_sync():
                    loss = nn.functional.mse_loss(model(mx), my.to(second), reduction="sum") / shard
                    loss.backward()
            optimizer.step()
            if rank == 0 and step % log_every == 0:
                print(f"[Rank 0] step {step} | {micro_batches} micro-batches", flush=True)
    finally:
        if ddp:
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
'''

CORRECT = (
    v("main_function_with_finally", [(ROOT.joinpath("solutions", "p10", PY).read_text(), MAIN_FUNCTION)]),
    # PyTorch's DDP tutorial: devices named by int
    v("tutorial_int_devices", [(PLACE, "        if torch.cuda.is_available():\n"
                                       "            self.stage1.to(local_rank)\n"
                                       "            self.stage2.to(local_rank + local_world_size)\n")]),
    # the forward pass decides: no_sync around it alone is enough
    v("no_sync_around_forward_only", [(BODY,
        "        with model.no_sync() if ddp and not last else nullcontext():\n"
        "            out = model(mx)\n"
        "        loss = loss_fn(out, my.to(stage2_device)) / shard\n"
        "        loss.backward()\n")]),
    v("if_else_instead_of_context_expression", [(BODY,
        "        if ddp and not last:\n"
        "            with model.no_sync():\n"
        "                loss = loss_fn(model(mx), my.to(stage2_device)) / shard\n"
        "                loss.backward()\n"
        "        else:\n"
        "            loss = loss_fn(model(mx), my.to(stage2_device)) / shard\n"
        "            loss.backward()\n")]),
    v("mean_loss_weighted_by_piece_size", [(LOSS_FN, "loss_fn = nn.MSELoss()\n"),
                                           (LOSS, "            loss = loss_fn(out, my.to(stage2_device)) * len(mx) / shard\n")]),
    v("split_sizes_computed_by_hand", [(PIECES,
        "    base, extra = divmod(len(x), micro_batches)\n"
        "    sizes = [base + (1 if i < extra else 0) for i in range(micro_batches)]\n"
        "    pieces = list(zip(torch.split(x, sizes), torch.split(y, sizes)))\n")]),
    v("loss_all_reduced_for_the_log", [(LOG_IF,
        "    logged = loss.detach().clone()\n    if ddp:\n        dist.all_reduce(logged)  # the last micro-batch's loss, summed over the ranks\n" + LOG_IF)]),
    v("every_rank_prints_every_micro_batch", [(BACKWARD,
        BACKWARD + '            print(f"[Rank {rank}] step {step} micro-batch {i}: {tuple(mx.shape)}", flush=True)\n')]),
    v("identity_from_dist_api", [(RANK, "    rank = dist.get_rank()\n"), (WORLD, "    world_size = dist.get_world_size()\n")]),
    v("strided_shards", [(SHARD, "    x, y = x[rank : shard * world_size : world_size], y[rank : shard * world_size : world_size]\n")]),
    v("model_seeded_by_rank_ddp_broadcasts", [(SEED_MODEL, "torch.manual_seed(seed + rank)  # DDP copies rank 0's weights\nmodel = TwoStageModel()\n")]),
    v("optimizer_built_before_wrap", [(OPTIMIZER, ""), (SEED_MODEL, SEED_MODEL + OPTIMIZER)]),
    v("gradient_as_bucket_view", [(WRAP, "    model = DDP(model, device_ids=None, gradient_as_bucket_view=True)\n")]),
    v("model_zero_grad_keeps_tensors", [(ZERO, "    model.zero_grad(set_to_none=False)\n")]),
    v("answers_gpus_listed_in_another_order", [(ANS, A_RANK0, "    rank0: [2, 0]"), (ANS, A_RANK1, "    rank1: [3, 1]")]),
    # collectives and conventions of its own: carried, and judged by the training they make
    v("seed_broadcast_from_rank_zero", [(SEED_MODEL, "if ddp:\n    shared = torch.tensor([seed])\n    dist.broadcast(shared, src=0)\n"
                                                     "    seed = int(shared.item())\n" + SEED_MODEL)]),
    v("loss_reduced_to_rank_zero_for_the_log", [(STEP, "    if ddp:\n        logged = loss.detach().clone()\n        dist.reduce(logged, dst=0)\n" + STEP)]),
    v("loss_gathered_for_the_log", [(STEP, "    if ddp:\n        losses = [torch.zeros((), device=loss.device) for _ in range(world_size)]\n"
                                           "        dist.all_gather(losses, loss.detach())\n" + STEP)]),
    v("loss_sent_to_rank_zero", [(STEP, "    if ddp and rank > 0:\n        dist.send(loss.detach().reshape(1), dst=0)\n"
                                        "    elif ddp:\n        for other in range(1, world_size):\n"
                                        "            got = torch.zeros(1, device=loss.device)\n            dist.recv(got, src=other)\n" + STEP)]),
    v("loss_all_reduced_in_a_subgroup_for_the_log", [(STEP, "    if ddp:\n        logged = loss.detach().clone()\n"
                                                            "        dist.all_reduce(logged, group=log_group)\n" + STEP),
                                                     (WRAP, "    log_group = dist.new_group(ranks=list(range(world_size)))\n" + WRAP)]),
    v("comm_hook_allreduce", [(WRAP, WRAP + "    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks\n"
                                            "    model.register_comm_hook(None, default_hooks.allreduce_hook)\n")]),
    v("ddp_on_a_device_mesh", [(WRAP, "    from torch.distributed.device_mesh import init_device_mesh\n"
                                      '    model = DDP(model, device_ids=None, device_mesh=init_device_mesh("cuda" if torch.cuda.is_available() else "cpu", (world_size,)))\n')]),
    # a summed loss, the averaged gradients divided by the shard's rows before the step: the same update
    v("summed_loss_gradients_divided_before_the_step", [(LOSS, "            loss = loss_fn(out, my.to(stage2_device))\n"),
                                                        (STEP, "    for p in model.parameters():\n        p.grad /= shard\n" + STEP)]),
    # the first micro-batches through the wrapped module (no DDP, so no sync), the last through DDP
    v("micro_batches_through_the_module_but_the_last", [(BODY,
        "        net = model.module if ddp and not last else model\n"
        "        out = net(mx)\n"
        "        loss = loss_fn(out, my.to(stage2_device)) / shard\n"
        "        loss.backward()\n")]),
)

CORPUS = BUGGY + CORRECT


# The grader's verdicts on these differ from the first expectation by design (see why): the
# checks they also lose, and why.
BY_DESIGN: dict[str, tuple[frozenset[str], str]] = {}
CORPUS = tuple(replace(c, loses=c.loses | BY_DESIGN[c.name][0]) if c.name in BY_DESIGN else c for c in CORPUS)

# Cases whose expectation follows the requirement but the grader disagrees (grader defects, seen
# with bench/corpus.py): case -> what the grader does.
DISAGREEMENTS: dict[str, str] = {
}
