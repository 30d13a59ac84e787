"""Checks for data-parallel training under a launcher: who each rank is, where it computes,
what share of the batch it takes, and whether gradients and parameters stay in step.

Expected values come from what the grader chose (the layout of the launch, the arguments,
the seed) and from the reference the grader computed itself. Observed values come from the
probe's recordings inside each rank — which the submission can write — and, in a run with the
grader's witness as its last rank (grader/probe/witness.py), from what the witness saw, which
it cannot: there, gradients and parameters pass only when the witness received the full-batch
gradient, and records that claim what the witness did not see fail the check, saying so.
"""
from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, Mapping, Sequence

from grader.checks import failures
from grader.checks.base import CheckContext, CheckDef, OptionDef, Verdict
from grader.checks.runs import missing, per_run
from grader.checks.numeric import Difference, Named, compare, named, scale
from grader.probe.events import AllReduce, Ddp, DestroyPg, EndState, Forward, Globals, InitPg, Model, OptGrads, Optimizer
from grader.probe.messages import WitnessReport
from grader.probe.witness import shard_rows
from grader.run.job import JobResult, RankResult


@dataclass(frozen=True)
class Trajectory:
    """Single-process full-batch training as the grader computed it, step by step.

    A practical may give several acceptable trajectories for one run (e.g. with and without
    the samples an uneven split leaves over); the first is the one feedback refers to."""

    initial: Mapping[str, Sequence[float]]
    grads: Sequence[Mapping[str, Sequence[float]]]  # before optimizer step i
    params: Sequence[Mapping[str, Sequence[float]]]  # after optimizer step i
    samples: int  # how many samples of the global batch a full step uses
    batches: Sequence[Sequence[float]] = ()  # each step's global batch, a sum per row (what the recorder's `rows` holds)


def _yours(run: JobResult, plural: str, singular: str) -> str:
    """'all 4 ranks <plural>', or with the grader's witness among them 'your 3 ranks <plural>'
    ('your rank <singular>'; 'the rank <singular>' alone)."""
    count = len(run.ranks)
    if count == 1:
        return f"{'your' if run.spec.witness is not None else 'the'} rank {singular}"
    return f"{'your' if run.spec.witness is not None else 'all'} {count} ranks {plural}"


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
        if run.spec.witness is not None and not run.witness_stage and not failures.explain(run):
            world = run.layout.world_size
            return False, f"your ranks' records say they started a process group of {world}; the grader's witness (rank {world - 1}) found none to join"
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
    """What is wrong with the rows the ranks fed, step by step: rows not of the grader's batch,
    a row fed twice, a row two ranks fed, more or fewer rows than a shard. Any split into equal
    disjoint shards is right; in a run with the grader's witness, its rank keeps the rows the
    split rank 0's first pass showed gives it, which the others must leave to it."""
    world = run.layout.world_size
    owners: dict[int, dict[int, str]] = {}
    if run.spec.witness is not None:
        witness = run.witness if isinstance(run.witness, WitnessReport) else None
        owners = {
            step: dict.fromkeys(shard_rows(witness.layout_at(step) if witness else "contiguous", len(batch), world, world - 1), f"the grader's witness (rank {world - 1})")
            for step, batch in enumerate(batches)
        }
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


def batch_shard(ctx: CheckContext) -> Verdict:
    """Every rank feeds batch_size // world_size samples of the grader's global batch per step
    to the model, and no sample is fed by two ranks."""
    def judge(run: JobResult) -> tuple[bool, str]:
        batch = int(ctx.args_of(run)[ctx.options["batch_argument"]])
        world = run.layout.world_size
        want = batch // world
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
        refs: Sequence[Trajectory] = ctx.references.get(run.spec.name, ())
        batches = refs[0].batches if refs else ()
        problems = problems or shard_problems(run, batches, want)
        if problems:
            return False, "; ".join(problems[:3])
        left = batch - want * world
        dropped = f"; {left} left over and dropped" if left else ""
        disjoint = ", each row of the grader's batch fed by one rank" if batches and any(fed_rows(r) for r in run.ranks) else ""
        return True, f"{world} × {want} rows{dropped}{disjoint}"

    return per_run(ctx, judge, "each rank takes an equal share of the global batch")


