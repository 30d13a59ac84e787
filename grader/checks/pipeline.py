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
import statistics
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping

from grader.checks import failures
from grader.checks.answers import answer_number
from grader.checks.base import CheckContext, CheckDef, OptionDef, Verdict
from grader.checks.runs import per_run
from grader.probe.transport.traffic import TrafficReport, pipeline_send
from grader.results.model import Later
from grader.run.job import JobResult
from grader.traffic.report import delivered_tensor, kept_tensors

if TYPE_CHECKING:
    from grader.speed.measure import TimedRuns


@dataclass(frozen=True)
class Crossing:
    """What crosses a cut for one micro-batch: its rows, the sum of its elements, the sum of
    their absolute values (the scale of a comparison of sums) and the elements (float64, flat)."""

    rows: int
    total: float
    scale: float
    values: Any = None


@dataclass(frozen=True)
class Delivered:
    """A send the hub delivered with values of its own: the step, cut, direction and
    micro-batch whose activation (forward) or gradient it carried, and the values delivered
    (float64, flat)."""

    step: int
    cut: int
    forward: bool
    micro_batch: int
    values: Any


@dataclass(frozen=True)
class PipelineReference:
    """The grader's training of a run: what crosses each cut between stage c and c + 1, by step,
    cut and micro-batch (activations forward, their gradients backward). `retrain` is the same
    training again where the hub delivered some sends with values of its own."""

    stages: int
    micro_batches: int
    steps: int
    dim: int
    activations: tuple[tuple[tuple[Crossing, ...], ...], ...]
    gradients: tuple[tuple[tuple[Crossing, ...], ...], ...]
    retrain: Callable[[tuple[Delivered, ...]], "PipelineReference"] | None = None


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
    delivered: Any = None  # what the receiver got instead (float64, flat), where the hub delivered values of its own


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
        if sent is None or not pipeline_send(sent, dim):
            continue
        found.append(Message(part.rank, carried.root, part.at, carried.done, sent.numel // dim, float(part.sums[0]), kept_tensors(carried, part.rank), delivered_tensor(carried)))
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


def _identify(reference: PipelineReference, message: Message, rtol: float, atol: float) -> Delivered | None:
    """Which step's and micro-batch's crossing a send the hub delivered with its own values
    carried, by what its stage sent (among the crossings of `reference`), or None."""
    cut = min(message.source, message.target)
    if abs(message.source - message.target) != 1 or cut >= reference.stages - 1:
        return None
    forward = message.target > message.source
    table = reference.activations if forward else reference.gradients
    found = next(((step, micro) for step, cuts in enumerate(table) for micro, crossing in enumerate(cuts[cut]) if same(message, crossing, rtol, atol)), None)
    return None if found is None else Delivered(found[0], cut, forward, found[1], message.delivered)


@dataclass(frozen=True)
class Reading:
    """How the stages used the sends the hub delivered with its own values: the grader's
    training with the ones `used` delivered (`reference`), and those whose receiver sent on
    what follows from the values that were sent instead (`ignored`)."""

    reference: PipelineReference
    used: tuple[Delivered, ...]
    ignored: tuple[Delivered, ...]


def _effect(delivered: Delivered, reference: PipelineReference) -> tuple[int, int, bool, int, int, int] | None:
    """The first send that shows whether the receiver of a delivery computed on it: (step, cut,
    forward, micro-batch, from, to) of a crossing that depends on it and on no delivery made
    after it; None where nothing sent depends on it. An activation to a stage before the last:
    that stage's activation of the micro-batch on; to the last stage: the gradient it sends back
    for it. A gradient to a stage after the first: the gradient that stage sends back for the
    micro-batch; to the first stage: its first activation of the next step (its update)."""
    step, cut, micro = delivered.step, delivered.cut, delivered.micro_batch
    if delivered.forward:
        stage = cut + 1
        return (step, stage, True, micro, stage, stage + 1) if stage < reference.stages - 1 else (step, cut, False, micro, stage, cut)
    if cut > 0:
        return step, cut - 1, False, micro, cut, cut - 1
    return (step + 1, 0, True, 0, 0, 1) if step + 1 < reference.steps else None


def read_deliveries(reference: PipelineReference, stream: list[Message], rtol: float, atol: float) -> Reading | None:
    """How the stages used the hub's own deliveries, where every send is then the grader's;
    None where it is not (or a delivery cannot be told). Each delivery, in the order the hub
    made them, is found among the crossings of the training so far by what its stage sent, and
    its receiver's next send that depends on it (`_effect`) says whether the receiver computed on
    it (that send is the training's with the delivery) or ignored it (it is the training's
    without); where both are, it counts as used."""
    current, used, ignored = reference, [], []
    for message in sorted((m for m in stream if m.delivered is not None), key=lambda m: m.received):
        found = _identify(current, message, rtol, atol) if current.retrain is not None else None
        if found is None:
            return None
        trial = reference.retrain((*used, found))  # type: ignore[misc]
        effect = _effect(found, reference)
        if effect is None:
            used.append(found)
            current = trial
            continue
        step, cut, forward, micro, source, target = effect
        sent = [m for m in stream if (m.source, m.target) == (source, target)]

        def shown(training: PipelineReference) -> bool:
            crossing = (training.activations if forward else training.gradients)[step][cut][micro]
            return any(same(m, crossing, rtol, atol) for m in sent)

        if shown(trial):
            used.append(found)
            current = trial
        elif shown(current):
            ignored.append(found)
        else:
            return None
    if value_problems(current, stream, rtol, atol):
        return None
    return Reading(current, tuple(used), tuple(ignored))


def with_deliveries(reference: PipelineReference, stream: list[Message], rtol: float, atol: float) -> tuple[PipelineReference, tuple[Delivered, ...]]:
    """The grader's training with every delivery of the hub's own values that can be found
    (in the order delivered; a send not found stops there, its own mismatch being reported)."""
    deliveries: list[Delivered] = []
    for message in sorted((m for m in stream if m.delivered is not None), key=lambda m: m.received):
        found = _identify(reference, message, rtol, atol) if reference.retrain is not None else None
        if found is None:
            break
        deliveries.append(found)
        reference = reference.retrain(tuple(deliveries))  # type: ignore[misc]
    return reference, tuple(deliveries)


def delivered_sends(deliveries: tuple[Delivered, ...]) -> str:
    """"2 send(s) with values of its own (step 1's micro-batch 3 activation to stage 1; ...)"."""
    said = "; ".join(
        f"step {d.step}'s micro-batch {d.micro_batch} {'activation to stage' if d.forward else 'gradient to stage'} {d.cut + 1 if d.forward else d.cut}"
        for d in deliveries
    )
    return f"{len(deliveries)} send(s) with values of its own ({said})"


def describe_deliveries(deliveries: tuple[Delivered, ...]) -> str:
    """What the hub delivered with its own values, and why, for a verdict."""
    return (
        f"the grader's hub delivered {delivered_sends(deliveries)}, as it does with one send of each step each way between neighbouring stages: "
        "a stage that computes on what it receives sends what follows from those values"
    )


def value_problems(reference: PipelineReference, stream: list[Message], rtol: float, atol: float) -> list[tuple[int, int, int, str]]:
    """Where the sends across each cut, each way, are not the grader's training `reference`:
    (step, 0 forward or 1 backward, cut, why), one per direction and cut that has one."""
    problems = []
    for cut in range(reference.stages - 1):
        for direction, (source, target, what, expected) in enumerate(
            ((cut, cut + 1, "activation", reference.activations), (cut + 1, cut, "gradient", reference.gradients))
        ):
            found = [m for m in stream if (m.source, m.target) == (source, target)]
            problem = _stream_problem(found, tuple(step[cut] for step in expected), what, source, target, rtol, atol)
            if problem:
                problems.append((problem[0], direction, cut, problem[1]))
    return problems


def replayed(reading: Reading | None) -> str | None:
    """Why the sends show that a stage did not compute on what it received, or None: every send
    is the grader's only where some receivers of the hub's own values sent on what follows from
    the values that were sent instead. Their work was done elsewhere (a stage that relays what
    another process computed) or ahead (one that replays what it precomputed): the sends'
    values and times then say nothing of the stages' passes."""
    if reading is None or not reading.ignored:
        return None
    stages = sorted({d.cut + 1 if d.forward else d.cut for d in reading.ignored})
    return (
        f"stage(s) {', '.join(map(str, stages))} sent what follows from what was sent to them, not from what they received: the grader's hub "
        f"delivered {delivered_sends(reading.ignored)} — what a stage sent was not computed from what it received (relayed from another process, "
        "or computed ahead)"
    )


def p2p_values(ctx: CheckContext) -> Verdict:
    """Every stage sends each micro-batch's activation forward to the next stage and the
    gradient of its input back to the one before, with the values of the grader's own
    single-process training, in every step (so the parameter updates are right too: step k's
    activations depend on step k − 1's update). Compared element by element where the hub kept
    the data, else by the sum it records. Where the hub delivered a send with values of its
    own, the training is the grader's with those values delivered: what a stage sends must
    follow from what it received."""
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
        reading = read_deliveries(reference, stream, rtol, atol)
        relayed = replayed(reading)
        if relayed:
            return False, relayed
        reference, deliveries = (reading.reference, reading.used) if reading else with_deliveries(reference, stream, rtol, atol)
        problems = value_problems(reference, stream, rtol, atol)
        if problems:
            cause = failures.explain(run)
            first = min(problems)
            after = deliveries and first[0] >= min(d.step for d in deliveries)
            return False, first[3] + (f" — {describe_deliveries(deliveries)}" if after else "") + (f" — {cause}" if cause else "")
        strays = [m for m in stream if abs(m.source - m.target) != 1]
        if strays:
            return False, f"stage {strays[0].source} sent stage {strays[0].target} a tensor of {strays[0].rows}×{reference.dim}: a stage talks to its neighbours only"
        sends = reference.steps * reference.micro_batches
        unkept = sum(m.data is None for m in stream)
        how = "element by element" if not unkept else f"element by element, {unkept} by their sums (the hub kept no more data)"
        also = f"; {len(deliveries)} delivered with the hub's own values, and what followed from them the grader's too" if deliveries else ""
        return True, f"{sends} activations and {sends} gradients across each of the {reference.stages - 1} cut(s), all the grader's ({how}{also})"

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
    pipeline) before the first leaves in every step (`reached`), and never more (`done`). The
    first stage's warm-up is not judged: its backward passes send nothing, so when one ran is
    not seen; a gradient delivered to it early may be one it received ahead of time with irecv
    while it sent the next activation on, as 1F1B has it (a first stage that waits for each
    gradient before its next forward pass idles longer: the `bubble` check's to find)."""
    limit = min(stages - stage, micro_batches)
    held, peak, leaving = 0, 0, False
    for event in reached:
        held += event.change
        if held < 0:
            return f"stage {stage} sent back a gradient of a micro-batch whose activation had not reached it"
        if event.change > 0 and leaving and schedule == "gpipe":
            return f"stage {stage} started a forward pass after a backward pass of the same step (with {held - 1} micro-batch(es) still in flight): GPipe runs all forward passes of a step before the first backward"
        if event.change < 0 and not leaving and schedule == "1f1b" and peak < limit and stage > 0:
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
        relayed = replayed(read_deliveries(reference, stream, ctx.options["rtol"], ctx.options["atol"]))
        if relayed:
            return False, f"the order of the sends says nothing of the stages' passes: {relayed}"
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


@dataclass(frozen=True)
class StageTime:
    """One stage in one step's window, by the hub's clock: the time it held a micro-batch's
    work (`busy`) and the rest of the window (`idle`), in seconds."""

    stage: int
    busy: float
    idle: float


@dataclass(frozen=True)
class StepWindow:
    """One step of a run as the hub saw it: its window, from the first activation the first
    stage sent in the step to the first it sent in the next (a whole period of the schedule,
    the optimizer step included), and the stages after the first in it."""

    step: int
    start: float
    end: float
    stages: tuple[StageTime, ...]

    @property
    def span(self) -> float:
        return self.end - self.start

    @property
    def bubble(self) -> float:
        """The stages' idle share of the window, averaged over the stages measured."""
        return sum(s.idle for s in self.stages) / (len(self.stages) * self.span) if self.stages and self.span > 0 else 0.0


def _holding(stream: list[Message], stage: int, stages: int) -> list[tuple[float, int]]:
    """When `stage` (not the first) took on and finished a micro-batch's work, as the hub saw
    it: +1 when an activation (and, but on the last stage, a gradient) was delivered to it, −1
    when it sent what that work makes (the next stage's activation; a gradient back, which on
    the last stage ends its forward and backward pass). Ties count the finishing first."""
    changes = []
    for m in stream:
        if m.target == stage and m.source in (stage - 1, stage + 1):
            changes.append((m.received, +1))
        elif m.source == stage and (m.target == stage - 1 or (m.target == stage + 1 and stage < stages - 1)):
            changes.append((m.sent, -1))
    return sorted(changes)


def _held_within(changes: list[tuple[float, int]], start: float, end: float) -> float:
    """How long within [start, end) the count of work taken on and not finished was above zero."""
    held, since, total = 0, 0.0, 0.0
    for at, change in changes:
        if held > 0:
            total += max(0.0, min(at, end) - max(since, start))
        held, since = held + change, at
    if held > 0:
        total += max(0.0, end - max(since, start))
    return total


def step_windows(stream: list[Message], stages: int, micro_batches: int) -> tuple[StepWindow, ...] | str:
    """Each stage's busy and idle time in each step, as the grader's hub saw the sends of one
    run (`messages`), and so the bubble of its schedule; or why the sends show no pipeline.

    What the hub sees of a stage: when each send it made arrived (the stage issued it, right
    after the pass that made the tensor) and when each tensor sent to it was delivered (its
    recv took it: the pass that needs it can start). A stage after the first therefore holds
    work from the delivery of an activation until it sends the next stage that micro-batch's
    activation (on the last stage: until it sends the gradient back, its forward and backward
    passes done), and from the delivery of a gradient until it sends its own gradient back.
    Counting deliveries up and the sends they lead to down, the stage is busy while the count
    is above zero and idle while it is zero: it then has no micro-batch to work on, whatever
    its code does. Counts, not matched micro-batches: any order within a step is measured
    alike.

    The measure can only err towards busy: a stage that holds work but waits (a recv posted
    late, a sleep, a pass that waits for another stage) counts as busy, and so does the time
    a tensor takes from the hub to the stage. An idle stretch it counts was idle. The first
    stage is not measured: its forward passes start from its own data, its backward passes
    end with no send, so neither shows at the hub.

    A step's window runs from the first stage's first activation sent in the step to its
    first in the next step, so the last step has none. With S equal stages, M micro-batches,
    forward f and backward b per micro-batch and free sends, both GPipe and 1F1B take
    (M + S − 1)(f + b) a step of which each stage works M(f + b): the bubble is
    (S − 1) / (M + S − 1) (the optimizer's step and everything else a stage does outside its
    micro-batches' passes count as idle here)."""
    if stages < 2:
        return "one stage sends nothing: a bubble needs two stages or more"
    firsts = sorted(m.sent for m in stream if (m.source, m.target) == (0, 1))
    if len(firsts) < 2 * micro_batches:
        return f"stage 0 sent stage 1 {len(firsts)} activation(s): a step's window needs the {micro_batches} of a step and the first of the next"
    starts = firsts[::micro_batches]
    changes = {stage: _holding(stream, stage, stages) for stage in range(1, stages)}
    for stage, found in changes.items():
        if not any(change < 0 for _, change in found):
            return f"stage {stage} sent nothing on: no micro-batch's work can be seen to end there"
    windows = []
    for step, (start, end) in enumerate(zip(starts, starts[1:])):
        times = []
        for stage in range(1, stages):
            busy = _held_within(changes[stage], start, end)
            times.append(StageTime(stage, busy, end - start - busy))
        windows.append(StepWindow(step, start, end, tuple(times)))
    return tuple(windows)


def theoretical_bubble(stages: int, micro_batches: int) -> float:
    """(S − 1) / (M + S − 1): GPipe's and 1F1B's, equal stages and free sends."""
    return (stages - 1) / (micro_batches + stages - 1)


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
        return Verdict(False, "", deferred="the answer key stays with the course staff: the autograder grades these answers", later=Later.AUTOGRADER)
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


NOT_TIMED = "this grading did not time it (the bubble is measured by the autograder, from the spec's timed run)"


def _setting(launch: JobResult, name: str) -> int | None:
    """The whole number the grader passed the launch as `--name=value`, or None."""
    value = next((arg.split("=", 1)[1] for arg in launch.spec.argv if arg.startswith(f"--{name}=")), None)
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def launch_bubble(launch: JobResult, options: Mapping[str, Any], warmup: int) -> float | str:
    """One launch's bubble: the median over its steps' windows (`step_windows`) after the
    first `warmup`; or why it cannot be measured."""
    if launch.skipped:
        return f"a launch was not run: {launch.skipped}"
    report = _traffic(launch)
    if isinstance(report, str):
        return report
    cause = failures.explain(launch)
    if cause:
        return cause
    micro_batches, dim = _setting(launch, options["micro_batches_argument"]), _setting(launch, options["dim_argument"])
    if micro_batches is None or dim is None:
        return f"the run gives no --{options['micro_batches_argument']} and --{options['dim_argument']} (the spec's timed run must)"
    windows = step_windows(messages(report, dim), launch.spec.layout.world_size, micro_batches)
    if isinstance(windows, str):
        return windows
    if len(windows) <= warmup:
        return f"{len(windows)} step window(s), none after the first {warmup} steps, which are not timed"
    return statistics.median(w.bubble for w in windows[warmup:])


def side_bubble(launches: tuple[JobResult, ...], options: Mapping[str, Any], warmup: int) -> list[float] | str:
    """Each launch's bubble (`launch_bubble`), or why one could not be measured."""
    found = []
    for launch in launches:
        measured = launch_bubble(launch, options, warmup)
        if isinstance(measured, str):
            return measured
        found.append(measured)
    return found or "it was not launched"


def _percent(values: list[float]) -> str:
    return ", ".join(f"{v:.1%}" for v in values)


@dataclass(frozen=True)
class BubbleSides:
    """A timed run's bubbles, each launch's (`launch_bubble`): the submission's and the
    reference solution's, made alternately under the same load; the theory's for its S and M."""

    own: list[float]
    reference: list[float]
    theory: float
    tolerance: float

    @property
    def busy(self) -> bool:
        """The machine is too busy to measure a bubble: the reference's least disturbed launch is above what passes."""
        return min(self.reference) > self.theory + self.tolerance

    @property
    def limit(self) -> float:
        """The most that passes: the theory's (or, where larger, the reference's least
        disturbed launch's: a load that slows both sides alike) + `tolerance`."""
        return max(self.theory, min(self.reference)) + self.tolerance

    @property
    def passed(self) -> bool:
        return min(self.own) <= self.limit


def _theory(launch: JobResult, options: Mapping[str, Any]) -> float:
    """The theory's bubble for the launch's stages and micro-batches."""
    return theoretical_bubble(launch.spec.layout.world_size, _setting(launch, options["micro_batches_argument"]) or 1)


def bubble(ctx: CheckContext) -> Verdict:
    """The pipeline's bubble as the grader's hub saw a timed run: each launch's stages after
    the first idle while they hold no micro-batch's work (`step_windows`), the median of its
    steps; the least of the launches (the least disturbed) is at most
    (S − 1) / (M + S − 1) + `tolerance`. The measure errs only towards busy: a bubble above
    it is idle time the stages had, a stage starving while another does what is no
    micro-batch's pass (an optimizer step or a synchronisation per micro-batch, work in the
    wrong place). The reference solution's launches, made alternately under the same load,
    must pass it themselves, or the machine is too busy to measure it and the check defers;
    where the reference's bubble is above the theory's, the submission's may be as far above
    the reference's."""
    lines, data = [], {}
    for run in ctx.runs:
        timed = ctx.timings.get(run.spec.name)
        if timed is None:
            return Verdict(False, "", deferred=NOT_TIMED, later=Later.AUTOGRADER)
        if run.spec.carrier is None:
            return Verdict(False, "", deferred="the grader's hub did not carry this run (ranks on real GPUs): only its clock measures the bubble")
        own = side_bubble(timed.own, ctx.options, ctx.warmup_steps)
        if isinstance(own, str):
            return Verdict(False, f"{run.spec.name}: your pipeline's bubble could not be measured: {own}")
        reference = side_bubble(timed.reference, ctx.options, ctx.warmup_steps)
        if isinstance(reference, str):
            return Verdict(False, "", deferred=f"the reference solution's bubble could not be measured here ({reference})")
        sides = BubbleSides(own, reference, _theory(timed.own[0], ctx.options), float(ctx.options["tolerance"]))
        shape = f"{run.spec.name} ({run.spec.layout.world_size} stages, {_setting(timed.own[0], ctx.options['micro_batches_argument'])} micro-batches)"
        if sides.busy:
            return Verdict(False, "", deferred=(
                f"this machine is too busy to measure a bubble: in {shape}, the reference solution's stages were idle {_percent(sides.reference)} "
                f"of a step in its {len(sides.reference)} launch(es), where at most {sides.theory + sides.tolerance:.1%} passes (theory {sides.theory:.1%})"
            ), later=Later.QUIET_MACHINE)
        lines.append(
            f"{shape}: your stages after the first were idle {min(sides.own):.1%} of a step in your least disturbed launch (of {_percent(sides.own)}); "
            f"theory (S − 1)/(M + S − 1) = {sides.theory:.1%}, the reference solution's {min(sides.reference):.1%} here"
            + ("" if sides.passed else f"; at most {sides.limit:.1%} passes")
        )
        data[run.spec.name] = {
            "bubble": round(min(sides.own), 4), "launches": [round(b, 4) for b in sides.own], "reference": [round(b, 4) for b in sides.reference],
            "theory": round(sides.theory, 4), "limit": round(sides.limit, 4),
        }
        if not sides.passed:
            return Verdict(False, lines[-1], tuple(lines), data={"bubble": data})
    return Verdict(True, "; ".join(lines), tuple(lines), data={"bubble": data})


def bubble_doubtful(timed: TimedRuns, warmup: int, options: Mapping[str, Any]) -> bool:
    """Whether `bubble` would fail these launches though both sides were measured: more rounds
    of launches (both sides) may still pass it, or show the machine too busy."""
    own, reference = side_bubble(timed.own, options, warmup), side_bubble(timed.reference, options, warmup)
    if isinstance(own, str) or isinstance(reference, str):
        return False
    return not BubbleSides(own, reference, _theory(timed.own[0], options), float(options["tolerance"])).passed


TOLERANCES = {
    "rtol": OptionDef(float, 1e-4, minimum=0.0, help="tolerance of a send's sum, relative to the sum of its absolute values"),
    "atol": OptionDef(float, 1e-6, minimum=0.0, help="absolute tolerance of a send's sum"),
}

CHECKS = MappingProxyType(
    {
        check.id: check
        for check in (
            CheckDef("p2p_values", p2p_values, p2p_values.__doc__ or "", TOLERANCES),
            CheckDef("schedule_order", schedule_order, schedule_order.__doc__ or "", {"schedule_argument": OptionDef(str, "schedule"), **TOLERANCES}),
            CheckDef(
                "bubble", bubble, bubble.__doc__ or "",
                {
                    "tolerance": OptionDef(float, 0.1, minimum=0.0, maximum=1.0, help="how far above (S − 1)/(M + S − 1) the measured bubble may be"),
                    "micro_batches_argument": OptionDef(str, "micro_batches"),
                    "dim_argument": OptionDef(str, "dim"),
                },
                timed=True, doubtful=bubble_doubtful, core_per_rank=True,
            ),
            CheckDef("pipeline_answers", pipeline_answers, pipeline_answers.__doc__ or "", {"tolerance": OptionDef(float, 0.005, minimum=0.0)}),
        )
    }
)
