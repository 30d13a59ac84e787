"""The one reader of event files (what grader.probe.recorder.observers recorded in a process): each line
validated into a typed event (grader.probe.recorder.events), and one ProcessRecord per process, which
the checks (through RankResult) and the observe report both consume.

The files are written next to the student's code, which can write into them too: a line the
recorder does not write makes the record `damaged`, with the reason, and reading stops there;
it is never passed over in silence nor filled in with a default.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from grader.probe.recorder.events import DamagedRecords, E, Event, Process, Truncated, parse_line
from grader.run.safeio import UntrustedFileError, read_untrusted

MAX_EVENTS = 20_000  # a file of millions of tiny events would cost the grader gigabytes


@dataclass(frozen=True)
class ProcessRecord:
    """What one process recorded: its header, its events in the order they began, why the
    file is damaged (None when it is not: then every line was read), and whether it ends
    before the process did (its size cap, a last line cut by the process's end, or the
    reader's cap on events)."""

    header: Process | None = None
    events: tuple[Event, ...] = ()
    damaged: str | None = None
    cut_short: bool = False

    def of_kind(self, kind: type[E]) -> list[E]:
        """The events of one kind, in the order they began."""
        return [e for e in self.events if type(e) is kind]

    def first(self, kind: type[E]) -> E | None:
        """The first event of one kind, or None."""
        return next((e for e in self.events if type(e) is kind), None)


def parse_records(lines: Iterable[str | bytes], max_events: int = MAX_EVENTS) -> ProcessRecord:
    """The record of a file's complete lines (each without its newline). The first must be
    the `process` header; reading stops at the first line that is not an event the recorder
    writes (the record is then damaged) or after `max_events` events (then cut short)."""
    header, events, damaged, capped = None, [], None, False
    for number, line in enumerate(lines, start=1):
        if len(events) >= max_events:
            capped = True
            break
        try:
            event = parse_line(line)
            if (number == 1) != isinstance(event, Process):
                raise DamagedRecords("the first record is not the process header" if number == 1 else "a second process header")
        except DamagedRecords as exc:
            damaged = f"line {number}: {exc}"
            break
        if isinstance(event, Process):
            header = event
        else:
            events.append(event)
    events.sort(key=lambda e: e.seq)
    truncated = any(type(e) is Truncated for e in events)
    return ProcessRecord(header, tuple(events), damaged, capped or truncated)


def decode_records(data: bytes, longer: bool, max_events: int = MAX_EVENTS) -> ProcessRecord:
    """The record of a file's bytes (`longer`: the file went on beyond them). A last line
    without its newline was cut by the process's end or by the size cap: it is left out, and
    the record is cut short."""
    lines = data.split(b"\n")
    cut = lines.pop() != b"" or longer
    record = parse_records(lines, max_events)
    if cut and not record.damaged:
        return ProcessRecord(record.header, record.events, None, True)
    return record


def read_records(path: Path, max_bytes: int, max_events: int = MAX_EVENTS) -> ProcessRecord:
    """The record of one event file, read as an untrusted file (grader.run.safeio): no file
    is an empty record; a link, a special file or an unreadable one is a damaged record."""
    try:
        data, longer = read_untrusted(path, max_bytes)
    except FileNotFoundError:
        return ProcessRecord()
    except (OSError, UntrustedFileError) as exc:
        return ProcessRecord(damaged=str(exc))
    return decode_records(data, longer, max_events)
