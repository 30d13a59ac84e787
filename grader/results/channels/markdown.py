"""A markdown summary appended to a file, e.g. a GitHub job summary ($GITHUB_STEP_SUMMARY)
(grader.results.render.markdown)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.results.channels import Delivered, Outcome, Problem
from grader.results.model import GradingReport
from grader.results.render import markdown


@dataclass(frozen=True)
class SummaryFile:
    """The file the summary is appended to, and the graded commit it names (if any)."""

    path: Path
    graded_commit: str | None = None


@dataclass(frozen=True)
class MarkdownChannel:
    """Appends the report's markdown summary to a file."""

    name: str = "markdown"

    def destination_from(self, text: str) -> SummaryFile:
        """The file's path."""
        return SummaryFile(Path(text))

    def deliver(self, report: GradingReport, destination: SummaryFile) -> Outcome:
        """The summary appended to `destination.path`."""
        try:
            with open(destination.path, "a", encoding="utf-8") as handle:
                handle.write(markdown(report, graded_commit=destination.graded_commit))
        except OSError as exc:
            return Problem(self.name, f"the summary not written to {destination.path}: {exc}")
        return Delivered(self.name, str(destination.path))


CHANNEL = MarkdownChannel()
