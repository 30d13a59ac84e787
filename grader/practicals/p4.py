"""p4: the concepts notebook. `prepare` takes the graded cells out of the notebook and adds
the driver that runs them; `references` computes, in the grader's process, what the
student's functions must return on the grader's inputs (built by the driver's own builders).
The driver imports torch: it is imported where it is used, so that loading the practical (the
course's list, a release, an export) does not import torch."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from grader.checks.concepts import CHECKS, ConceptsReference, DPCase
from grader.grade.notebook import NotebookError, graded_cells, read_notebook
from grader.grade.prepared import Prepared
from grader.spec import Assignment, RunDef

__all__ = ["CHECKS", "prepare", "references"]
TAGS = {"graded", "answers"}
DRIVER = "run_p4_driver.py"
DRIVER_SOURCE = '''"""Written by the grader: runs the notebook's graded cells, then the grader's exercises."""
from grader.probe.drivers.p4 import main

main(__grader_emit__)  # noqa: F821 - given by the grader's probe
'''


def prepare(submission: Path, into: Path, assignment: Assignment) -> Prepared:
    """Write the graded cells (cells.json) and the driver into `into`."""
    from grader.probe.drivers import p4 as driver

    try:
        notebook = read_notebook(submission / assignment.script)
    except NotebookError as exc:
        return Prepared(problem=str(exc))
    cells = graded_cells(notebook, TAGS)
    if not cells:
        return Prepared(problem=f"no code cell of {assignment.script} is tagged 'graded' or 'answers'; the grader runs only tagged cells (keep the tags of the template)")
    document = {"name": assignment.script, "cells": [{"index": c.index, "source": c.source, "tags": list(c.tags)} for c in cells]}
    (into / driver.CELLS_FILE).write_text(json.dumps(document), encoding="utf-8")
    (into / DRIVER).write_text(DRIVER_SOURCE, encoding="utf-8")
    notes = tuple(f"{assignment.script}, cell {c.index}: {note}" for c in cells for note in c.notes)
    return Prepared(script=DRIVER, driver=True, notes=notes)


def references(args: Mapping[str, Any], runs: Sequence[RunDef]) -> dict[str, ConceptsReference]:
    """The outputs the student's functions must produce on the grader's inputs."""
    import torch

    from grader.probe.drivers import p4 as driver

    seed = int(args["seed"])
    dims = (int(args["in_features"]), int(args["hidden"]), int(args["out_features"]))
    cases = []
    with torch.no_grad():
        for index, (batch, parts) in enumerate(driver.cases(seed)):
            model, x = driver.dp_case(seed, index, batch, dims)
            cases.append(DPCase(batch=batch, parts=parts, output=driver.values(model(x))))
    layer1, layer2, x = driver.mp_case(seed, int(args["mp_batch"]), dims)
    output = layer2(layer1(x))
    output.sum().backward()
    reference = ConceptsReference(
        in_features=dims[0], out_features=dims[2], cases=tuple(cases), mp_output=driver.values(output), mp_layer1_grad=driver.values(layer1.weight.grad)
    )
    return {run.name: reference for run in runs}
