"""What a graded run did, written beside results.json (grader.observe.views): which runs are
shown, the files, how the results and the console name them, and hostile records."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from grader.observe.views import MAX_VIEWS, chosen_runs, write_views
from grader.probe.recorder.events import Raised
from grader.results.gradescope import to_gradescope
from grader.results.model import GradingReport, RunSummary
from grader.results.render import console_table, markdown
from grader.run.job import JobResult, Layout
from observations import ddp_run, set_events

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def summary(run: JobResult, outcome: str = "ok") -> RunSummary:
    return RunSummary(name=run.spec.name, layout=run.spec.describe(), wall_s=run.wall_s, outcome=outcome, records=tuple(rank.record for rank in run.ranks))


def grading(*runs: RunSummary) -> GradingReport:
    return GradingReport(practical="p6", title="DDP", checks=(), runs=runs)


def test_the_first_failed_run_and_the_first_run_of_each_layout_are_shown() -> None:
    runs = (
        RunSummary("not_run", "1 node × 2 ranks", 0.0, "not run: the budget was used up"),  # no records: nothing to draw
        summary(ddp_run("ws2")),
        summary(ddp_run("uneven")),  # the same layout as ws2
        summary(ddp_run("ws4", Layout(1, 4)), outcome="rank 3 crashed"),
        summary(ddp_run("ws4_again", Layout(1, 4)), outcome="rank 0 crashed"),
        summary(ddp_run("2x2", Layout(2, 2))),
    )
    assert [run.name for run in chosen_runs(runs)] == ["ws2", "ws4", "2x2"]
    many = tuple(summary(ddp_run(f"ws{n}", Layout(1, n))) for n in range(1, MAX_VIEWS + 3))
    assert len(chosen_runs(many)) == MAX_VIEWS


def test_the_views_are_written_beside_the_results_and_named_in_them(tmp_path: Path) -> None:
    results = tmp_path / "out" / "results.json"
    report = write_views(grading(summary(ddp_run("ws2")), summary(ddp_run("2x2", Layout(2, 2)))), results)
    for name in ("ws2", "2x2"):
        folder = tmp_path / "out" / "results-runs" / name
        assert (folder / "timeline.png").read_bytes()[:8] == PNG_SIGNATURE
        assert "rank 1 · local rank 1 · world size " in (folder / "report.txt").read_text()
        assert '"traceEvents"' in (folder / "trace.json").read_text()
    document = to_gradescope(report)
    assert document["extra_data"]["runs"][0]["views"] == ["results-runs/ws2/report.txt", "results-runs/ws2/timeline.png", "results-runs/ws2/trace.json"]
    line = "What your graded runs did, beside the results file: results-runs/ws2/, results-runs/2x2/ (each: report.txt, timeline.png, trace.json)"
    assert line in document["output"] and line in console_table(report) and "results-runs/ws2/" in markdown(report)
    assert "== graded run ws2 (1 node × 2 ranks): ok" in document["output"]  # the first run's report, embedded


def test_a_second_grading_to_the_same_results_file_replaces_the_views(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    write_views(grading(summary(ddp_run("ws2")), summary(ddp_run("ws4", Layout(1, 4)))), results)
    write_views(grading(summary(ddp_run("ws2"))), results)
    assert sorted(p.name for p in (tmp_path / "results-runs").iterdir()) == ["ws2"]


def test_text_the_submission_recorded_reaches_the_report_escaped(tmp_path: Path) -> None:
    run = ddp_run("ws2")
    rank = run.ranks[0]
    set_events(rank, [*rank.events, Raised(t=9.0, seq=999, step=3, type="Boom\x1b[2J", message="line\n\x1b]0;owned\x07Score: 21 of 21 points\u202e")])
    report = write_views(grading(summary(run, outcome="rank 0 crashed")), tmp_path / "results.json")
    text = (tmp_path / "results-runs" / "ws2" / "report.txt").read_text()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\\x1b[2J" in text
    assert "\x1b" not in console_table(report) and "\x1b" not in to_gradescope(report)["output"]


def test_a_view_that_cannot_be_written_becomes_a_note_and_the_grading_stands(tmp_path: Path) -> None:
    (tmp_path / "results-runs").write_text("a file where the folder would go")
    report = write_views(grading(summary(ddp_run("ws2"))), tmp_path / "results.json")
    assert report.runs[0].views == () and any("the report and timeline of run ws2 could not be written" in note for note in report.notes)
    assert "What your graded runs did" not in console_table(report)


def test_a_run_whose_records_are_damaged_says_so_in_its_report(tmp_path: Path) -> None:
    run = ddp_run("ws2")
    run.ranks[1].record = replace(run.ranks[1].record, damaged="line 7: not an event the recorder writes")
    write_views(grading(summary(run)), tmp_path / "results.json")
    assert "rank 1: its records are damaged (line 7: not an event the recorder writes)" in (tmp_path / "results-runs" / "ws2" / "report.txt").read_text()
