"""What a graded run did, shown to the student: for a few of the runs a grading launched, the
per-rank report, the timeline PNG and the Chrome trace that `python -m grader observe` gives,
written next to the results file and named in it.

    out/results.json
    out/results-runs/main/report.txt     each rank: process group, forwards, backwards,
    out/results-runs/main/timeline.png     all-reduces, step times (grader.observe.report)
    out/results-runs/main/trace.json
    out/results-runs/main/pipeline.png     where the ranks are a pipeline's stages (p7)

Which runs: the first run that failed, and the first run of each layout (`chosen_runs`), so
a grading of several launches writes a handful of pictures, not one per launch. Everything
here is drawn from what the ranks' recorders wrote, which the submission can forge: the views
explain, they never decide a verdict; their text goes out through grader.results.escape, and
a view that cannot be drawn is a note, never a failed grading.
"""
from __future__ import annotations

import json
import re
import shutil
from dataclasses import replace
from pathlib import Path

from grader.files import write_atomically
from grader.observe.pipeline import PipelineDiagram, draw_pipeline, pipeline_diagram
from grader.observe.records import ObservedProcess, align
from grader.observe.report import PERFETTO, process_block
from grader.observe.trace import chrome_trace
from grader.results.escape import terminal_line
from grader.results.model import GradingReport, RunSummary

REPORT, TIMELINE, TRACE, PIPELINE = "report.txt", "timeline.png", "trace.json", "pipeline.png"
MAX_VIEWS = 6  # runs drawn per grading


def views_folder(results: Path) -> Path:
    """Where the views of the grading whose results file is `results` go: results-runs/ for
    results.json, beside it."""
    return results.parent / f"{results.stem}-runs"


def chosen_runs(runs: tuple[RunSummary, ...]) -> list[RunSummary]:
    """The first failed run, then the first run of each layout not shown yet; runs that
    recorded nothing are passed over. At most MAX_VIEWS, in the grading's order."""
    recorded = [run for run in runs if any(record.header is not None for record in run.records)]
    failed = next((index for index, run in enumerate(recorded) if run.outcome != "ok"), None)
    chosen = [] if failed is None else [failed]
    for index, run in enumerate(recorded):
        if index not in chosen and run.layout not in {recorded[shown].layout for shown in chosen}:
            chosen.append(index)
    return [recorded[index] for index in sorted(chosen[:MAX_VIEWS])]


def run_report(run: RunSummary, processes: list[ObservedProcess], diagram: PipelineDiagram | None = None) -> str:
    """The text report of one graded run (its ranks' records placed on one axis:
    `processes`; `diagram` where they are a pipeline's stages): how it ended, then each rank's
    block."""
    lines = [f"== graded run {run.name} ({run.layout}): {run.outcome}"]
    lines.append("What your processes recorded about themselves: it explains the checks; the grader's verdicts rest on its own observations.")
    lines.append(f"timeline: {TIMELINE} · trace: {TRACE} (open it in {PERFETTO} or chrome://tracing)")
    if diagram is not None:
        lines.append(f"pipeline: {PIPELINE}: {diagram.summary()}")
    for number, record in enumerate(run.records):
        if record.damaged:
            lines.append(f"rank {number}: its records are damaged ({record.damaged})")
        elif record.header is None:
            lines.append(f"rank {number}: recorded nothing")
    for process in processes:
        lines += ["", *process_block(process)]
    return "\n".join(terminal_line(line) for line in lines) + "\n"


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60].lstrip(".") or "run"


def write_run_views(run: RunSummary, folder: Path) -> tuple[str, tuple[str, ...]]:
    """Write one run's report, trace, timeline and (where its ranks are a pipeline's stages)
    pipeline diagram into `folder`; the report's text and the names of the files written."""
    from grader.observe.timeline import draw_timeline

    folder.mkdir(parents=True, exist_ok=True)
    processes = align(list(run.records))
    diagram = pipeline_diagram(processes)
    text = run_report(run, processes, diagram)
    write_atomically(folder / REPORT, text)
    write_atomically(folder / TRACE, json.dumps(chrome_trace(processes, {"run": run.name, "layout": run.layout})))
    heading = terminal_line(f"graded run {run.name} ({run.layout}): {run.outcome}")[:120]
    draw_timeline(processes, folder / TIMELINE, heading)
    if diagram is None:
        return text, (REPORT, TIMELINE, TRACE)
    draw_pipeline(diagram, folder / PIPELINE, heading)
    return text, (REPORT, TIMELINE, TRACE, PIPELINE)


def write_views(report: GradingReport, results: Path) -> GradingReport:
    """Write the views of the chosen runs of `report` beside `results` (replacing those of an
    earlier grading to the same file); the report with each run's `views` named, relative to
    the results file's folder. Never raises: a run that cannot be drawn becomes a note."""
    folder = views_folder(results)
    shutil.rmtree(folder, ignore_errors=True)
    written: dict[str, RunSummary] = {}
    notes = []
    for run in chosen_runs(report.runs):
        place = folder / _safe_name(run.name)
        try:
            text, names = write_run_views(run, place)
            written[run.name] = replace(run, views=tuple(f"{folder.name}/{place.name}/{name}" for name in names), view_text=text)
        except Exception as exc:  # noqa: BLE001 - the grading stands without its pictures
            notes.append(f"the report and timeline of run {run.name} could not be written ({type(exc).__name__}: {exc})")
    runs = tuple(written.get(run.name, run) for run in report.runs)
    return replace(report, runs=runs, notes=report.notes + tuple(notes))
