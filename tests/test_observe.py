"""`python -m grader observe`: the report, the trace and the timeline from hand-made events
(fast), and real runs of the p5, p6 and p10 reference solutions and of scripts written for
these tests (slow: they start python and torchrun for real)."""
from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from grader.cli import main
from grader.observe.records import ObservedProcess, Timed, align, distinct_labels, read_processes
from grader.observe.report import RunSummary, busy_seconds, duration_text, render_report, size_text
from grader.observe.timeline import MAX_LANES, MIN_WIDTH, draw_timeline, lanes, timeline_lanes, visible
from grader.observe.trace import COMMUNICATION, chrome_trace
from grader.probe.recorder.events import Backward, Exit, InitPg, Note, plain, to_json
from grader.probe.recorder.observers import Probe
from grader.run.records import decode_records, parse_records, read_records
from helpers import ROOT, again_after_teardown_abort, run_cli
from observations import header, inputs, observed, timed

SCRIPTS = Path(__file__).parent / "observe_scripts"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]


def span(kind: str, start: float, end: float, step: int = 0, **fields: object) -> Timed:
    return timed(kind, start, end, step, **fields)


def instant(kind: str, at: float, step: int = 0, **fields: object) -> Timed:
    return timed(kind, at, None, step, **fields)


def process(rank: int | None, *events: Timed, world_size: int = 2) -> ObservedProcess:
    return observed(header(rank, world_size if rank is not None else None, pid=4000 + (rank or 0)), *events)


def missing(text: str, *lines: str) -> list[str]:
    """The lines that `text` does not contain (an empty list when all are there)."""
    return [line for line in lines if line not in text]


def report_of(*processes: ObservedProcess, exit_status: int = 0) -> str:
    return render_report(list(processes), RunSummary(["python", "train.py"], exit_status))


def two_step_hybrid_rank(rank: int, synced_passes: tuple[int, ...]) -> ObservedProcess:
    """A rank of two steps of 4 micro-batches, DDP's bucket all-reduced in `synced_passes`."""
    events = [instant("init_pg", 0.0, requested="nccl", backend="gloo", rank=rank, world_size=2)]
    label = "DistributedDataParallel(TwoStageModel)"
    events.append(instant("model", 0.01, label=label, params=2177, devices=[f"cuda:{rank}", f"cuda:{rank + 2}"]))
    t = 0.1
    for step in range(2):
        for micro in range(1, 5):
            call = step * 4 + micro
            events.append(span("forward", t, t + 0.01, step, role="model", label=label, call=call, inputs=inputs([8, 32], "cpu")))
            stage = {"role": "stage", "label": "stage1", "module": "Sequential", "devices": [f"cuda:{rank}"], "call": call}
            events.append(span("forward", t, t + 0.004, step, **stage, inputs=inputs([8, 32], f"cuda:{rank}")))
            events.append(span("backward", t + 0.01, t + 0.03, step))
            if micro in synced_passes:
                events.append(span("allreduce", t + 0.02, t + 0.025, step, source="ddp", bytes=8708, bucket=0))
            t += 0.03
        events.append(span("optimizer", t, t + 0.002, step, optimizer="SGD"))
        t += 0.01
    events += [instant("memory", t, 2, peak=[16896, 0, 2458, 0]), instant("exit", t, 2)]
    return process(rank, *events)


# ---------------------------------------------------------------- numbers
def test_sizes_durations_and_busy_time_read_as_people_write_them() -> None:
    assert [size_text(n) for n in (4, 8708, 3 << 20, 5 << 30)] == ["4 B", "8.5 KiB", "3.0 MiB", "5.0 GiB"]
    assert [duration_text(s) for s in (0.00042, 0.0121, 12.345)] == ["0.42 ms", "12.1 ms", "12.35 s"]
    overlapping = [span("backward", 0.0, 1.0), span("allreduce", 0.5, 1.5), span("forward", 3.0, 4.0)]
    assert busy_seconds(overlapping) == pytest.approx(2.5)


