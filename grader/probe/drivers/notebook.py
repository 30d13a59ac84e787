"""Running a notebook's graded cells as a kernel would: one shared namespace, cell after
cell, an error in one cell recorded and the next cell run anyway."""
from __future__ import annotations

import builtins
import linecache
import os
from typing import Callable

from grader.probe.recorder.events import Cell
from grader.probe.recorder.observers import describe_exception

Emit = Callable[..., None]  # the recorder's emit: (event class, **fields)


def run_cells(cells: list[dict], notebook: str, emit: Emit) -> dict:
    """Execute `cells` ({index, source, tags}) in order; return the shared namespace.

    Each cell is compiled under the name `<notebook>[cell N]` in the working folder, so its
    frames count as the student's in tracebacks, and its source is registered with linecache
    so those tracebacks show the code.
    """
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins}
    for cell in cells:
        filename = os.path.join(os.getcwd(), f"{notebook}[cell {cell['index']}]")
        source = cell["source"]
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        try:
            exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - the student's graded cell
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a failing cell is an observation
            emit(Cell, index=cell["index"], ok=False, exception=describe_exception(exc, os.getcwd()), tags=tuple(cell["tags"]))
        else:
            emit(Cell, index=cell["index"], ok=True, tags=tuple(cell["tags"]))
    return namespace
