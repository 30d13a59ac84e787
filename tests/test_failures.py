"""The one-line explanations of runs that did not end cleanly."""
from __future__ import annotations

from dataclasses import replace

from grader.checks import failures
from grader.probe.transport.traffic import RankEnd, TrafficReport
from grader.run.job import Frame, JobResult, Layout
from observations import crashed, ddp_run, job


def test_a_clean_run_needs_no_explanation() -> None:
    assert failures.explain(ddp_run()) is None


def test_the_root_cause_leads_and_the_echoes_follow() -> None:
    run = ddp_run("ws3", Layout(1, 3))
    crashed(run.ranks[0], "RuntimeError", "[gloo/pair.cc:553] Connection closed by peer [127.0.0.1]:1234")
    crashed(run.ranks[2], "ValueError", "shapes do not match", line=71, code="loss = loss_fn(out, y)")
    assert failures.explain(run) == "rank 2 raised ValueError: shapes do not match at p6_ddp.py:71 (loss = loss_fn(out, y)); then rank 0 failed too"


def test_only_broken_connections_mean_the_ranks_disagreed_on_collectives() -> None:
    run = ddp_run()
    crashed(run.ranks[0], "RuntimeError", "Connection closed by peer [127.0.0.1]:1669", line=90, code="loss.backward()")
    text = failures.explain(run)
    assert text.startswith("rank 0 lost contact with the other ranks in a collective at p6_ddp.py:90 (loss.backward()) (Connection closed by peer)")
    assert "rank 1 had already finished normally" in text
    assert text.endswith("— every rank must run the same collectives in the same order (e.g. backward() on every rank in every step)")
    hub = "collective 3 of the default process group: rank 1 left (its process ended) before it joined; its last call: all_reduce SUM([2177] float32)"
    crashed(run.ranks[0], "DistBackendError", hub, line=90, code="loss.backward()")
    assert failures.explain(run).startswith(f"rank 0 lost contact with the other ranks in a collective at p6_ddp.py:90 (loss.backward()) ({hub}); rank 1 had already finished normally")
    p2p = "rank 0 received from rank 1: it expected [8, 16] float32 and would receive [7, 16] float32"  # a send and a recv, not a collective
    crashed(run.ranks[0], "DistBackendError", p2p, line=117, code="dist.recv(grad, src=stage + 1)")
    assert failures.explain(run) == (
        f"rank 0 lost contact with the other ranks in a send or recv at p6_ddp.py:117 (dist.recv(grad, src=stage + 1)) ({p2p}); rank 1 had already finished normally"
        " — every send must meet a recv from its rank, of its size, in the same order"
    )



def test_a_connection_the_hub_ended_leads_what_the_ranks_reported() -> None:
    run = ddp_run()
    crashed(run.ranks[0], "DistBackendError", "the connection to the other ranks was lost (Broken pipe)", line=90, code="loss.backward()")
    ends = (RankEnd(0, 0.5, "broken: a frame announces a 99-byte header, over the transport's bounds"), RankEnd(1, 0.9, "broken: later"))
    run = replace(run, traffic=TrafficReport(2, (), (), ends, 0, 0))
    text = failures.explain(run)
    assert text.startswith("the grader's hub ended rank 0's connection: a frame announces a 99-byte header, over the transport's bounds — then rank 0 lost contact"), text
    run = replace(run, traffic=TrafficReport(2, (), (), (RankEnd(0, 0.5, "lost: it closed its connection in the middle of a call"), RankEnd(1, 0.9, "closed")), 0, 0))
    assert failures.explain(run).startswith("rank 0 lost contact")


def test_a_second_rendezvous_at_the_same_port_names_the_rank_given_to_init() -> None:
    run = ddp_run()
    crashed(run.ranks[1], "DistNetworkError", "The server socket has failed to listen on any local network address. port: 29500, code: -98, name: EADDRINUSE", line=59, code="dist.init_process_group(backend=backend)")
    assert failures.explain(run).endswith("init_process_group must get each process's own rank (the launcher's RANK)")


def test_nccl_where_a_rank_sees_no_gpu_is_named_on_either_build_of_torch() -> None:
    """A CPU build refuses NCCL at init_process_group; a CUDA build whose rank sees no GPU (a
    GPU node's CPU runs) refuses the first CPU tensor. Both say what to ask for."""
    for message in ("Distributed package doesn't have NCCL built in", "No backend type associated with device type cpu"):
        run = ddp_run()
        crashed(run.ranks[0], "RuntimeError", message, line=59, code='dist.init_process_group(backend="nccl")')
        assert "(nccl when CUDA is available, gloo otherwise" in failures.explain(run), message


def test_todo_stops_name_the_todo_and_the_line() -> None:
    run = ddp_run()
    for rank in run.ranks:
        crashed(rank, "NotImplementedError", "TODO 3: wrap the model in DDP", line=70)
    assert failures.explain(run) == "the script stops at TODO 3: wrap the model in DDP (p6_ddp.py:70) (every rank)"


