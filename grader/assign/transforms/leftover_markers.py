"""Refuse a template that still holds a marker (a typo such as `# BEGIN SOLUTON` slips
through the other transforms; a left-over marker means solution text may have, too)."""
from __future__ import annotations

from grader.assign.markers import ANY_MARKER, Code, MarkerError


def reject_leftover_markers(code: Code) -> Code:
    for number, line in enumerate(code.lines, 1):
        if ANY_MARKER.search(line) or "BEGIN SOLUT" in line or "END SOLUT" in line:
            raise MarkerError(code.where, number, f"a marker is left after the transforms (misspelt?): {line.strip()!r}")
    return code
