"""Checks any practical can use without code of its own."""
from __future__ import annotations

from types import MappingProxyType
from typing import Any

from grader.checks import failures
from grader.checks.base import CheckContext, CheckDef, OptionDef, Verdict
from grader.checks.runs import per_run
from grader.probe.recorder.events import Globals
from grader.run.job import JobResult, RankResult


def _end_value(rank: RankResult, name: str) -> Any:
    for event in reversed(rank.of_kind(Globals)):
        if name in event.values:
            return event.values[name]
    return None


def variable_matches(ctx: CheckContext) -> Verdict:
    """At the end of the script, the variable named by the `variable` option holds, on every
    rank, the value the practical's reference computed for the run (numbers within tolerance)."""
    name = ctx.options["variable"]

    def judge(run: JobResult) -> tuple[bool, str]:
        want = ctx.references[run.spec.name][name]
        for rank in run.ranks:
            have = _end_value(rank, name)
            if have is None:
                return False, failures.explain(run) or f"rank {rank.rank}: no variable `{name}` at the end of the script"
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (have, want))
            ok = abs(have - want) <= ctx.options["atol"] + ctx.options["rtol"] * abs(want) if numbers else have == want
            if not ok:
                return False, f"rank {rank.rank}: {name} = {have!r}, expected {want!r}"
        return True, f"{name} = {want!r} on every rank"

    return per_run(ctx, judge, f"`{name}` holds the expected value")


CHECKS = MappingProxyType(
    {
        "variable_matches": CheckDef(
            "variable_matches",
            variable_matches,
            variable_matches.__doc__ or "",
            {"variable": OptionDef(str, "result"), "rtol": OptionDef(float, 1e-5, minimum=0.0), "atol": OptionDef(float, 1e-6, minimum=0.0)},
        )
    }
)
