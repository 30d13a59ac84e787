"""The grader's transport: what each collective delivers (pure), the wire's strict reading, and
real ranks whose process groups the hub carries (tests/transport_ranks.py): every kind of
operation arrives as gloo would deliver it, DDP trains as single-process training does, and
every failure — members that disagree, a rank that left, one that never came, one that wrote
garbage — is an answer with a sentence, never a hang."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from grader.probe.transport import wire
from grader.probe.transport.collectives import deliver, mismatch
from grader.probe.transport.traffic import Carried, GroupRecord, Part, RankEnd, TrafficReport, pack, unpack
from grader.probe.transport.wire import BadFrame, Call, FrameReader, TensorMeta, parse_request, request_frame
from grader.probe.typed import Malformed, dumps
from grader.run import procs
from helpers import ROOT

F2 = TensorMeta("float32", (2,))


def call(kind: str, inputs=(F2,), outputs=(F2,), reduce: str = "", root: int = -1, ident: int = 0) -> Call:
    return Call(ident, "0", kind, reduce, root, -1, 0, tuple(inputs), tuple(outputs))


def test_each_collective_delivers_what_its_members_sent() -> None:
    def ones() -> dict:  # fresh each time: a reduction works in the first member's buffer, which the hub owns
        return {m: [torch.tensor([1.0, 2.0]) * (m + 1)] for m in range(3)}

    reduced = deliver({m: call("all_reduce", reduce="SUM") for m in range(3)}, ones())
    assert all(out[0].tolist() == [6.0, 12.0] for out in reduced.values())
    averaged = deliver({m: call("all_reduce", reduce="AVG") for m in range(3)}, ones())
    assert averaged[2][0].tolist() == [2.0, 4.0]
    broadcast = {m: call("broadcast", inputs=(F2,) if m == 1 else (), outputs=() if m == 1 else (F2,), root=1) for m in range(3)}
    delivered = deliver(broadcast, {m: ones()[m] if m == 1 else [] for m in range(3)})
    assert delivered[0][0].tolist() == [2.0, 4.0] and delivered[1] == []
    def pieces() -> dict:
        return {m: [torch.tensor([float(10 * m + r)]) for r in range(3)] for m in range(3)}

    one = TensorMeta("float32", (1,))
    scattered = deliver({m: call("reduce_scatter", inputs=(one,) * 3, outputs=(one,), reduce="SUM") for m in range(3)}, pieces())
    assert [scattered[m][0].item() for m in range(3)] == [30.0, 33.0, 36.0]
    swapped = deliver({m: call("all_to_all", inputs=(one,) * 3, outputs=(one,) * 3) for m in range(3)}, pieces())
    assert [t.item() for t in swapped[1]] == [1.0, 11.0, 21.0]


def test_members_that_disagree_are_named_with_both_calls() -> None:
    calls = {0: call("all_reduce", reduce="SUM"), 1: call("broadcast", inputs=(), root=0)}
    assert mismatch(calls) == "rank 0 called all_reduce SUM([2] float32) where rank 1 called broadcast([2] float32) from root 0"
    other_shape = {0: call("all_reduce", reduce="SUM"), 1: call("all_reduce", (TensorMeta("float32", (3,)),), (TensorMeta("float32", (3,)),), reduce="SUM")}
    assert "rank 1 called all_reduce SUM([3] float32)" in mismatch(other_shape)
    assert mismatch({0: call("all_reduce", (TensorMeta("int64", (2,)),), (TensorMeta("int64", (2,)),), reduce="AVG")}) == "rank 0 called all_reduce AVG([2] int64): it averages whole numbers"
    assert mismatch({m: call("broadcast", root=5) for m in range(2)}).endswith("its root 5 is not a member of the group of 2")
    assert mismatch({m: call("all_reduce", reduce="SUM") for m in range(2)}) is None


def test_the_hub_reads_frames_strictly() -> None:
    good = request_frame(call("all_reduce", reduce="SUM")) + b"\0" * 8
    reader = FrameReader()
    reader.feed(good[:5])
    assert reader.frames() == [] and reader.pending == 5
    reader.feed(good[5:])
    ((header, payload),) = reader.frames()
    assert parse_request(header, len(payload)).kind == "all_reduce"
    with pytest.raises(BadFrame, match="carries 4 bytes where its tensors make 8"):
        parse_request(header, 4)
    bad_kind = request_frame(call("all_reduce", reduce="SUM"))[8:].replace(b"all_reduce", b"rm_rf_home")
    with pytest.raises(BadFrame, match="kind 'rm_rf_home'"):
        parse_request(bad_kind, 8)
    with pytest.raises(BadFrame, match="dtype 'object'"):
        parse_request(dumps(call("all_reduce", (TensorMeta("object", (1,)),), (), reduce="SUM"), "op", "call").encode(), 0)
    with pytest.raises(BadFrame, match="over the transport's bounds"):  # at once: the bytes are never waited for
        FrameReader().feed(wire.PREFIX.pack(16, wire.MAX_PAYLOAD + 1))


def test_the_report_round_trips_and_a_forged_one_is_refused() -> None:
    report = TrafficReport(2, (GroupRecord("0", (0, 1), (0, 1)),), (Carried("0", 0, "all_reduce", "SUM", -1, 0.5, (Part(0, 0.1, (F2,), "AAAAAAAAAAA=", (0.0,)),), None),), (RankEnd(0, 1.0, "closed"),), 0, 8)
    assert unpack(pack(report)) == report
    with pytest.raises(Malformed):
        unpack(["bm90IGEgcmVwb3J0"])


def test_a_long_group_name_is_cut_in_the_report_and_still_told_apart() -> None:
    """Each operation of the report names its group: a name of 8,000 characters on 14,000
    barriers took the grader to 837 MiB. The report keeps NAME_CHARS of it, with a digest of the
    whole, so two long names sharing their start are still two groups."""
    from grader.probe.transport.hub import NAME_CHARS, report_name

    first, second = "g" * 8000, "g" * 7999 + "h"
    assert report_name("0") == "0" and report_name("x" * NAME_CHARS) == "x" * NAME_CHARS
    assert len(report_name(first)) == NAME_CHARS and report_name(first) != report_name(second) and report_name(first).startswith("g" * 40)


def test_a_connection_handed_to_another_process_is_ended_not_credited() -> None:
    """Rank 0 hands its socket to rank 1 and exits; rank 1 writes an all-reduce on it as rank
    0's. The kernel names each frame's sender: the hub ends rank 0's connection with a sentence,
    and carries nothing in its name."""
    seen = ranks("hands_its_socket", 2, wait_s=3.0)
    assert seen["ranks"] == [{"handed": True}, {"wrote": True}], seen["ranks"]
    assert seen["ends"][0].startswith("broken: rank 0's connection to the grader's hub was written by another process than the one that used it first"), seen["ends"]
    assert not any(c["kind"] == "all_reduce" and c["error"] is None for c in seen["carried"]), seen["carried"]


def test_a_connection_first_written_by_a_process_the_launcher_did_not_start_is_ended() -> None:
    """A socket handed on before its rank ever wrote on it: its first writer is then no child of
    the launcher (here the hub's launcher is said to be another process than this test's parent),
    and the hub ends the connection. Written by a child of the launcher, it is taken."""
    import os
    import socket

    from grader.probe.transport.hub import Hub
    from grader.probe.transport.traffic import CarrierPlan
    from grader.probe.transport.wire import Group, pass_credentials

    for launcher, ended in ((1, True), (os.getppid(), False)):
        hub_end, rank_end = socket.socketpair()
        pass_credentials(hub_end)
        hub = Hub({0: hub_end}, CarrierPlan(1.0, 0), launcher=launcher)
        rank_end.sendall(request_frame(Group("0", (0,), 0)))
        hub._read(0)
        end = hub._ranks[0].end
        assert (end is not None and end.how.startswith("broken: rank 0's connection to the grader's hub was written by a process the launcher did not start as a rank")) is ended, end
        rank_end.close()
        hub_end.close()


def ranks(scenario: str, world: int, wait_s: float = 10.0) -> dict:
    """Run a scenario of tests/transport_ranks.py: its ranks' results and the hub's report."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "transport_ranks.py"), scenario, str(world), str(wait_s)],
        capture_output=True, text=True, timeout=120, env={"TEST_PORT": str(procs.free_port()), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.slow
def test_every_kind_of_operation_arrives_as_gloo_delivers_it() -> None:
    seen = ranks("every_collective", 3)
    r0, r1, r2 = seen["ranks"]
    assert r0["backend"] == "gloo", r0  # what the script asked for, as under torchrun
    assert r0["all_reduce"] == [6.0] * 3 and r2["all_reduce_max"] == [3.0]
    assert r0["broadcast"] == r1["broadcast"] == [2.0]
    assert r1["all_gather"] == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]] and r2["all_gather_into_tensor"] == [0.0, 0.0, 1.0, 1.0, 2.0, 2.0]
    assert r0["reduce"] == [6.0]
    assert [r["reduce_scatter"] for r in (r0, r1, r2)] == [[30.0], [33.0], [36.0]]
    assert r1["reduce_scatter_tensor"] == [9.0, 12.0]
    assert r0["gather"] == [[0.0], [1.0], [2.0]] and r1["gather"] is None
    assert [r["scatter"] for r in (r0, r1, r2)] == [[0.0], [100.0], [200.0]]
    assert r2["all_to_all_single"] == [2.0, 12.0, 22.0]
    assert r2["recv"] == [42.0]
    assert r1["all_gather_object"] == [{"rank": 0}, {"rank": 1}, {"rank": 2}]
    assert r0["subgroup"] == r1["subgroup"] == [11.0] and "subgroup" not in r2
    assert seen["ends"] == ["closed"] * 3
    assert not [c for c in seen["carried"] if c["error"]]
    reductions = [c for c in seen["carried"] if c["kind"] == "all_reduce" and c["group"] == "0"]
    assert reductions[0]["kept"] == [True] * 3  # what each member sent is in the report
    assert any(c["kind"] == "all_reduce" and c["ranks"] == [0, 1] for c in seen["carried"])  # the subgroup's


