"""What a practical's `prepare` step hands back to the pipeline."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prepared:
    """A submission turned into something runnable (e.g. a notebook's graded cells and a driver).

    `problem` set means the submission cannot be run at all: every run is reported as not run,
    with this message. `notes` are shown with the feedback (e.g. IPython lines not run).
    """

    script: str | None = None  # what to run instead of the spec's script
    driver: bool = False  # the script is a grader driver (it receives the probe's recorder)
    problem: str | None = None
    notes: tuple[str, ...] = ()
