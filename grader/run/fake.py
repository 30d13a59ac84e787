"""A runner that runs nothing: it answers each job with a JobResult it is given, and records
what it was asked. For testing everything above the runner (pipeline, checks, results)
without processes."""
from __future__ import annotations

from typing import Callable, Mapping

from grader.run.job import JobResult, JobSpec

Responder = Callable[[JobSpec], JobResult]


class FakeRunner:
    """Answers `run(job)` from `responses` (a function of the job, or results by job name)."""

    def __init__(self, responses: Responder | Mapping[str, JobResult]) -> None:
        self._respond: Responder = responses if callable(responses) else (lambda job: responses[job.name])
        self.jobs: list[JobSpec] = []
        self.isolation = "none (fake runner: nothing runs)"
        self.telemetry = "none (fake runner)"
        self.started = False
        self.closed = False

    def start(self, trusted: bool = False) -> None:
        self.started = True

    def run(self, job: JobSpec) -> JobResult:
        self.jobs.append(job)
        return self._respond(job)

    def close(self) -> None:
        self.closed = True
