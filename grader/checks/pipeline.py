"""Checks for pipeline parallelism (p7): the model in S stages, one rank per stage, the
micro-batches' activations sent forward and their gradients backward with point-to-point sends.

Every verdict rests on the grader's hub (grader/probe/transport/hub.py), which carries the
ranks' process group. For each send it delivered it records the sender, the receiver, when the
send arrived (`Part.at`) and when it was delivered, i.e. matched with the receiver's recv
(`Carried.done`), both by the hub's clock, the tensors' shapes, the sum of each and, within
the plan's keep_bytes, their data; a send never received is not recorded, nor when a recv was
posted. The expected values are the grader's own single-process training
(grader/practicals/p7.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from grader.checks import failures
from grader.checks.answers import answer_number
from grader.checks.base import CheckContext, CheckDef, OptionDef, Verdict
from grader.checks.runs import per_run
from grader.probe.transport.traffic import TrafficReport
from grader.run.job import JobResult
from grader.traffic.report import kept_tensors


@dataclass(frozen=True)
class Crossing:
    """What crosses a cut for one micro-batch: its rows, the sum of its elements, the sum of
    their absolute values (the scale of a comparison of sums) and the elements (float64, flat)."""

    rows: int
    total: float
    scale: float
    values: Any = None


@dataclass(frozen=True)
class PipelineReference:
    """The grader's training of a run: what crosses each cut between stage c and c + 1, by step,
    cut and micro-batch (activations forward, their gradients backward)."""

    stages: int
    micro_batches: int
    steps: int
    dim: int
    activations: tuple[tuple[tuple[Crossing, ...], ...], ...]
    gradients: tuple[tuple[tuple[Crossing, ...], ...], ...]


@dataclass(frozen=True)
class Message:
    """One send the hub delivered: from, to, when it arrived and when it was received (hub's clock)."""

    source: int
    target: int
    sent: float
    received: float
    rows: int
    total: float
    data: Any = None  # its elements (float64, flat) where the hub kept them


def messages(report: TrafficReport, dim: int) -> list[Message]:
    """The delivered sends of one float tensor of rows × dim elements, whatever its shape
    ([rows, dim], flattened, [1, rows, dim]: activations and their gradients; any other send,
    integers, a loss, targets of one column, is carried and judged for nothing), in the order
    they were sent."""
    found = []
    for carried in report.carried:
        if carried.kind != "send" or carried.error or len(carried.members) != 1:
            continue
        part = carried.members[0]
        sent = part.inputs[0] if len(part.inputs) == 1 else None
        if sent is None or not sent.dtype.startswith("float") or not sent.shape or not sent.numel or sent.shape[-1] % dim:
            continue
        found.append(Message(part.rank, carried.root, part.at, carried.done, sent.numel // dim, float(part.sums[0]), kept_tensors(carried, part.rank)))
    return sorted(found, key=lambda m: m.sent)


def _traffic(run: JobResult) -> TrafficReport | str:
    if isinstance(run.traffic, TrafficReport):
        return run.traffic
    reason = run.traffic if isinstance(run.traffic, str) else "the run was not carried by the grader's hub"
    return failures.explain(run) or f"the grader's hub, which carries your stages' process group, sent no report: {reason}"


def same(message: Message, crossing: Crossing, rtol: float, atol: float) -> bool:
    """Whether a send is what crosses the cut for that micro-batch: element by element where
    the hub kept its data (within atol + rtol × the grader's value), else by its sum (within
    atol + rtol × the sum of the absolute values)."""
    if message.rows != crossing.rows:
        return False
    if message.data is not None and crossing.values is not None:
        return message.data.shape == crossing.values.shape and bool(((message.data - crossing.values).abs() <= atol + rtol * crossing.values.abs()).all())
    return abs(message.total - crossing.total) <= rtol * crossing.scale + atol


def _stream_problem(stream: list[Message], expected: tuple[tuple[Crossing, ...], ...], what: str, source: int, target: int, rtol: float, atol: float) -> tuple[int, str] | None:
    """Why the sends of one direction across one cut are not the grader's `expected` (by step,
    then micro-batch, in any order within a step), with the step it shows in; or None."""
    step, used = 0, set()
    for index, message in enumerate(stream):
        if step == len(expected):
            return step, f"stage {source} sent stage {target} {len(stream) - index} more {what}(s) than the {len(expected)} steps' micro-batches"
        want = expected[step]
        match = next((i for i, c in enumerate(want) if i not in used and same(message, c, rtol, atol)), None)
        if match is None:
            unused = [i for i in range(len(want)) if i not in used]
            if used:
                return step, (
                    f"step {step}: after the {what}s of micro-batches {sorted(used)}, stage {source} sent stage {target} one that is none of the step's "
                    f"({message.rows} rows, sum {message.total:.6g}): micro-batch {', '.join(map(str, unused))} ({', '.join(str(want[i].rows) for i in unused)} rows) never went"
                )
            sums = ", ".join(f"{want[i].rows} rows: {want[i].total:.6g}" for i in unused)
            return step, f"step {step}: the first {what} stage {source} sent stage {target} ({message.rows} rows, sum {message.total:.6g}) is not the grader's for any micro-batch of the step (the grader's sums: {sums})"
        used.add(match)
        if len(used) == len(want):
            step, used = step + 1, set()
    if step < len(expected):
        return step, f"stage {source} sent stage {target} the {what}s of {step} step(s) and {len(used)} of step {step}'s {len(expected[step])} micro-batches, expected {len(expected)} steps"
    return None


def p2p_values(ctx: CheckContext) -> Verdict:
    """Every stage sends each micro-batch's activation forward to the next stage and the
    gradient of its input back to the one before, with the values of the grader's own
    single-process training, in every step (so the parameter updates are right too: step k's
    activations depend on step k − 1's update). Compared element by element where the hub kept
    the data, else by the sum it records."""
    rtol, atol = ctx.options["rtol"], ctx.options["atol"]

    def judge(run: JobResult) -> tuple[bool, str]:
        reference: PipelineReference = ctx.references[run.spec.name]
        report = _traffic(run)
        if isinstance(report, str):
            return False, report
        if reference.stages < 2:
            return False, "one stage sends nothing: this check needs a run of two stages or more"
        stream = messages(report, reference.dim)
        if not stream:
            return False, failures.explain(run) or "no activation or gradient crossed between the stages (dist.send/isend of a [rows, dim] tensor)"
        problems = []  # (step, forward before backward, cut, message): the earliest is named
        for cut in range(reference.stages - 1):
            for direction, (source, target, what, expected) in enumerate(
                ((cut, cut + 1, "activation", reference.activations), (cut + 1, cut, "gradient", reference.gradients))
            ):
                found = [m for m in stream if (m.source, m.target) == (source, target)]
                problem = _stream_problem(found, tuple(step[cut] for step in expected), what, source, target, rtol, atol)
                if problem:
                    problems.append((problem[0], direction, cut, problem[1]))
        if problems:
            cause = failures.explain(run)
            return False, min(problems)[3] + (f" — {cause}" if cause else "")
        strays = [m for m in stream if abs(m.source - m.target) != 1]
        if strays:
            return False, f"stage {strays[0].source} sent stage {strays[0].target} a tensor of {strays[0].rows}×{reference.dim}: a stage talks to its neighbours only"
        sends = reference.steps * reference.micro_batches
        unkept = sum(m.data is None for m in stream)
        how = "element by element" if not unkept else f"element by element, {unkept} by their sums (the hub kept no more data)"
        return True, f"{sends} activations and {sends} gradients across each of the {reference.stages - 1} cut(s), all the grader's ({how})"

    return per_run(ctx, judge, "every activation and gradient sent is the grader's")


@dataclass(frozen=True)
class Event:
    """A micro-batch entering (+1) or leaving (−1) a stage, by the hub's clock."""

    at: float
    change: int


def stage_events(stream: list[Message], stage: int, stages: int, done: bool = False) -> list[Event]:
    """When micro-batches entered and left `stage`, as the hub saw it. The hub sees no pass
    run, only what each needs and what each gives: a forward pass runs after its activation
    reached the stage and before the stage sent its output on; a backward pass after the
    gradient reached it and before it sent its input's gradient back. Reached (`done` False):
    the earliest each forward can have run, the latest each backward (a micro-batch enters
    when its activation is delivered to the stage, the first stage: when it sends it on, and
    leaves when the stage sends its gradient back, the first stage: when that gradient is
    delivered to it). Done (`done` True): the latest each forward can have run, the earliest
    each backward: enters when the stage sends the activation on, leaves when the gradient is
    delivered to it; the last stage's forward is not seen apart from its backward, and counts
    as run just before it. A receive posted ahead of time (an irecv that prefetches) makes a
    delivery early, never a send. Ties count the leaving first."""
    events = []
    for m in stream:
        forward_out, gradient_in = (m.source, m.target) == (stage, stage + 1), (m.source, m.target) == (stage + 1, stage)
        if done and stage == stages - 1 and (m.source, m.target) == (stage, stage - 1):
            events += [Event(m.sent, +1), Event(math.nextafter(m.sent, math.inf), -1)]
        elif done or stage == 0:
            events += [Event(m.sent, +1)] if forward_out else [Event(m.received, -1)] if gradient_in else []
        elif (m.source, m.target) == (stage - 1, stage):
            events.append(Event(m.received, +1))
        elif (m.source, m.target) == (stage, stage - 1):
            events.append(Event(m.sent, -1))
    return sorted(events, key=lambda e: (e.at, e.change))


def order_problem(reached: list[Event], done: list[Event], schedule: str, stage: int, stages: int, micro_batches: int) -> str | None:
    """Why a stage's micro-batches did not enter and leave as `schedule` has them, or None;
    `reached` and `done` are stage_events' two readings of the hub's times, each taken where
    it gives the schedule the benefit of the doubt. GPipe: once a micro-batch left, none enters
    until every one of the step has left (all forward passes of a step before its first
    backward; read from `reached`). 1F1B: as many as S − stage in flight (its warm-up fills the
    pipeline) before the first leaves in every step (`reached`), and never more (`done`)."""
    limit = min(stages - stage, micro_batches)
    held, peak, leaving = 0, 0, False
    for event in reached:
        held += event.change
        if held < 0:
            return f"stage {stage} sent back a gradient of a micro-batch whose activation had not reached it"
        if event.change > 0 and leaving and schedule == "gpipe":
            return f"stage {stage} started a forward pass after a backward pass of the same step (with {held - 1} micro-batch(es) still in flight): GPipe runs all forward passes of a step before the first backward"
        if event.change < 0 and not leaving and schedule == "1f1b" and peak < limit:
            return f"stage {stage} started a backward pass with {peak} micro-batch(es) in flight: 1F1B's warm-up runs {limit - 1} forward pass(es) before the steady state's first forward and backward"
        peak = max(peak, held)
        leaving = leaving or event.change < 0
        if held == 0:  # the step's micro-batches have all left
            peak, leaving = 0, False
    if held:
        return f"stage {stage} still held {held} micro-batch(es) at the end: their gradients never went back"
    if schedule == "1f1b" and in_flight(done) > limit:
        return f"stage {stage} had {in_flight(done)} micro-batches in flight, at most {limit} in 1F1B (S − stage = {stages} − {stage}): a forward pass came before the backward pass that should precede it"
    return None


def in_flight(events: list[Event]) -> int:
    """The most micro-batches a stage held at once."""
    held, peak = 0, 0
    for event in events:
        held += event.change
        peak = max(peak, held)
    return peak


def schedule_order(ctx: CheckContext) -> Verdict:
    """The order of each stage's sends is the schedule the run asked for (`--schedule`), as the
    grader's hub timed them: in GPipe no micro-batch leaves a stage before all of the step have
    entered it; in 1F1B a stage never holds more than S − stage micro-batches, and fills up to
    that before its first backward. A GPipe order labelled 1F1B fails; a stage that posts its
    receives ahead of time (irecv) is judged by what it sent, which it cannot have sent early."""

    def judge(run: JobResult) -> tuple[bool, str]:
        reference: PipelineReference = ctx.references[run.spec.name]
        report = _traffic(run)
        if isinstance(report, str):
            return False, report
        cause = failures.explain(run)
        if cause:
            return False, cause
        schedule = str(ctx.args_of(run)[ctx.options["schedule_argument"]])
        stream = messages(report, reference.dim)
        peaks = []
        for stage in range(reference.stages):
            reached, done = stage_events(stream, stage, reference.stages), stage_events(stream, stage, reference.stages, done=True)
            if not reached:
                return False, f"no activation reached or left stage {stage}: the stages never passed micro-batches"
            problem = order_problem(reached, done, schedule, stage, reference.stages, reference.micro_batches)
            if problem:
                return False, f"{schedule}: {problem}"
            peaks.append(in_flight(reached if schedule == "gpipe" else done))
        return True, f"{schedule}: micro-batches in flight at most {peaks} (by stage), as the grader's hub saw the sends"

    return per_run(ctx, judge, "each stage's sends follow the schedule asked for")


def _fraction(value: Any) -> float | None:
    """A number as a person writes it: 0.2, "0.2" or "1/5"."""
    if isinstance(value, str) and value.count("/") == 1:
        top, bottom = (answer_number(part) for part in value.split("/"))
        return top / bottom if top is not None and bottom else None
    return answer_number(value)


def pipeline_answers(ctx: CheckContext) -> Verdict:
    """The answers with one right value (the bubble fractions, the micro-batches the first
    stage holds in each schedule), against the staff's answer key (solutions/p7/answer_key.yaml,
    whose names are the answers' keys with the first dot an underscore), within `tolerance`;
    decimals or fractions ("1/4"); partial credit."""
    if ctx.answer_key is None:
        return Verdict(False, "", deferred="the answer key stays with the course staff: the autograder grades these answers")
    if ctx.answers is None or ctx.answers.problem:
        return Verdict(False, ctx.answers.problem if ctx.answers else "this practical has no answers file")
    wrong = []
    for name, want in ctx.answer_key.items():
        key = name.replace("_", ".", 1)
        raw = ctx.answers.get(key)
        given = _fraction(raw)
        if given is None or abs(given - float(want)) > ctx.options["tolerance"]:
            wrong.append(f"{key}: no answer" if raw is None else f"{key}: you answered {raw!r}")
    right = len(ctx.answer_key) - len(wrong)
    if wrong:
        return Verdict(False, f"{right} of {len(ctx.answer_key)} right; " + "; ".join(wrong[:3]), fraction=right / len(ctx.answer_key))
    return Verdict(True, f"all {len(ctx.answer_key)} right")


TOLERANCES = {
    "rtol": OptionDef(float, 1e-4, minimum=0.0, help="tolerance of a send's sum, relative to the sum of its absolute values"),
    "atol": OptionDef(float, 1e-6, minimum=0.0, help="absolute tolerance of a send's sum"),
}

CHECKS = MappingProxyType(
    {
        check.id: check
        for check in (
            CheckDef("p2p_values", p2p_values, p2p_values.__doc__ or "", TOLERANCES),
            CheckDef("schedule_order", schedule_order, schedule_order.__doc__ or "", {"schedule_argument": OptionDef(str, "schedule")}),
            CheckDef("pipeline_answers", pipeline_answers, pipeline_answers.__doc__ or "", {"tolerance": OptionDef(float, 0.005, minimum=0.0)}),
        )
    }
)
