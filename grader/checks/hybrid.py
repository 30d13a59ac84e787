"""Checks for hybrid parallelism (p10): DDP across ranks, each rank's model in two stages on
two devices, micro-batches with gradient accumulation.

Expected values come from the launch layout and the arguments the grader chose (micro_batches,
world size, GPUs per node); observed values from the probe: parameter devices, forward and
backward passes, and all-reduces, in the order they happened. How often a step's gradients
were all-reduced is what the grader's hub carried (grader/traffic/training.py); the records
say in which micro-batch.
"""
from __future__ import annotations

from types import MappingProxyType
from typing import Any

from grader.checks import failures
from grader.checks.base import CheckContext, CheckDef, OptionDef, Verdict
from grader.checks.dataparallel import chunk_rows
from grader.checks.distributed import shard_problems, training_of
from grader.probe.transport.traffic import TrafficReport
from grader.results.model import Later
from grader.traffic.training import TrainingSeen, whole_syncs
from grader.checks.runs import missing, per_run
from grader.probe.recorder.events import AllReduce, Backward, Forward, Model, OptGrads
from grader.run.job import JobResult, RankResult


def stage_devices(rank: RankResult, stages: tuple[str, str]) -> list[list[str]]:
    """The devices of each stage's parameters (names `stage.…`), from the model event."""
    model = rank.first(Model)
    if not model:
        return []
    pairs = list(zip(model.names, model.devices))
    return [sorted({device for name, device in pairs if name.split(".")[0] == stage}) for stage in stages]


def expected_stages(rank: RankResult, run: JobResult, gpus: int) -> list[str]:
    if not gpus:
        return ["cpu", "cpu"]
    per_node = run.layout.ranks_per_node
    return [f"cuda:{rank.local_rank}", f"cuda:{rank.local_rank + per_node}"]


def _stages(ctx: CheckContext) -> tuple[str, str]:
    return ctx.options["stage1"], ctx.options["stage2"]


def stage_placement(ctx: CheckContext) -> Verdict:
    """Each rank's stage 1 sits on cuda:LOCAL_RANK and stage 2 on cuda:LOCAL_RANK + ranks per
    node (the CPU without GPUs), and no GPU of a node is used by two ranks."""
    stages = _stages(ctx)

    def judge(run: JobResult) -> tuple[bool, str]:
        if not any(r.first(Model) for r in run.ranks):
            return missing(run, "the model")
        gpus = ctx.gpus_of(run)
        problems, owners = [], {}
        for rank in run.ranks:
            found = stage_devices(rank, stages)
            if not found:
                problems.append(f"rank {rank.rank}: no model seen ({failures.rank_end(rank) or 'not built'})")
                continue
            if not all(found):
                problems.append(f"rank {rank.rank}: no parameters named {stages[0]}.… or {stages[1]}.… (keep the template's stage names)")
                continue
            want = expected_stages(rank, run, gpus)
            for label, devices, expected in zip(("stage 1", "stage 2"), found, want):
                if devices != [expected]:
                    problems.append(f"rank {rank.rank} (local rank {rank.local_rank}): {label} on {', '.join(devices)}, expected {expected}")
            if gpus and found[0] == found[1]:
                problems.append(f"rank {rank.rank}: both stages on {found[0][0]} — model parallelism needs two devices")
            for devices in found:
                for device in devices:
                    if device.startswith("cuda"):
                        owners.setdefault((rank.node, device), set()).add(rank.rank)
        for (node, device), ranks in sorted(owners.items()):
            if len(ranks) > 1:
                problems.append(f"ranks {', '.join(map(str, sorted(ranks)))} share {device} on node {node}")
        if problems:
            return False, "; ".join(problems[:3])
        return True, ", ".join(f"rank {r.rank}→{'+'.join(expected_stages(r, run, gpus))}" for r in run.ranks)

    return per_run(ctx, judge, "every rank's two stages are on its own two devices")


