"""The console: the per-check table and the feedback (grader.results.render.console_table)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

from grader.results.channels import Delivered, Outcome
from grader.results.model import GradingReport
from grader.results.render import console_table


@dataclass(frozen=True)
class ConsoleChannel:
    """Writes the table to a text stream (the CLI's standard output)."""

    name: str = "console"

    def deliver(self, report: GradingReport, destination: TextIO) -> Outcome:
        """The table, then a newline, to `destination`."""
        destination.write(console_table(report) + "\n")
        destination.flush()
        return Delivered(self.name, str(getattr(destination, "name", "the console")))


CHANNEL = ConsoleChannel()
