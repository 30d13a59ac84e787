"""Replace every line `… # TEMPLATE: <text>` by its indentation and <text>."""
from __future__ import annotations

from dataclasses import replace

from grader.assign.markers import TEMPLATE_LINE, Code


def replace_template_lines(code: Code) -> Code:
    lines = []
    for line in code.lines:
        match = TEMPLATE_LINE.match(line)
        lines.append(f"{match['indent']}{match['replacement'].strip()}".rstrip() if match else line)
    return replace(code, lines=tuple(lines))
