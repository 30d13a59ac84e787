"""The class report for staff (`grader report RESULTS_DIR --out report.html`): per practical,
over the submissions that count (grader.collect, with the course's policy), the distribution of
final scores, each check's pass rate, the most frequent kinds of failure (`failure_kind`), the
leaderboard of a practical the course ranks, who was late and what it cost, how many ended in an autograder error, and the pairs of alike submissions (grader.similarity).

One self-contained HTML file: the plots are PNGs (matplotlib, Agg) inside it, it loads nothing
and runs no script. Everything that came from a submission or the store is HTML-escaped.
"""
from __future__ import annotations

import base64
import collections
import html
import io
import re
import statistics
from dataclasses import dataclass
from typing import Iterable

from grader.collect import Chosen, maxima, practical_order
from grader.results.gradescope import autograder_error_of, read_report
from grader.results.model import Status
from grader.similarity import Findings, Pair

TOP_MESSAGES = 10
TOP_BOARD = 10  # rows of a practical's leaderboard
MESSAGE_CHARS = 200


@dataclass(frozen=True)
class CheckRate:
    check: str
    title: str
    passed: int
    graded: int

    @property
    def rate(self) -> float:
        return self.passed / self.graded if self.graded else 0.0


@dataclass(frozen=True)
class PracticalStats:
    practical: str
    maximum: float
    finals: tuple[float, ...]  # per student, after the late policy
    checks: tuple[CheckRate, ...]
    messages: tuple[tuple[str, str, int], ...]  # (check, a kind of failure: `failure_kind`, students), most frequent first
    late: tuple[tuple[str, str], ...]  # (student, what the policy made of it), in the students' order
    errors: int  # counted submissions that ended in an autograder error
    pairs: tuple[Pair, ...]
    pending: tuple[float, int] = (0.0, 0)  # points of deferred checks, neither given nor taken yet, and in how many submissions
    board: tuple[tuple[str, float], ...] = ()  # (student, step time in ms): the course's leaderboard, fastest first (grader/results/leaderboard.py)


NUMBER = re.compile(r"(?<![A-Za-z_\d])\d+(?:\.\d+)?")  # not a name's digits: p6_ddp.py, ws2, cuda keep theirs


def failure_kind(summary: str) -> str:
    """What a failure is, without what differs from one submission to the next: the first line
    of a check's feedback, every number in it (timings, ratios, ranks, line numbers) as #, so
    that the same mistake in many submissions is one row."""
    first = (summary.strip().splitlines() or [""])[0]
    return NUMBER.sub("#", first)[:MESSAGE_CHARS]


def practical_stats(practical: str, counted: list[Chosen], maximum: float, pairs: Iterable[Pair] = ()) -> PracticalStats:
    """The statistics of one practical over its counted submissions."""
    rates: dict[str, list[int]] = {}
    titles: dict[str, str] = {}
    messages: collections.Counter = collections.Counter()
    board: list[tuple[str, float]] = []
    for chosen in counted:
        kinds = set()
        report = read_report(chosen.entry.document)
        board += [(chosen.entry.student, entry.value) for entry in report.leaderboard[:1]]
        for check in report.checks:
            if check.status is Status.DEFERRED:
                continue
            titles.setdefault(check.id, check.title)
            tally = rates.setdefault(check.id, [0, 0])
            tally[0] += check.status is Status.PASSED
            tally[1] += 1
            if check.status is not Status.PASSED:
                kinds.add((check.id, failure_kind(check.summary)))
        messages.update(kinds)  # a student counts once for each kind of failure
    return PracticalStats(
        practical=practical,
        maximum=maximum,
        finals=tuple(chosen.final for chosen in counted),
        checks=tuple(CheckRate(check, titles[check], passed, graded) for check, (passed, graded) in rates.items()),
        messages=tuple((check, text, n) for (check, text), n in messages.most_common(TOP_MESSAGES)),
        late=tuple((chosen.entry.student, chosen.lateness.effect) for chosen in counted if chosen.late),
        errors=sum(1 for chosen in counted if autograder_error_of(chosen.entry.document)),
        pairs=tuple(p for p in pairs if p.practical == practical),
        pending=(sum(sum(chosen.scores.pending.values()) for chosen in counted), sum(1 for chosen in counted if chosen.scores.pending)),
        board=tuple(sorted(board, key=lambda row: (row[1], row[0]))[:TOP_BOARD]),
    )


def class_stats(table: dict[str, dict[str, Chosen]], findings: Findings | None = None) -> list[PracticalStats]:
    """Every practical's statistics, in course order."""
    top = maxima(table)
    pairs = findings.pairs if findings else ()
    return [practical_stats(p, [row[p] for row in table.values() if p in row], top[p], pairs) for p in practical_order(table)]


