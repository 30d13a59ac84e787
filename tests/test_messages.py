"""The messages between the grader, its rank launcher and the ranks (grader.probe.messages):
one definition each, checked where they arrive, a bad one answered with a clear reason."""
from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from grader.probe.messages import (
    BadMessage,
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
    TrafficPart,
    answer_line,
    parse_answer,
    parse_request,
    request_line,
)
from grader.probe.transport.traffic import Carried, CarrierPlan, GroupRecord, Part, RankEnd, TrafficReport, pack
from grader.probe.transport.wire import TensorMeta
from grader.run.local import traffic_report
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


# ------------------------------------------------------------------ the grader's hub
REPORT = TrafficReport(
    world=2,
    groups=(GroupRecord("0", (0, 1), (0, 1)),),
    carried=(Carried("0", 0, "all_reduce", "SUM", -1, 0.25, (Part(0, 0.1, (TensorMeta("float32", (2,)),), "AAAAAAAAgD8=", (1.0,)), Part(1, 0.2, (TensorMeta("float32", (2,)),), "", (2.0,))), None),),
    ends=(RankEnd(0, 0.3, "closed"), RankEnd(1, 0.3, "broken: a frame is not valid JSON")),
    omitted=0,
    kept_bytes=8,
)


def hub_lines(job: str, report: TrafficReport) -> list[str]:
    """The hub's report as the launcher says it: `traffic` answers."""
    chunks = pack(report)
    return [answer_line(TrafficPart(job=job, part=i, parts=len(chunks), data=chunk)) for i, chunk in enumerate(chunks)]


def test_a_carried_job_and_its_hubs_report_come_back_as_they_were_sent() -> None:
    request = JobRequest(id="ws2", ranks=(CONFIG, replace(CONFIG, rank=0)), hold=False, carrier=CarrierPlan(wait_s=60.0, keep_bytes=1 << 20))
    assert parse_request(request_line(request)) == request
    parts = [parse_answer(line) for line in hub_lines("ws2", REPORT)]
    assert all(isinstance(part, TrafficPart) for part in parts)
    assert traffic_report(parts, timed_out=False) == REPORT


def test_a_large_report_is_cut_into_lines_that_are_each_one_atomic_pipe_write() -> None:
    data = base64.b64encode(os.urandom(1024000)).decode()  # floats hardly compress: nor do these
    member = replace(REPORT.carried[0].members[0], inputs=(TensorMeta("float32", (256000,)),), data=data)
    big = replace(REPORT, carried=(replace(REPORT.carried[0], members=(member,)),))
    lines = hub_lines("ws2", big)
    assert len(lines) > 10 and max(len(line.encode()) for line in lines) < 4096  # PIPE_BUF: writes this short never interleave
    assert traffic_report([parse_answer(line) for line in lines], timed_out=False) == big


def test_a_missing_or_damaged_report_says_why() -> None:
    parts = [parse_answer(line) for line in hub_lines("ws2", REPORT)]
    assert traffic_report([], timed_out=False) == "the grader's hub sent no report (was it killed?)"
    assert traffic_report([], timed_out=True) == "the job was stopped before the grader's hub could report"
    assert traffic_report([replace(parts[0], parts=2)], timed_out=False) == "the grader's hub sent 1 of 2 parts of its report"
    assert traffic_report([replace(parts[0], data="!!!!")], timed_out=False).startswith("the grader's hub's report could not be read")
