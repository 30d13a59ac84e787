"""Remove `# BEGIN HIDDEN` … `# END HIDDEN` regions (markers included)."""
from __future__ import annotations

from dataclasses import replace

from grader.assign.markers import BEGIN_HIDDEN, BEGIN_SOLUTION, END_HIDDEN, Code, MarkerError


def remove_hidden_regions(code: Code) -> Code:
    kept: list[str] = []
    opened = 0
    for number, line in enumerate(code.lines, 1):
        if BEGIN_HIDDEN.match(line):
            if opened:
                raise MarkerError(code.where, number, f"BEGIN HIDDEN inside the hidden region opened at line {opened} (regions do not nest)")
            opened = number
        elif END_HIDDEN.match(line):
            if not opened:
                raise MarkerError(code.where, number, "END HIDDEN without a BEGIN HIDDEN before it")
            opened = 0
        elif opened and BEGIN_SOLUTION.match(line):
            raise MarkerError(code.where, number, f"BEGIN SOLUTION inside the hidden region opened at line {opened} (regions do not nest)")
        elif not opened:
            kept.append(line)
    if opened:
        raise MarkerError(code.where, opened, "BEGIN HIDDEN is never closed by END HIDDEN")
    return replace(code, lines=tuple(kept))
