"""Checks for data-parallel training under a launcher: who each rank is, where it computes,
what share of the batch it takes, and whether gradients and parameters stay in step.

Expected values come from what the grader chose (the layout of the launch, the arguments,
the seed) and from its own computation of the training (grader/practicals/reference.py).
Every rank runs the submission; the grader's hub carries their process groups
(grader/probe/transport) and reports what each rank sent, which the submission cannot write.
Verdicts about communication rest on that traffic, as grader/traffic/training.py reads it:
which all-reduces delivered each step's full-batch gradient, and whether each rank sent its
own shard's. The probe's records inside each rank (which the submission can write) name the
rows, the lines and the variables that explain a verdict, and choose what the grader tries;
where a check rests on them alone, its docstring says so.
"""
from __future__ import annotations

import bisect
from collections import Counter
from types import MappingProxyType
from typing import Any, Sequence

from grader.checks import failures
from grader.checks.base import CheckContext, CheckDef, OptionDef, Verdict
from grader.checks.numeric import Named, compare, named
from grader.checks.runs import missing, per_run
from grader.probe.recorder.events import AllReduce, Ddp, DestroyPg, EndState, Forward, Globals, InitPg, Model, OptGrads, Optimizer
from grader.probe.transport.traffic import TrafficReport
from grader.run.job import JobResult, RankResult
from grader.traffic.training import Claims, TrainingSeen


def _yours(run: JobResult, plural: str, singular: str) -> str:
    """'all 4 ranks <plural>' ('the rank <singular>' alone)."""
    count = len(run.ranks)
    return f"the rank {singular}" if count == 1 else f"all {count} ranks {plural}"


def group_unseen(run: JobResult) -> str | None:
    """Why the grader's hub did not see every rank of a carried run join one default process
    group of the launch's size (None: it did, or the run was not carried)."""
    if run.traffic is None:
        return None
    if not isinstance(run.traffic, TrafficReport):
        return f"the grader's hub, which carries your ranks' process groups, sent no report: {run.traffic}"
    world = run.layout.world_size
    default = next((group for group in run.traffic.groups if group.name == "0"), None)
    if default is None:
        return f"your ranks' records say they started a process group of {world}; the grader's hub saw none start"
    absent = sorted(set(range(world)) - set(default.joined))
    if absent:
        return f"rank {absent[0]} never joined the process group (the grader's hub saw ranks {', '.join(map(str, sorted(default.joined)))} join)"
    return None


def setup_values(rank: RankResult) -> dict:
    """The script's setup variables as first seen (at DDP construction or first forward)."""
    snapshots = rank.of_kind(Globals)
    for when in ("ddp", "first_forward", "end"):
        for snap in snapshots:
            if snap.when == when and snap.values:
                return snap.values
    return {}


# ---------------------------------------------------------------- rank setup
def rank_setup(ctx: CheckContext) -> Verdict:
    """Each rank's process group (nccl with GPUs), and the script's own rank / local rank /
    world size variables, agree with what the launcher gave that rank."""
    names = {role: ctx.options[f"{role}_variable"] for role in ("rank", "local_rank", "world_size")}

    def judge(run: JobResult) -> tuple[bool, str]:
        if not any(r.first(InitPg) for r in run.ranks):
            return missing(run, "a process group")
        unseen = group_unseen(run)
        if unseen:
            return False, failures.explain(run) or unseen
        stopped = failures.explain(run)
        if stopped and any(not r.of_kind(Globals) for r in run.ranks):
            return False, stopped  # a rank that stopped before its variables could be read
        problems = []
        for rank in run.ranks:
            expected = {"rank": rank.rank, "local_rank": rank.local_rank, "world_size": run.layout.world_size}
            group = rank.first(InitPg)
            if group is None:
                problems.append(f"rank {rank.rank} never initialised the process group ({failures.rank_end(rank) or 'no call seen'})")
                continue
            if ctx.gpus_of(run) and "nccl" not in group.requested.lower() and group.requested != "None":
                problems.append(f"rank {rank.rank}: init_process_group(backend={group.requested!r}) with GPUs, expected 'nccl' (nccl when CUDA is available, gloo otherwise)")
            if not ctx.gpus_of(run) and "nccl" in group.requested.lower() and "cpu" not in group.requested.lower():
                problems.append(f"rank {rank.rank}: init_process_group(backend={group.requested!r}) without GPUs: NCCL carries CUDA tensors only, expected 'gloo' (nccl when CUDA is available, gloo otherwise)")
            if (group.rank, group.world_size) != (rank.rank, run.layout.world_size):
                problems.append(
                    f"rank {rank.rank}: the process group says rank {group.rank} of {group.world_size}, "
                    f"expected rank {rank.rank} of {run.layout.world_size} (let init_process_group read RANK and WORLD_SIZE)"
                )
            values = setup_values(rank)
            for role, name in names.items():
                if name not in values:
                    problems.append(f"rank {rank.rank}: no variable `{name}` in the script (keep the template's names)")
                elif values[name] != expected[role]:
                    hint = {
                        "local_rank": " (LOCAL_RANK: numbering starts again at 0 on every node)",
                        "rank": " (RANK: the global number of the process)",
                        "world_size": " (WORLD_SIZE: every process of every node)",
                    }[role]
                    problems.append(f"rank {rank.rank} (node {rank.node}): {name} = {values[name]!r}, expected {expected[role]}{hint}")
        if problems:
            return False, "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
        return True, _yours(run, "match the launcher", "matches the launcher")

    return per_run(ctx, judge, "every rank knows its rank, local rank and world size")