# -------------------------------------------------------- gradients, params
def gradient_steps(rank: RankResult) -> list[Named]:
    """The gradients before each optimizer step, by parameter name."""
    return [named(e.names, e.grads) for e in sorted(rank.of_kind(OptGrads), key=lambda e: e.step)]


def parameter_steps(rank: RankResult) -> list[Named]:
    """The parameters after each optimizer step, by name."""
    return [named(e.names, e.values) for e in sorted(rank.of_kind(Optimizer), key=lambda e: e.step)]


def gradient_allreduces(rank: RankResult) -> list[AllReduce]:
    """The all-reduces of DDP's gradient buckets (not the script's own calls: a loss
    all-reduced for the log synchronises no gradient)."""
    return [e for e in rank.of_kind(AllReduce) if e.source == "ddp"]


def allreduce_pattern(rank: RankResult, steps: int) -> list[int]:
    """DDP's gradient all-reduces in each of the first `steps` steps."""
    counts = Counter(e.step for e in gradient_allreduces(rank))
    return [counts.get(step, 0) for step in range(steps)]


def closest(observed: Named, refs: Sequence[Trajectory], pick: Callable[[Trajectory], Named], rtol: float, atol: float) -> Difference:
    """The comparison with the first reference `observed` matches, else with the first one."""
    first = None
    for ref in refs:
        diff = compare(observed, pick(ref), rtol, atol)
        if diff.ok:
            return diff
        first = first or diff
    assert first is not None
    return first


def _start_matches(run: JobResult, ref: Trajectory, rtol: float, atol: float) -> str | None:
    """Why the model's initial parameters differ from the reference's, if they do."""
    for rank in run.ranks:
        model = rank.first(Model)
        if model and model.values is not None:
            diff = compare(named(model.names, model.values), ref.initial, rtol, atol)
            if not diff.ok:
                return f"the model starts from other weights than the reference ({diff.describe()}): keep the template's model, seed and data"
            return None
    return None


def witness_of(run: JobResult) -> WitnessReport | str | None:
    """What the run's witness saw: its report, or a sentence on why it saw nothing usable;
    None when the run had no witness."""
    if run.spec.witness is None:
        return None
    rank = run.layout.world_size - 1
    seen = run.witness
    if seen is None or isinstance(seen, str):
        return f"the grader's witness (rank {rank}) saw nothing: {seen or 'it sent no report'}"
    if seen.error:
        return f"the grader's witness (rank {rank}) stopped: {seen.error}"
    return seen


def witness_failure(run: JobResult, seen: str) -> str:
    """The line for a run whose witness saw nothing usable (`seen`, from witness_of): when it was
    stopped before it could say why, the ranks' ends (a crash, a TODO) explain more."""
    stopped = run.witness is None or isinstance(run.witness, str)
    return (failures.explain(run) if stopped else None) or seen


def _claimed(rank: RankResult, steps: int) -> str:
    """What a rank's own records say of its all-reduces, for a verdict that disagrees with them."""
    pattern = allreduce_pattern(rank, steps) if steps else []
    return f"your rank {rank.rank}'s records say all-reduce calls per step: {pattern}" if any(pattern) else f"your rank {rank.rank}'s records show no all-reduce"


def witnessed_grads(run: JobResult, refs: Sequence[Trajectory], batch: int, rtol: float, atol: float) -> tuple[bool, str] | None:
    """The witness's verdict on the gradients of a run (None: the run has no witness): the
    all-reduces of every backward pass delivered the full-batch gradient to it, and the
    submission's records agree with it on how many there were."""
    seen = witness_of(run)
    if seen is None:
        return None
    claimed = gradient_steps(run.ranks[0])
    steps = len(claimed)
    if isinstance(seen, str):
        return False, witness_failure(run, f"{seen} ({_claimed(run.ranks[0], steps)})")
    rank = run.layout.world_size - 1
    for step, grads in enumerate(seen.grads):
        diff = closest(named(seen.names, grads), refs, lambda r: r.grads[step], rtol, atol)
        if not diff.ok:
            record = closest(claimed[step], refs, lambda r: r.grads[step], rtol, atol) if step < steps else None
            claim = "; your processes' records say the full-batch gradient, the grader saw otherwise" if record is not None and record.ok else ""
            rows = {f.inputs[0].shape[0] for r in run.ranks for f in model_forwards(r) if f.inputs[0].shape}
            whole = f" — your ranks each fed the whole batch to the model ({rows.pop()} rows), so what they sent is not their shard's gradient" if len(rows) == 1 and next(iter(rows)) == batch else ""
            return False, f"step {step}: the all-reduces of backward delivered to the grader's witness (rank {rank}) are not the full-batch gradient ({diff.describe()}){claim}{whole}"
    per_step = [sum(passes) for passes in seen.allreduces]
    if not seen.grads or not all(per_step):
        return False, f"the grader's witness (rank {rank}) took part in no all-reduce in some step (per step: {per_step})"
    recorded = allreduce_pattern(run.ranks[0], len(per_step))
    if recorded != per_step:
        return False, f"your processes' records say all-reduce calls per step: {recorded}; the grader's witness (rank {rank}) took part in {per_step}"
    return True, ""


