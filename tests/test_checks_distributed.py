"""Each distributed check on synthetic observations: the records a correct DDP run writes and
the traffic the grader's hub carries for it (tests/observations.py); a correct run passes, a
broken one fails with the message a student would read. What a verdict rests on is broken in
the traffic; what the records say explains it."""
from __future__ import annotations

import base64
from dataclasses import replace

import pytest
import torch

from grader.checks.base import CheckContext
from grader.checks.distributed import CHECKS, allreduce_pattern
from grader.probe.recorder.events import AllReduce, Ddp, DestroyPg, EndState, Forward, Globals, InitPg, Model, Optimizer
from grader.run.job import Layout
from observations import NAMES, FakeWorkload, changed, contiguous, crashed, ddp_run, ddp_traffic, references, replace_events, set_events, without

ARGS = {"batch_size": 64, "steps": 3, "seed": 1}


def context(*runs, gpus: int = 0) -> CheckContext:
    check_options = {}
    for check in CHECKS.values():
        check_options.update({name: option.default for name, option in check.options.items()})
    return CheckContext(runs=tuple(runs), options=check_options, args=ARGS, references=references(*runs), gpus=gpus)


def judge(check_id: str, *runs, **kwargs):
    return CHECKS[check_id].function(context(*runs, **kwargs))


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_a_correct_run_passes_every_check(check_id: str) -> None:
    verdict = judge(check_id, ddp_run("ws2", Layout(1, 2)), ddp_run("2x2", Layout(2, 2)))
    assert verdict.passed, verdict


def test_rank_setup_names_the_local_rank_mistake() -> None:
    run = ddp_run("2x2", Layout(2, 2))
    for rank in run.ranks:
        replace_events(rank, Globals, lambda e, r=rank: replace(e, values={**e.values, "local_rank": r.rank}))
    verdict = judge("rank_setup", run)
    assert not verdict.passed
    assert "rank 2 (node 1): local_rank = 2, expected 0 (LOCAL_RANK" in verdict.summary


def test_rank_setup_catches_a_process_group_of_the_wrong_size_and_a_renamed_variable() -> None:
    run = ddp_run()
    replace_events(run.ranks[1], InitPg, changed(world_size=4))
    replace_events(run.ranks[0], Globals, lambda e: replace(e, values={k: v for k, v in e.values.items() if k != "world_size"}))
    verdict = judge("rank_setup", run)
    assert "no variable `world_size` in the script" in verdict.summary
    assert "the process group says rank 1 of 4, expected rank 1 of 2" in verdict.summary


def test_rank_setup_explains_a_rank_that_stopped_before_its_variables_were_read() -> None:
    """Seen on a node of one GPU: rank 1 failed on cuda:1, rank 0 hung in DDP's constructor."""
    run = ddp_run()
    crashed(run.ranks[1], "AcceleratorError", "CUDA error: invalid device ordinal")
    without(run.ranks[0], Globals)
    verdict = judge("rank_setup", run)
    assert not verdict.passed and "invalid device ordinal" in verdict.summary
    assert "no variable" not in verdict.summary


def test_rank_setup_wants_nccl_with_gpus_and_takes_the_default_too() -> None:
    run = ddp_run("2x2", Layout(2, 2))
    assert judge("rank_setup", run).passed  # gloo without GPUs
    verdict = judge("rank_setup", run, gpus=2)
    assert "rank 0: init_process_group(backend='gloo') with GPUs, expected 'nccl' (nccl when CUDA is available, gloo otherwise)" in verdict.summary
    for requested in ("nccl", "None", "cpu:gloo,cuda:nccl"):
        for rank in run.ranks:
            replace_events(rank, InitPg, changed(requested=requested))
        assert judge("rank_setup", run, gpus=2).passed, requested


