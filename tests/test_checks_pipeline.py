"""p7's checks on made-up traffic: which sends are activations and gradients, how a stage's
order is read from the hub's times (a receive posted ahead of time included), and how the sends
of a cut are matched with the grader's micro-batches."""
from __future__ import annotations

import pytest

from grader.checks.pipeline import Crossing, Event, Message, _fraction, _stream_problem, in_flight, messages, order_problem, stage_events
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
        ("ELELELEL", "1f1b", 0, "stage 0 started a backward pass with 1 micro-batch(es) in flight: 1F1B's warm-up runs 1 forward pass(es)"),
        ("LE", "gpipe", 1, "stage 1 sent back a gradient of a micro-batch whose activation had not reached it"),
        ("EEL", "gpipe", 0, "stage 0 still held 1 micro-batch(es) at the end"),
    ],
)
def test_a_stages_order_against_its_schedule(pattern: str, schedule: str, stage: int, problem: str | None) -> None:
    found = order_problem(events(pattern), events(pattern), schedule, stage, 2, 4)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem)), found


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
