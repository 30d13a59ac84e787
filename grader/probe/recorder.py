"""A size-capped event file: one event (grader.probe.events) per line, flushed after every
event so a killed process keeps its history."""
from __future__ import annotations

import json
import math
import time
from typing import Any

from grader.probe.events import Event, Truncated, to_json


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


def _plain(value: Any) -> Any:
    """Turn a value into something JSON can hold; non-finite floats become strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return repr(value)[:200]


class Recorder:
    """Appends one JSON object per line to `path` until `max_bytes` is reached, then one
    `truncated` event and nothing more."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self._file = open(path, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the rank
        self._left = max_bytes
        self._t0 = time.monotonic()
        self.truncated = False

    def emit(self, kind: str, **fields: Any) -> None:
        """Write one event of type `kind`."""
        if self.truncated:
            return
        fields["kind"] = kind
        fields["t"] = round(time.monotonic() - self._t0, 6)
        line = json.dumps(_plain(fields), separators=(",", ":")) + "\n"
        if len(line) > self._left:
            self.truncated = True
            line = json.dumps({"kind": "truncated", "t": fields["t"]}) + "\n"
        self._left -= len(line)
        self._file.write(line)
        self._file.flush()

    def close(self) -> None:
        """Flush and close the file."""
        self._file.close()