@pytest.mark.slow
def test_ddp_over_the_hub_trains_as_one_process_does() -> None:
    seen = ranks("ddp_training", 3)
    for result in seen["ranks"]:
        for mine, want in zip(result["params"], seen["reference"]):
            assert max(abs(a - b) for a, b in zip(mine, want)) < 1e-6
    kinds = [c["kind"] for c in seen["carried"]]
    assert kinds.count("broadcast") >= 1 and kinds.count("all_reduce") == 2  # DDP's start, one bucket per backward


@pytest.mark.slow
def test_a_backend_for_cuda_alone_refuses_a_cpu_tensor_as_c10d_does() -> None:
    """NCCL carries CUDA tensors only: a script that asks for it where its ranks see no GPU
    fails at its first CPU collective under torchrun, and does over the hub (on a CPU build
    of torch it fails earlier, at init_process_group)."""
    seen = ranks("cuda_only_backend", 2)
    assert [r["error"] for r in seen["ranks"]] == ["No backend type associated with device type cpu"] * 2
    assert seen["carried"] == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "world", "wait_s", "said"),
    [
        ("disagree", 2, 10.0, "collective 1 of the default process group: rank 0 called all_reduce SUM([2] float32) where rank 1 called broadcast([2] float32) from root 0"),
        ("leaves_early", 3, 10.0, "collective 1 of the default process group: rank 2 left (its process ended) before it joined; its last call: nothing yet"),
        ("stays_away", 2, 0.5, "collective 1 of the default process group: rank 1 did not join within 0.5 s (its last call: nothing yet)"),
        ("writes_garbage", 3, 10.0, "rank 2 left (broken: a frame is not valid JSON) before it joined"),
    ],
)
def test_a_collective_that_cannot_complete_fails_every_member_with_a_sentence(scenario: str, world: int, wait_s: float, said: str) -> None:
    seen = ranks(scenario, world, wait_s)
    assert seen["ranks"][0]["error"].startswith("collective 1") and said in seen["ranks"][0]["error"], seen["ranks"][0]
    assert seen["carried"][0]["error"] and said in seen["carried"][0]["error"]


