"""Human-readable forms of a GradingReport: the console table, an overview text, markdown."""
from __future__ import annotations

from grader.results.escape import markdown_block, markdown_inline, terminal_block, terminal_line
from grader.results.model import CheckResult, GradingReport, Status
from grader.run.telemetry import describe as describe_telemetry

_MARK = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.DEFERRED: "DEFERRED", Status.ERROR: "ERROR"}
_MARKDOWN_MARK = {Status.PASSED: "✅ pass", Status.FAILED: "❌ fail", Status.DEFERRED: "⏸ deferred", Status.ERROR: "⚠️ error"}


def _points(value: float) -> str:
    return f"{value:g}"


def _score_line(report: GradingReport) -> str:
    """'Score: 5 of 21 points so far — 4 shown after the deadline, 1 graded on a GPU node'."""
    return f"Score: {report.headline()}"


def _row_points(check: CheckResult) -> str:
    """A check's points in a table: '2/3', or '–/3' for one not graded here."""
    return f"{'–' if check.status is Status.DEFERRED else _points(check.score)}/{_points(check.max_score)}"


def _row_result(check: CheckResult, marks: dict[Status, str]) -> str:
    """A check's result in a table: its mark, and where a deferred one is graded."""
    return f"{marks[check.status]} ({check.later.value})" if check.status is Status.DEFERRED and check.later else marks[check.status]


def _environment_line(report: GradingReport) -> str:
    """How and where it was graded, as raw text (each writer escapes it its own way)."""
    env = report.environment
    parts = [f"graded in {report.execution_time_s:.1f} s"]
    if env.get("host"):
        parts.append(f"on {env['host']}")
    if env.get("devices"):
        parts.append(str(env["devices"]))
    if env.get("torch"):
        parts.append(f"torch {env['torch']}")
    if env.get("seed") is not None:
        parts.append(f"seed {env['seed']}")
    return ", ".join(parts)


VIEW_LINES = 60  # of a run's report shown in the overview


def views_line(report: GradingReport) -> str | None:
    """One line naming what the grading wrote beside the results file: each shown run's
    report, timeline and trace (raw paths; each writer escapes them its own way)."""
    shown = [run for run in report.runs if run.views]
    if not shown:
        return None
    folders = [run.views[0].rsplit("/", 1)[0] + "/" for run in shown]
    names = ", ".join(dict.fromkeys(path.rsplit("/", 1)[-1] for run in shown for path in run.views))
    return f"What your graded runs did, beside the results file: {', '.join(folders)} (each: {names})"


def _view_lines(report: GradingReport) -> list[str]:
    """The report of the first failed run that has one (else of the first run with one), capped."""
    shown = [run for run in report.runs if run.view_text]
    if not shown:
        return []
    run = next((r for r in shown if r.outcome != "ok"), shown[0])
    text = run.view_text.splitlines()
    cut = [f"… {len(text) - VIEW_LINES} more lines in {run.views[0]}"] if len(text) > VIEW_LINES and run.views else []
    return ["", terminal_line(views_line(report) or ""), *terminal_block("\n".join(text[:VIEW_LINES] + cut), "  ")]


def _heading(report: GradingReport) -> str:
    return f"{terminal_line(report.practical)}: {terminal_line(report.title)}"


def _error_lines(report: GradingReport) -> list[str]:
    return ["", f"AUTOGRADER ERROR: {terminal_line(report.error)}"] if report.error else []


def _note_lines(report: GradingReport) -> list[str]:
    return ["", "Notes:", *(f"  {terminal_line(note)}" for note in report.notes)] if report.notes else []


def overview_text(report: GradingReport) -> str:
    """The text of the whole submission: score, environment, and how each run went."""
    lines = [_heading(report), _score_line(report), terminal_line(_environment_line(report)), *_error_lines(report), *_note_lines(report)]
    if report.manual:
        lines += ["", "Answers collected for manual grading (not scored here):"]
        lines += [f"  {terminal_line(question)}: {terminal_line(text.strip()) or '(empty)'}" for question, text in report.manual]
    if report.runs:
        lines += ["", "Runs of your script:"]
        for run in report.runs:
            lines.append(f"  {terminal_line(run.name)} ({terminal_line(run.layout)}, {run.wall_s:.1f} s): {terminal_line(run.outcome)}")
            lines += terminal_block(run.output, "    | ")
            if run.telemetry:
                lines += terminal_block(describe_telemetry(dict(run.telemetry)), "    ")
    lines += _view_lines(report)
    return "\n".join(lines)


def console_table(report: GradingReport, width: int = 100) -> str:
    """A per-check table followed by the feedback of every check that did not pass."""
    titles = [terminal_line(check.title) for check in report.checks]
    title_width = min(max([len(title) for title in titles] + [5]), width - 30)
    lines = [_heading(report), ""]
    lines.append(f"  #  {'check':<{title_width}}  {'points':>9}  result")
    for check, title in zip(report.checks, titles):
        title = title if len(title) <= title_width else title[: title_width - 1] + "…"
        lines.append(f"{check.number:>3}  {title:<{title_width}}  {_row_points(check):>9}  {_row_result(check, _MARK)}")
    lines += ["", _score_line(report), terminal_line(_environment_line(report))]
    if report.manual:
        answered = sum(1 for _, text in report.manual if text.strip())
        lines.append(f"{answered} of {len(report.manual)} free-text answers collected for manual grading")
    if report.checks:
        lines += ["", "Feedback:"]
        for check, title in zip(report.checks, titles):
            mark = "✓" if check.status is Status.PASSED else "✗" if check.status in (Status.FAILED, Status.ERROR) else "·"
            lines.append(f"  {mark} {check.number}. {title}: {terminal_line(check.summary)}")
    lines += [*_note_lines(report), *_error_lines(report)]
    troubled = [r for r in report.runs if r.output]
    if troubled:
        lines += ["", "Output of failing ranks:"]
        for run in troubled:
            lines.append(f"  {terminal_line(run.name)} ({terminal_line(run.layout)}): {terminal_line(run.outcome)}")
            lines += terminal_block(run.output, "    | ")
    views = views_line(report)
    if views:
        lines += ["", terminal_line(views)]
    return "\n".join(lines)


def markdown(report: GradingReport, graded_commit: str | None = None) -> str:
    """A markdown summary, e.g. for a CI job summary; with `graded_commit`, a last line naming it."""
    heading = f"{markdown_inline(report.practical)}: {markdown_inline(report.title)}"
    lines = [f"### {heading}", "", f"**{_score_line(report)}** — {markdown_inline(_environment_line(report))}", ""]
    if report.error:
        lines += [f"> **Autograder error:** {markdown_inline(report.error)}", ""]
    lines += [f"- {markdown_inline(note)}" for note in report.notes] + ([""] if report.notes else [])
    lines += ["| # | check | points | result |", "|---|---|---|---|"]
    for check in report.checks:
        lines.append(f"| {check.number} | {markdown_inline(check.title)} | {_row_points(check)} | {_row_result(check, _MARKDOWN_MARK)} |")
    failing = [c for c in report.checks if c.status is not Status.PASSED]
    if failing:
        lines += ["", "<details><summary>Feedback</summary>", ""]
        for check in failing:
            lines += [f"**{check.number}. {markdown_inline(check.title)}**", "", markdown_block(check.feedback)]
        lines += ["", "</details>"]
    views = views_line(report)
    if views:
        lines += ["", markdown_inline(views)]
    if graded_commit is not None:
        lines += ["", f"Graded commit: {markdown_inline(graded_commit)}"]
    return "\n".join(lines) + "\n"
