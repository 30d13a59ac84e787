"""Checks of practical 4 (parallelism concepts, in a notebook): the simulated data-parallel
split, its output, the two-device model and its activation, and the questions whose answer
is determined. The driver (grader/probe/drivers/p4.py) exercised the student's functions with
the grader's inputs; the expected values come from the grader's reference."""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Sequence

from grader.checks import failures
from grader.checks.base import CheckContext, CheckDef, OptionDef, Verdict
from grader.checks.dataparallel import chunk_rows
from grader.checks.numeric import compare
from grader.probe.recorder.events import Answers, Cell, DpCase, Mp
from grader.results.model import Later
from grader.run.job import JobResult, RankResult

SAME_DEVICE = "Expected all tensors to be on the same device"


@dataclass(frozen=True)
class DPCase:
    batch: int
    parts: int
    output: Sequence[float]  # model(x), computed by the grader


@dataclass(frozen=True)
class ConceptsReference:
    in_features: int
    out_features: int
    cases: Sequence[DPCase]
    mp_output: Sequence[float]  # layer2(layer1(x)), computed by the grader
    mp_layer1_grad: Sequence[float] | None = None  # layer 1's weight gradient of its sum


def _rank(ctx: CheckContext) -> tuple[JobResult | None, RankResult | None, str | None]:
    """The one run and rank of the notebook, or why there is none."""
    run = ctx.runs[0] if ctx.runs else None
    if run is None or not run.ranks or failures.damaged(run):
        return run, None, (failures.explain(run) if run else None) or "the notebook was not run"
    return run, run.ranks[0], None


def _cell_failures(rank: RankResult) -> str:
    failed = [e for e in rank.of_kind(Cell) if not e.ok]
    return "; ".join(f"cell {e.index} {failures.failure(e.exception)}" if e.exception else f"cell {e.index} failed" for e in failed[:2])


def _missing_function(rank: RankResult, name: str) -> str:
    cells = _cell_failures(rank)
    return f"{name} is not defined" + (f": {cells}" if cells else " (keep the function's name, in a cell tagged 'graded')")


def _not_run(run: JobResult | None, rank: RankResult | None, kind: str) -> str:
    reason = failures.explain(run) if run else None
    return reason or f"the grader's exercise ({kind}) did not run"


def _dp_cases(ctx: CheckContext) -> tuple[ConceptsReference | None, list[DpCase], str | None]:
    """The reference and the data-parallel cases the driver ran, or why they cannot be judged
    (the notebook did not run, the function is missing, or it raised)."""
    run, rank, problem = _rank(ctx)
    if problem:
        return None, [], problem
    events = rank.of_kind(DpCase)
    if not events:
        return None, [], _not_run(run, rank, "data parallelism")
    for event in events:
        if event.missing is not None:
            return None, [], _missing_function(rank, event.missing)
        if event.exception is not None:
            return None, [], f"simulate_data_parallel(model, x of {event.batch} rows, {event.parts}) {failures.failure(event.exception)}"
        if event.returned is not None:
            return None, [], f"simulate_data_parallel(model, x of {event.batch} rows, {event.parts}) returned {event.returned}; it must return two values: the list of chunks and the concatenated output"
    return ctx.references[run.spec.name], events, None


def chunk_split(ctx: CheckContext) -> Verdict:
    """simulate_data_parallel splits the batch the way torch.chunk does, for batch sizes and
    chunk counts the grader picks (a small batch gives fewer chunks)."""
    ref, events, problem = _dp_cases(ctx)
    if problem:
        return Verdict(False, problem)
    wrong = []
    for event in events:
        expected = tuple((rows, ref.in_features) for rows in chunk_rows(event.batch, event.parts))
        if event.chunks != expected:
            got = ", ".join(str(c[0]) if c else "?" for c in event.chunks or ()) or "none"
            wrong.append(f"{event.batch} rows into {event.parts} chunks: expected {', '.join(str(r) for r, _ in expected)} rows, observed {got}")
    if wrong:
        return Verdict(False, "; ".join(wrong[:2]) + " (torch.chunk gives each chunk ceil(rows / chunks) rows, the last what is left)")
    return Verdict(True, "chunks as torch.chunk makes them: " + "; ".join(f"{e.batch}/{e.parts} → {', '.join(str(c[0]) for c in e.chunks or ())}" for e in events))