# ------------------------------------------------------------ device mapping
def expected_device(rank: RankResult, gpus_per_node: int) -> str:
    return f"cuda:{rank.local_rank}" if gpus_per_node > 0 else "cpu"


def model_devices(rank: RankResult) -> list[str]:
    """The devices of the model's parameters (the first model seen)."""
    model = rank.first(Model)
    return sorted(set(model.devices)) if model else []


def model_forwards(rank: RankResult) -> list[Forward]:
    """The outermost calls of the model that had tensor inputs."""
    return [f for f in rank.of_kind(Forward) if f.role == "model" and f.inputs]


def device_mapping(ctx: CheckContext) -> Verdict:
    """Each rank's model and inputs live on its own device: cuda:LOCAL_RANK with GPUs, else cpu."""

    def judge(run: JobResult) -> tuple[bool, str]:
        if not any(r.first(Model) for r in run.ranks):
            return missing(run, "the model")
        problems = []
        used: dict[str, list[int]] = {}
        gpus = ctx.gpus_of(run)
        for rank in run.ranks:
            want = expected_device(rank, gpus)
            devices = model_devices(rank)
            if not devices:
                end = failures.rank_end(rank) or "not built"
                problems.append(f"rank {rank.rank} (node {rank.node}): no model seen ({end})")
                continue
            if devices != [want]:
                hint = " — the GPU follows LOCAL_RANK, not RANK" if want.startswith("cuda") and f"cuda:{rank.rank}" in devices else ""
                problems.append(f"rank {rank.rank} (node {rank.node}, local rank {rank.local_rank}): model on {', '.join(devices)}, expected {want}{hint}")
            for device in devices:
                used.setdefault(f"node {rank.node} {device}", []).append(rank.rank)
            inputs = {f.inputs[0].device for f in model_forwards(rank)}
            if inputs and inputs != {want}:
                problems.append(f"rank {rank.rank}: inputs on {', '.join(sorted(inputs))}, expected {want}")
            wrapped = rank.first(Ddp)
            if wrapped and wrapped.device_ids not in (None, (str(rank.local_rank),), (want,)):
                ids = list(wrapped.device_ids or ())
                problems.append(f"rank {rank.rank}: DDP(device_ids={ids}), expected [{rank.local_rank}]" if want != "cpu" else f"rank {rank.rank}: DDP(device_ids={ids}) on the CPU, expected None")
            elif wrapped and want != "cpu" and wrapped.current_device not in (None, want):
                problems.append(
                    f"rank {rank.rank}: the current CUDA device was {wrapped.current_device} when DDP was built, expected {want} — "
                    "make the rank's GPU current with torch.cuda.set_device(device) (NCCL's collectives and the CUDA defaults use it)"
                )
        if gpus:
            for where, ranks in sorted(used.items()):
                if len(ranks) > 1:
                    problems.append(f"ranks {', '.join(map(str, ranks))} share {where}")
        if problems:
            return False, "; ".join(problems[:3])
        return True, ", ".join(f"rank {r.rank}→{expected_device(r, gpus)}" for r in run.ranks)

    return per_run(ctx, judge, "every rank computes on its own device")


