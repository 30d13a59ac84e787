"""p7's checks on made-up traffic: how a stage's order is read from the hub's times, and how
the sends of a cut are matched with the grader's micro-batches."""
from __future__ import annotations

import pytest

from grader.checks.pipeline import Crossing, Event, Message, _fraction, _stream_problem, order_problem


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
        ("EEEELLLL", "1f1b", 0, "stage 0 had 3 micro-batches in flight, at most 2 in 1F1B"),
        ("ELELELEL", "1f1b", 0, "stage 0 started a backward pass with 1 micro-batch(es) in flight: 1F1B's warm-up runs 1 forward pass(es)"),
        ("LE", "gpipe", 1, "stage 1 sent back a gradient of a micro-batch whose activation had not reached it"),
        ("EEL", "gpipe", 0, "stage 0 still held 1 micro-batch(es) at the end"),
    ],
)
def test_a_stages_order_against_its_schedule(pattern: str, schedule: str, stage: int, problem: str | None) -> None:
    found = order_problem(events(pattern), schedule, stage, 2, 4)
    assert (found is None) if problem is None else (found is not None and found.startswith(problem)), found


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
