"""p7's checks on made-up traffic: which sends are activations and gradients, how a stage's
order is read from the hub's times (a receive posted ahead of time included), how the sends
of a cut are matched with the grader's micro-batches, and how the bubble is measured."""
from __future__ import annotations

import pytest

from grader.checks.pipeline import BubbleSides, Crossing, Event, Message, _fraction, _stream_problem, in_flight, messages, order_problem, stage_events, step_windows, theoretical_bubble
from grader.probe.transport.traffic import Carried, Part, TrafficReport
from grader.probe.transport.wire import TensorMeta


def events(pattern: str) -> list[Event]:
    """'EEL…': a micro-batch entering (E) or leaving (L) a stage, one per tick."""
    return [Event(float(t), +1 if c == "E" else -1) for t, c in enumerate(pattern)]


@pytest.mark.parametrize(
    ("pattern", "schedule", "stage", "problem"),
    [
        ("EEEELLLL" * 2, "gpipe", 0, None),
        ("EELELELL", "1f1b", 0, None),  # warm-up 1, steady state, cool-down
        ("ELELELEL", "1f1b", 1, None),  # the last stage: one in flight
        ("EELELELL", "gpipe", 0, "stage 0 started a forward pass after a backward pass of the same step (with 1 micro-batch(es) still in flight)"),
        ("EEEELLLL", "1f1b", 0, "stage 0 had 4 micro-batches in flight, at most 2 in 1F1B"),
        ("ELELELEL", "1f1b", 0, None),  # the first stage's backward sends nothing: a gradient delivered early may have been received ahead (irecv)
        ("ELEELELL", "1f1b", 1, "stage 1 had 2 micro-batches in flight, at most 1 in 1F1B"),
        ("LE", "gpipe", 1, "stage 1 sent back a gradient of a micro-batch whose activation had not reached it"),
        ("EEL", "gpipe", 0, "stage 0 still held 1 micro-batch(es) at the end"),
    ],
)
def test_a_stages_order_against_its_schedule(pattern: str, schedule: str, stage: int, problem: str | None) -> None:
    found = order_problem(events(pattern), events(pattern), schedule, stage, 2, 4)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem)), found


def test_a_middle_stages_warm_up_is_judged() -> None:
    """Stage 1 of 3 holds up to 2 in 1F1B: its first backward before its second forward is a
    warm-up of one pass too few (its backward's gradient send shows when it ran at the latest)."""
    assert order_problem(events("ELELELEL"), events("ELELELEL"), "1f1b", 1, 3, 4).startswith("stage 1 started a backward pass with 1 micro-batch(es) in flight: 1F1B's warm-up runs 1 forward pass(es)")
    assert order_problem(events("EELELELL"), events("EELELELL"), "1f1b", 1, 3, 4) is None


def send(source: int, target: int, sent: float, received: float) -> Message:
    return Message(source, target, sent, received, 8, 0.0)


# 1F1B over two stages whose last posts each activation's receive ahead of time (irecv): a1,
# a2 and a3 are delivered as stage 0 sends them, before stage 1 sent the gradient before them
PREFETCHED = [
    send(0, 1, 0, 0), send(0, 1, 1, 1), send(1, 0, 2, 3), send(0, 1, 4, 4),
    send(1, 0, 5, 6), send(0, 1, 7, 7), send(1, 0, 8, 9), send(1, 0, 10, 11),
]


def test_a_receive_posted_ahead_of_time_counts_by_what_the_stage_sent() -> None:
    """Reached, stage 1 held two micro-batches (a delivery is early when the receive was posted
    early); done, one: its forward is not seen apart from its backward, so 1F1B passes."""
    reached, done = stage_events(PREFETCHED, 1, 2), stage_events(PREFETCHED, 1, 2, done=True)
    assert (in_flight(reached), in_flight(done)) == (2, 1)
    assert order_problem(reached, done, "1f1b", 1, 2, 4) is None
    assert order_problem(stage_events(PREFETCHED, 0, 2), stage_events(PREFETCHED, 0, 2, done=True), "1f1b", 0, 2, 4) is None
    assert order_problem(reached, done, "gpipe", 1, 2, 4).startswith("stage 1 started a forward pass after a backward pass")


def test_a_gradient_sent_before_its_activation_was_delivered_is_named() -> None:
    fabricated = [send(1, 0, 0, 2), send(0, 1, 1, 1), *PREFETCHED[1:]]
    problem = order_problem(stage_events(fabricated, 1, 2), stage_events(fabricated, 1, 2, done=True), "1f1b", 1, 2, 4)
    assert problem == "stage 1 sent back a gradient of a micro-batch whose activation had not reached it"


