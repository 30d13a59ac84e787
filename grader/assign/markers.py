"""The markers an author puts in solution files, and the error for malformed ones.

In .py files, notebook code cells and .yaml files (all use `#` comments):

    # BEGIN SOLUTION TODO 3: wrap the model in DDP      the region is the solution; the template
    #: TODO 3: wrap the model in DistributedDataParallel   gets the `#:` lines as comments and
    model = DDP(model)                                  `raise NotImplementedError("TODO 3: …")`
    # END SOLUTION                                      (YAML: the region is just removed)

    # BEGIN HIDDEN / # END HIDDEN                       removed from the template entirely
    answer = "data"  # TEMPLATE: answer = ""            this line becomes `answer = ""`
"""
from __future__ import annotations

import re
from dataclasses import dataclass

BEGIN_SOLUTION = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION\b(?P<message>.*)$")
END_SOLUTION = re.compile(r"^\s*# END SOLUTION\s*$")
BEGIN_HIDDEN = re.compile(r"^\s*# BEGIN HIDDEN\s*$")
END_HIDDEN = re.compile(r"^\s*# END HIDDEN\s*$")
PROMPT = re.compile(r"^\s*#:(?P<text>.*)$")
TEMPLATE_LINE = re.compile(r"^(?P<indent>\s*)(?P<code>.*?)\s+# TEMPLATE:(?P<replacement>.*)$")
ANY_MARKER = re.compile(r"# (BEGIN|END) (SOLUTION|HIDDEN)\b|# TEMPLATE:|^\s*#:")


class MarkerError(ValueError):
    """A malformed marker: where (file, cell, line) and what is wrong."""

    def __init__(self, where: str, line: int, problem: str) -> None:
        self.where, self.line, self.problem = where, line, problem
        super().__init__(f"{where}:{line}: {problem}")


@dataclass(frozen=True)
class Code:
    """Lines of one file, or of one notebook cell, and how to name them in errors."""

    where: str  # e.g. "solutions/p6/p6_ddp.py" or "solutions/p4/p4_concepts.ipynb, cell 5"
    lines: tuple[str, ...]
    python: bool = True  # solution regions become a raise (Python) or vanish (other languages)
