"""Each distributed check on synthetic observations: a correct run passes it, a broken one
fails it with the message a student would read."""
from __future__ import annotations

import pytest

from dataclasses import replace

from grader.checks.base import CheckContext
from grader.checks.distributed import CHECKS, allreduce_pattern
from grader.probe.events import AllReduce, Ddp, DestroyPg, EndState, Forward, Globals, InitPg, Model, OptGrads, Optimizer
from grader.run.job import Layout
from observations import NAMES, changed, crashed, ddp_run, replace_events, set_events, trajectory, without

ARGS = {"batch_size": 64, "steps": 3, "seed": 1}


def context(*runs, gpus: int = 0, references=None) -> CheckContext:
    ref = trajectory()
    refs = references or {run.spec.name: (ref,) for run in runs}
    check_options = {}
    for check in CHECKS.values():
        check_options.update({name: option.default for name, option in check.options.items()})
    return CheckContext(runs=tuple(runs), options=check_options, args=ARGS, references=refs, gpus=gpus)


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


def test_batch_shard_flags_the_full_batch_on_every_rank() -> None:
    run = ddp_run("ws2", Layout(1, 2), batch=128)  # every rank feeds 64 rows = the whole batch
    verdict = judge("batch_shard", run)
    assert not verdict.passed
    assert "rank 0 fed 64 rows per step to the model, expected 32 (= 64 // 2) — every rank trains on the whole batch" in verdict.summary


def rows_fed(run, rows_of) -> None:
    """Make every rank's model calls feed the rows `rows_of(rank, step)` of the synthetic
    batch, one call per `want`-sized piece."""
    ref = trajectory()
    for rank in run.ranks:
        events = []
        for event in rank.events:
            if type(event) is Forward and event.role == "model":
                rows = rows_of(rank.rank, event.step)
                size = event.inputs[0].shape[0]
                for start in range(0, len(rows), size):
                    piece = tuple(ref.batches[event.step][i] for i in rows[start : start + size])
                    events.append(replace(event, rows=piece))
            else:
                events.append(event)
        set_events(rank, events)


def test_batch_shard_checks_which_rows_each_rank_fed_not_only_how_many() -> None:
    every_shard = ddp_run()
    rows_fed(every_shard, lambda rank, step: list(range(64)))  # 2 calls of 32 rows: every shard
    verdict = judge("batch_shard", every_shard)
    assert not verdict.passed
    assert "rank 0 fed 64 rows in step 0 (rows 0–63), expected 32 — the whole batch: each rank keeps only its shard" in verdict.summary
    by_local_rank = ddp_run("2x2", Layout(2, 2))
    rows_fed(by_local_rank, lambda rank, step: list(range(rank % 2 * 16, rank % 2 * 16 + 16)))
    assert "rank 2 and rank 0 both fed rows 0–15 of step 0 — the shard follows RANK, not LOCAL_RANK" in judge("batch_shard", by_local_rank).summary
    other_data = ddp_run()
    replace_events(other_data.ranks[1], Forward, lambda e: replace(e, rows=tuple(v + 0.25 for v in e.rows)) if e.rows else e)
    assert "rank 1 fed 32 row(s) in step 0 that are not in the step's global batch (keep the template's get_batch)" in judge("batch_shard", other_data).summary
    twice = ddp_run()
    rows_fed(twice, lambda rank, step: [rank * 32] * 32)
    assert "rank 0 fed 31 row(s) of step 0 more than once" in judge("batch_shard", twice).summary


def test_batch_shard_accepts_any_split_into_equal_disjoint_shards() -> None:
    strided = ddp_run("ws4", Layout(1, 4))  # as DistributedSampler(shuffle=False) splits: rank r takes rows r, r + 4, ...
    rows_fed(strided, lambda rank, step: list(range(rank, 64, 4)))
    verdict = judge("batch_shard", strided)
    assert verdict.passed, verdict
    assert "4 × 16 rows, each row of the grader's batch fed by one rank" in verdict.details[0]


def test_batch_shard_explains_a_rank_that_never_ran_the_model() -> None:
    run = ddp_run()
    crashed(run.ranks[1], "RuntimeError", "rank 1 gives up", code='raise RuntimeError("rank 1 gives up")')
    verdict = judge("batch_shard", run)
    assert "rank 1 never ran the model (raised RuntimeError: rank 1 gives up at p6_ddp.py:84" in verdict.summary