def test_a_middle_stage_holds_what_it_sent_on_and_has_not_had_a_gradient_for() -> None:
    """Stage 1 of 3 (at most 2 in flight): it sent three activations on before the first
    gradient reached it; delivered early or not, that is three."""
    stream = [send(0, 1, 0, 0), send(1, 2, 1, 1), send(0, 1, 2, 2), send(1, 2, 3, 3), send(0, 1, 4, 4), send(1, 2, 5, 5), send(2, 1, 6, 7), send(1, 0, 8, 9)]
    stream += [send(0, 1, 10, 10), send(1, 2, 11, 11), *(m for t in (12, 15, 18) for m in (send(2, 1, t, t + 1), send(1, 0, t + 2, t + 2)))]
    done = stage_events(stream, 1, 3, done=True)
    assert in_flight(done) == 3 and order_problem(stage_events(stream, 1, 3), done, "1f1b", 1, 3, 4).startswith("stage 1 had 3 micro-batches in flight, at most 2")


def carried_send(meta: TensorMeta, source: int = 0) -> Carried:
    return Carried("0", -1, "send", "", 1 - source, 1.0, (Part(source, 0.5, (meta,), "", (2.0,)),), None)


def test_an_activation_is_any_float_tensor_of_rows_times_dim_elements_whatever_its_shape() -> None:
    sends = [TensorMeta("float32", (8, 16)), TensorMeta("float32", (128,)), TensorMeta("float64", (1, 7, 16)), TensorMeta("float32", (16, 1)), TensorMeta("int64", (8, 16)), TensorMeta("float32", ()), TensorMeta("float32", (0, 16))]
    report = TrafficReport(2, (), tuple(carried_send(meta) for meta in sends), (), 0, 0)
    assert [m.rows for m in messages(report, 16)] == [8, 8, 7]


def test_sends_match_the_micro_batches_of_each_step_in_any_order_and_a_missing_one_is_named() -> None:
    steps = ((Crossing(2, 1.0, 4.0), Crossing(1, -1.0, 2.0)), (Crossing(2, 3.0, 6.0), Crossing(1, 0.5, 1.0)))
    sent = [Message(0, 1, float(t), float(t), rows, total) for t, (rows, total) in enumerate([(1, -1.0), (2, 1.0), (2, 3.0), (1, 0.5)])]
    assert _stream_problem(sent, steps, "activation", 0, 1, 1e-4, 1e-6) is None
    step, problem = _stream_problem(sent[1:], steps, "activation", 0, 1, 1e-4, 1e-6) or (None, "")
    assert step == 0 and problem == "step 0: after the activations of micro-batches [0], stage 0 sent stage 1 one that is none of the step's (2 rows, sum 3): micro-batch 1 (1 rows) never went"
    wrong = [Message(0, 1, 0.0, 0.0, 2, 1.1)]
    assert _stream_problem(wrong, steps, "activation", 0, 1, 1e-4, 1e-6) == (0, "step 0: the first activation stage 0 sent stage 1 (2 rows, sum 1.1) is not the grader's for any micro-batch of the step (the grader's sums: 2 rows: 1, 1 rows: -1)")
    assert _stream_problem(sent[:3], steps, "activation", 0, 1, 1e-4, 1e-6) == (1, "stage 0 sent stage 1 the activations of 1 step(s) and 1 of step 1's 2 micro-batches, expected 2 steps")


@pytest.mark.parametrize(("given", "value"), [(0.2, 0.2), ("0.2", 0.2), ("1/5", 0.2), (" 3 / 11 ", 3 / 11), ("1/0", None), ("a/5", None), (None, None), (True, None)])
def test_answers_as_decimals_or_fractions(given: object, value: float | None) -> None:
    assert _fraction(given) == value


def passes(schedule: str, stages: int, micro_batches: int, stage: int) -> list[tuple[str, int]]:
    """A stage's passes in the order its schedule runs them: ("F", i) and ("B", i)."""
    if schedule == "gpipe":
        return [("F", i) for i in range(micro_batches)] + [("B", i) for i in range(micro_batches)]
    warmup = min(stages - stage - 1, micro_batches)
    order = [("F", i) for i in range(warmup)]
    for i in range(micro_batches - warmup):
        order += [("F", warmup + i), ("B", i)]
    return order + [("B", i) for i in range(micro_batches - warmup, micro_batches)]


