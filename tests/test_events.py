"""The events the recorder writes: one definition (grader.probe.recorder.events), read back strictly
(grader.run.records); damaged records explain a grading instead of crashing it; and one
recorder wraps torch.distributed's entry points."""
from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from grader.grade.pipeline import GradingReport, grade
from grader.probe.recorder.events import EVENTS, EVENTS_VERSION, DamagedRecords, Forward, Process, TensorInfo, parse_event, plain, to_json
from grader.probe.typed import MAX_TEXT
from grader.results.model import Status
from grader.run.fake import FakeRunner
from grader.run.job import JobResult, JobSpec, Layout
from grader.run.records import decode_records, parse_records, read_records
from helpers import ROOT
from observations import ddp_rank, header
from test_pipeline import practical, submission

BACKWARD = {"kind": "backward", "t": 0.5, "seq": 3, "step": 0, "dur": 0.25}


def damage(obj: object) -> str:
    with pytest.raises(DamagedRecords) as caught:
        parse_event(obj)
    return str(caught.value)


def test_every_kind_has_one_class_and_its_events_come_back_as_they_were_written() -> None:
    assert all(cls.kind == kind for kind, cls in EVENTS.items())
    rank = ddp_rank(0, Layout(1, 2))
    written = [rank.record.header, *rank.events]
    assert {type(e).kind for e in written} >= {"process", "init_pg", "ddp", "model", "globals", "forward", "backward", "allreduce", "opt_grads", "optimizer", "exit"}
    for event in written:
        assert parse_event(json.loads(to_json(event))) == event
        assert plain(event) == json.loads(to_json(event))
    nan = parse_event({**json.loads(to_json(next(e for e in rank.events if e.kind == "opt_grads"))), "grads": [[float("nan")], None]})
    assert nan.grads[1] is None and nan.grads[0][0] != nan.grads[0][0]


@pytest.mark.parametrize(
    "obj, reason",
    [
        ({**BACKWARD, "kind": "telemetry"}, 'unknown event kind "telemetry"'),
        ({k: v for k, v in BACKWARD.items() if k != "kind"}, "unknown event kind null"),
        ({k: v for k, v in BACKWARD.items() if k != "dur"}, "a 'backward' event lacks its field 'dur'"),
        ({**BACKWARD, "step": "3"}, "field 'step' of a 'backward' event is \"3\", not a whole number"),
        ({**BACKWARD, "step": True}, "field 'step' of a 'backward' event is true, not a whole number"),
        ({**BACKWARD, "dur": float("inf")}, "field 'dur' of a 'backward' event is Infinity, not a finite number"),
        ({**BACKWARD, "score": 100}, "a 'backward' event has a field it should not have ('score')"),
        ({**BACKWARD, "dur": 10**400}, "field 'dur' of a 'backward' event is a whole number too large for a float"),
        ({"kind": "forward", "t": 0, "seq": 1, "step": 0, "dur": 0.1, "module": "Net", "name": None, "label": "Net", "role": "model", "depth": 0, "call": 1, "has_params": True, "replica": False, "inputs": [], "devices": None, "rows": [1.0, -(10**400)]}, "field 'rows' of a 'forward' event holds a whole number too large for a float"),
        ([BACKWARD], "an event is a list, not a JSON object"),
        ({"kind": "note", "t": 0, "seq": 1, "step": 0, "text": "x" * (MAX_TEXT + 1)}, f"field 'text' of a 'note' event is longer than {MAX_TEXT} characters"),
        ({"kind": "init_pg_call", "t": 0, "seq": 1, "step": 0, "backend": "gloo", "kwargs": ["timeout"] * 70_000}, "field 'kwargs' of a 'init_pg_call' event has more than 65536 items"),
        ({"kind": "globals", "t": 0, "seq": 1, "step": 0, "when": "end", "values": {"x": [[[[[[[[[1]]]]]]]]]}}, "field 'values' of a 'globals' event['x'] is nested deeper than 8 levels"),
    ],
)
def test_parse_event_names_each_kind_of_damage(obj: object, reason: str) -> None:
    assert damage(obj) == reason


def test_a_nested_part_and_the_format_version_are_checked_too() -> None:
    call = plain(Forward(t=0, seq=1, step=0, dur=0.1, module="Net", name=None, label="Net", role="model", depth=0, call=1, has_params=True, replica=False, inputs=(TensorInfo((4, 3), "cpu"),), devices=None))
    assert damage({**call, "inputs": [{"shape": [4, "3"], "device": "cpu"}]}) == "an item of field 'shape' of an item of field 'inputs' of a 'forward' event is \"3\", not a whole number"
    assert damage({**call, "inputs": [{"shape": [4, 3]}]}) == "an item of field 'inputs' of a 'forward' event lacks its field 'device'"
    old = plain(header())
    assert damage({**old, "version": EVENTS_VERSION + 1}) == f"the records are of format version {EVENTS_VERSION + 1}, this grader reads version {EVENTS_VERSION}"
    assert isinstance(parse_event(old), Process)