def test_a_run_whose_ranks_saw_no_gpu_wants_gloo_on_a_gpu_node_too() -> None:
    """On a GPU node the spec's CPU runs hide the machine's GPUs (grader/grade/plan.py on_this_machine): a
    rank there saw none, so gloo is right and nccl is the CPU machine's failure."""
    run = ddp_run("ws2", Layout(1, 2))
    hidden = replace(run, spec=replace(run.spec, hide_gpus=True))
    assert judge("rank_setup", hidden, gpus=2).passed
    assert not judge("rank_setup", run, gpus=2).passed
    for rank in hidden.ranks:
        replace_events(rank, InitPg, changed(requested="nccl"))
    verdict = judge("rank_setup", hidden, gpus=2)
    assert "rank 0: init_process_group(backend='nccl') without GPUs: NCCL carries CUDA tensors only, expected 'gloo'" in verdict.summary
    for requested in ("cpu:gloo,cuda:nccl", "None"):
        for rank in hidden.ranks:
            replace_events(rank, InitPg, changed(requested=requested))
        assert judge("rank_setup", hidden, gpus=2).passed, requested


def test_device_mapping_with_gpus_wants_cuda_local_rank() -> None:
    good = ddp_run("2x2", Layout(2, 2), device="cuda:0")
    for rank in good.ranks:
        device = f"cuda:{rank.local_rank}"
        replace_events(rank, Model, changed(devices=(device, device)))
        replace_events(rank, Forward, lambda e, d=device: replace(e, inputs=tuple(replace(i, device=d) for i in e.inputs)))
        replace_events(rank, Ddp, changed(device_ids=(str(rank.local_rank),)))
    assert judge("device_mapping", good, gpus=2).passed
    replace_events(good.ranks[1], Ddp, changed(current_device="cuda:0"))  # torch.cuda.set_device never called
    verdict = judge("device_mapping", good, gpus=2)
    assert "rank 1: the current CUDA device was cuda:0 when DDP was built, expected cuda:1 — make the rank's GPU current with torch.cuda.set_device(device)" in verdict.summary
    replace_events(good.ranks[1], Ddp, changed(current_device="cuda:1"))
    replace_events(good.ranks[3], Model, changed(devices=("cuda:3", "cuda:3")))
    verdict = judge("device_mapping", good, gpus=2)
    assert "rank 3 (node 1, local rank 1): model on cuda:3, expected cuda:1 — the GPU follows LOCAL_RANK, not RANK" in verdict.summary


def test_device_mapping_reports_inputs_left_elsewhere_and_shared_gpus() -> None:
    run = ddp_run(device="cuda:0")
    for rank in run.ranks:
        replace_events(rank, Model, changed(devices=("cuda:0", "cuda:0")))
        replace_events(rank, Ddp, changed(device_ids=None))
    verdict = judge("device_mapping", run, gpus=2)
    assert "rank 1 (node 0, local rank 1): model on cuda:0, expected cuda:1" in verdict.summary
    assert "ranks 0, 1 share node 0 cuda:0" in verdict.summary
    cpu_inputs = ddp_run()
    replace_events(cpu_inputs.ranks[0], Forward, lambda e: replace(e, inputs=tuple(replace(i, device="meta") for i in e.inputs)))
    assert "rank 0: inputs on meta, expected cpu" in judge("device_mapping", cpu_inputs).summary


def whole_batch(rank: int, step: int) -> list[int]:
    return list(range(64))


def strided(world: int):
    return lambda rank, step: list(range(rank, 64, world))


def test_batch_shard_flags_the_full_batch_on_every_rank() -> None:
    run = ddp_run("ws2", Layout(1, 2), batch=128, traffic=ddp_traffic(FakeWorkload(2), whole_batch))  # every rank feeds 64 rows = the whole batch
    verdict = judge("batch_shard", run)
    assert not verdict.passed
    assert "rank 0 fed 64 rows per step to the model, expected 32 (= 64 // 2) — every rank trains on the whole batch" in verdict.summary