@pytest.mark.slow
def test_a_send_completes_when_its_recv_takes_it_as_on_gloo() -> None:
    """gloo's send is a rendezvous: two ranks that both send before receiving hang (here each
    send fails after the hub's wait, unrecorded: the first to expire with the wait, the other
    with it too, or, where its receiver's failed send let that rank end first, with its
    receiver gone — which of the two is a race between the sends' arrivals and the first rank's
    exit: CI saw both); a send then its recv, in order, is fine."""
    stuck = ranks("sends_first", 2, 0.5)
    reasons = [result["error"] for result in stuck["ranks"]]
    waited = [f"send to rank {1 - rank} of the default process group: it was not received within 0.5 s" for rank in (0, 1)]
    left = [f"send to rank {1 - rank} of the default process group: rank {1 - rank} left (its process ended) without receiving it" for rank in (0, 1)]
    assert all(reason in (waited[rank], left[rank]) for rank, reason in enumerate(reasons)), reasons
    assert waited[0] in reasons or waited[1] in reasons, reasons  # one send expired first
    assert stuck["carried"] == []
    fine = ranks("send_then_recv", 2)
    assert fine["ranks"] == [{"completed_before_recv": False, "got": [10.0, 20.0]}, {"got": [1.0, 2.0]}], fine["ranks"]
    assert [c["kind"] for c in fine["carried"]] == ["barrier", "send", "send"] and fine["ends"] == ["closed"] * 2


