"""GitHub Classroom's grading reporter: the runner's result, base64, in a file the workflow
hands on as `<RUNNER>_RESULTS` (grader.results.classroom)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.results.channels import Delivered, Outcome, Problem
from grader.results.classroom import classroom_encoded
from grader.results.model import GradingReport


@dataclass(frozen=True)
class ClassroomChannel:
    """Writes the reporter's value (one line, ASCII) to a file."""

    name: str = "classroom"

    def destination_from(self, text: str) -> Path:
        """The file's path."""
        return Path(text)

    def deliver(self, report: GradingReport, destination: Path) -> Outcome:
        """The encoded result, then a newline, at `destination`."""
        try:
            Path(destination).write_text(classroom_encoded(report) + "\n", encoding="ascii")
        except OSError as exc:
            return Problem(self.name, f"GitHub Classroom's result not written to {destination}: {exc}")
        return Delivered(self.name, str(destination))


CHANNEL = ClassroomChannel()