def test_batch_shard_rests_on_what_each_rank_all_reduced_and_explains_by_the_records() -> None:
    every_shard = ddp_run(rows_of=whole_batch, traffic=ddp_traffic(FakeWorkload(2), whole_batch))  # 2 calls of 32 rows: every shard
    verdict = judge("batch_shard", every_shard)
    assert not verdict.passed
    assert "rank 0 fed 64 rows in step 0 (rows 0–63), expected 32 — the whole batch: each rank keeps only its shard" in verdict.summary
    by_local_rank = ddp_run("2x2", Layout(2, 2), rows_of=lambda rank, step: list(range(rank % 2 * 16, rank % 2 * 16 + 16)), traffic=ddp_traffic(FakeWorkload(4), lambda rank, step: list(range(rank % 2 * 16, rank % 2 * 16 + 16))))
    assert "rank 2 and rank 0 both fed rows 0–15 of step 0 — the shard follows RANK, not LOCAL_RANK" in judge("batch_shard", by_local_rank).summary
    records_lie = ddp_run(traffic=ddp_traffic(FakeWorkload(2), whole_batch))  # records of a shard each; the traffic shows the whole batch
    verdict = judge("batch_shard", records_lie)
    assert not verdict.passed and "every rank trains on the whole batch (all 64 rows): what each rank all-reduced is the whole batch's gradient, not its shard's" in verdict.summary
    # the training itself is single-process training's on the whole batch: only the split is wrong
    assert "each rank's the whole batch's (batch_shard's concern" in judge("grad_sync", records_lie).details[0]
    assert judge("params_sync", records_lie).passed


def test_batch_shard_accepts_any_split_into_equal_disjoint_shards() -> None:
    for rows_of in (strided(4), lambda rank, step: [(r + 16 * step) % 64 for r in range(rank * 16, rank * 16 + 16)]):
        run = ddp_run("ws4", Layout(1, 4), rows_of=rows_of, traffic=ddp_traffic(FakeWorkload(4), rows_of))
        verdict = judge("batch_shard", run)
        assert verdict.passed, verdict
    assert "4 × 16 rows: what each rank all-reduced is its own shard's gradient (the rows your ranks' records name)" in verdict.details[0]
    unrecorded = ddp_run("ws4", Layout(1, 4), rows_of=strided(4), traffic=ddp_traffic(FakeWorkload(4), strided(4)))
    for rank in unrecorded.ranks:  # no rows in the records: the layouts a correct script may use are tried
        replace_events(rank, Forward, changed(rows=None))
    verdict = judge("batch_shard", unrecorded)
    assert verdict.passed and "(every world_size-th row)" in verdict.details[0]


def test_batch_shard_explains_a_rank_that_never_ran_the_model() -> None:
    run = ddp_run(traffic=ddp_traffic(FakeWorkload(2), contiguous(2), steps=0))
    crashed(run.ranks[1], "RuntimeError", "rank 1 gives up", code='raise RuntimeError("rank 1 gives up")')
    verdict = judge("batch_shard", run)
    assert "rank 1 never ran the model (raised RuntimeError: rank 1 gives up at p6_ddp.py:84" in verdict.summary


def test_grad_sync_without_all_reduce_asks_whether_the_model_is_wrapped() -> None:
    run = ddp_run(traffic=ddp_traffic(FakeWorkload(2), contiguous(2), steps=0, ddp=False))
    for rank in run.ranks:
        without(rank, AllReduce)
        without(rank, Ddp)
    verdict = judge("grad_sync", run)
    assert "step 0: your ranks made no all-reduce that could carry its gradients (none at all) — no all-reduce at all: is the model wrapped in DistributedDataParallel?" in verdict.summary


