"""Checks of a submission's answers file: answers whose right value the grader can work out
itself (a split table) or check for consistency (a timing table against the student's own
speedup). Free-text answers are never scored: the pipeline collects them for people."""
from __future__ import annotations

import math
from types import MappingProxyType
from typing import Any

from grader.checks.base import Answers, CheckContext, CheckDef, OptionDef, Verdict
from grader.checks.dataparallel import chunk_rows


def _problem(answers: Answers | None) -> str | None:
    if answers is None:
        return "this practical has no answers file"
    return answers.problem


def answer_number(value: Any) -> float | None:
    """A finite number, or None (other text, booleans, NaN, infinities, integers beyond a
    float). Text that reads as a number counts as one: YAML 1.1 loads `5e-3` (no dot) as the
    string '5e-3', and a person wrote a number."""
    if isinstance(value, str):
        try:
            value = float(value.strip().replace("_", ""))
        except ValueError:
            return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def split_table(ctx: CheckContext) -> Verdict:
    """The rows per GPU in the split table match how DataParallel (torch.chunk) splits the batch."""
    problem = _problem(ctx.answers)
    if problem:
        return Verdict(False, problem)
    batch, key = ctx.options["batch"], ctx.options["key"]
    wrong = []
    for gpus in ctx.options["gpus"]:
        given = ctx.answers.get(f"{key}.{gpus}")
        expected = chunk_rows(batch, gpus)
        if given is None or given == []:
            wrong.append(f"{gpus} GPUs: no answer")
        elif not isinstance(given, list) or given != expected:
            wrong.append(f"{gpus} GPUs: {given!r} is not how a batch of {batch} is split")
    if wrong:
        return Verdict(False, f"{key}: " + "; ".join(wrong))
    return Verdict(True, f"{key}: all {len(ctx.options['gpus'])} rows correct")


def timing_table(ctx: CheckContext) -> Verdict:
    """The timing table is filled with positive numbers and the speedup given matches the
    student's own total times (single / DataParallel) within the tolerance."""
    problem = _problem(ctx.answers)
    if problem:
        return Verdict(False, problem)
    key = ctx.options["key"]
    fields = ("single_gpu.step_time", "single_gpu.total_time", "data_parallel.gpus", "data_parallel.step_time", "data_parallel.total_time", "speedup")
    values = {name: answer_number(ctx.answers.get(f"{key}.{name}")) for name in fields}
    empty = [name for name, value in values.items() if value is None or value <= 0]
    if empty:
        return Verdict(False, f"{key}: fill in {', '.join(empty)} with positive numbers")
    computed = values["single_gpu.total_time"] / values["data_parallel.total_time"]
    claimed = values["speedup"]
    if abs(claimed - computed) > ctx.options["tolerance"] * computed:
        return Verdict(False, f"{key}: speedup {claimed:g} does not match your own times: {values['single_gpu.total_time']:g} / {values['data_parallel.total_time']:g} = {computed:.3g}")
    return Verdict(True, f"{key}: filled in, speedup {claimed:g} consistent with your times")


CHECKS = MappingProxyType(
    {
        check.id: check
        for check in (
            CheckDef(
                "split_table",
                split_table,
                split_table.__doc__ or "",
                {"key": OptionDef(str, "split_table"), "batch": OptionDef(int, 64, minimum=1), "gpus": OptionDef(list, [2, 3, 5])},
            ),
            CheckDef("timing_table", timing_table, timing_table.__doc__ or "", {"key": OptionDef(str, "timing"), "tolerance": OptionDef(float, 0.1, minimum=0.0)}),
        )
    }
)