def dp_output(ctx: CheckContext) -> Verdict:
    """The concatenated output of the chunks equals the model's output on the whole batch."""
    ref, events, problem = _dp_cases(ctx)
    if problem:
        return Verdict(False, problem)
    for event, case in zip(events, ref.cases):
        want = [case.batch, ref.out_features]
        shape = list(event.output_shape) if event.output_shape is not None else None
        if shape != want:
            return Verdict(False, f"{case.batch} rows into {case.parts} chunks: output of shape {shape}, expected {want} (concatenate the chunks' outputs along the batch dimension)")
        diff = compare({"output": event.output}, {"output": case.output}, ctx.options["rtol"], ctx.options["atol"])
        if not diff.ok:
            return Verdict(False, f"{case.batch} rows into {case.parts} chunks: the output differs from the model's output on the whole batch ({diff.describe()}); keep the chunks' order")
        wanted = [chunk[0] if chunk else 0 for chunk in event.chunks or ()]
        if event.calls and list(event.calls) != wanted:
            ran = ", ".join(map(str, event.calls))
            return Verdict(False, f"{case.batch} rows into {case.parts} chunks: the model ran on {ran} rows, expected once per chunk, on {', '.join(map(str, wanted))} rows: run the model on each chunk and concatenate their outputs")
    return Verdict(True, f"equal to the single-device output in all {len(events)} cases, the model run once per chunk")


def _mp(rank: RankResult) -> Mp | None:
    return rank.first(Mp)


def mp_placement(ctx: CheckContext) -> Verdict:
    """place_layers puts layer 1 on cuda:0 and layer 2 on cuda:1."""
    run, rank, problem = _rank(ctx)
    if problem:
        return Verdict(False, problem)
    event = _mp(rank)
    if event is None:
        return Verdict(False, _not_run(run, rank, "model parallelism"))
    if event.missing is not None:
        return Verdict(False, _missing_function(rank, event.missing))
    if event.stage == "place" or event.devices is None or len(event.devices) != 2:
        return Verdict(False, f"place_layers {failures.failure(event.exception)}" if event.exception else "place_layers did not return two layers")
    first, second = event.devices
    if first == ("cuda:0",) and second == ("cuda:1",):
        return Verdict(True, "layer 1 on cuda:0, layer 2 on cuda:1")
    return Verdict(False, f"layer 1 on {', '.join(first)}, layer 2 on {', '.join(second)}; expected layer 1 on cuda:0 and layer 2 on cuda:1")