def micro_batches(ctx: CheckContext, run: JobResult) -> int:
    return int(ctx.args_of(run)[ctx.options["micro_batches_argument"]])


def passes(rank: RankResult) -> dict[int, tuple[int, int]]:
    """Forward (outermost model calls) and backward passes in each optimizer step."""
    counts: dict[int, list[int]] = {}
    for event in rank.of_kind(Forward):
        if event.depth == 0 and event.has_params:
            counts.setdefault(event.step, [0, 0])[0] += 1
    for event in rank.of_kind(Backward):
        counts.setdefault(event.step, [0, 0])[1] += 1
    return {step: (f, b) for step, (f, b) in counts.items()}


def micro_batch_sizes(rank: RankResult) -> dict[int, list[int]]:
    """The rows of each outermost model call with gradients on (a training pass), by step."""
    sizes: dict[int, list[int]] = {}
    for event in rank.of_kind(Forward):
        if event.depth == 0 and event.has_params and event.rows is not None:
            sizes.setdefault(event.step, []).append(len(event.rows))
    return sizes


def passes_per_step(ctx: CheckContext) -> Verdict:
    """Every rank runs MICRO_BATCHES forward and backward passes per optimizer step, each on a
    non-empty part of its shard, the parts together its whole shard of the grader's batch."""

    def judge(run: JobResult) -> tuple[bool, str]:
        want = micro_batches(ctx, run)
        args = ctx.args_of(run)
        steps = int(args[ctx.options["steps_argument"]])
        shard = int(args[ctx.options["batch_argument"]]) // run.layout.world_size
        chunk_pieces = len(chunk_rows(shard, want))  # what torch.chunk makes of the shard
        if not any(r.of_kind(OptGrads) for r in run.ranks):
            return missing(run, "an optimizer step")
        for rank in run.ranks:
            taken = len(rank.of_kind(OptGrads))
            if taken > steps:
                return False, f"rank {rank.rank} took {taken} optimizer steps for {steps} training steps — is optimizer.step() inside the micro-batch loop? (accumulate, then step once)"
            sizes = micro_batch_sizes(rank)
            for step, (forwards, backwards) in sorted(passes(rank).items()):
                if step >= taken:
                    continue  # after the last optimizer step
                if (forwards, backwards) != (want, want):
                    chunk = f" — torch.chunk gives {chunk_pieces} pieces of a {shard}-row shard, not {want}: use tensor_split" if forwards == backwards == chunk_pieces != want else ""
                    return False, f"rank {rank.rank}, step {step}: {forwards} forward and {backwards} backward passes, expected {want} each (micro_batches {want}){chunk}"
                rows = sizes.get(step)
                if rows and (0 in rows or sum(rows) != shard):
                    empty = f" ({rows.count(0)} empty)" if 0 in rows else ""
                    return False, f"rank {rank.rank}, step {step}: micro-batches of {rows} rows{empty}, expected {want} non-empty parts of its {shard}-row shard, e.g. tensor_split's sizes"
            if taken < steps:
                return False, f"rank {rank.rank} took {taken} of {steps} optimizer steps ({failures.rank_end(rank) or failures.explain(run) or 'stopped early'})"
        reference = ctx.references.get(run.spec.name)
        batches = [reference.workload.row_sums(step) for step in range(reference.workload.steps)] if reference is not None else []
        problems = shard_problems(run, batches, shard)
        if problems:
            return False, "the micro-batches of a step are not the rank's shard: " + "; ".join(problems[:2])
        return True, f"{want} forward and {want} backward passes per step on every rank, together its {shard}-row shard"

    return per_run(ctx, judge, "every rank runs one forward and one backward pass per micro-batch")


def allreduce_per_micro_batch(rank: RankResult, step: int) -> list[int]:
    """DDP's gradient all-reduces that followed each backward pass of `step`, in order (the
    script's own all_reduce calls, e.g. of the loss for the log, synchronise no gradient)."""
    counts: list[int] = []
    for event in rank.events:
        if event.step != step:
            continue
        if isinstance(event, Backward):
            counts.append(0)
        elif isinstance(event, AllReduce) and event.source == "ddp" and counts:
            counts[-1] += 1
    return counts


