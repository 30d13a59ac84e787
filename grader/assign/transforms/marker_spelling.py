"""Refuse markers that are almost right (`# BEGIN SOLUTON`, `# end solution`): otherwise the
region would be copied into the template as it is, solution and all."""
from __future__ import annotations

import re

from grader.assign.markers import Code, MarkerError

_LOOKS_LIKE = re.compile(r"#\s*(begin|end)\s+(\w+)", re.IGNORECASE)
_EXACT = re.compile(r"# (BEGIN|END) (SOLUTION|HIDDEN)\b")


def check_marker_spelling(code: Code) -> Code:
    for number, line in enumerate(code.lines, 1):
        looks = _LOOKS_LIKE.search(line)
        if looks and looks.group(2).upper().startswith(("SOL", "HID")) and not _EXACT.search(line):
            raise MarkerError(code.where, number, f"this looks like a marker but is not one (write '# BEGIN SOLUTION', '# END HIDDEN', …): {line.strip()!r}")
    return code
