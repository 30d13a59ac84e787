"""The `feedback` branch of the student's own repository (grader.submit.feedback.publish)."""
from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from grader.results.channels import Delivered, Outcome, Problem
from grader.results.model import GradingReport
from grader.submit.feedback import publish


@dataclass(frozen=True)
class Branch:
    """Which repository and graded commit, and how the student is shown the report there
    (see publish)."""

    repo: Path
    practical: str
    commit: str
    after_deadline: bool | None = False
    notes: tuple[str, ...] = ()
    latest: bool = True


@dataclass(frozen=True)
class GitBranchChannel:
    """Commits the student's view of the report to the repository's feedback branch."""

    name: str = "git-branch"

    def deliver(self, report: GradingReport, destination: Branch) -> Outcome:
        """The feedback commit, or why git refused it."""
        try:
            made = publish(destination.repo, destination.practical, destination.commit, report, after_deadline=destination.after_deadline, notes=destination.notes, latest=destination.latest)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            return Problem(self.name, str(exc))
        return Delivered(self.name, f"{destination.repo} feedback @{made[:7]}")


CHANNEL = GitBranchChannel()
