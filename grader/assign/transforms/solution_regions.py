"""Replace `# BEGIN SOLUTION <message>` … `# END SOLUTION` regions: in Python by the region's
`#:` prompt lines (as comments) and `raise NotImplementedError("<message>")`, indented like the
BEGIN line; in other languages by the prompt lines alone."""
from __future__ import annotations

import json
from dataclasses import replace

from grader.assign.markers import BEGIN_HIDDEN, BEGIN_SOLUTION, END_SOLUTION, PROMPT, Code, MarkerError

DEFAULT_MESSAGE = "TODO: complete this part"


def replace_solution_regions(code: Code) -> Code:
    kept: list[str] = []
    region: tuple[int, str, str] | None = None  # (line, indent, message)
    prompts: list[str] = []
    for number, line in enumerate(code.lines, 1):
        begin = BEGIN_SOLUTION.match(line)
        if begin:
            if region:
                raise MarkerError(code.where, number, f"BEGIN SOLUTION inside the solution region opened at line {region[0]} (regions do not nest)")
            message = begin["message"].strip().lstrip(":").strip() or DEFAULT_MESSAGE
            region, prompts = (number, begin["indent"], message), []
        elif END_SOLUTION.match(line):
            if not region:
                raise MarkerError(code.where, number, "END SOLUTION without a BEGIN SOLUTION before it")
            _, indent, message = region
            kept.extend(f"{indent}#{text}" if text.strip() else f"{indent}#" for text in prompts)
            if code.python:
                kept.append(f"{indent}raise NotImplementedError({json.dumps(message, ensure_ascii=False)})")
            region = None
        elif region:
            if BEGIN_HIDDEN.match(line):
                raise MarkerError(code.where, number, f"BEGIN HIDDEN inside the solution region opened at line {region[0]} (regions do not nest)")
            prompt = PROMPT.match(line)
            if prompt:
                prompts.append(prompt["text"].rstrip())
        else:
            kept.append(line)
    if region:
        raise MarkerError(code.where, region[0], "BEGIN SOLUTION is never closed by END SOLUTION")
    return replace(code, lines=tuple(kept))