def hub_record(schedule: str, stages: int, micro_batches: int, steps: int, pause: dict[tuple[int, str, int], float] | None = None) -> list[Message]:
    """The sends the hub would record of a pipeline whose passes take one tick each and whose
    sends are free: each stage runs its passes in order, a blocking recv before each pass that
    needs a tensor (delivered when both the send and the recv are there), then sends what the
    pass made. `pause`: (stage, "F" or "B", micro-batch) -> ticks the stage waits before that pass."""
    clock, record = [0.0] * stages, []
    for _ in range(steps):
        queues = [passes(schedule, stages, micro_batches, s) for s in range(stages)]
        sent: dict[tuple[str, int, int], float] = {}  # (kind, from, micro-batch) -> when
        while any(queues):
            for s, queue in enumerate(queues):
                while queue:
                    kind, i = queue[0]
                    source = s - 1 if kind == "F" else s + 1
                    if 0 <= source < stages:
                        if (kind, source, i) not in sent:
                            break
                        clock[s] = max(clock[s], sent[kind, source, i])
                        record.append(Message(source, s, sent[kind, source, i], clock[s], 1, 0.0))
                    clock[s] += (pause or {}).get((s, kind, i), 0.0) + 1.0
                    if 0 <= (s + 1 if kind == "F" else s - 1) < stages:
                        sent[kind, s, i] = clock[s]
                    queue.pop(0)
    return sorted(record, key=lambda m: m.sent)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize(("stages", "micro_batches"), [(2, 4), (2, 8), (3, 6), (4, 8)])
def test_an_ideal_pipeline_has_the_theorys_bubble(schedule: str, stages: int, micro_batches: int) -> None:
    windows = step_windows(hub_record(schedule, stages, micro_batches, 3), stages, micro_batches)
    assert not isinstance(windows, str)
    assert len(windows) == 2  # the last step has no next step to end its window
    for window in windows:
        assert window.span == 2 * (micro_batches + stages - 1)
        assert [t.stage for t in window.stages] == list(range(1, stages))
        assert all(t.busy == 2 * micro_batches and t.idle == 2 * (stages - 1) for t in window.stages)
        assert window.bubble == pytest.approx(theoretical_bubble(stages, micro_batches))
    assert theoretical_bubble(2, 4) == 0.2


def test_gpipe_of_two_stages_and_four_micro_batches_idles_a_fifth() -> None:
    (first, second) = step_windows(hub_record("gpipe", 2, 4, 3), 2, 4)  # type: ignore[misc]
    assert (first.start, first.end, first.bubble) == (1.0, 11.0, 0.2)
    assert (second.start, second.end, second.bubble) == (11.0, 21.0, 0.2)


@pytest.mark.parametrize(
    ("schedule", "pause", "bubble"),
    [
        # the first stage waits 2 ticks before each backward pass: the second starves (GPipe: the step is 8 ticks
        # longer, the second stage's 8 of work the same; 1F1B: 7, the first stage no longer waits for its last gradient)
        ("gpipe", {(0, "B", i): 2.0 for i in range(4)}, 10 / 18),
        ("1f1b", {(0, "B", i): 2.0 for i in range(4)}, 9 / 17),
        # the first stage waits 2 ticks before its third forward pass (1F1B: the second stage has nothing to do then)
        ("1f1b", {(0, "F", 2): 2.0}, 4 / 12),
        # a wait while the last stage holds micro-batches whose backward GPipe puts later counts as busy:
        # the measure errs towards busy (the span grows by 2 ticks, the idle time not)
        ("gpipe", {(0, "F", 2): 2.0}, 2 / 12),
    ],
)
def test_a_stage_that_waits_shows_in_the_bubble_where_the_next_one_holds_nothing(schedule: str, pause: dict, bubble: float) -> None:
    windows = step_windows(hub_record(schedule, 2, 4, 3, pause), 2, 4)
    assert not isinstance(windows, str)
    assert [w.bubble for w in windows] == pytest.approx([bubble] * 2)


def test_a_window_needs_a_whole_step_and_the_next_ones_first_activation() -> None:
    record = hub_record("1f1b", 2, 4, 3)
    assert step_windows(record, 1, 4) == "one stage sends nothing: a bubble needs two stages or more"
    assert step_windows([m for m in record if m.sent < 9], 2, 4) == "stage 0 sent stage 1 4 activation(s): a step's window needs the 4 of a step and the first of the next"
    assert step_windows([m for m in record if m.source == 0], 2, 4) == "stage 1 sent nothing on: no micro-batch's work can be seen to end there"