# ---------------------------------------------------------------- report
def test_a_dataparallel_split_is_reported_row_by_row_in_device_order() -> None:
    replicas = [(4, 12), (0, 13), (2, 13), (1, 13), (3, 13)]  # as threads on real GPUs may finish
    events = [instant("model", 0.0, label="DataParallel(Net)", params=100, devices=["cuda:0"])]
    events += [span("forward", 0.1, 0.2, role="replica", label="Net", call=1, inputs=inputs([n, 8], f"cuda:{k}")) for k, n in replicas]
    events.append(span("forward", 0.05, 0.3, role="model", label="DataParallel(Net)", call=1, inputs=inputs([64, 8], "cuda:0")))
    text = report_of(process(None, *events))
    assert "split of [64, 8] on cuda:0: 13, 13, 13, 13, 12 rows on cuda:0, cuda:1, cuda:2, cuda:3, cuda:4 (1 call)" in text
    assert "replica Net (1 call): [12, 8] on cuda:4" in text
    assert "process 4000 (not launched by torchrun) · device cuda:0" in text
    assert "none: DataParallel sums the replicas' gradients on its first device instead" in text


def test_no_sync_shows_as_one_all_reduce_in_the_last_backward_pass_of_each_step() -> None:
    text = report_of(two_step_hybrid_rank(0, (4,)), two_step_hybrid_rank(1, (4,)))
    assert missing(
        text,
        "rank 1 · local rank 1 · world size 2 · device cuda:1, cuda:3 · pid 4001",
        "process group gloo (asked for nccl), rank 0 of 2",
        "backward      8 passes, 4 per step",
        "DDP gradient buckets: 1 per step, 8.5 KiB per step · 10.0 ms in all · only during the last of the 4 backward passes of a step",
        "stage stage1 (Sequential on cuda:0, 8 calls): [8, 32] on cuda:0",
        "peak memory   cuda:0 16.5 KiB · cuda:2 2.4 KiB",
        "2 optimizer steps: 122.0 ms, 130.0 ms",
    ) == []
    every_pass = report_of(two_step_hybrid_rank(0, (1, 2, 3, 4)))
    assert "4 per step, 34.0 KiB per step" in every_pass and "during each of the 4 backward passes of a step" in every_pass


def test_what_was_not_seen_is_one_clear_line_each() -> None:
    events = [
        span("forward", 0.0, 0.1, role="model", label="Net", call=1, inputs=inputs([3, 4], "cpu")),
        instant("note", 0.2, text="all-reduces inside DDP not visible: its communication hook could not be registered (RuntimeError: no)"),
        instant("exception", 0.3, type="RuntimeError", message="boom"),
        span("allreduce", 0.4, 0.5, source="call", bytes=4),
    ]
    text = report_of(process(0, *events), exit_status=1)
    assert missing(
        text,
        "the script failed: exit status 1; below is what was seen until it stopped",
        "step time     no optimizer steps seen: step times not available",
        "backward      none seen",
        "dist.all_reduce calls: 1 (4 B) in all (no optimizer step: not split by step)",
        "all-reduces inside DDP not visible: its communication hook could not be registered (RuntimeError: no)",
        "uncaught RuntimeError: boom",
        "no normal exit recorded: the process was killed or crashed",
        "not measured: the process did not reach a normal exit",
        "process group none initialised",
    ) == []
    assert "no process recorded anything" in report_of()