def sync_pattern(ctx: CheckContext) -> Verdict:
    """Gradients are all-reduced once per step, in the last micro-batch's backward (no_sync on
    the others): the grader's hub carried one all-reduce of each bucket per step. Syncing every
    micro-batch gives the right result but wastes M-1 all-reduces: it earns
    `every_micro_batch_credit` of the points. In which micro-batch each all-reduce came, the
    records say."""
    credit = ctx.options["every_micro_batch_credit"]
    patterns: dict[str, list[int]] = {}

    def judge(run: JobResult) -> tuple[bool, str, float]:
        pattern = allreduce_per_micro_batch(run.ranks[0], 0)
        patterns[run.spec.name] = pattern
        want = micro_batches(ctx, run)
        said = f" (your rank 0's records: all-reduces per micro-batch {pattern})" if pattern else ""
        seen = training_of(ctx, run)
        if isinstance(seen, str):
            return False, failures.explain(run) or seen, 0.0
        if not isinstance(seen, TrainingSeen):
            return False, failures.explain(run) or "the grader's hub carried no process group of your ranks", 0.0
        if seen.steps:
            per_bucket = {len(step.syncs) // max(len(step.final), 1) for step in seen.steps}
        else:  # wrong gradients (grad_sync's matter): how often a bucket of the whole model's size went
            steps = int(ctx.args_of(run)[ctx.options["steps_argument"]])
            reference = ctx.references[run.spec.name]
            count = whole_syncs(run.traffic, sum(int(v.numel()) for v in reference.workload.parameters([]).values())) if isinstance(run.traffic, TrafficReport) else 0
            if not count or count % steps:
                reason = seen.problem or "no step's gradients were all-reduced"
                return False, f"{failures.explain(run) or reason}{said}", 0.0
            per_bucket = {count // steps}
        if run.layout.world_size == 1 and per_bucket == {1}:
            return True, f"one rank: one all-reduce of its gradients per step{said}", 1.0
        if per_bucket == {1} and not seen.steps and pattern and len(pattern) == want and pattern[-1] == 0:
            # the hub counts one per step, and no step's gradient arrived: the records say where it went
            return False, f"one all-reduce per step, but no all-reduce in the last micro-batch{said}: the gradients of the micro-batches after it are never synchronised", 0.0
        if per_bucket == {1}:
            return True, f"one all-reduce of each gradient bucket per step, as the grader's hub carried them{said}", 1.0
        if per_bucket == {want}:
            return False, (
                f"an all-reduce in every micro-batch ({want} per step, as the grader's hub carried them){said}: the gradients are right, but {want - 1} of {want} are wasted"
                " — wrap all but the last micro-batch in model.no_sync(), their forward passes included (DDP decides in the forward pass whether the backward syncs)"
            ), credit
        return False, f"{sorted(per_bucket)} all-reduces of each gradient bucket per step, expected 1 (all but the last micro-batch inside no_sync){said}", 0.0

    return per_run(ctx, judge, "one all-reduce per step, in the last micro-batch", {"allreduce_per_micro_batch": patterns})


def _gpu_numbers(devices: list[str]) -> list[int]:
    """The GPUs a rank uses, each once (both stages on one GPU is one GPU)."""
    return sorted({int(d.split(":")[1]) for d in devices if d.startswith("cuda:")})


def gpu_answer(given: Any) -> Any:
    """GPUs as a person writes them: `[0, 2]`, `["cuda:0", "cuda:2"]`, `cuda:0` (one GPU),
    as sorted GPU numbers; anything else as it was given."""
    items = given if isinstance(given, list) else [given]
    numbers = []
    for item in items:
        text = item.strip().removeprefix("cuda:") if isinstance(item, str) else item
        if isinstance(text, str) and text.isdigit():
            text = int(text)
        if isinstance(text, bool) or not isinstance(text, int):
            return given
        numbers.append(text)
    return sorted(numbers)


def hybrid_answers(ctx: CheckContext) -> Verdict:
    """The answers with one right value agree with what the grader saw the program do:
    processes, each rank's GPUs and micro-batches (in the course's setup: `processes` ranks,
    micro_batches 4), and the passes per step for M = 2, 4, 8. Answers about a run this
    grading did not make are left out; with none left the check is not graded here."""
    if ctx.answers is None or ctx.answers.problem:
        return Verdict(False, ctx.answers.problem if ctx.answers else "this practical has no answers file")
    stages = _stages(ctx)
    setup = [run for run in ctx.runs if run.layout.world_size == ctx.options["processes"] and micro_batches(ctx, run) == 4]
    main = next((run for run in setup if run.spec.name == ctx.options["main_run"]), setup[0] if setup else None)
    by_m = {micro_batches(ctx, run): run for run in reversed(ctx.runs)}
    observed: dict[str, Any] = {}
    for run in [main, *by_m.values()]:
        if run is not None and (failures.damaged(run) or not any(r.first(Model) for r in run.ranks)):
            return Verdict(False, f"could not observe the program: {failures.explain(run) or 'no model was built'}")
    if main is not None:
        observed["part1.processes"] = main.layout.world_size
        observed["part1.micro_batches"] = passes(main.ranks[0]).get(0, (None, None))[0]
        for rank in main.ranks:
            observed[f"part1.gpus.rank{rank.rank}"] = _gpu_numbers([d for devices in stage_devices(rank, stages) for d in devices])
    for m in (2, 4, 8):
        if m in by_m:
            observed[f"part2.passes_per_step.m{m}"] = passes(by_m[m].ranks[0]).get(0, (None, None))[0]
    if not observed:
        return Verdict(False, "", deferred=f"the answers describe runs this grading did not make ({ctx.options['processes']} processes, micro_batches 2, 4, 8)", later=Later.AUTOGRADER)
    wrong = []
    for key, want in observed.items():
        given = ctx.answers.get(key)
        if key.startswith("part1.gpus.") and given not in (None, []):
            given = gpu_answer(given)
        if given is None or given == [] or want is None or given != want:
            wrong.append(f"{key}: you answered {given!r}, your program showed {want!r}")
    right = len(observed) - len(wrong)
    left_out = sorted({"part1.processes", "part2.passes_per_step.m2", "part2.passes_per_step.m8"} - set(observed))
    details = (f"not compared (no such run in this grading): {', '.join(left_out)}",) if left_out else ()
    if wrong:
        return Verdict(False, f"{right} of {len(observed)} agree with what your program did; " + "; ".join(wrong[:3]), details, fraction=right / len(observed))
    return Verdict(True, f"all {len(observed)} agree with what your program did", details)


STAGES = {"stage1": OptionDef(str, "stage1"), "stage2": OptionDef(str, "stage2")}
ARGUMENTS = {"micro_batches_argument": OptionDef(str, "micro_batches"), "steps_argument": OptionDef(str, "steps"), "batch_argument": OptionDef(str, "batch_size")}

CHECKS = MappingProxyType(
    {
        check.id: check
        for check in (
            CheckDef("stage_placement", stage_placement, stage_placement.__doc__ or "", STAGES),
            CheckDef("passes_per_step", passes_per_step, passes_per_step.__doc__ or "", ARGUMENTS),
            CheckDef("sync_pattern", sync_pattern, sync_pattern.__doc__ or "", {**ARGUMENTS, "every_micro_batch_credit": OptionDef(float, 0.5, minimum=0.0, maximum=1.0)}),
            CheckDef(
                "hybrid_answers",
                hybrid_answers,
                hybrid_answers.__doc__ or "",
                {**STAGES, **ARGUMENTS, "main_run": OptionDef(str, "main"), "processes": OptionDef(int, 2, minimum=1)},
            ),
        )
    }
)