def test_timeouts_say_where_each_stuck_rank_waits() -> None:
    run = ddp_run()
    run.timed_out = True
    run.ranks[0].status = None
    run.ranks[0].stack = [Frame("p6_ddp.py", 90, "<module>", "loss.backward()")]
    text = failures.explain(run)
    assert text == "did not finish within 60 s (a hang?): rank 0 waits at p6_ddp.py:90 in <module>: loss.backward(); rank 1 had already ended (exit 0)"
    run.ranks[0].cpu_share, run.reference_s = 0.97, 0.3  # the kernel saw it on a CPU just before it was stopped: computing, not waiting
    assert failures.explain(run) == (
        "did not finish within 60 s, where the reference solution's same run takes 0.3 s on this machine, 200× its whole run (still computing: does the loop end?): "
        "rank 0 is still computing at p6_ddp.py:90 in <module>: loss.backward(); rank 1 had already ended (exit 0)"
    )
    run.ranks[0].cpu_share = 0.02
    assert "(a hang, or far too slow?): rank 0 waits at p6_ddp.py:90" in failures.explain(run)


def test_a_check_of_the_whole_training_fails_a_run_that_never_ended() -> None:
    """What a run did until the grader stopped it is not the training a check of the whole
    training asks about (CheckDef.whole_run: p6's batch_shard, grad_sync, params_sync): a
    never-ending loop earns nothing there, whatever its first steps did."""
    from grader.checks.distributed import CHECKS
    from grader.checks.runs import unfinished

    run = ddp_run()
    assert unfinished((run,)) is None
    run.timed_out, run.reference_s = True, 0.5
    run.ranks[0].status, run.ranks[0].cpu_share = None, 1.0
    run.ranks[0].stack = [Frame("p6_ddp.py", 108, "<module>", "loss = model(x).sum()")]
    verdict = unfinished((ddp_run("ws1"), run))
    assert verdict is not None and not verdict.passed and verdict.summary == (
        "ws2 (1 node × 2 ranks): did not finish within 60 s, where the reference solution's same run takes 0.5 s on this machine, 120× its whole run "
        "(still computing: does the loop end?): rank 0 is still computing at p6_ddp.py:108 in <module>: loss = model(x).sum(); rank 1 had already ended (exit 0) "
        "— this check judges the whole training, which never ended"
    )
    assert {check for check, definition in CHECKS.items() if definition.whole_run} == {"batch_shard", "grad_sync", "params_sync"}


def test_a_job_stopped_for_using_no_cpu_says_so_in_seconds() -> None:
    run = ddp_run()
    run.timed_out, run.stalled_s, run.wall_s = True, 4.0, 6.25
    for rank in run.ranks:
        rank.status = None
        rank.stack = [Frame("p6_ddp.py", 97, "<module>", "dist.recv(torch.zeros(1), src=0)")]
    text = failures.explain(run)
    assert text.startswith("hung: stopped after 6.2 s, when none of its processes had used the CPU for 4 s (waiting for something that never comes): rank 0 waits at p6_ddp.py:97"), text


def test_signals_skips_and_errors() -> None:
    run = ddp_run()
    run.ranks[1].status = "signal:11"
    run.ranks[1].stack = [Frame("p6_ddp.py", 12, "<module>", "ctypes.string_at(0)")]
    assert failures.explain(run) == "rank 1 was killed by SIGSEGV at p6_ddp.py:12 in <module>: ctypes.string_at(0)"
    assert failures.explain(JobResult(spec=job("ws2", Layout(1, 2)), ranks=[], skipped="p6_ddp.py is not in the submission")) == "not run: p6_ddp.py is not in the submission"
    assert failures.explain(JobResult(spec=job("ws2", Layout(1, 2)), ranks=[], error="launcher died")) == "could not be run: launcher died"
    run = ddp_run()
    run.ranks[0].status = None
    assert failures.explain(run) == "rank 0 ended without an exit status (its launcher was killed)"


def test_an_error_of_the_grader_s_emulation_is_not_presented_as_the_student_s() -> None:
    from grader.probe.recorder.events import ExceptionInfo

    raised = ExceptionInfo(
        type="TypeError",
        message="'NoneType' object does not support the context manager protocol",
        frames=(Frame(file="p6_ddp.py", line=71, func="<module>", code="with torch.cuda.stream(s):"),),
        library_frame=Frame(file="../lib/grader/probe/vgpu/api.py", line=212, func="stream", code="return None"),
    )
    assert failures.describe_exception(raised) == (
        "TypeError: 'NoneType' object does not support the context manager protocol — raised inside the grader's virtual-GPU emulation "
        "(vgpu/api.py:212 in stream), not by torch, while running your line at p6_ddp.py:71 (with torch.cuda.stream(s):): "
        "if that line is right on a real GPU, this is the grader's fault; tell the course staff"
    )
    by_torch = ExceptionInfo(type="RuntimeError", message="boom", frames=raised.frames, library_frame=Frame(file="/usr/lib/python3/torch/nn/modules/linear.py", line=1, func="forward", code=""))
    assert failures.describe_exception(by_torch) == "RuntimeError: boom at p6_ddp.py:71 (with torch.cuda.stream(s):)"
    on_purpose = ExceptionInfo(type="AcceleratorError", message="CUDA error: invalid device ordinal", frames=raised.frames, library_frame=Frame(file="../lib/grader/probe/vgpu/devices.py", line=154, func="_check", code="raise invalid_ordinal()"))
    assert "grader's" not in failures.describe_exception(on_purpose)  # CUDA's error for the student's device number
