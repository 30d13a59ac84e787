"""Taking the graded code out of a student's notebook.

Only code cells carrying one of the graded tags are taken; no other cell is ever executed.
IPython syntax is not Python, so:
  * a line magic or shell line (`%time x`, `!pip install …`, `y = !ls`) becomes `pass` (or
    `y = None`) with the original as a comment, keeping every line number;
  * a cell magic (`%%time`, `%%capture`) on the first line is dropped when the rest of the cell
    is Python, and the whole cell is skipped when it is not (`%%bash`, `%%writefile`, …).
Each such change is reported in a note so the feedback can mention it.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import nbformat

from grader.run.safeio import UntrustedFileError, read_untrusted

MAX_NOTEBOOK_BYTES = 8 << 20
PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}
_LINE_MAGIC = re.compile(r"^(\s*)([%!].*)$")
_ASSIGNED_MAGIC = re.compile(r"^(\s*)([A-Za-z_][A-Za-z0-9_]*)\s*=\s*([%!].*)$")


@dataclass(frozen=True)
class GradedCell:
    index: int  # the cell's position in the notebook, counting from 1 as Jupyter shows it
    tags: tuple[str, ...]
    source: str  # Python, magics neutralised
    notes: tuple[str, ...] = ()


class NotebookError(Exception):
    """The notebook cannot be read (not JSON, not a notebook, too large, a link)."""


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """Read a notebook written by a student: no links, a size cap, nbformat's own parser."""
    try:
        data, longer = read_untrusted(path, MAX_NOTEBOOK_BYTES)
    except FileNotFoundError:
        raise NotebookError(f"{path.name} is not in the submission") from None
    except (OSError, UntrustedFileError) as exc:
        raise NotebookError(f"{path.name} cannot be read: {exc}") from None
    if longer:
        raise NotebookError(f"{path.name} is larger than {MAX_NOTEBOOK_BYTES >> 20} MiB (clear the outputs and submit again)")
    try:
        with warnings.catch_warnings():  # nbformat warns on stderr with the student's text (a 1 MiB cell id, say)
            warnings.simplefilter("ignore")
            return nbformat.reads(data.decode("utf-8", errors="replace"), as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises many kinds for broken files
        raise NotebookError(f"{path.name} is not a valid notebook: {str(exc).splitlines()[0][:200]}") from None


def neutralise_magics(source: str) -> tuple[str | None, tuple[str, ...]]:
    """The cell as plain Python (None when it is not Python at all) and notes on the changes."""
    lines = source.splitlines()
    notes = []
    if lines and lines[0].lstrip().startswith("%%"):
        magic = lines[0].strip()[2:].split()[0] if lines[0].strip()[2:] else ""
        if magic not in PYTHON_CELL_MAGICS:
            return None, (f"skipped: the cell magic %%{magic} makes it something other than Python",)
        notes.append(f"line 1: the cell magic %%{magic} was ignored")
        lines[0] = f"# {lines[0].strip()}"
    for number, line in enumerate(lines, 1):
        assigned = _ASSIGNED_MAGIC.match(line)
        plain = _LINE_MAGIC.match(line)
        if assigned:
            indent, name, magic = assigned.groups()
            lines[number - 1] = f"{indent}{name} = None  # {magic}"
            notes.append(f"line {number}: {magic.split()[0]} is IPython syntax; {name} was set to None")
        elif plain:
            indent, magic = plain.groups()
            lines[number - 1] = f"{indent}pass  # {magic}"
            notes.append(f"line {number}: {magic.split()[0]} is IPython syntax and was not run")
    return "\n".join(lines) + ("\n" if source.endswith("\n") else ""), tuple(notes)


def graded_cells(notebook: nbformat.NotebookNode, tags: set[str]) -> list[GradedCell]:
    """The code cells tagged with one of `tags`, in notebook order, as Python."""
    cells = []
    for index, cell in enumerate(notebook.get("cells", []), 1):
        cell_tags = tuple(str(t) for t in cell.get("metadata", {}).get("tags", []) or [])
        if cell.get("cell_type") != "code" or not tags.intersection(cell_tags):
            continue
        source, notes = neutralise_magics(str(cell.get("source", "")))
        if source is not None:
            cells.append(GradedCell(index=index, tags=cell_tags, source=source, notes=notes))
    return cells