def test_the_bubble_is_left_to_a_machine_with_a_core_per_stage_and_one_for_the_hub() -> None:
    from grader.course import load_course, load_practical
    from grader.grade.options import GradeOptions
    from grader.grade.plan import deferred_checks, plan_runs
    from helpers import ROOT

    practical = load_practical(load_course(ROOT), "p7")
    options = GradeOptions(solutions=ROOT / "solutions")
    checks = practical.assignment.checks
    assert {check: (verdict.deferred, verdict.later.value) for check, verdict in deferred_checks(practical, checks, 0, options, cpus=2).items()} == {
        "bubble": ("needs ≥ 3 CPU cores, one per rank and one for the grader's hub, so that they work at once (this machine has 2); its points are left to a grading on a larger machine", "graded on a machine with more CPU cores")
    }
    graded = tuple(c for c in checks if c.id != "bubble")
    assert "bubble" not in [r.name for r in plan_runs(practical.assignment, graded, options, 0)]  # its run is not launched
    assert deferred_checks(practical, checks, 0, options, cpus=3) == {}


def test_the_least_disturbed_launch_passes_within_the_tolerance_of_the_theory_or_of_the_reference_under_load() -> None:
    quiet = BubbleSides([0.45, 0.29], [0.21, 0.26], 0.2, 0.1)
    assert quiet.limit == pytest.approx(0.31) and quiet.passed and not quiet.busy
    assert not BubbleSides([0.32, 0.4], [0.2], 0.2, 0.1).passed
    loaded = BubbleSides([0.37], [0.28, 0.4], 0.2, 0.1)  # the reference's stages idle more than the theory says: a load on both sides
    assert loaded.limit == pytest.approx(0.38) and loaded.passed and not loaded.busy
    assert BubbleSides([0.2], [0.31, 0.45], 0.2, 0.1).busy  # the reference itself fails: deferred, the machine is too busy


def record_of(reference, delivered: dict | None = None) -> list[Message]:
    """The sends of a two-stage pipeline whose values are `reference`'s, in step order, each
    step's activations before its gradients; `delivered` marks sends the hub replaced:
    (step, forward, micro-batch) -> the values it delivered."""
    stream, clock = [], 0.0
    for step in range(reference.steps):
        for forward, table in ((True, reference.activations), (False, reference.gradients)):
            for micro, crossing in enumerate(table[step][0]):
                clock += 1
                given = (delivered or {}).get((step, forward, micro))
                stream.append(Message(0 if forward else 1, 1 if forward else 0, clock, clock + 0.5, crossing.rows, crossing.total, crossing.values, given))
    return stream


def test_a_stage_must_compute_on_what_the_hub_delivered_and_one_that_relays_or_replays_is_named() -> None:
    """The hub delivered one activation of each step to stage 1 and one gradient of each step
    but the last to stage 0, with values of its own. An honest pipeline's sends are the
    grader's training with every delivery; a stage 1 whose sends follow from the activations
    that were sent (computed elsewhere, or ahead) is named, even where it computed honestly in
    one step; sends with wrong values are no reading at all."""
    import torch

    from grader.checks.pipeline import Delivered, read_deliveries, replayed
    from grader.practicals.p7 import PipelineSettings, pipeline_training

    reference = pipeline_training(PipelineSettings(seed=3, batch_size=16, micro_batches=4, dim=8, layers=2, steps=3, lr=0.1, stages=2))
    shape = reference.activations[0][0][0].values.shape
    forward = [Delivered(step, 0, True, (step + 2) % 4, torch.rand(shape, dtype=torch.float64) * 2 - 1) for step in range(3)]
    backward = [Delivered(step, 0, False, step, torch.randn(shape, dtype=torch.float64) * 0.01) for step in range(2)]
    hub = {(d.step, d.forward, d.micro_batch): d.values for d in forward + backward}

    def pipeline(used: list) -> list[Message]:
        order = sorted(used, key=lambda d: (d.step, not d.forward))
        return record_of(reference.retrain(tuple(order)), hub)

    honest = read_deliveries(reference, pipeline(forward + backward), 1e-6, 1e-9)
    assert honest is not None and len(honest.used) == 5 and not honest.ignored and replayed(honest) is None
    for used in (backward, [*backward, forward[1]]):  # stage 1 never computes on what it gets; or only in step 1
        relayed = replayed(read_deliveries(reference, pipeline(used), 1e-6, 1e-9))
        assert relayed is not None and relayed.startswith("stage(s) 1 sent what follows from what was sent to them, not from what they received"), relayed
        assert "step 0's micro-batch 2 activation to stage 1" in relayed and "step 2's micro-batch 0 activation to stage 1" in relayed
    wrong = [Message(m.source, m.target, m.sent, m.received, m.rows, 2 * m.total, 2 * m.data, m.delivered) for m in pipeline(forward + backward)]
    assert read_deliveries(reference, wrong, 1e-6, 1e-9) is None