# --------------------------------------------------------------- batch shard
ROW_TOLERANCE = 1e-9  # relative: a row's sum in float64 is the grader's up to summation order


def fed_rows(rank: RankResult) -> dict[int, list[float]]:
    """The rows (each summed, the recorder's `rows`) a rank fed its model while training, by step."""
    by_step: dict[int, list[float]] = {}
    for call in model_forwards(rank):
        if call.rows is not None:
            by_step.setdefault(call.step, []).extend(call.rows)
    return by_step


def row_indices(sums: Sequence[float], batch: Sequence[float]) -> list[int | None]:
    """Where each row sum is in `batch` (the grader's sums of a global batch), None where it is
    none of its rows."""
    order = sorted(range(len(batch)), key=batch.__getitem__)
    keys = [batch[i] for i in order]
    found: list[int | None] = []
    for value in sums:
        at = bisect.bisect_left(keys, value)
        near = [j for j in (at - 1, at) if 0 <= j < len(keys) and abs(keys[j] - value) <= ROW_TOLERANCE * (1 + abs(value))]
        found.append(order[near[0]] if near else None)
    return found


def row_ranges(indices: Sequence[int], most: int = 4) -> str:
    """'0–15, 32–47' for a set of row numbers (at most `most` ranges, then '…')."""
    spans: list[list[int]] = []
    for i in sorted(set(indices)):
        if spans and spans[-1][1] == i - 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    text = ", ".join(f"{a}–{b}" if b > a else str(a) for a, b in spans[:most])
    return text + (", …" if len(spans) > most else "")


def shard_problems(run: JobResult, batches: Sequence[Sequence[float]], want: int) -> list[str]:
    """What is wrong with the rows the ranks' records say they fed, step by step: rows not of
    the grader's batch, a row fed twice, a row two ranks fed, more or fewer rows than a shard.
    Any split into equal disjoint shards is right."""
    owners: dict[int, dict[int, str]] = {}
    problems = []
    for rank in run.ranks:
        for step, sums in sorted(fed_rows(rank).items()):
            if step >= len(batches):
                continue
            where = row_indices(sums, batches[step])
            rows = [i for i in where if i is not None]
            own = f"rank {rank.rank}"
            if len(rows) < len(where):
                problems.append(f"{own} fed {len(where) - len(rows)} row(s) in step {step} that are not in the step's global batch (keep the template's get_batch)")
            elif len(set(rows)) < len(rows):
                problems.append(f"{own} fed {len(rows) - len(set(rows))} row(s) of step {step} more than once")
            elif len(rows) != want:
                whole = " — the whole batch: each rank keeps only its shard" if len(rows) == len(batches[step]) else ""
                problems.append(f"{own} fed {len(rows)} rows in step {step} (rows {row_ranges(rows)}), expected {want}{whole}")
            else:
                taken = owners.setdefault(step, {})
                shared = [i for i in rows if i in taken]
                if shared:
                    other = taken[shared[0]]
                    local = " — the shard follows RANK, not LOCAL_RANK" if rank.local_rank != rank.rank and shared == rows else ""
                    problems.append(f"{own} and {other} both fed rows {row_ranges(shared)} of step {step}{local}")
                taken.update(dict.fromkeys(rows, own))
                continue
            break
    return problems


LAYOUTS = {
    "records": "the rows your ranks' records name",
    "contiguous": "contiguous shards",
    "strided": "every world_size-th row",
}


def _split_name(layout: str) -> str:
    return LAYOUTS.get(layout, "DistributedSampler's shuffle")