def test_grad_sync_with_ddp_but_no_all_reduce_asks_about_no_sync_not_about_wrapping() -> None:
    run = ddp_run(traffic=ddp_traffic(FakeWorkload(2), contiguous(2), steps=0))
    verdict = judge("grad_sync", run)
    assert "— DDP made no all-reduce: is every backward pass inside model.no_sync()?" in verdict.summary
    assert "is the model wrapped" not in verdict.summary


def test_grad_sync_wants_ddp_not_an_average_of_the_scripts_own_after_backward() -> None:
    run = ddp_run(traffic=ddp_traffic(FakeWorkload(2), contiguous(2), ddp=False))  # rank 0's weights never broadcast
    verdict = judge("grad_sync", run)
    assert "the gradients are right, but no DistributedDataParallel of the model was built (rank 0 never broadcast its initial parameters" in verdict.summary
    one = ddp_run("ws1", Layout(1, 1), traffic=ddp_traffic(FakeWorkload(1), contiguous(1), ddp=False))
    assert judge("grad_sync", one).passed  # one rank: nothing to synchronise, DDP or not


def test_grad_sync_follows_every_step_so_gradients_never_zeroed_fail() -> None:
    """optimizer.zero_grad() outside the loop: step 0 is right, step 1 sends two steps' sum."""
    run = ddp_run(traffic=ddp_traffic(FakeWorkload(2), contiguous(2), accumulate=True))
    verdict = judge("grad_sync", run)
    assert verdict.summary.startswith("ws2 (1 node × 2 ranks): step 1: none of your ranks' 2 all-reduce(s) from here on delivered the full-batch gradient")
    assert "step 0's were: are the gradients zeroed in every step (optimizer.zero_grad() inside the loop)?" in verdict.summary


@pytest.mark.parametrize(("scale", "said"), [(32.0, "32× it: is the loss summed over the samples instead of averaged"), (0.5, "1/2 of it: averaged twice")])
def test_grad_sync_names_a_wrong_scale_the_update_did_not_undo(scale: float, said: str) -> None:
    """The update followed what was delivered: the next step starts from other parameters."""
    run = ddp_run(traffic=ddp_traffic(FakeWorkload(2), contiguous(2), scale=scale))
    verdict = judge("grad_sync", run)
    assert not verdict.passed and "step 0: your ranks' all-reduces delivered" in verdict.summary and said in verdict.summary, verdict.summary


def test_grad_sync_accepts_a_scale_the_update_undoes() -> None:
    """A summed loss, the gradients divided by the rows after the all-reduce: the same update."""
    verdict = judge("grad_sync", ddp_run(traffic=_undone(FakeWorkload(2), 32.0)))
    assert verdict.passed, verdict.summary
    assert verdict.data["allreduce_per_step"] == {"ws2": [1, 1, 1]}


def _undone(workload: FakeWorkload, scale: float):
    """The traffic of a script that all-reduces `scale` × the gradient and divides by `scale` before its step."""
    report = ddp_traffic(workload, contiguous(workload.world))
    carried = []
    for entry in report.carried:
        if entry.kind == "all_reduce":
            parts = []
            for part in entry.members:
                values = torch.frombuffer(bytearray(base64.b64decode(part.data)), dtype=torch.float32) * scale
                parts.append(replace(part, data=base64.b64encode(values.numpy().tobytes()).decode(), sums=(float(values.sum()),)))
            entry = replace(entry, members=tuple(parts))
        carried.append(entry)
    return replace(report, carried=tuple(carried))


def test_params_sync_follows_the_update_and_checks_the_last_by_the_records() -> None:
    run = ddp_run()
    assert judge("params_sync", run).passed
    replace_events(run.ranks[1], Optimizer, lambda e: replace(e, values=((0.0, 0.0, 0.0), (0.0,))) if e.step == 2 else e)
    assert "after 3 steps rank 1's parameters (as its records show them) differ from single-process training" in judge("params_sync", run).summary
    short = ddp_run()
    set_events(short.ranks[0], [e for e in short.ranks[0].events if not (isinstance(e, Optimizer) and e.step == 2)])
    assert "rank 0 took 2 of 3 optimizer steps" in judge("params_sync", short).summary
    lr_doubled = ddp_run(workload=_other_update(FakeWorkload(2), 2.0))
    verdict = judge("params_sync", lr_doubled)
    assert "step 1's gradients were computed at other parameters than single-process training's after step 0" in verdict.summary
    assert judge("grad_sync", lr_doubled).passed  # the gradients of every step were right where the ranks stood


