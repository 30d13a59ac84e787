"""`python -m grader collect RESULTS_DIR --csv grades.csv [--deadline ISO]`: grades out.

The course's policy (course.yaml: deadlines per practical, extensions per student, a late
penalty and cut-off; grader/policy.py) decides which submission counts and what it scores: the
latest one made by the student's deadline, unless a later one scores more after its penalty
(`--deadline` sets one deadline for every practical instead). One CSV row per student: per
practical the commit, the score, the maximum (the practical's total, its spec's points, as
everywhere), the points pending (checks deferred to a machine that can grade them: `pending`
in their columns, not 0), each check's score, how late it was, the policy's effect and the
final score; then the overall final total and maximum. Free-text
answers go to a second CSV (student, practical, question, answer) for the people who grade
them. Every cell is made visible and guarded against being read as a spreadsheet formula
(grader.results.escape.spreadsheet_cell).
"""
from __future__ import annotations

import csv
import datetime
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Iterable

from grader.policy import CoursePolicy, Lateness, parse_time
from grader.results.escape import spreadsheet_cell
from grader.results.gradescope import Scores, autograder_error_of, read_scores
from grader.store import Entry, ResultsStore

EPOCH = "1970-01-01T00:00:00+00:00"


@dataclass(frozen=True)
class Chosen:
    """The submission that counts, and what the policy made of it."""

    entry: Entry
    lateness: Lateness
    later: int  # submissions after the deadline that did not count

    @property
    def late(self) -> bool:
        return self.lateness.late

    @cached_property
    def scores(self) -> Scores:
        return read_scores(self.entry.document)

    @property
    def final(self) -> float:
        return self.lateness.final(self.scores.total)


def submitted_at(entry: Entry) -> datetime.datetime:
    """When the entry was submitted (the epoch when its provenance does not say, or says nonsense)."""
    try:
        return parse_time(entry.provenance.get("submitted_at", EPOCH))
    except ValueError:
        return parse_time(EPOCH)


def choose(entries: list[Entry], policy: CoursePolicy = CoursePolicy()) -> Chosen:
    """The submission that counts among one student's submissions of one practical (an
    autograder error only when there is nothing else: it is no verdict on the work)."""
    graded = [entry for entry in entries if not autograder_error_of(entry.document)]
    timed = sorted(graded or entries, key=submitted_at)
    student, practical = timed[0].student, timed[0].practical
    judged = [Chosen(entry, policy.judge(student, practical, submitted_at(entry)), later=0) for entry in timed]
    candidates = [c for c in judged if not c.late][-1:] + [c for c in judged if c.late]
    # the highest final score; on a tie the on-time one, then the latest
    best = max(enumerate(candidates), key=lambda item: (item[1].final, not item[1].late, item[0]))[1]
    return replace(best, later=sum(1 for c in candidates if c.late and c is not best))


def collect(store: ResultsStore, policy: CoursePolicy = CoursePolicy()) -> dict[str, dict[str, Chosen]]:
    """student -> practical -> the submission that counts."""
    grouped: dict[tuple[str, str], list[Entry]] = {}
    for entry in store.entries():
        grouped.setdefault((entry.student, entry.practical), []).append(entry)
    table: dict[str, dict[str, Chosen]] = {}
    for (student, practical), entries in sorted(grouped.items()):
        table.setdefault(student, {})[practical] = choose(entries, policy)
    return table


def _row(cells: Iterable[object]) -> list[str]:
    """A CSV row of safe cells."""
    return [spreadsheet_cell(cell) for cell in cells]


def practical_order(table: dict[str, dict[str, Chosen]]) -> list[str]:
    """The practicals in the table, in course order (p4 before p10)."""
    return sorted({p for row in table.values() for p in row}, key=lambda p: (len(p), p))


def maxima(table: dict[str, dict[str, Chosen]]) -> dict[str, float]:
    """practical -> its total: its spec's points, as the counted results state them (the same
    total in every place the grade appears; a result from before totals were stored: the
    largest maximum any states)."""
    found: dict[str, float] = {}
    for row in table.values():
        for practical, chosen in row.items():
            scores = chosen.scores
            found[practical] = max(found.get(practical, 0.0), scores.total_points if scores.total_points is not None else scores.max_score or 0.0)
    return found


def _check_cell(scores: Scores, check: str) -> str:
    """A check's score in the grades, or 'pending' where it was deferred (its points neither
    given nor taken until a grading that can grade it)."""
    return "pending" if check in scores.pending else f"{scores.checks.get(check, 0):g}"


def write_grades(table: dict[str, dict[str, Chosen]], path: Path) -> None:
    """One row per student: per practical commit, score, max, checks, lateness, policy, final;
    then the final total and its maximum."""
    practicals = practical_order(table)
    checks = {p: sorted({c for row in table.values() if p in row for c in (*row[p].scores.checks, *row[p].scores.pending)}) for p in practicals}
    top = maxima(table)
    header = ["student"]
    for p in practicals:
        header += [f"{p}.commit", f"{p}.score", f"{p}.max", f"{p}.pending", *(f"{p}.{c}" for c in checks[p]), f"{p}.late", f"{p}.days_late", f"{p}.policy", f"{p}.total", f"{p}.later_submissions", f"{p}.autograder_error"]
    header += ["total", "max"]
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(_row(header))
        for student, row in sorted(table.items()):
            line: list = [student]
            overall = 0.0
            for p in practicals:
                chosen = row.get(p)
                if chosen is None:
                    line += ["", "", f"{top[p]:g}", "", *([""] * len(checks[p])), "", "", "not submitted", "0", "", ""]
                    continue
                scores = chosen.scores
                overall += chosen.final
                line += [
                    chosen.entry.commit, f"{scores.total:g}", f"{top[p]:g}", f"{sum(scores.pending.values()):g}", *(_check_cell(scores, c) for c in checks[p]),
                    "yes" if chosen.late else "no", chosen.lateness.days_late, chosen.lateness.effect, f"{chosen.final:g}", chosen.later,
                    "yes: regrade it (grader regrade --errors)" if autograder_error_of(chosen.entry.document) else "",
                ]
            line += [f"{overall:g}", f"{sum(top.values()):g}"]
            writer.writerow(_row(line))


def write_answers(table: dict[str, dict[str, Chosen]], path: Path) -> None:
    """The free-text answers of the counted submissions, for manual grading."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(_row(["student", "practical", "commit", "question", "answer"]))
        for student, row in sorted(table.items()):
            for practical, chosen in sorted(row.items()):
                for question, answer in chosen.scores.answers.items():
                    writer.writerow(_row([student, practical, chosen.entry.commit, question, answer]))