def batch_shard(ctx: CheckContext) -> Verdict:
    """Every rank trains on batch_size // world_size samples of the grader's global batch per
    step, and no sample on two ranks: as what each rank all-reduced shows (its gradient is its
    own shard's). A run whose ranks all-reduced no gradient shows nothing of its shards; there
    the rows the ranks' records say they fed decide."""
    def judge(run: JobResult) -> tuple[bool, str]:
        batch = int(ctx.args_of(run)[ctx.options["batch_argument"]])
        world = run.layout.world_size
        want = batch // world
        left = batch - want * world
        dropped = f"; {left} left over and dropped" if left else ""
        seen = training_of(ctx, run)
        if isinstance(seen, TrainingSeen) and seen.steps and not seen.shards_wrong and not seen.whole_batch:
            return True, f"{world} × {want} rows{dropped}: what each rank all-reduced is its own shard's gradient ({_split_name(seen.steps[0].layout)})"
        if not any(model_forwards(r) for r in run.ranks):
            return missing(run, "a forward pass of the model")
        problems = []
        for rank in run.ranks:
            sizes = [f.inputs[0].shape[0] if f.inputs[0].shape else 0 for f in model_forwards(rank)]
            if not sizes:
                problems.append(f"rank {rank.rank} never ran the model ({failures.rank_end(rank) or 'no forward seen'})")
                continue
            wrong = sorted({s for s in sizes if s != want})
            if wrong:
                hint = " — every rank trains on the whole batch" if wrong == [batch] and world > 1 else ""
                problems.append(f"rank {rank.rank} fed {', '.join(map(str, wrong))} rows per step to the model, expected {want} (= {batch} // {world}){hint}")
        reference = ctx.references.get(run.spec.name)
        batches = [reference.workload.row_sums(step) for step in range(reference.workload.steps)] if reference is not None else []
        problems = problems or shard_problems(run, batches, want)
        if isinstance(seen, TrainingSeen) and seen.whole_batch:
            return False, "; ".join(problems[:2]) if problems else f"every rank trains on the whole batch (all {batch} rows): what each rank all-reduced is the whole batch's gradient, not its shard's"
        if isinstance(seen, TrainingSeen) and seen.shards_wrong:
            return False, "; ".join(problems[:2]) if problems else seen.problem or ""
        if problems:
            return False, "; ".join(problems[:3])
        return True, f"{world} × {want} rows{dropped}, each row of the grader's batch fed by one rank (as your ranks' records say: they all-reduced no gradient that would show it)"

    return per_run(ctx, judge, "each rank takes an equal share of the global batch")


# -------------------------------------------------------- gradients, params
def gradient_steps(rank: RankResult) -> list[Named]:
    """The gradients before each optimizer step, by parameter name."""
    return [named(e.names, e.grads) for e in sorted(rank.of_kind(OptGrads), key=lambda e: e.step)]


def parameter_steps(rank: RankResult) -> list[Named]:
    """The parameters after each optimizer step, by name."""
    return [named(e.names, e.values) for e in sorted(rank.of_kind(Optimizer), key=lambda e: e.step)]


def gradient_allreduces(rank: RankResult) -> list[AllReduce]:
    """The all-reduces of DDP's gradient buckets as a rank's records show them (not the
    script's own calls: a loss all-reduced for the log synchronises no gradient)."""
    return [e for e in rank.of_kind(AllReduce) if e.source == "ddp"]


def allreduce_pattern(rank: RankResult, steps: int) -> list[int]:
    """DDP's gradient all-reduces in each of the first `steps` steps, as a rank's records show them."""
    counts = Counter(e.step for e in gradient_allreduces(rank))
    return [counts.get(step, 0) for step in range(steps)]


def claims_of(run: JobResult, workload: Any) -> Claims:
    """What the ranks' records say that the traffic can confirm: the rows each rank fed in each
    step, and rank 0's parameters before each step after the first."""
    import torch

    rows: dict[int, dict[int, tuple[int, ...]]] = {}
    sums = {step: workload.row_sums(step) for step in range(workload.steps)}
    for rank in run.ranks:
        for step, fed in fed_rows(rank).items():
            found = row_indices(fed, sums[step]) if step in sums else []
            if found and None not in found:
                rows.setdefault(rank.rank, {})[step] = tuple(int(i) for i in found if i is not None)
    own: dict[int, dict[int, dict]] = {}
    for rank in run.ranks:
        for event in rank.of_kind(Optimizer):
            if event.values is not None and len(event.values) == len(event.names) and set(event.names) == set(workload.names):
                own.setdefault(rank.rank, {})[event.step + 1] = {name: torch.tensor(values, dtype=torch.float64) for name, values in zip(event.names, event.values)}
    return Claims(rows=rows, params=own.get(run.ranks[0].rank, {}) if run.ranks else {}, own=own)