def gradient_hint(ctx: CheckContext, run: JobResult, grads: Named, ref: Trajectory) -> str:
    """' — they are 1/2 of it: …' when a rank's first-step gradient is a known wrong multiple
    of the full-batch gradient (averaged twice, summed, micro-batch losses not divided), else ''."""
    factor = scale(grads, ref.grads[0])
    world = run.layout.world_size
    pieces = int(ctx.args_of(run).get(ctx.options["micro_batches_argument"], 0) or 0) if ctx.options["micro_batches_argument"] else 0
    if factor is None:
        return ""
    if world > 1 and abs(factor - 1 / world) < 0.05 / world:
        return f" — they are 1/{world} of it: averaged twice (DDP already averages; do not divide the loss or the gradients by the world size)"
    if world > 1 and abs(factor - world) < 0.05 * world:
        return f" — they are {world}× it: summed instead of averaged"
    if pieces > 1 and abs(factor - pieces) < 0.1 * pieces:
        return f" — they are about {pieces}× it: each micro-batch's loss must be divided so that the {pieces} micro-batches add up to one mean"
    if pieces > 1 and abs(factor - 1) < 0.1:
        return " — close but not equal: with micro-batches of unequal size a mean per micro-batch divided by their number is not the mean over the samples; sum the loss and divide by the rank's sample count"
    if factor >= 1.9 and abs(factor - round(factor)) < 0.05 * factor:
        return f" — they are {round(factor)}× it: is the loss summed over the samples instead of averaged (reduction='sum' without dividing)?"
    return ""


def grad_sync(ctx: CheckContext) -> Verdict:
    """After backward, every rank holds the same gradients, equal to the single-process
    full-batch gradient on the grader's data; the all-reduce pattern is reported."""
    rtol, atol = ctx.options["rtol"], ctx.options["atol"]
    patterns: dict[str, list[int]] = {}

    def judge(run: JobResult) -> tuple[bool, str]:
        refs: Sequence[Trajectory] = ctx.references[run.spec.name]
        ref = refs[0]
        witnessed = witnessed_grads(run, refs, int(ctx.args_of(run).get("batch_size", 0)), rtol, atol)
        grads = {r.rank: gradient_steps(r) for r in run.ranks}
        if witnessed is not None and not witnessed[0]:
            own = grads[run.ranks[0].rank]
            recorded = closest(own[0], refs, lambda r: r.grads[0], rtol, atol) if own else None
            hint = gradient_hint(ctx, run, own[0], ref) if recorded is not None and not recorded.ok else ""
            return False, witnessed[1] + (f" (your rank 0's own gradients{hint})" if hint else "")
        if not all(grads.values()):
            return missing(run, "an optimizer step")
        pattern = allreduce_pattern(run.ranks[0], len(grads[0]))
        patterns[run.spec.name] = pattern
        calls = f"all-reduce calls per step: {pattern}" + (" (the grader's witness took part in each)" if witnessed else "")
        start = _start_matches(run, ref, rtol, atol)
        if start:
            return False, start
        for rank in run.ranks[1:]:
            for step, (mine, first) in enumerate(zip(grads[rank.rank], grads[0])):
                diff = compare(mine, first, rtol, atol)
                if not diff.ok:
                    hint = ""
                    if not any(pattern):
                        wrapped = rank.first(Ddp) is not None or run.ranks[0].first(Ddp) is not None
                        hint = " — DDP made no all-reduce: is every backward pass inside model.no_sync()?" if wrapped else " — no all-reduce at all: is the model wrapped in DistributedDataParallel?"
                    return False, f"step {step}: gradients differ between rank 0 and rank {rank.rank} ({diff.describe()}); {calls}{hint}"
        for step, observed in enumerate(grads[0][: len(ref.grads)]):
            diff = closest(observed, refs, lambda r, step=step: r.grads[step], rtol, atol)
            if diff.ok:
                continue
            if step == 0:
                return False, f"gradients are the same on every rank but not the full-batch gradient ({diff.describe()}){gradient_hint(ctx, run, observed, ref)}; {calls}"
            return False, f"step {step}: gradients are the same on every rank but not the full-batch gradient ({diff.describe()}) — step 0's were: are the gradients zeroed in every step (optimizer.zero_grad() inside the loop)?; {calls}"
        unwrapped = [r.rank for r in run.ranks if r.first(Ddp) is None]
        if run.layout.world_size > 1 and unwrapped:
            return False, (
                f"the gradients are right, but rank {unwrapped[0]} built no DistributedDataParallel: wrap the model in DDP, as the TODO asks "
                f"(DDP all-reduces bucket by bucket while backward runs; an average after backward waits for all of it); {calls}"
            )
        return True, f"identical on all ranks, equal to the full-batch gradient in every step; {calls}"

    return per_run(ctx, judge, "gradients are synchronised and equal to single-process training", {"allreduce_per_step": patterns})