def test_the_hub_replaces_one_send_of_each_step_each_way_between_neighbours_with_values_it_draws() -> None:
    """Substitution (p7's checked runs): one send in each block of micro_batches sends (a step)
    on each pair of neighbouring ranks, forward in every step, backward in all but the last, in
    the sent shape and dtype: forward uniform in [-1, 1], backward of the sent values' scale;
    other sends (not float, not rows × dim, not between neighbours) are neither replaced nor
    counted."""
    import torch

    from grader.probe.transport.hub import _Substitutes
    from grader.probe.transport.traffic import Substitution

    hub = _Substitutes(Substitution(dim=4, micro_batches=3, steps=3))
    replaced = []
    for number in range(9):
        for pair in ((0, 1), (1, 0), (1, 2)):
            for other in ([torch.ones(3, dtype=torch.int64)], [torch.ones(2, 5)], [torch.ones(2, 4), torch.ones(2, 4)]):
                assert hub.deliver(*pair, other) is other
            sent = [torch.full((2, 4), 100.0, dtype=torch.float32)]
            got = hub.deliver(*pair, sent)
            if got is not sent:
                replaced.append((pair, number // 3, got[0]))
        assert hub.deliver(0, 2, [torch.ones(2, 4)])[0].eq(1).all()  # not neighbours
    assert sorted((pair, step) for pair, step, _ in replaced) == [((0, 1), 0), ((0, 1), 1), ((0, 1), 2), ((1, 0), 0), ((1, 0), 1), ((1, 2), 0), ((1, 2), 1), ((1, 2), 2)]
    for pair, _, values in replaced:
        assert values.shape == (2, 4) and values.dtype == torch.float32 and not values.eq(100).any()
        assert values.abs().max() <= (1 if pair[1] > pair[0] else 1000)


def test_the_hub_counts_exactly_the_sends_the_pipeline_checks_read() -> None:
    """One rule (traffic.pipeline_send) for what the hub may substitute and what p7's checks
    judge: a bfloat16 send of rows × dim is both (sends the checks skipped could otherwise use
    up every substitution), an integer one or one of another width neither."""
    import torch

    from grader.checks.pipeline import messages
    from grader.probe.transport.hub import _Substitutes
    from grader.probe.transport.traffic import Carried, Part, Substitution, TrafficReport
    from grader.probe.transport.wire import TensorMeta

    hub = _Substitutes(Substitution(dim=4, micro_batches=1, steps=2))
    decoy = [torch.zeros(1, 4, dtype=torch.bfloat16)]
    assert hub.deliver(0, 1, decoy) is not decoy  # counted, and the block's only send: replaced
    assert hub.deliver(0, 1, [torch.ones(3, 4)])[0].dtype == torch.float32
    report = TrafficReport(2, (), tuple(
        Carried("0", -1, "send", "", 1, float(i), (Part(0, float(i), (meta,), "", (0.0,)),), None)
        for i, meta in enumerate((TensorMeta("bfloat16", (1, 4)), TensorMeta("int64", (1, 4)), TensorMeta("float32", (1, 5))))
    ), (), 0, 0)
    assert [(m.source, m.rows) for m in messages(report, 4)] == [(0, 1)]
