"""The grader's witness rank (grader/probe/witness.py) without processes: how it finds rank 0's
DDP options, forward passes and optimizer steps in a file the submission can write, and how it
words what stopped it. (Witnessed
gradings are in test_p6_grading.py, with the forgery corpus of p6_forgeries.py.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.probe.events import AllReduce, AllReduceCall, Backward, DdpArgs, DdpForward, Exit, InitPg, Optimizer, to_json
from grader.probe.witness import SHARD_LAYOUTS, GaveUp, PeerRecords, explain, layout_of, mirror_all_reduce, peer_ddp_args, shard_rows

OPTIONS = DdpArgs(t=0.1, seq=2, step=0, find_unused_parameters=True, static_graph=False, gradient_as_bucket_view=False, bucket_cap_mb=0.5)


def lines(path: Path, *text: str) -> Path:
    path.write_text("".join(line + "\n" for line in text))
    return path


def test_rank_0s_ddp_options_are_read_past_lines_the_recorder_does_not_write(tmp_path: Path) -> None:
    path = lines(tmp_path / "r0", '{"kind": "ddp_args", "forged": 1}', "not json", to_json(InitPg(t=0.0, seq=1, step=0, requested="gloo", backend="gloo", rank=0, world_size=2)), to_json(OPTIONS))
    assert peer_ddp_args(PeerRecords(str(path)), wait_s=1.0) == OPTIONS


def test_the_witness_gives_up_at_once_when_rank_0_trains_or_ends_without_ddp(tmp_path: Path) -> None:
    backward = to_json(Backward(t=0.2, seq=3, step=0, dur=0.01))
    assert peer_ddp_args(PeerRecords(str(lines(tmp_path / "a", backward, to_json(OPTIONS)))), wait_s=30.0) == "your rank 0 ran backward without DistributedDataParallel"
    ended = to_json(Exit(t=0.3, seq=4, step=0, how="returned", code=0))
    assert peer_ddp_args(PeerRecords(str(lines(tmp_path / "b", ended))), wait_s=30.0) == "your rank 0 ended without DistributedDataParallel"


def test_without_options_the_witness_waits_its_time_and_says_so(tmp_path: Path) -> None:
    assert peer_ddp_args(PeerRecords(str(tmp_path / "never-written")), wait_s=0.1) == "your rank 0 built no DistributedDataParallel within 0.1 s of joining the process group"
    (tmp_path / "half").write_text(to_json(OPTIONS))  # no end of line yet: still being written
    assert peer_ddp_args(PeerRecords(str(tmp_path / "half")), wait_s=0.1).startswith("your rank 0 built no")


def test_what_stopped_the_witness_in_a_collective_is_said_plainly() -> None:
    lost = RuntimeError("[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:29059")
    assert explain(lost, 10) == "your ranks ended or dropped their connections while it waited in a collective: they did not all-reduce what DDP does in every backward pass"
    late = RuntimeError("[../unbound_buffer.cc:78] Timed out waiting 10000ms for recv operation to complete")
    assert explain(late, 10).startswith("your ranks made no matching collective within 10 s")
    assert explain(ValueError("DDP expects same model across all ranks"), 10) == "ValueError: DDP expects same model across all ranks"


def test_the_witness_follows_rank_0s_forward_passes_and_steps_in_order_past_other_lines(tmp_path: Path) -> None:
    """What the witness mirrors: each DDP forward (inside no_sync or not) and each optimizer step,
    in the order rank 0 recorded them; a line still being written is not read yet."""
    forwards = [DdpForward(t=0.1 * i, seq=i, step=0, sync=i == 3) for i in range(4)]
    step = Optimizer(t=0.5, seq=5, step=0, dur=0.001, optimizer="SGD", names=(), values=None)
    path = lines(tmp_path / "r0", to_json(OPTIONS), *(to_json(f) for f in forwards[:2]), '{"kind": "ddp_forward", "sync": "yes"}', to_json(Backward(t=0.2, seq=9, step=0, dur=0.01)), *(to_json(f) for f in forwards[2:]), to_json(step))
    records = PeerRecords(str(path))
    assert peer_ddp_args(records, wait_s=1.0) == OPTIONS
    followed = [records.next((DdpForward, Optimizer), wait_s=1.0) for _ in range(5)]
    assert followed == [*forwards, step]
    with path.open("a") as handle:
        handle.write(to_json(forwards[0]))  # no end of line yet
    assert records.next((DdpForward, Optimizer), wait_s=0.05) is None


def test_rank_0s_own_all_reduces_before_its_ddp_are_taken_part_in_not_a_reason_to_give_up(tmp_path: Path) -> None:
    call = AllReduceCall(t=0.05, seq=1, step=0, shape=(1,), dtype="float32", op="SUM", default_group=True)
    taken: list[AllReduceCall] = []
    path = lines(tmp_path / "r0", to_json(call), to_json(AllReduce(t=0.06, seq=2, step=0, dur=0.001, source="call", numel=1, bytes=4, bucket=None, async_op=False)), to_json(OPTIONS))
    assert peer_ddp_args(PeerRecords(str(path)), wait_s=1.0, along=taken.append) == OPTIONS
    assert taken == [call]


def test_an_all_reduce_the_witness_cannot_take_part_in_is_said_plainly() -> None:
    with pytest.raises(GaveUp, match="on a process group of its own"):
        mirror_all_reduce(AllReduceCall(t=0.0, seq=1, step=0, shape=(1,), dtype="float32", op="SUM", default_group=False))
    with pytest.raises(GaveUp, match=r"cannot take part in: \(1099511627776,\) float32 SUM"):
        mirror_all_reduce(AllReduceCall(t=0.0, seq=1, step=0, shape=(1 << 40,), dtype="float32", op="SUM", default_group=True))
    with pytest.raises(GaveUp, match="cannot take part in"):
        mirror_all_reduce(AllReduceCall(t=0.0, seq=1, step=0, shape=(1,), dtype="os.system", op="SUM", default_group=True))
    assert explain(GaveUp("your rank 0 all-reduced on a process group of its own"), 10) == "your rank 0 all-reduced on a process group of its own"


def test_the_witness_takes_its_shard_the_way_rank_0s_first_pass_shows() -> None:
    """Contiguous shards (the TODO), every world-th row (DistributedSampler without shuffle) or
    DistributedSampler's seeded shuffle: every split is disjoint, and rank 0's first rows name it."""
    sums = [float(row) * 1.5 for row in range(64)]  # a row's sum, one per row of the grader's batch
    for layout in SHARD_LAYOUTS:
        shards = [shard_rows(layout, 64, 3, rank) for rank in range(3)]
        assert all(len(shard) == 21 for shard in shards)
        assert len({row for shard in shards for row in shard}) == 63
        first = tuple(sums[row] for row in shards[0][:5])
        assert layout_of(first, sums, 64, 3) == layout
    assert shard_rows("strided", 64, 3, 2)[:3] == [2, 5, 8]
    assert layout_of(None, sums, 64, 3) == "contiguous"  # no rows recorded: the TODO's split
    assert layout_of((sums[7], sums[3]), sums, 64, 3) == "contiguous"  # a split of its own: the gradients will tell


def test_a_samplers_own_seed_and_a_new_shuffle_in_every_step_are_followed() -> None:
    """DistributedSampler(seed=s) shuffles with s + epoch: the witness finds the shuffle from
    rank 0's rows in each step, whether the seed is the script's, one of its own or the epoch's."""
    from torch.utils.data.distributed import DistributedSampler

    sums = [float(row) * 1.5 for row in range(64)]
    for seed, epoch in ((1234, 0), (1234, 2), (42, 0), (0, 1)):
        taken = {}
        for rank in range(3):
            sampler = DistributedSampler(range(64), num_replicas=3, rank=rank, seed=seed, drop_last=True)
            sampler.set_epoch(epoch)
            taken[rank] = list(sampler)
        key = seed + epoch
        assert taken == {rank: shard_rows(f"sampler:{key}", 64, 3, rank) for rank in range(3)}
        first = tuple(sums[row] for row in taken[0][:5])
        assert layout_of(first, sums, 64, 3, seed=1234, step=epoch, previous=None if epoch == 0 else f"sampler:{key - 1}") == f"sampler:{key}"
    assert shard_rows("sampler", 64, 3, 1) == shard_rows("sampler:0", 64, 3, 1)
