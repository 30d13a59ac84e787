"""A size-capped event file: one event (grader.probe.recorder.events) per line, flushed after every
event so a killed process keeps its history."""
from __future__ import annotations

from grader.probe.recorder.events import Event, Truncated, to_json


class EventFile:
    """Writes one event per line to `path` until `max_bytes` is reached, then one `truncated`
    event and nothing more. Not thread-safe: its user holds a lock."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self._file = open(path, "w", encoding="ascii")  # noqa: SIM115 - lives as long as the process
        self._left = max_bytes
        self.truncated = False

    def write(self, event: Event) -> None:
        """Write `event` (or, where it no longer fits, the `truncated` mark)."""
        if self.truncated:
            return
        line = to_json(event) + "\n"
        if len(line) > self._left:
            self.truncated = True
            line = to_json(Truncated(t=event.t, seq=event.seq, step=event.step)) + "\n"
        self._left -= len(line)
        self._file.write(line)
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        self._file.close()

