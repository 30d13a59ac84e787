"""Human-readable forms of a GradingReport: the console table, an overview text, markdown."""
from __future__ import annotations

from grader.results.model import GradingReport, Status
from grader.run.telemetry import describe as describe_telemetry

_MARK = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.DEFERRED: "DEFERRED", Status.ERROR: "ERROR"}


def _points(value: float) -> str:
    return f"{value:g}"


def _score_line(report: GradingReport) -> str:
    line = f"Score: {_points(report.score)} / {_points(report.max_score)}"
    if report.deferred_points:
        line += f"  ({_points(report.deferred_points)} more points deferred: not gradable on this machine)"
    return line


def _environment_line(report: GradingReport) -> str:
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


def overview_text(report: GradingReport) -> str:
    """The text of the whole submission: score, environment, and how each run went."""
    lines = [f"{report.practical}: {report.title}", _score_line(report), _environment_line(report)]
    if report.error:
        lines += ["", f"AUTOGRADER ERROR: {report.error}"]
    if report.notes:
        lines += ["", "Notes:", *(f"  {note}" for note in report.notes)]
    if report.manual:
        lines += ["", "Answers collected for manual grading (not scored here):"]
        lines += [f"  {question}: {text.strip() or '(empty)'}" for question, text in report.manual]
    if report.runs:
        lines += ["", "Runs of your script:"]
        for run in report.runs:
            lines.append(f"  {run.name} ({run.layout}, {run.wall_s:.1f} s): {run.outcome}")
            if run.output:
                lines += [f"    | {line}" for line in run.output.splitlines()]
            if run.telemetry:
                lines += [f"    {line}" for line in describe_telemetry(dict(run.telemetry)).splitlines()]
    return "\n".join(lines)


def console_table(report: GradingReport, width: int = 100) -> str:
    """A per-check table followed by the feedback of every check that did not pass."""
    title_width = max([len(c.title) for c in report.checks] + [5])
    title_width = min(title_width, width - 30)
    lines = [f"{report.practical}: {report.title}", ""]
    lines.append(f"  #  {'check':<{title_width}}  {'points':>9}  result")
    for check in report.checks:
        title = check.title if len(check.title) <= title_width else check.title[: title_width - 1] + "…"
        points = f"{_points(check.score)}/{_points(check.max_score)}"
        lines.append(f"{check.number:>3}  {title:<{title_width}}  {points:>9}  {_MARK[check.status]}")
    lines += ["", _score_line(report), _environment_line(report)]
    if report.manual:
        answered = sum(1 for _, text in report.manual if text.strip())
        lines.append(f"{answered} of {len(report.manual)} free-text answers collected for manual grading")
    if report.checks:
        lines += ["", "Feedback:"]
        for check in report.checks:
            mark = "✓" if check.status is Status.PASSED else "✗" if check.status in (Status.FAILED, Status.ERROR) else "·"
            lines.append(f"  {mark} {check.number}. {check.title}: {check.summary}")
    if report.notes:
        lines += ["", "Notes:", *(f"  {note}" for note in report.notes)]
    if report.error:
        lines += ["", f"AUTOGRADER ERROR: {report.error}"]
    troubled = [r for r in report.runs if r.output]
    if troubled:
        lines += ["", "Output of failing ranks:"]
        for run in troubled:
            lines.append(f"  {run.name} ({run.layout}): {run.outcome}")
            lines += [f"    | {line}" for line in run.output.splitlines()]
    return "\n".join(lines)


def markdown(report: GradingReport) -> str:
    """A markdown summary, e.g. for a CI job summary."""
    lines = [f"### {report.practical}: {report.title}", "", f"**{_score_line(report)}** — {_environment_line(report)}", ""]
    if report.error:
        lines += [f"> **Autograder error:** {report.error}", ""]
    lines += ["| # | check | points | result |", "|---|---|---|---|"]
    for check in report.checks:
        mark = {Status.PASSED: "✅ pass", Status.FAILED: "❌ fail", Status.DEFERRED: "⏸ deferred", Status.ERROR: "⚠️ error"}[check.status]
        lines.append(f"| {check.number} | {check.title} | {_points(check.score)}/{_points(check.max_score)} | {mark} |")
    failing = [c for c in report.checks if c.status is not Status.PASSED]
    if failing:
        lines += ["", "<details><summary>Feedback</summary>", ""]
        for check in failing:
            lines.append(f"**{check.number}. {check.title}**")
            lines.append("")
            lines.append("```")
            lines.append(check.feedback)
            lines.append("```")
        lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
