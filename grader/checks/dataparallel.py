"""Checks for nn.DataParallel: how the batch is split over the replicas, where the model
lives, what each replica logs, and (with real GPUs) step times and GPU 0's memory.

The expected split is torch.chunk's: chunks of ceil(B / n) rows, the last one smaller, and
fewer chunks (so fewer replicas) than GPUs when the batch is small — computed here, never
taken from the submission.
"""
from __future__ import annotations

import re
from types import MappingProxyType

from grader.checks import failures
from grader.checks.base import CheckContext, CheckDef, OptionDef, Verdict
from grader.checks.runs import per_run
from grader.checks.speed import measured
from grader.results.model import Later
from grader.speed.measure import charged
from grader.probe.recorder.events import Forward, ForwardOutput, Memory, Model
from grader.run.job import JobResult, RankResult


def chunk_rows(batch: int, parts: int) -> list[int]:
    """The rows of each chunk of torch.chunk(batch rows, parts)."""
    if batch <= 0:
        return []
    size = -(-batch // parts)
    return [size] * (batch // size) + ([batch % size] if batch % size else [])


def model_calls(rank: RankResult, step: int = 0) -> tuple[str | None, list[Forward]]:
    """The first model call of `step`: ('DataParallel', its replicas' forwards) when the model
    is wrapped, else (the model's class, [its own forward]). Replicas hold their parameters as
    plain attributes (torch's replicate), so they are found by depth, not by parameters."""
    calls = [f for f in rank.of_kind(Forward) if f.step == step]
    for index, event in enumerate(calls):
        if event.depth != 0 or not event.has_params:
            continue
        if event.module != "DataParallel":
            return event.module, [event]
        replicas = []  # every module call directly inside DataParallel.forward is a replica's
        for inner in calls[index + 1 :]:
            if inner.depth == 0:
                break
            if inner.depth == 1:
                replicas.append(inner)
        return "DataParallel", replicas
    return None, []


def _rows_on(call: Forward) -> tuple[str, int]:
    if not call.inputs:
        return "?", 0
    first = call.inputs[0]
    return first.device, first.shape[0] if first.shape else 0


def describe_split(pairs: list[tuple[str, int]]) -> str:
    if not pairs:
        return "no replica ran"
    return f"rows {', '.join(str(r) for _, r in pairs)} on {', '.join(d for d, _ in pairs)}"


def replica_shapes(ctx: CheckContext) -> Verdict:
    """Each replica got the rows torch.chunk gives it, on its own GPU (fewer replicas than
    GPUs when the batch is smaller than the GPU count)."""

    def judge(run: JobResult) -> tuple[bool, str]:
        batch = int(ctx.args_of(run)[ctx.options["batch_argument"]])
        gpus = ctx.gpus_of(run)
        expected = [(f"cuda:{i}", rows) for i, rows in enumerate(chunk_rows(batch, gpus))]
        wanted = f"{describe_split(expected)} (batch {batch} over {gpus} GPUs)"
        kind, calls = model_calls(run.ranks[0])
        if kind is None:
            return False, failures.explain(run) or "the model never ran"
        observed = [_rows_on(call) for call in calls]
        if kind != "DataParallel":
            return False, f"expected {wanted}, but the model ran unwrapped: {describe_split(observed)} — is it wrapped in nn.DataParallel?"
        if observed != expected:
            reason = failures.explain(run)
            return False, f"expected {wanted}, observed {describe_split(observed)}" + (f": {reason}" if reason else "")
        return True, wanted

    verdict = per_run(ctx, judge, "")
    if verdict.passed:
        splits = "; ".join(line[2:] for line in verdict.details)
        return Verdict(True, f"every batch split as torch.chunk does: {splits}", verdict.details)
    return verdict


def dp_wrapped(ctx: CheckContext) -> Verdict:
    """With several GPUs the model is wrapped in DataParallel and its master copy lives on
    the first device, cuda:0."""

    def judge(run: JobResult) -> tuple[bool, str]:
        rank = run.ranks[0]
        model = rank.first(Model)
        devices = sorted(set(model.devices)) if model else []
        if devices and devices != ["cuda:0"]:
            end = failures.explain(run)
            return False, f"the model's parameters are on {', '.join(devices)}, expected cuda:0 (DataParallel keeps the model on device_ids[0])" + (f"; {end}" if end else "")
        kind, calls = model_calls(rank)
        if kind is None:
            return False, failures.explain(run) or "the model never ran"
        if kind != "DataParallel":
            return False, f"the model ran as a plain {kind} on one device with {ctx.gpus_of(run)} GPUs visible — wrap it in nn.DataParallel when torch.cuda.device_count() > 1"
        return True, f"DataParallel over {ctx.gpus_of(run)} GPUs, model on cuda:0"

    return per_run(ctx, judge, "the model is on the first GPU and wrapped in DataParallel")


SHAPE = re.compile(
    r"[\[(]\s*(\d+(?:\s*,\s*\d+)*)\s*,?\s*[\])]"  # [22, 10], (22, 10), torch.Size([22, 10])
    r"|\b(\d+)\s*(?:[x×*]|by)\s*(\d+)\b"  # 22x10, 22 × 10, 22 by 10
    r"|\b(\d+)\s+(?:rows?|samples?|examples?|items?|inputs?)\b[\s,;]*(?:[x×*]|by|and|of|with)?\s*(\d+)\s+(?:features?|columns?|cols?|dims?|dimensions?|values?)\b",  # 22 samples x 512 features, 22 rows, 512 features
    re.IGNORECASE,
)
DEVICE = re.compile(r"cuda:\d+|\bcpu\b|device\(type='cuda', index=\d+\)")  # str(device), or its repr (a printed tuple)


def printed_devices(text: str) -> set[str]:
    """The devices a line of text names, as 'cuda:N' or 'cpu'."""
    return {re.sub(r"device\(type='cuda', index=(\d+)\)", r"cuda:\1", found) for found in DEVICE.findall(text)}


def printed_shapes(text: str) -> list[tuple[int, ...]]:
    """The shapes a line of text names, written as torch, a tuple, a list or AxB prints them, or
    in words (rows and features)."""
    shapes = []
    for match in SHAPE.finditer(text):
        numbers = match.group(1).split(",") if match.group(1) else [match.group(2), match.group(3)] if match.group(2) else [match.group(4), match.group(5)]
        shapes.append(tuple(int(n) for n in numbers))
    return shapes


def replica_log_problem(call: Forward, texts: list[str]) -> str | None:
    """Why what a replica printed inside forward does not name its device and input shape
    (None when it does). `texts` are the writes made during that call: print writes each of
    its arguments apart, so they are read together. Only this replica's device and shape may
    appear: a table of every replica's is not a log of this one."""
    device = call.inputs[0].device if call.inputs else "?"
    shape = tuple(call.inputs[0].shape) if call.inputs else ()
    said = f"{device} (shape {list(shape)})"
    if not texts:
        return f"{said}: nothing printed"
    text = " ".join(t.strip() for t in texts)
    shown = f"printed {text[:120]!r}"
    devices = printed_devices(text)
    if devices != {device}:
        others = sorted(devices - {device})
        return f"{said}: {shown} — " + (f"it names {', '.join(others)} too: print this replica's x.device only" if device in devices else "print the device x is on (x.device)")
    shapes = [s for s in printed_shapes(text) if len(s) == len(shape)]
    if shape not in shapes:
        return f"{said}: {shown} — print x.shape (this replica's rows and features)"
    if any(s != shape for s in shapes):
        return f"{said}: {shown} — it names other shapes too: print this replica's x.shape only"
    return None


def shape_log(ctx: CheckContext) -> Verdict:
    """Inside forward, every replica printed the device and the shape of its input, and no
    other (checked against the device and shape the grader saw that replica get)."""

    def judge(run: JobResult) -> tuple[bool, str]:
        rank = run.ranks[0]
        kind, calls = model_calls(rank)
        if kind is None or not calls:
            return False, failures.explain(run) or "the model never ran"
        printed = [e for e in rank.of_kind(ForwardOutput) if e.step == 0]
        problems = []
        for call in calls:
            problem = replica_log_problem(call, [e.text for e in printed if e.depth == call.depth and e.inputs == call.inputs])
            if problem:
                problems.append(problem)
        if problems:
            return False, f"no line naming the device and the shape from inside forward for {'; '.join(problems[:3])}"
        return True, f"{len(calls)} replica(s) logged their device and input shape"

    return per_run(ctx, judge, "every replica logs its device and input shape from inside forward")


def gpu_step_times(ctx: CheckContext) -> Verdict:
    """The step times of the single-GPU baseline and of DataParallel on real GPUs, by the
    grader's clock (pairs of launches of two step counts, grader/speed/measure.py; charged
    with time outside the steps beyond the reference's where the reference was launched)."""
    times = {}
    for run in ctx.runs:
        timed = ctx.timings.get(run.spec.name)
        if timed is None:
            return Verdict(False, "", deferred="this grading did not time it (the autograder does, on a node of two GPUs or more)", later=Later.GPU_NODE)
        side = charged(measured(timed.own, ctx.warmup_steps), measured(timed.reference, ctx.warmup_steps))
        if not side.timed:
            return Verdict(False, f"{run.spec.name}: your script could not be timed: {side.problem}")
        times[run.spec.name] = side
    names = list(times)
    summary = ", ".join(f"{name}: {side.describe()}" for name, side in times.items())
    if len(names) == 2:
        summary += f"; speedup {times[names[0]].typical_s / times[names[1]].typical_s:.2f}×"
    return Verdict(True, summary, data={"median_step_s": {name: side.typical_s for name, side in times.items()}, "speed": {name: side.as_data() for name, side in times.items()}})


def gpu0_memory(ctx: CheckContext) -> Verdict:
    """Under DataParallel, GPU 0 holds more memory at its peak than every other GPU: the memory
    the run added on each GPU, as NVML showed the grader (grader/run/telemetry.py); without
    NVML, the peaks torch reported inside the run."""

    def judge(run: JobResult) -> tuple[bool, str]:
        if run.telemetry and len(run.telemetry.get("gpus", [])) >= 2:
            peaks = [g["memory_added_peak_mib"] for g in run.telemetry["gpus"]]
            shown = ", ".join(f"GPU {i}: +{p:.0f} MiB" for i, p in enumerate(peaks)) + " (NVML, measured by the grader)"
        else:
            memory = run.ranks[0].first(Memory) if run.ranks else None
            if not memory or memory.peak is None or len(memory.peak) < 2:
                return False, failures.explain(run) or "no per-GPU memory was measured"
            peaks = [p / 2**20 for p in memory.peak]
            shown = ", ".join(f"GPU {i}: {p:.1f} MiB" for i, p in enumerate(peaks)) + " (torch's peak allocation)"
        if all(peaks[0] > other for other in peaks[1:]):
            return True, f"peak memory {shown}"
        return False, f"GPU 0 is not the most loaded: {shown}"

    return per_run(ctx, judge, "GPU 0 carries the most memory")


BATCH = {"batch_argument": OptionDef(str, "batch_size", help="the script's argument that sets the batch size")}

CHECKS = MappingProxyType(
    {
        check.id: check
        for check in (
            CheckDef("replica_shapes", replica_shapes, replica_shapes.__doc__ or "", BATCH),
            CheckDef("dp_wrapped", dp_wrapped, dp_wrapped.__doc__ or ""),
            CheckDef("shape_log", shape_log, shape_log.__doc__ or ""),
            CheckDef("gpu_step_times", gpu_step_times, gpu_step_times.__doc__ or "", real_gpus=2, timed=True, against_reference=False),
            CheckDef("gpu0_memory", gpu0_memory, gpu0_memory.__doc__ or "", real_gpus=2),
        )
    }
)