def test_grad_sync_without_all_reduce_asks_whether_the_model_is_wrapped() -> None:
    run = ddp_run()
    for rank in run.ranks:
        without(rank, AllReduce)
        without(rank, Ddp)
    replace_events(run.ranks[1], OptGrads, changed(grads=((9.0, 9.0, 9.0), (9.0,))))
    verdict = judge("grad_sync", run)
    assert "step 0: gradients differ between rank 0 and rank 1 (max |Δ| 9.2 in 0.weight)" in verdict.summary
    assert "all-reduce calls per step: [0, 0, 0] — no all-reduce at all: is the model wrapped in DistributedDataParallel?" in verdict.summary


def test_grad_sync_with_ddp_but_no_all_reduce_asks_about_no_sync_not_about_wrapping() -> None:
    run = ddp_run()
    for rank in run.ranks:
        without(rank, AllReduce)
    replace_events(run.ranks[1], OptGrads, changed(grads=((9.0, 9.0, 9.0), (9.0,))))
    verdict = judge("grad_sync", run)
    assert "— DDP made no all-reduce: is every backward pass inside model.no_sync()?" in verdict.summary
    assert "is the model wrapped" not in verdict.summary


def test_grad_sync_wants_ddp_not_an_average_of_the_scripts_own_after_backward() -> None:
    run = ddp_run()
    for rank in run.ranks:
        without(rank, Ddp)
    verdict = judge("grad_sync", run)
    assert "the gradients are right, but rank 0 built no DistributedDataParallel: wrap the model in DDP, as the TODO asks" in verdict.summary
    one = ddp_run("ws1", Layout(1, 1))
    without(one.ranks[0], Ddp)
    assert judge("grad_sync", one).passed  # one rank: nothing to synchronise, DDP or not


def test_grad_sync_compares_every_step_so_gradients_never_zeroed_fail() -> None:
    """optimizer.zero_grad() outside the loop: step 0 is right, step 1 holds two steps' sum."""
    run = ddp_run()
    first = trajectory().grads[0]
    for rank in run.ranks:
        replace_events(rank, OptGrads, lambda e: replace(e, grads=tuple(tuple(v + f for v, f in zip(values, first[name])) for name, values in zip(e.names, e.grads))) if e.step == 1 else e)
    verdict = judge("grad_sync", run)
    assert verdict.summary.startswith("ws2 (1 node × 2 ranks): step 1: gradients are the same on every rank but not the full-batch gradient")
    assert "step 0's were: are the gradients zeroed in every step (optimizer.zero_grad() inside the loop)?" in verdict.summary


def test_grad_sync_names_a_summed_loss_by_its_factor() -> None:
    run = ddp_run()
    for rank in run.ranks:
        replace_events(rank, OptGrads, lambda e: replace(e, grads=tuple(tuple(g * 32 for g in t) for t in e.grads)))
    assert "they are 32× it: is the loss summed over the samples instead of averaged" in judge("grad_sync", run).summary


def test_grad_sync_recognises_gradients_averaged_twice() -> None:
    run = ddp_run()
    for rank in run.ranks:
        replace_events(rank, OptGrads, lambda e: replace(e, grads=tuple(tuple(g / 2 for g in t) for t in e.grads)))
    verdict = judge("grad_sync", run)
    assert "they are 1/2 of it: averaged twice" in verdict.summary
    assert verdict.data["allreduce_per_step"] == {"ws2": [1, 1, 1]}


def test_grad_sync_accepts_any_of_the_references_and_checks_the_start() -> None:
    run = ddp_run()
    wrong, right = trajectory(), trajectory()
    wrong.grads[0]["0.bias"][0] = 7.0
    assert judge("grad_sync", run, references={"ws2": (wrong, right)}).passed
    replace_events(run.ranks[0], Model, changed(values=((1.0, 1.0, 1.0), (1.0,))))
    verdict = judge("grad_sync", run)
    assert "the model starts from other weights than the reference" in verdict.summary


def test_params_sync_reports_divergence_and_missing_steps() -> None:
    run = ddp_run()
    replace_events(run.ranks[1], Optimizer, lambda e: replace(e, values=((0.0, 0.0, 0.0), (0.0,))) if e.step == 2 else e)
    assert "after 3 steps the parameters differ between rank 0 and rank 1" in judge("params_sync", run).summary
    short = ddp_run()
    set_events(short.ranks[0], [e for e in short.ranks[0].events if not (isinstance(e, Optimizer) and e.step == 2)])
    assert "rank 0 took 2 of 3 optimizer steps" in judge("params_sync", short).summary


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
    runs = [ddp_run("ws2", Layout(1, 2)), ddp_run("ws3", Layout(1, 3))]
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