# ---------------------------------------------------------------- records
def test_event_files_line_up_on_one_clock_and_a_cut_last_line_is_passed_over() -> None:
    backward = Backward(t=1.25, seq=1, step=0, dur=0.25)  # a span's t is its start
    first = "\n".join([to_json(replace(header(1, 2, pid=7), t=0.5, wall=1000.5)), to_json(backward), '{"kind":"opt']).encode()
    group = InitPg(t=0.0, seq=1, step=0, requested="gloo", backend="gloo", rank=0, world_size=2)
    second = [to_json(header(0, 2, pid=8)), to_json(group)]
    one, two = align([decode_records(first, longer=False), parse_records(second)])
    assert (one.rank, two.rank) == (0, 1)
    assert one.events[0].start == 0.0 and two.events[0].start == pytest.approx(1.25) and two.events[0].end == pytest.approx(1.5)
    assert len(two.events) == 1 and one.world_size == 2 and two.name == "rank 1" and two.record.cut_short
    assert two.events[0]["kind"] == "backward" and dict(two.events[0]) == {**plain(backward), "start": two.events[0].start, "end": two.events[0].end}


def test_read_processes_reads_every_event_file_of_a_folder(tmp_path: Path) -> None:
    events = [Note(t=0.25, seq=1, step=0, text="a note"), Exit(t=1.0, seq=2, step=0, how="atexit", code=None)]
    lines = [to_json(header(None, None, pid=9, wall=5.0)), *(to_json(e) for e in events)]
    (tmp_path / "events-host-9.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "events-host-10.jsonl").write_text("\n".join([lines[0].replace('"pid":9', '"pid":10'), '{"kind": "verdict"}']) + "\n")
    (tmp_path / "notes.txt").write_text("not an event file")
    only, damaged = read_processes(tmp_path)
    assert only.name == "pid 9" and only.of_kind(Exit)[0].end == 0.75
    assert damaged.name == "pid 10" and 'the event file is damaged (line 2: unknown event kind "verdict")' in render_report([damaged], RunSummary(["x"], 0))
    assert read_processes(tmp_path / "missing") == []


# ---------------------------------------------------------------- pictures
def test_the_chrome_trace_names_ranks_and_puts_all_reduces_on_their_own_thread() -> None:
    document = json.loads(json.dumps(chrome_trace([two_step_hybrid_rank(0, (4,)), two_step_hybrid_rank(1, (4,))], {"command": ["x"]})))
    events = document["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {1: "rank 0 · pid 4000", 2: "rank 1 · pid 4001"}
    reduces = [e for e in events if e.get("cat") == "allreduce"]
    assert len(reduces) == 4 and {e["tid"] for e in reduces} == {COMMUNICATION}
    assert reduces[0]["ph"] == "X" and reduces[0]["ts"] == pytest.approx(0.21e6) and reduces[0]["dur"] == pytest.approx(5000)
    assert [e["name"] for e in events if e.get("cat") == "step" and e["pid"] == 1] == ["step 0", "step 1"]
    assert any(e["name"] == "stage stage1 on cuda:0" for e in events)


def test_the_timeline_is_a_png_with_idle_spanning_the_active_window(tmp_path: Path) -> None:
    rank = two_step_hybrid_rank(0, (4,))
    main, stage, reduces = lanes(rank, "rank 0")
    assert main.spans["idle"] == [(pytest.approx(0.1), pytest.approx(0.252))]
    assert len(main.spans["forward"]) == 8 and len(reduces.spans["allreduce"]) == 2
    assert stage.label == "stage stage1 (Sequential) on cuda:0" and len(stage.spans["forward"]) == 8
    draw_timeline([rank, two_step_hybrid_rank(1, (4,))], tmp_path / "t.png", "observe: test")
    draw_timeline([], tmp_path / "empty.png")
    assert (tmp_path / "t.png").read_bytes()[:8] == PNG_SIGNATURE == (tmp_path / "empty.png").read_bytes()[:8]


def dataparallel_process(devices: int = 3, calls: int = 2) -> ObservedProcess:
    """DataParallel over `devices` devices, its replicas ending on the last device first."""
    events, t = [], 0.0
    for call in range(1, calls + 1):
        for k in reversed(range(devices)):
            begin = t + 0.01 * k
            events.append(span("forward", begin, begin + 0.008, role="replica", label="Net", call=call, inputs=inputs([4, 8], f"cuda:{k}")))
        events.append(span("forward", t, t + 0.05, role="model", label="DataParallel(Net)", call=call, inputs=inputs([12, 8], "cuda:0")))
        events += [span("backward", t + 0.05, t + 0.09), span("optimizer", t + 0.09, t + 0.1, optimizer="SGD")]
        t += 0.1
    return process(None, *events)


def spawned(rank: int, pid: int, ppid: int, start: float, host: str = "node", world_size: int = 2) -> ObservedProcess:
    return observed(header(rank, world_size, pid=pid, ppid=ppid, host=host), span("forward", start, start + 0.1, role="model", label="Net", call=1))


def test_dataparallel_replicas_get_one_lane_per_device_in_device_order_and_no_all_reduce_lane() -> None:
    main, *replicas = lanes(dataparallel_process(devices=3), "pid 4000")
    assert (main.label, main.main, len(main.spans["forward"])) == ("pid 4000", True, 2)
    assert [lane.label for lane in replicas] == ["replica on cuda:0", "replica on cuda:1", "replica on cuda:2"]
    assert [len(lane.spans["forward"]) for lane in replicas] == [2, 2, 2] and not any(lane.main for lane in replicas)
    assert replicas[1].spans["forward"][0] == (pytest.approx(0.01), pytest.approx(0.008))
    assert main.spans["idle"] == [(0.0, pytest.approx(0.2))]
    with_reduce = process(0, span("backward", 0.0, 1.0), span("allreduce", 0.5, 0.7, source="ddp", bytes=4, bucket=0))
    assert [lane.label for lane in lanes(with_reduce, "rank 0")] == ["rank 0", "all-reduce"]


def test_a_rank_of_several_that_never_all_reduced_gets_an_empty_lane_that_says_so() -> None:
    """What a student whose gradients are never synchronised sees in the timeline of a graded run."""
    alone = process(1, span("forward", 0.0, 0.1, role="model", label="Net", call=1), span("backward", 0.1, 0.3), world_size=2)
    assert [(lane.label, lane.spans.get("allreduce")) for lane in lanes(alone, "rank 1")][1:] == [("all-reduce: none recorded", [])]
    assert [lane.label for lane in lanes(process(0, span("backward", 0.0, 1.0), world_size=1), "rank 0")] == ["rank 0"]


def test_model_stages_get_one_lane_each_in_the_order_of_their_first_call() -> None:
    events = [span("forward", 0.0, 0.3, role="model", label="Net", call=1, inputs=inputs([8, 4], "cpu"))]
    for micro in range(2):  # a pipeline of two micro-batches: stage 2 of the first runs with stage 1 of the second
        t = 0.1 * micro
        events.append(span("forward", t, t + 0.1, role="stage", label="seq1", module="Sequential", devices=["cuda:0"], call=1))
        events.append(span("forward", t + 0.1, t + 0.2, role="stage", label="fc", module="Linear", devices=["cuda:1"], call=1))
    events.append(span("forward", 0.3, 0.4, role="stage", label="Linear", module="Linear", call=1, inputs=inputs([4, 2], "cuda:2")))
    drawn = lanes(process(None, *events), "pid 4000")
    stages = ["stage seq1 (Sequential) on cuda:0", "stage fc (Linear) on cuda:1", "stage Linear on cuda:2"]
    assert [lane.label for lane in drawn] == ["pid 4000", *stages]
    assert drawn[2].spans["forward"] == [(pytest.approx(0.1), pytest.approx(0.1)), (pytest.approx(0.2), pytest.approx(0.1))]


def test_two_spawn_groups_with_the_same_ranks_get_distinct_labels_and_stay_together() -> None:
    later, earlier = 100, 200  # the parent of the second group started its processes first
    processes = [spawned(0, 11, later, 5.0), spawned(0, 21, earlier, 0.0), spawned(1, 12, later, 5.0), spawned(1, 22, earlier, 0.0)]
    assert distinct_labels(processes) == [
        "spawn 2 · rank 0 · pid 11",
        "spawn 1 · rank 0 · pid 21",
        "spawn 2 · rank 1 · pid 12",
        "spawn 1 · rank 1 · pid 22",
    ]
    assert [lane.label for lane in timeline_lanes(processes).lanes if lane.main] == [
        "spawn 1 · rank 0 · pid 21",
        "spawn 1 · rank 1 · pid 22",
        "spawn 2 · rank 0 · pid 11",
        "spawn 2 · rank 1 · pid 12",
    ]
    # mp.spawn called three times by one script, the last time for one process
    one_parent = [spawned(0, 31, 1, 0.0), spawned(0, 41, 1, 5.0), spawned(0, 51, 1, 9.0, world_size=1), spawned(1, 32, 1, 0.1), spawned(1, 42, 1, 5.0)]
    assert distinct_labels(one_parent) == [
        "spawn 1 · rank 0 · pid 31",
        "spawn 2 · rank 0 · pid 41",
        "spawn 3 · rank 0 · pid 51",
        "spawn 1 · rank 1 · pid 32",
        "spawn 2 · rank 1 · pid 42",
    ]
    torchrun = [spawned(0, 11, 100, 0.0), spawned(1, 12, 100, 0.0)]
    assert distinct_labels(torchrun) == ["rank 0 · pid 11", "rank 1 · pid 12"]
    two_nodes = [spawned(0, 11, 100, 0.0, host="a"), spawned(1, 11, 100, 0.0, host="b")]
    assert distinct_labels(two_nodes) == ["spawn 1 · rank 0 · pid 11 · a", "spawn 2 · rank 1 · pid 11 · b"]
    assert [p.name for p in processes[:2]] == ["rank 0", "rank 0"]  # the report's own block titles add pid and device


def test_a_one_millisecond_span_on_a_seventeen_second_axis_is_still_drawn() -> None:
    [(start, width), long] = visible([(5.0, 0.001), (6.0, 4.0)], 17.0)
    assert start == 5.0 and width >= 17.0 * MIN_WIDTH > 0.001 and long == (6.0, 4.0)
    assert 13 * 110 * 0.75 * MIN_WIDTH >= 2  # at least two pixels on the drawn axis (13 inches at 110 dpi, 3/4 of it the axis)


def test_hundreds_of_processes_are_cut_to_the_lanes_that_fit_and_counted() -> None:
    many = [spawned(rank, 1000 + rank, 1, 0.0) for rank in range(300)]
    timeline = timeline_lanes(many)
    assert len(timeline.lanes) == MAX_LANES and timeline.processes_not_drawn == 300 - MAX_LANES // 2  # each: main and an empty all-reduce lane
    wide = dataparallel_process(devices=8)
    cut = timeline_lanes([wide, dataparallel_process(devices=1)], max_lanes=4)
    assert (len(cut.lanes), cut.lanes_not_drawn, cut.processes_not_drawn) == (4, 5, 1)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_the_timeline_png_of_replicas_and_of_hundreds_of_processes_stays_a_readable_size(tmp_path: Path) -> None:
    draw_timeline([dataparallel_process(devices=5)], tmp_path / "dp.png", "observe: python p5_dp.py costs $5$")
    width, height = png_size(tmp_path / "dp.png")
    assert width == 13 * 110 and 300 <= height <= 400
    draw_timeline([spawned(rank, 1000 + rank, 1, 0.0) for rank in range(300)], tmp_path / "many.png")
    assert png_size(tmp_path / "many.png")[1] <= 1800


def test_the_process_header_names_the_parent_that_spawned_it(tmp_path: Path) -> None:
    import os

    Probe(str(tmp_path / "events-here.jsonl")).note("nothing to see")
    written = read_records(tmp_path / "events-here.jsonl", 1 << 20)
    assert written.header is not None and (written.header.pid, written.header.ppid) == (os.getpid(), os.getppid())
    assert [e.text for e in written.of_kind(Note)] == ["nothing to see"]


# ---------------------------------------------------------------- command line
def test_no_command_is_a_usage_error_and_a_missing_one_still_leaves_the_files(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["observe"]) == 2
    out = tmp_path / "out"
    assert main(["observe", "--out", str(out), "--", "no-such-command-here"]) == 127
    printed = capsys.readouterr().out
    assert "the command could not be started: command not found: no-such-command-here" in printed
    assert (out / "timeline.png").read_bytes()[:8] == PNG_SIGNATURE
    assert json.loads((out / "trace.json").read_text())["traceEvents"] == []


# ---------------------------------------------------------------- real runs
def observe(tmp_path: Path, *arguments: str) -> tuple[int, str, Path]:
    out = tmp_path / "observe-out"
    done = again_after_teardown_abort(lambda: run_cli("observe", "--out", str(out), *arguments, cwd=tmp_path, timeout=120))
    assert "== observe:" in done.stdout, done.stderr[-3000:]
    return done.returncode, done.stdout[done.stdout.index("== observe:"):], out


def trace_of(out: Path) -> list[dict]:
    return json.loads((out / "trace.json").read_text())["traceEvents"]


@pytest.mark.slow
def test_p5_dataparallel_on_five_virtual_gpus_splits_64_rows_13_13_13_13_12(tmp_path: Path) -> None:
    script = ROOT / "solutions" / "p5" / "p5_dp.py"
    status, report, out = observe(tmp_path, "--virtual-gpus", "5", "--", sys.executable, str(script), "--batch_size=64", "--steps=2")
    assert status == 0, report
    assert "split of [64, 512] on cuda:0: 13, 13, 13, 13, 12 rows on cuda:0, cuda:1, cuda:2, cuda:3, cuda:4 (2 calls)" in report
    for k, rows in enumerate([13, 13, 13, 13, 12]):
        assert f"replica Net (2 calls): [{rows}, 512] on cuda:{k}" in report
    assert "DataParallel(Net) (2 calls): [64, 512] on cuda:0" in report
    assert "2 optimizer steps:" in report and "backward      2 passes, 1 per step" in report
    assert "peak memory   cuda:0 " in report and "cuda:4 " in report
    assert (out / "timeline.png").read_bytes()[:8] == PNG_SIGNATURE
    assert sum(1 for e in trace_of(out) if e.get("cat") == "forward/replica") == 10


def observe_two_ranks(tmp_path: Path, script: Path, *arguments: str, virtual_gpus: int = 0) -> tuple[str, Path]:
    """Observe `torchrun --nproc_per_node=2 script arguments`, which must succeed."""
    options = ["--virtual-gpus", str(virtual_gpus)] if virtual_gpus else []
    status, report, out = observe(tmp_path, *options, "--", *TORCHRUN, "--nproc_per_node=2", str(script), *arguments)
    assert status == 0, report
    return report, out


@pytest.mark.slow
def test_p6_ddp_under_torchrun_reports_each_rank_its_device_and_its_buckets(tmp_path: Path) -> None:
    report, out = observe_two_ranks(tmp_path, ROOT / "solutions" / "p6" / "p6_ddp.py", "--steps=3", virtual_gpus=2)
    for rank in (0, 1):
        assert f"rank {rank} · local rank {rank} · world size 2 · device cuda:{rank} · pid" in report
        assert f"DistributedDataParallel(Sequential) (3 calls): [32, 32] on cuda:{rank}" in report
        assert f"peak memory   cuda:{rank} " in report
    assert report.count("process group gloo (asked for nccl)") == 2
    assert report.count("DDP gradient buckets: 1 per step, 8.5 KiB per step") == 2
    assert report.count("3 optimizer steps:") == 2
    assert len(list((out / "events").glob("events-*.jsonl"))) == 2  # torchrun's launcher wrote nothing
    assert {e["pid"] for e in trace_of(out) if e.get("cat") == "allreduce"} == {1, 2}


@pytest.mark.slow
def test_p10_hybrid_shows_stages_on_two_gpus_and_one_sync_per_step(tmp_path: Path) -> None:
    report, _ = observe_two_ranks(tmp_path, ROOT / "solutions" / "p10" / "p10_hybrid.py", "--steps=2", virtual_gpus=4)
    expected = []
    for rank in (0, 1):
        expected += [
            f"rank {rank} · local rank {rank} · world size 2 · device cuda:{rank}, cuda:{rank + 2}",
            f"stage stage1 (Sequential on cuda:{rank}, 8 calls): [8, 32] on cuda:{rank}",
            f"stage stage2 (Linear on cuda:{rank + 2}, 8 calls): [8, 64] on cuda:{rank + 2}",
        ]
    assert missing(report, *expected) == []
    assert report.count("backward      8 passes, 4 per step") == 2
    assert report.count("only during the last of the 4 backward passes of a step") == 2
    assert "DistributedDataParallel built with device_ids=None" in report


@pytest.mark.slow
def test_a_ddp_script_with_sampler_loader_and_its_own_hook_on_the_cpu(tmp_path: Path) -> None:
    import torch

    arguments = ["--samples", "40", "--batch", "8", "--workers", "1", "--own-comm-hook", "--cpu"]
    report, out = observe_two_ranks(tmp_path, SCRIPTS / "ddp_sampler.py", *arguments)
    assert "rank 1 · local rank 1 · world size 2 · device cpu" in report
    assert report.count("DistributedDataParallel(Sequential) (2 calls): [8, 16] on cpu") == 2
    assert report.count("DistributedDataParallel(Sequential) (1 call): [4, 16] on cpu") == 2  # 20 samples a rank: 8, 8, 4
    assert report.count("DDP gradient buckets: 1 per step, 2.3 KiB per step") == 2
    assert report.count("dist.all_reduce calls: after the last step: 1 (4 B)") == 2
    assert report.count("the script registers its own DDP communication hook (allreduce_hook)") == 2
    if not torch.cuda.is_available():
        assert report.count("peak memory   no CUDA device: memory not measured") == 2
    assert len(list((out / "events").glob("events-*.jsonl"))) == 2  # nor did the DataLoader's worker


@pytest.mark.slow
def test_a_sharded_optimizer_counts_one_step_per_step(tmp_path: Path) -> None:
    """ZeroRedundancyOptimizer's step runs its inner Adam's step: one step, not two (the report
    once counted 6 for 3 and gave negative step times)."""
    report, _ = observe_two_ranks(tmp_path, SCRIPTS / "ddp_sampler.py", "--samples", "40", "--batch", "8", "--cpu", "--zero")
    assert report.count("3 optimizer steps: ") == 2, report


@pytest.mark.slow
def test_a_failing_script_keeps_its_exit_status_and_still_gets_its_pictures(tmp_path: Path) -> None:
    status, report, out = observe(tmp_path, "--", sys.executable, str(SCRIPTS / "fails_after_a_step.py"))
    assert status == 1
    assert "the script failed: exit status 1" in report
    assert "uncaught RuntimeError: deliberate failure after one step" in report
    assert "Linear (1 call): [3, 4] on cpu" in report and "Linear (1 call): [5, 4] on cpu" in report
    assert "1 optimizer step:" in report
    assert (out / "timeline.png").read_bytes()[:8] == PNG_SIGNATURE
    assert [e["name"] for e in trace_of(out) if e.get("cat") == "backward"] == ["backward"]