def params_sync(ctx: CheckContext) -> Verdict:
    """After all steps, the parameters are identical on every rank and equal to those of
    single-process full-batch training."""
    rtol, atol = ctx.options["rtol"], ctx.options["atol"]

    def judge(run: JobResult) -> tuple[bool, str]:
        steps = int(ctx.args_of(run)[ctx.options["steps_argument"]])
        refs: Sequence[Trajectory] = ctx.references[run.spec.name]
        seen = witness_of(run)
        if isinstance(seen, str):
            return False, witness_failure(run, seen)
        if seen is not None:
            diff = closest(named(seen.names, seen.params), refs, lambda r: r.params[steps - 1], rtol, atol) if len(seen.step_ends) == steps else None
            if diff is None or not diff.ok:
                what = f"took {len(seen.step_ends)} of {steps} steps" if diff is None else f"differ from single-process training ({diff.describe()})"
                return False, f"the parameters of the grader's witness (rank {run.layout.world_size - 1}), trained by the all-reduces of your ranks, {what}"
        params = {r.rank: parameter_steps(r) for r in run.ranks}
        if not all(params.values()):
            return missing(run, "an optimizer step")
        short = [rank for rank, seen in params.items() if len(seen) < steps]
        if short:
            rank = next(r for r in run.ranks if r.rank == short[0])
            return False, f"rank {rank.rank} took {len(params[rank.rank])} of {steps} optimizer steps ({failures.rank_end(rank) or failures.explain(run) or 'stopped early'})"
        last = steps - 1
        for rank in run.ranks[1:]:
            diff = compare(params[rank.rank][last], params[0][last], rtol, atol)
            if not diff.ok:
                return False, f"after {steps} steps the parameters differ between rank 0 and rank {rank.rank} ({diff.describe()})"
        diff = closest(params[0][last], refs, lambda r: r.params[last], rtol, atol)
        if not diff.ok:
            return False, f"after {steps} steps the parameters are the same on every rank but differ from single-process training ({diff.describe()})"
        return True, f"identical after {steps} steps and equal to single-process training" + (", on the grader's witness too" if seen is not None else "")

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
        CheckDef("batch_shard", batch_shard, batch_shard.__doc__ or "", {"batch_argument": OptionDef(str, "batch_size")}),
        CheckDef("grad_sync", grad_sync, grad_sync.__doc__ or "", {**TOLERANCES, "micro_batches_argument": OptionDef(str, "", help="the argument that sets micro-batches, if any")}),
        CheckDef("params_sync", params_sync, params_sync.__doc__ or "", {**TOLERANCES, "steps_argument": OptionDef(str, "steps")}),
        CheckDef("clean_exit", clean_exit, clean_exit.__doc__ or ""),
    )
})
