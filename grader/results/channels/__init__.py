"""Feedback channels: every way a GradingReport reaches people, behind one narrow interface.

A channel has a `name` and `deliver(report, destination)`, which answers `Delivered` (where it
went) or `Problem` (why not). Each channel wraps the renderer that already exists for its form
(results.json: grader.results.gradescope; markdown and the console: grader.results.render;
GitHub Classroom: grader.results.classroom; the student's `feedback` branch:
grader.submit.feedback) and knows nothing of the others. `deliver_all` hands one report to
several (channel, destination) routes in order; a channel that fails, even with an exception
nobody expected, is one Problem among the outcomes and never stops the channels after it.

A new channel is one file in this package that defines `CHANNEL` (and, to be asked for from
the command line with `--deliver NAME=DEST`, a `destination_from(text)` method): `available()`
finds it by its name.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any, Generic, Iterable, Mapping, Protocol, TypeVar, Union, runtime_checkable

from grader.results.model import GradingReport

D = TypeVar("D")
D_contra = TypeVar("D_contra", contravariant=True)


@dataclass(frozen=True)
class Delivered:
    """The report reached `where` (a path, a branch, a stream: for people) through `channel`."""

    channel: str
    where: str


@dataclass(frozen=True)
class Problem:
    """The report did not reach `channel`'s destination, for `message`'s reason."""

    channel: str
    message: str


Outcome = Union[Delivered, Problem]


class FeedbackChannel(Protocol[D_contra]):
    """One way a report reaches people."""

    name: str

    def deliver(self, report: GradingReport, destination: D_contra) -> Outcome:
        """Deliver `report` to `destination`: Delivered, or Problem when that failed."""


@runtime_checkable
class FromText(Protocol):
    """A channel that can be asked for from the command line (`--deliver NAME=DEST`)."""

    name: str

    def destination_from(self, text: str) -> Any:
        """The destination that `text` names (e.g. a file's path)."""


@dataclass(frozen=True)
class Route(Generic[D]):
    """A channel and where it delivers this time."""

    channel: FeedbackChannel[D]
    destination: D


def deliver_all(report: GradingReport, routes: Iterable[Route[Any]]) -> tuple[Outcome, ...]:
    """Deliver `report` through every route, in order; each outcome, one per route."""
    outcomes: list[Outcome] = []
    for route in routes:
        try:
            outcomes.append(route.channel.deliver(report, route.destination))
        except Exception as exc:  # noqa: BLE001 - one channel's failure must not stop the others
            outcomes.append(Problem(route.channel.name, f"{type(exc).__name__}: {exc}"))
    return tuple(outcomes)


def available() -> Mapping[str, FeedbackChannel[Any]]:
    """Every channel of this package (each module's `CHANNEL`), by name."""
    found: dict[str, FeedbackChannel[Any]] = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        channel = getattr(importlib.import_module(f"{__name__}.{module.name}"), "CHANNEL", None)
        if channel is not None:
            found[channel.name] = channel
    return found
