"""Answers parsed the way a person writes them (issue: checks that cannot be failed by a right
program): numbers YAML 1.1 reads as text, GPUs named `cuda:N`."""
from __future__ import annotations

import pytest

from grader.checks.answers import timing_table
from grader.checks.base import Answers, CheckContext
from grader.checks.hybrid import gpu_answer

TABLE = {"single_gpu": {"step_time": "5e-3", "total_time": 0.41}, "data_parallel": {"gpus": 2, "step_time": 0.004, "total_time": "0.55"}, "speedup": "7.45e-1"}


def table_context(table: dict) -> CheckContext:
    return CheckContext(runs=(), options={"key": "timing", "tolerance": 0.1}, args={}, answers=Answers({"timing": table}))


def test_numbers_written_as_yaml_1_1_strings_are_numbers() -> None:
    verdict = timing_table(table_context(TABLE))
    assert verdict.passed, verdict.summary


@pytest.mark.parametrize("bad", ["fast", "", "nan", "1e999", True])
def test_what_is_not_a_finite_positive_number_is_still_asked_for(bad: object) -> None:
    verdict = timing_table(table_context({**TABLE, "speedup": bad}))
    assert not verdict.passed and verdict.summary == "timing: fill in speedup with positive numbers"


@pytest.mark.parametrize("given", [[0, 2], ["cuda:0", "cuda:2"], ["2", "cuda:0"], [2, 0]])
def test_gpus_are_read_as_numbers_however_they_are_named(given: object) -> None:
    assert gpu_answer(given) == [0, 2]


def test_a_gpu_answer_that_names_no_gpu_is_left_as_written() -> None:
    assert gpu_answer(["gpu zero"]) == ["gpu zero"]
    assert gpu_answer("cuda:1") == [1]
    assert gpu_answer([True]) == [True]
