"""results.json in Gradescope's format (grader.results.gradescope.write_results): what
Gradescope reads, and what the course's results store keeps."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.results.channels import Delivered, Outcome, Problem
from grader.results.gradescope import write_results
from grader.results.model import GradingReport


@dataclass(frozen=True)
class GradescopeChannel:
    """Writes results.json (atomically) at a path."""

    name: str = "gradescope"

    def destination_from(self, text: str) -> Path:
        """The file's path."""
        return Path(text)

    def deliver(self, report: GradingReport, destination: Path) -> Outcome:
        """The results file at `destination`."""
        try:
            write_results(report, destination)
        except OSError as exc:
            return Problem(self.name, f"results not written to {destination}: {exc}")
        return Delivered(self.name, str(destination))


CHANNEL = GradescopeChannel()
