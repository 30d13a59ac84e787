"""`python -m grader collect RESULTS_DIR --csv grades.csv [--deadline ISO]`: grades out.

For every student and practical, the latest submission made before the deadline counts (when
there is none before it, the latest one, flagged late); a later submission is flagged too.
One CSV row per student: per practical the commit, the total, each check's score and the late
flag, then the overall total. Free-text answers go to a second CSV (student, practical,
question, answer) for the people who grade them. Every cell is made visible and guarded
against being read as a spreadsheet formula (grader.results.escape.spreadsheet_cell).
"""
from __future__ import annotations

import csv
import datetime
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from grader.results.escape import spreadsheet_cell
from grader.results.gradescope import read_scores
from grader.store import Entry, ResultsStore


@dataclass(frozen=True)
class Chosen:
    entry: Entry
    late: bool  # the counted submission came after the deadline
    later: int  # submissions after the deadline that did not count


def parse_time(text: str) -> datetime.datetime:
    """An ISO 8601 time; without a zone it is taken as UTC."""
    moment = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def choose(entries: list[Entry], deadline: datetime.datetime | None) -> Chosen:
    """The submission that counts among one student's submissions of one practical."""
    timed = sorted(entries, key=lambda e: parse_time(e.provenance.get("submitted_at", "1970-01-01T00:00:00")))
    if deadline is None:
        return Chosen(timed[-1], late=False, later=0)
    on_time = [e for e in timed if parse_time(e.provenance.get("submitted_at", "1970-01-01T00:00:00")) <= deadline]
    later = len(timed) - len(on_time)
    if on_time:
        return Chosen(on_time[-1], late=False, later=later)
    return Chosen(timed[-1], late=True, later=later - 1)


def collect(store: ResultsStore, deadline: datetime.datetime | None = None) -> dict[str, dict[str, Chosen]]:
    """student -> practical -> the submission that counts."""
    grouped: dict[tuple[str, str], list[Entry]] = {}
    for entry in store.entries():
        grouped.setdefault((entry.student, entry.practical), []).append(entry)
    table: dict[str, dict[str, Chosen]] = {}
    for (student, practical), entries in sorted(grouped.items()):
        table.setdefault(student, {})[practical] = choose(entries, deadline)
    return table


def _row(cells: Iterable[object]) -> list[str]:
    """A CSV row of safe cells."""
    return [spreadsheet_cell(cell) for cell in cells]


def write_grades(table: dict[str, dict[str, Chosen]], path: Path) -> None:
    """One row per student: per practical commit, total, checks, late; then the total."""
    practicals = sorted({p for row in table.values() for p in row}, key=lambda p: (len(p), p))
    checks = {p: sorted({c for row in table.values() if p in row for c in read_scores(row[p].entry.document).checks}) for p in practicals}
    header = ["student"]
    for p in practicals:
        header += [f"{p}.commit", f"{p}.total", *(f"{p}.{c}" for c in checks[p]), f"{p}.late", f"{p}.later_submissions"]
    header.append("total")
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(_row(header))
        for student, row in sorted(table.items()):
            line: list = [student]
            overall = 0.0
            for p in practicals:
                chosen = row.get(p)
                if chosen is None:
                    line += ["", "", *([""] * len(checks[p])), "", ""]
                    continue
                scores = read_scores(chosen.entry.document)
                overall += scores.total
                line += [chosen.entry.commit, f"{scores.total:g}", *(f"{scores.checks.get(c, 0):g}" for c in checks[p]), "yes" if chosen.late else "no", chosen.later]
            line.append(f"{overall:g}")
            writer.writerow(_row(line))


def write_answers(table: dict[str, dict[str, Chosen]], path: Path) -> None:
    """The free-text answers of the counted submissions, for manual grading."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(_row(["student", "practical", "commit", "question", "answer"]))
        for student, row in sorted(table.items()):
            for practical, chosen in sorted(row.items()):
                for question, answer in read_scores(chosen.entry.document).answers.items():
                    writer.writerow(_row([student, practical, chosen.entry.commit, question, answer]))