def lines(*events: object) -> list[str]:
    return [json.dumps(e) if isinstance(e, dict) else str(e) for e in events]


def test_the_reader_wants_a_header_first_and_stops_at_the_first_damaged_line() -> None:
    head = plain(header())
    record = parse_records(lines(head, BACKWARD, "not json", BACKWARD))
    assert record.damaged == "line 3: a record is not valid JSON" and len(record.events) == 1
    assert parse_records(lines(BACKWARD)).damaged == "line 1: the first record is not the process header"
    assert parse_records(lines(head, head)).damaged == "line 2: a second process header"
    assert parse_records([]).damaged is None and parse_records([]).header is None
    later = {**BACKWARD, "seq": 1}  # began first, written last (a span is written at its end)
    assert [e.seq for e in parse_records(lines(head, BACKWARD, later)).events] == [1, 3]


def test_a_cut_last_line_and_the_caps_cut_a_record_short_without_damage(tmp_path: Path) -> None:
    data = ("\n".join(lines(plain(header()), BACKWARD, BACKWARD)) + "\n").encode()
    whole = decode_records(data, longer=False)
    assert (whole.damaged, whole.cut_short, len(whole.events)) == (None, False, 2)
    cut = decode_records(data[:-7], longer=False)
    assert (cut.damaged, cut.cut_short, len(cut.events)) == (None, True, 1)
    assert decode_records(data, longer=False, max_events=1).cut_short
    assert decode_records(data[:10] + "é".encode() + data[10:], longer=False).damaged == "line 1: a record holds bytes that are not ASCII text"
    deep = decode_records(data + b'{"kind": ' + b"[" * 100_000 + b"\n", longer=False)
    assert deep.damaged == "line 4: a record is not valid JSON"
    path = tmp_path / "observations.jsonl"
    path.write_bytes(data)
    assert read_records(path, 1 << 20) == whole and read_records(tmp_path / "missing", 100).header is None
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    assert read_records(link, 1 << 20).damaged == "link.jsonl is a symbolic link"


def damaged_run(job: JobSpec) -> JobResult:
    """Every rank ran correctly, but rank 1's file holds a line the recorder never writes."""
    ranks = [ddp_rank(r, job.layout) for r in range(job.layout.world_size)]
    good = [to_json(ranks[1].record.header), *(to_json(e) for e in ranks[1].events)]
    ranks[1].record = parse_records([*good[:4], json.dumps({**BACKWARD, "kind": "verdict", "score": 100}), *good[4:]])
    return JobResult(spec=job, ranks=ranks)


def test_damaged_records_fail_the_checks_with_the_reason_and_never_crash_the_grading(tmp_path: Path) -> None:
    result = grade_with(tmp_path, damaged_run)
    reason = 'rank 1: the records of your process are damaged: line 5: unknown event kind "verdict"'
    checks = {c.id: c for c in result.checks}
    assert checks["rank_setup"].status == Status.FAILED and reason in checks["rank_setup"].summary
    assert checks["grad_sync"].status == Status.FAILED and reason in checks["grad_sync"].summary
    assert all(run.outcome == reason for run in result.runs)


def grade_with(tmp_path: Path, respond) -> GradingReport:
    return grade(practical(tmp_path), submission(tmp_path), FakeRunner(respond))


WRAPPED = ("init_process_group", "register_comm_hook", "_register_builtin_comm_hook")


def modules_naming(names: tuple[str, ...]) -> set[str]:
    """The modules under grader/ whose code (not their docstrings or messages) names one of
    `names`: as an attribute, a variable, or a string of exactly that name."""
    found = set()
    for path in (ROOT / "grader").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            named = (
                (isinstance(node, ast.Attribute) and node.attr in names)
                or (isinstance(node, ast.Name) and node.id in names)
                or (isinstance(node, ast.Constant) and node.value in names)
            )
            if named:
                found.add(str(path.relative_to(ROOT)))
    return found


def test_one_recorder_wraps_process_groups_and_ddp_communication_hooks() -> None:
    # virtual GPUs substitute gloo for NCCL in init_process_group (and record nothing); the
    # grader's transport builds every process group by c10d's own helper, wrapping nothing
    assert modules_naming(WRAPPED) == {os.path.join("grader", "probe", "recorder", "observers.py"), os.path.join("grader", "probe", "vgpu", "dist.py")}
    assert modules_naming(("register_comm_hook", "_register_builtin_comm_hook")) == {os.path.join("grader", "probe", "recorder", "observers.py")}