def _png(figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _plots(stats: PracticalStats) -> tuple[str, str]:
    """The score histogram and the pass-rate bars, as data URIs."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    scores = Figure(figsize=(5, 2.6))
    axis = scores.subplots()
    axis.hist(stats.finals, bins=max(1, min(20, int(stats.maximum) or 1)), range=(0, stats.maximum or 1), color="#3b6ea5", edgecolor="white")
    axis.set_xlabel("final score")
    axis.set_ylabel("students")
    axis.yaxis.set_major_locator(MaxNLocator(integer=True))  # a count of students is a whole number
    axis.set_title(f"{stats.practical}: scores out of {stats.maximum:g}")
    rates = Figure(figsize=(5, 0.4 + 0.32 * max(1, len(stats.checks))))
    bars = rates.subplots()
    bars.barh([c.check for c in stats.checks][::-1], [100 * c.rate for c in stats.checks][::-1], color="#5a9e6f")
    bars.set_xlim(0, 100)
    bars.set_xlabel("% of students passing")
    return _png(scores), _png(rates)


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _section(stats: PracticalStats) -> str:
    finals = stats.finals
    summary = (
        f"{len(finals)} students · mean {statistics.fmean(finals):.1f} · median {statistics.median(finals):g} "
        f"of {stats.maximum:g} · {len(stats.late)} late · {stats.errors} autograder error(s)" if finals else "no submissions"
    )
    if stats.pending[1]:
        summary += f" · {stats.pending[0]:g} points pending in {stats.pending[1]} submission(s) (deferred checks, graded where they can be)"
    histogram, rates = _plots(stats)
    rows = "".join(f"<tr><td><code>{_e(c.check)}</code></td><td>{_e(c.title)}</td><td>{c.passed}/{c.graded}</td><td>{c.rate:.0%}</td></tr>" for c in stats.checks)
    messages = "".join(f"<tr><td><code>{_e(check)}</code></td><td>{_e(text)}</td><td>{n}</td></tr>" for check, text, n in stats.messages)
    pairs = "".join(f"<tr><td>{_e(p.first)}</td><td>{_e(p.second)}</td><td>{_e(p.describe)}</td></tr>" for p in stats.pairs)
    late = "".join(f"<tr><td>{_e(student)}</td><td>{_e(effect)}</td></tr>" for student, effect in stats.late)
    board = "".join(f"<tr><td>{rank}</td><td>{_e(student)}</td><td>{value:.2f}</td></tr>" for rank, (student, value) in enumerate(stats.board, 1))
    leaderboard = f"""<h3>Leaderboard</h3>
<p>Fully correct submissions that count, by the step time the grader measured (its own clock, never a script's output), fastest first.</p>
<table><tr><th>#</th><th>student</th><th>step time (ms)</th></tr>{board}</table>
""" if stats.board else ""
    return f"""<section id="{_e(stats.practical)}">
<h2>{_e(stats.practical)}</h2>
<p class="summary">{_e(summary)}</p>
<div class="plots"><img alt="{_e(stats.practical)} score distribution" src="{histogram}"><img alt="{_e(stats.practical)} pass rate per check" src="{rates}"></div>
<h3>Pass rate of each check</h3>
<table><tr><th>check</th><th>title</th><th>passed</th><th>rate</th></tr>{rows}</table>
<h3>Most frequent failures</h3>
<p>Each check's first line of feedback, its numbers (timings, ranks, lines) as #: one row per kind of failure.</p>
<table><tr><th>check</th><th>failure</th><th>students</th></tr>{messages or '<tr><td colspan="3">none</td></tr>'}</table>
{leaderboard}<h3>Late</h3>
<table><tr><th>student</th><th>what the late policy made of it</th></tr>{late or '<tr><td colspan="2">none</td></tr>'}</table>
<h3>Alike submissions</h3>
<table><tr><th>student</th><th>student</th><th>how alike</th></tr>{pairs or '<tr><td colspan="3">none flagged</td></tr>'}</table>
</section>
"""


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:70em}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f0f0f0}.plots img{margin-right:1em;max-width:48%}.summary{font-weight:600}section{margin-bottom:3em}"""


def render_html(title: str, stats: list[PracticalStats], notes: Iterable[str] = ()) -> str:
    """The whole report: a page that needs nothing but itself."""
    contents = " · ".join(f'<a href="#{_e(s.practical)}">{_e(s.practical)}</a>' for s in stats)
    remarks = "".join(f"<li>{_e(note)}</li>" for note in notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<title>{_e(title)}: class report</title><style>{STYLE}</style></head>
<body><h1>{_e(title)}: class report</h1>
<p>{contents}</p>
{''.join(_section(s) for s in stats)}
{f'<h2>Notes</h2><ul>{remarks}</ul>' if remarks else ''}
</body></html>
"""
