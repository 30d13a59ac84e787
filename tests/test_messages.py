"""The messages between the grader, its rank launcher and the ranks (grader.probe.messages):
one definition each, checked where they arrive, a bad one answered with a clear reason."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from grader.probe.messages import (
    BadMessage,
    DdpOptions,
    Exited,
    Go,
    JobRequest,
    LauncherError,
    LeaderExited,
    RankConfig,
    RankExited,
    RankPid,
    Ready,
    Started,
    WitnessPart,
    WitnessPlan,
    WitnessReport,
    answer_line,
    parse_answer,
    parse_request,
    request_line,
)
from grader.probe.witness import witness_parts
from grader.run.local import witness_report
from helpers import ROOT

CONFIG = RankConfig(
    rank=1, script="/job/work/p6_ddp.py", argv=("--steps=3",), cwd="/job/work", env={"RANK": "1"}, stdout="/job/rank1/stdout",
    stderr="/job/rank1/stderr", faults="/job/rank1/faults", observations="/job/rank1/observations.jsonl", watch_globals=("rank",),
    virtual_gpus=2, driver=False, pg_timeout_s=90.0, max_observation_bytes=1 << 20,
)


def test_every_message_comes_back_as_it_was_sent() -> None:
    for request in (JobRequest(id="01-ws2", ranks=(CONFIG,), hold=True), Go()):
        assert parse_request(request_line(request)) == request
    answers = (
        Ready(pid=7), Started(job="ws2", leader=9, pids=(RankPid(0, 10), RankPid(1, 11))), RankExited(job="ws2", rank=1, status="signal:9"),
        Exited(job="ws2", status={"0": "exit:0"}, leftovers=0), LeaderExited(job="ws2", status="exit:0", orphans=2), LauncherError(message="no"),
    )
    for answer in answers:
        assert parse_answer(answer_line(answer).encode()) == answer


def job(**config: object) -> str:
    fields = json.loads(request_line(JobRequest(id="j", ranks=(CONFIG,), hold=False)))
    fields["ranks"][0].update(config)
    return json.dumps(fields)


@pytest.mark.parametrize(
    "line, reason",
    [
        (job(rank="1"), "field 'rank' of an item of field 'ranks' of a 'job' request is \"1\", not a whole number"),
        (job(env={"RANK": 1}), "field 'env' of an item of field 'ranks' of a 'job' request['RANK'] is 1, not a text"),
        (json.dumps({"op": "job", "id": "j", "hold": False}), "a 'job' request lacks its field 'ranks'"),
        (json.dumps({"op": "run"}), 'unknown request op "run"'),
        ("{'op': 'go'}", "a request is not valid JSON"),
    ],
)
def test_a_bad_request_is_named_with_its_reason(line: str, reason: str) -> None:
    with pytest.raises(BadMessage) as caught:
        parse_request(line)
    assert str(caught.value) == reason


def test_the_launcher_answers_a_bad_request_with_an_error_and_keeps_serving() -> None:
    launcher = subprocess.Popen(
        [sys.executable, "-m", "grader.probe.zygote"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=ROOT, text=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    try:
        assert isinstance(parse_answer(launcher.stdout.readline()), Ready)
        launcher.stdin.write(job(argv="--steps=3") + "\n" + request_line(Go()) + "\n")
        launcher.stdin.flush()
        first, second = parse_answer(launcher.stdout.readline()), parse_answer(launcher.stdout.readline())
        assert first == LauncherError(message="a request could not be read: field 'argv' of an item of field 'ranks' of a 'job' request is \"--steps=3\", not a list")
        assert second == LauncherError(message="a 'go' request came without a job waiting for it")
    finally:
        launcher.stdin.close()
        assert launcher.wait(timeout=30) == 0
        launcher.stdout.close()


# ------------------------------------------------------------------ the grader's witness
PLAN = WitnessPlan(seed=5, batch_size=64, dim=32, hidden=64, steps=3, lr=0.05, world_size=2, rows=32, micro_batches=1, values=True, model="mlp", peer_records="/job/rank0/observations.jsonl", wait_s=10.0)
REPORT = WitnessReport(
    rank=1, ddp_options=DdpOptions(static_graph=False, bucket_cap_mb=1.0), allreduces=((1,), (0, 1)), step_ends=(1.5, 1.75), names=("0.weight",),
    grads=(((0.5, float("nan")),), ((0.25, -1.0),)), params=((0.1, 0.2),), error=None,
)


def test_a_witness_plan_and_its_report_come_back_as_they_were_sent() -> None:
    request = JobRequest(id="ws2", ranks=(CONFIG, replace(CONFIG, rank=1, witness=PLAN)), hold=False)
    assert parse_request(request_line(request)) == request
    parts = [parse_answer(line) for line in witness_parts("ws2", REPORT)]
    assert all(isinstance(part, WitnessPart) for part in parts)
    back = witness_report(parts, "exit:0", timed_out=False, stage="ddp")
    assert isinstance(back, WitnessReport) and back.allreduces == ((1,), (0, 1)) and back.grads[1] == ((0.25, -1.0),)


def test_a_large_report_is_cut_into_lines_that_are_each_one_atomic_pipe_write() -> None:
    big = replace(REPORT, grads=(tuple(tuple(float(i) / 7 for i in range(20000)) for _ in range(3)),))
    lines = witness_parts("ws2", big)
    assert len(lines) > 10 and max(len(line.encode()) for line in lines) < 4096  # PIPE_BUF: writes this short never interleave
    assert witness_report([parse_answer(line) for line in lines], "exit:0", timed_out=False) == big


def test_a_missing_or_damaged_report_says_how_far_the_witness_got() -> None:
    parts = [parse_answer(line) for line in witness_parts("ws2", REPORT)]
    assert witness_report([], "signal:9", timed_out=False, stage="joined") == "it was stopped (signal:9) while it waited for your rank 0 to build its DistributedDataParallel, after they had ended"
    assert witness_report([], None, timed_out=True, stage="") == "it was still waiting for your ranks to start the process group (init_process_group) when the run timed out"
    assert witness_report([replace(parts[0], parts=2)], "exit:0", timed_out=False) == "it sent 1 of 2 parts of its report"
    damaged = replace(parts[0], data="!!!!")
    assert witness_report([damaged], "exit:0", timed_out=False).startswith("its report could not be read")
