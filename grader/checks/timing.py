"""Step times as the grader measures them: between consecutive optimizer steps of a rank (the
probe synchronises CUDA first), the slowest rank counting for each step."""
from __future__ import annotations

import statistics

from grader.run.job import JobResult, RankResult


def rank_step_seconds(rank: RankResult) -> list[float]:
    """Duration of each optimizer step after the first (the first pays for warm-up)."""
    ends = [e["t"] for e in sorted(rank.of_kind("opt_params"), key=lambda e: e.get("step", 0)) if "t" in e]
    return [later - earlier for earlier, later in zip(ends, ends[1:])]


def step_seconds(run: JobResult) -> list[float]:
    """Per step, the slowest rank's duration (a step ends for everyone when the last rank ends it)."""
    per_rank = [rank_step_seconds(rank) for rank in run.ranks]
    steps = min((len(d) for d in per_rank), default=0)
    return [max(d[i] for d in per_rank) for i in range(steps)]


def summary(run: JobResult) -> dict | None:
    """Median and minimum step time of a run, or None when no step could be timed."""
    seconds = step_seconds(run)
    if not seconds:
        return None
    return {"median_step_s": statistics.median(seconds), "min_step_s": min(seconds), "steps": len(seconds), "wall_s": round(run.wall_s, 4)}