def training_of(ctx: CheckContext, run: JobResult) -> TrainingSeen | str | None:
    """What the traffic of `run` shows of its training (grader/traffic/training.py), or why it
    shows nothing (None: the run was not carried, or has no reference)."""
    reference = ctx.references.get(run.spec.name)
    if reference is None or run.traffic is None:
        return None
    seen = reference.seen(run, lambda: claims_of(run, reference.workload), ctx.options.get("rtol", 1e-4), ctx.options.get("atol", 1e-7))
    if isinstance(seen, str):
        return f"the grader's hub, which carries your ranks' process groups, sent no report: {seen}"
    return seen


ALONE = (
    "one process, and nothing all-reduced: with nobody to synchronise with, none is needed (a program may wrap its model in DDP only "
    "for several processes); its training shows in no traffic, and its own records cannot decide a verdict, so the runs of several ranks judge it"
)


def alone(run: JobResult, seen: TrainingSeen) -> bool:
    """A run of one process that ended well and whose process group carried no all-reduce: it is not judged on
    synchronising (nobody to synchronise with), and its training, which no traffic shows, is
    judged by the runs of several ranks (a check passes only where every run does)."""
    return run.layout.world_size == 1 and not seen.reductions and failures.explain(run) is None and all(rank.exit_code == 0 for rank in run.ranks)


def scale_hint(scale: float, world: int, pieces: int) -> str:
    """' — 1/2 of it: averaged twice …' for a known wrong multiple of the full-batch gradient."""
    if world > 1 and abs(scale - 1 / world) < 0.05 / world:
        return f" — 1/{world} of it: averaged twice (DDP already averages; do not divide the loss or the gradients by the world size)"
    if world > 1 and abs(scale - world) < 0.05 * world:
        return f" — {world}× it: summed instead of averaged"
    if pieces > 1 and abs(scale - pieces) < 0.1 * pieces:
        return f" — {pieces}× it: each micro-batch's loss must be divided so that the {pieces} micro-batches add up to one mean"
    if scale >= 1.9 and abs(scale - round(scale)) < 0.05 * scale:
        return f" — {round(scale)}× it: is the loss summed over the samples instead of averaged (reduction='sum' without dividing)?"
    return ""


def final_parameters(run: JobResult, reference: Any, seen: TrainingSeen, rtol: float, atol: float) -> str | None:
    """Why the parameters after the last step, as every rank's records show them, are not
    single-process training's after the steps the traffic showed (None: they are). The update
    of the last step is the one thing no traffic shows: nothing is all-reduced after it."""
    steps = reference.workload.steps
    want = {name: value.tolist() for name, value in reference.workload.parameters([tuple(sorted(r for shard in s.rows for r in shard)) for s in seen.steps]).items()}
    for rank in run.ranks:
        params = parameter_steps(rank)
        if len(params) < steps:
            return f"rank {rank.rank} took {len(params)} of {steps} optimizer steps ({failures.rank_end(rank) or failures.explain(run) or 'stopped early'})"
        if not params[steps - 1]:
            return f"rank {rank.rank}'s records hold no parameters after its last step, where the last update shows"
        diff = compare(params[steps - 1], want, max([rtol, *(step.rtol for step in seen.steps)]), atol)
        if not diff.ok:
            return f"after {steps} steps rank {rank.rank}'s parameters (as its records show them) differ from single-process training ({diff.describe()})"
    return None


def _micro_batch_hint(run: JobResult, workload: Any, pieces: int, rtol: float) -> str:
    """Where step 0 delivered the mean over micro-batches of each one's mean loss gradient
    (each micro-batch's mean loss divided by their number), which differs from the shard's
    mean where the micro-batches differ in size: the sentence that says so; else ""."""
    import torch

    from grader.traffic.shards import shard_rows
    from grader.traffic.training import delivers

    if pieces < 2 or not isinstance(run.traffic, TrafficReport):
        return ""
    theta = workload.parameters([])
    per_rank = []
    for rank in range(workload.world):
        rows = torch.tensor(shard_rows("contiguous", workload.batch_size, workload.world, rank))
        grads = [workload.gradient(theta, 0, part.tolist()) for part in rows.tensor_split(pieces) if len(part)]
        per_rank.append({name: sum(g[name] for g in grads) / pieces for name in grads[0]})
    weighted = {name: sum(g[name] for g in per_rank) / len(per_rank) for name in per_rank[0]}
    if not delivers(run.traffic, weighted, rtol):
        return ""
    return (" — they delivered the average of each micro-batch's mean loss gradient: micro-batches of different sizes then weigh their rows"
            " unequally; sum the loss and divide by the rank's sample count (or weigh each micro-batch's mean by its rows)")