def mp_activation(ctx: CheckContext) -> Verdict:
    """model_parallel_forward moves the activation from cuda:0 to cuda:1 between the layers and
    returns layer2(layer1(x)) on cuda:1."""
    run, rank, problem = _rank(ctx)
    if problem:
        return Verdict(False, problem)
    ref: ConceptsReference = ctx.references[run.spec.name]
    event = _mp(rank)
    if event is None or event.stage != "forward":
        return Verdict(False, _not_run(run, rank, "model parallelism") if event is None else mp_placement(ctx).summary)
    inputs = event.inputs or {}
    if event.exception is not None:
        exc = event.exception
        if SAME_DEVICE in exc.message and inputs.get("layer2", "").startswith("cuda:0"):
            return Verdict(False, "the activation is still on cuda:0 when layer 2 (on cuda:1) runs: move it to layer 2's device with .to('cuda:1') between the layers")
        return Verdict(False, f"model_parallel_forward {failures.failure(exc)}")
    if inputs.get("layer1") != "cuda:0":
        return Verdict(False, f"layer 1 received its input on {inputs.get('layer1', 'no device (it never ran)')}, expected cuda:0: run layer 1 where place_layers put it, then move its output (the activation) to cuda:1")
    if inputs.get("layer2") != "cuda:1":
        return Verdict(False, f"layer 2 received its input on {inputs.get('layer2', 'no device (it never ran)')}, expected cuda:1")
    if event.output_device != "cuda:1":
        return Verdict(False, f"the output is on {event.output_device}, expected cuda:1 (where layer 2 ran)")
    diff = compare({"output": event.output}, {"output": ref.mp_output}, ctx.options["rtol"], ctx.options["atol"])
    if not diff.ok:
        return Verdict(False, f"the output is not layer2(layer1(x)) ({diff.describe()})")
    if ref.mp_layer1_grad is not None:
        if event.layer1_grad is None:
            return Verdict(False, "the output is right, but no gradient reaches layer 1 through it: the activation was cut from the graph between the devices (.detach(), .data, a new tensor) — .to('cuda:1') keeps it, and layer 1 learns")
        grad = compare({"layer1.weight.grad": event.layer1_grad}, {"layer1.weight.grad": ref.mp_layer1_grad}, ctx.options["rtol"], ctx.options["atol"])
        if not grad.ok:
            return Verdict(False, f"the output is right, but layer 1's gradient through it is not ({grad.describe()})")
    return Verdict(True, "activation moved cuda:0 → cuda:1; output equals layer2(layer1(x)); gradients flow back to layer 1")


def _choice(value: Any) -> str:
    text = str(value or "").strip().lower()
    return text.removesuffix(" parallelism").strip()


def concept_answers(ctx: CheckContext) -> Verdict:
    """The questions with one right answer (choices and chunk sizes), against the staff's
    answer key (solutions/p4/answer_key.yaml); partial credit."""
    if ctx.answer_key is None:
        return Verdict(False, "", deferred="the answer key stays with the course staff: the autograder grades these answers", later=Later.AUTOGRADER)
    run, rank, problem = _rank(ctx)
    if problem:
        return Verdict(False, problem)
    event = rank.first(Answers)
    if event is None:
        return Verdict(False, failures.explain(run) or "the answers cell was not run")
    cells = [cell for cell in rank.of_kind(Cell) if "answers" in cell.tags]
    if not cells:
        return Verdict(False, "no cell is tagged 'answers', so no answer was read: keep the template's tag on the answers cell (View → Cell Toolbar → Tags in Jupyter)")
    broken = next((cell for cell in cells if not cell.ok), None)
    crashed = f"the answers cell (cell {broken.index}) {failures.failure(broken.exception)}; " if broken and broken.exception else ""
    given = event.values
    expected = ctx.answer_key
    wrong = []
    for name, want in expected.items():
        have = given.get(name)
        ok = _choice(have) == want if isinstance(want, str) else have == want
        if not ok:
            wrong.append(f"{name} = {have!r}" if name in given else f"{name} is not set")
    right = len(expected) - len(wrong)
    if wrong:
        return Verdict(False, f"{crashed}{right} of {len(expected)} right; not right: {', '.join(wrong)}", fraction=right / len(expected))
    return Verdict(True, f"all {len(expected)} right")


TOLERANCES = {"rtol": OptionDef(float, 1e-4, minimum=0.0), "atol": OptionDef(float, 1e-5, minimum=0.0)}

CHECKS = MappingProxyType(
    {
        check.id: check
        for check in (
            CheckDef("chunk_split", chunk_split, chunk_split.__doc__ or ""),
            CheckDef("dp_output", dp_output, dp_output.__doc__ or "", TOLERANCES),
            CheckDef("mp_placement", mp_placement, mp_placement.__doc__ or ""),
            CheckDef("mp_activation", mp_activation, mp_activation.__doc__ or "", TOLERANCES),
            CheckDef("concept_answers", concept_answers, concept_answers.__doc__ or ""),
        )
    }
)