def _other_update(workload: FakeWorkload, lr_factor: float) -> FakeWorkload:
    """The training of a script whose learning rate is `lr_factor` times the template's."""
    changed_lr = FakeWorkload(workload.world)
    changed_lr.lr = workload.lr * lr_factor
    return changed_lr


def test_a_checked_run_whose_kept_data_ends_before_its_last_step_fails_grad_and_params_sync() -> None:
    """A checked run keeps 64 MiB: a script that sends that much before its training's end (junk
    all-reduced first, then steps the grader cannot see) is not followed on faith."""
    report = ddp_traffic(FakeWorkload(2), contiguous(2))
    last = max(i for i, c in enumerate(report.carried) if c.kind == "all_reduce")
    cut = replace(report, carried=tuple(replace(c, members=tuple(replace(p, data="") for p in c.members)) if i == last else c for i, c in enumerate(report.carried)), kept_bytes=64 << 20)
    run = ddp_run(traffic=cut)
    grad, params = judge("grad_sync", run), judge("params_sync", run)
    assert not grad.passed and "step 2: the grader's hub kept none of your all-reduces from here on (it kept the first 64 MiB" in grad.summary, grad.summary
    assert "what did your ranks send beside the gradients?" in grad.summary
    assert not params.passed and "the parameters your ranks trained from cannot be followed from there" in params.summary, params.summary


def test_clean_exit_wants_destroy_and_status_zero_and_no_leftovers() -> None:
    run = ddp_run()
    without(run.ranks[1], DestroyPg)
    replace_events(run.ranks[1], EndState, changed(pg_initialized=True))
    assert judge("clean_exit", run).summary == "ws2 (1 node × 2 ranks): rank 1 never called dist.destroy_process_group()"
    run = ddp_run()
    run.leftovers = 2
    assert "2 process(es) were still running after the ranks exited" in judge("clean_exit", run).summary
    run = ddp_run()
    run.ranks[0].status = "exit:3"
    assert "rank 0 exited with status 3" in judge("clean_exit", run).summary


def test_identical_failures_in_every_run_collapse_to_one_line() -> None:
    runs = [ddp_run(f"ws{n}", Layout(1, n), traffic=ddp_traffic(FakeWorkload(n), contiguous(n), steps=0, ddp=False)) for n in (2, 3)]
    for run in runs:
        for rank in run.ranks:
            crashed(rank, "NotImplementedError", "TODO 1: initialise the process group", line=54)
    verdict = judge("grad_sync", *runs)
    assert verdict.summary == "the script stops at TODO 1: initialise the process group (p6_ddp.py:54) (every rank) — in every run"
    assert verdict.details == ()


def test_allreduce_pattern_counts_ddps_gradient_all_reduces_per_step_not_the_scripts_own() -> None:
    run = ddp_run()
    bucket = AllReduce(t=0.2, seq=1000, step=1, dur=0.001, source="ddp", numel=4, bytes=16, bucket=1, async_op=True)
    logged = AllReduce(t=0.3, seq=1001, step=1, dur=0.001, source="call", numel=1, bytes=4, bucket=None, async_op=False)  # a loss for the log
    set_events(run.ranks[0], [*run.ranks[0].events, bucket, logged])
    assert allreduce_pattern(run.ranks[0], 3) == [1, 2, 1]
    assert NAMES == ["0.weight", "0.bias"]