def _unsynced_hint(run: JobResult) -> str:
    """Why no all-reduce carried gradients, as the records tell."""
    wrapped = any(rank.first(Ddp) is not None for rank in run.ranks)
    if not wrapped:
        return " — no all-reduce at all: is the model wrapped in DistributedDataParallel? (without DistributedDataParallel each rank trains its own copy)"
    return " — DDP made no all-reduce: is every backward pass inside model.no_sync()?"


def grad_sync(ctx: CheckContext) -> Verdict:
    """In every step, your ranks' all-reduces (as the grader's hub carried them) delivered the
    full-batch gradient at the step's parameters, each rank having sent its own shard's
    gradient, through the DistributedDataParallel of the model. Any scale passes where the
    update undoes it (a summed loss divided after the all-reduce); the all-reduces per step are
    reported. A run of one process that all-reduces nothing is not judged on it (`alone`)."""
    rtol = ctx.options["rtol"]
    patterns: dict[str, list[int]] = {}

    def judge(run: JobResult) -> tuple[bool, str]:
        seen = training_of(ctx, run)
        if seen is None:
            return missing(run, "the traffic of a carried process group")
        if isinstance(seen, str):
            return False, failures.explain(run) or seen
        if alone(run, seen):
            return True, ALONE
        patterns[run.spec.name] = seen.syncs_per_step()
        calls = f"all-reduces per step: {seen.syncs_per_step()}"
        world = run.layout.world_size
        pieces = int(ctx.args_of(run).get(ctx.options["micro_batches_argument"], 0) or 0) if ctx.options["micro_batches_argument"] else 0
        reference = ctx.references[run.spec.name]
        for step in seen.steps:
            if abs(step.scale - 1) <= 10 * rtol:
                continue
            later = seen.steps[step.step + 1] if step.step + 1 < len(seen.steps) else None
            undone = later.at_reference if later is not None else (len(seen.steps) == reference.workload.steps and final_parameters(run, reference, seen, ctx.options["rtol"], ctx.options["atol"]) is None)
            if not undone:
                return False, f"step {step.step}: your ranks' all-reduces delivered {step.scale:.4g} × the full-batch gradient, and the update did not undo it{scale_hint(step.scale, world, pieces)}"
        if seen.problem:
            hint = _unsynced_hint(run) if not seen.reductions else ""
            if not seen.steps and seen.reductions and not seen.shards_wrong:
                hint = _micro_batch_hint(run, reference.workload, pieces, rtol)
            if seen.steps and not seen.shards_wrong:
                taken = {rank.rank: len(parameter_steps(rank)) for rank in run.ranks}
                fewer = [f"rank {r} took {n}" for r, n in taken.items() if n < max(taken.values())]
                hint = (f" — step 0's were, and your ranks' records show unequal optimizer steps ({', '.join(fewer[:3])} of {max(taken.values())}): every rank must update its model in every step"
                        if fewer else " — step 0's were: are the gradients zeroed in every step (optimizer.zero_grad() inside the loop)?")
            return False, (failures.explain(run) or seen.problem + hint) + (f"; {calls}" if seen.steps else "")
        if seen.cut:  # a checked run keeps 64 MiB, hundreds of times what the practical's training sends
            return False, f"{seen.cut}: what did your ranks send beside the gradients?; {calls}"
        if not seen.started and world > 1:
            return False, (
                "the gradients are right, but no DistributedDataParallel of the model was built (rank 0 never broadcast its initial parameters, "
                "as DDP does when it is built): wrap the model in DDP, as the TODO asks (DDP all-reduces bucket by bucket while backward runs; "
                f"an average after backward waits for all of it); {calls}"
            )
        also = f"; the other operations carried: {', '.join(seen.others[:4])}" if seen.others else ""
        whose = "each rank's the whole batch's (batch_shard's concern: the training is the same)" if seen.whole_batch else "each rank's its own shard's"
        return True, f"every step's all-reduces delivered the full-batch gradient, {whose}; {calls}{also}"

    return per_run(ctx, judge, "gradients are synchronised and equal to single-process training", {"allreduce_per_step": patterns})


def params_sync(ctx: CheckContext) -> Verdict:
    """Every step trained from single-process training's parameters (what the ranks
    all-reduced in it shows, on every rank), and after the last step the parameters are
    single-process training's on every rank (its update, which nothing all-reduced follows,
    as the ranks' records show it)."""
    rtol, atol = ctx.options["rtol"], ctx.options["atol"]

    def judge(run: JobResult) -> tuple[bool, str]:
        steps = int(ctx.args_of(run)[ctx.options["steps_argument"]])
        seen = training_of(ctx, run)
        if seen is None:
            return missing(run, "the traffic of a carried process group")
        if isinstance(seen, str):
            return False, failures.explain(run) or seen
        if alone(run, seen):
            return True, ALONE
        off = next((step for step in seen.steps if not step.at_reference), None)
        if off is not None:
            return False, (
                f"step {off.step}'s gradients were computed at other parameters than single-process training's after step {off.step - 1} "
                f"(as what your ranks all-reduced shows): the update of step {off.step - 1} differs"
            )
        if seen.problem:
            return False, failures.explain(run) or f"{seen.problem}: the parameters your ranks trained from cannot be followed from there"
        if seen.cut:
            return False, f"{seen.cut}: the parameters your ranks trained from cannot be followed from there"
        wrong = final_parameters(run, ctx.references[run.spec.name], seen, rtol, atol)
        if wrong:
            return False, wrong
        return True, f"every step trained from single-process training's parameters, and after {steps} steps every rank's are single-process training's"

    return per_run(ctx, judge, "parameters stay identical across ranks and match single-process training")


# ---------------------------------------------------------------- clean exit
def clean_exit(ctx: CheckContext) -> Verdict:
    """Every rank destroys the process group and exits with status 0; nothing is left behind."""

    def judge(run: JobResult) -> tuple[bool, str]:
        reason = failures.explain(run)
        if reason:
            return False, reason
        problems = []
        for rank in run.ranks:
            end = rank.first(EndState)
            destroyed = any(e.default_group for e in rank.of_kind(DestroyPg))
            if not destroyed or (end and end.pg_initialized):
                problems.append(f"rank {rank.rank} never called dist.destroy_process_group()")
        if run.leftovers:
            problems.append(f"{run.leftovers} process(es) were still running after the ranks exited and were killed")
        if problems:
            return False, "; ".join(problems[:3])
        return True, _yours(run, "destroyed the process group and exited 0", "destroyed the process group and exited 0")

    return per_run(ctx, judge, "every rank cleans up and exits 0")


TOLERANCES = {
    "rtol": OptionDef(float, 1e-4, minimum=0.0, help="relative tolerance of the comparison"),
    "atol": OptionDef(float, 1e-6, minimum=0.0, help="absolute tolerance of the comparison"),
}
VARIABLES = {f"{role}_variable": OptionDef(str, role, help=f"the script's name for its {role}") for role in ("rank", "local_rank", "world_size")}

CHECKS = MappingProxyType({
    check.id: check
    for check in (
        CheckDef("rank_setup", rank_setup, rank_setup.__doc__ or "", VARIABLES),
        CheckDef("device_mapping", device_mapping, device_mapping.__doc__ or ""),
        CheckDef("batch_shard", batch_shard, batch_shard.__doc__ or "", {"batch_argument": OptionDef(str, "batch_size")}, whole_run=True),
        CheckDef("grad_sync", grad_sync, grad_sync.__doc__ or "", {**TOLERANCES, "micro_batches_argument": OptionDef(str, "", help="the argument that sets micro-batches, if any")}, whole_run=True),
        CheckDef("params_sync", params_sync, params_sync.__doc__ or "", {**TOLERANCES, "steps_argument": OptionDef(str, "steps")}, whole_run=True),
        CheckDef("clean_exit", clean_exit, clean_exit.__doc__ or ""),
    )
})
