"""The terminal report of `python -m grader observe`: recorded events in, text out (pure).

Per process (a rank, or a plain `python script.py`): who it is (rank, local rank, world size,
device), its process group, its models, each forward's input shapes and devices (DataParallel
replicas and the stages of a model spread over devices included), backward passes, all-reduces
and bytes per step, step times, where the time went, peak memory per device, and one line for
each thing it could not see. What the processes recorded is theirs to forge: every line of the
report goes out through grader.results.escape.terminal_line (visible, one line, capped).
"""
from __future__ import annotations

import shlex
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Iterable

from grader.observe.records import ObservedProcess, Timed
from grader.probe.recorder.events import AllReduce, Backward, CommHook, Ddp, Exit, Forward, InitPg, Memory, Model, Note, Optimizer, Raised, TensorInfo, Truncated
from grader.results.escape import terminal_line

PERFETTO = "https://ui.perfetto.dev"
LABEL_WIDTH = 13
MAX_SIGNATURES = 5
MAX_LISTED_STEPS = 8


@dataclass(frozen=True)
class RunSummary:
    """What the report says about the run as a whole."""

    command: list[str]
    exit_status: int
    virtual_gpus: int = 0
    timeline: Path | None = None
    timeline_missing: str = ""
    trace: Path | None = None
    start_error: str = ""
    pipeline: str = ""  # the pipeline diagram's line ("" where the run is no pipeline)


# ------------------------------------------------------------------ numbers
def size_text(count: int) -> str:
    """Bytes for people: 812 B, 8.5 KiB, 3.0 MiB, 1.2 GiB."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def duration_text(seconds: float) -> str:
    """0.42 ms, 12.1 ms, 3.25 s."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    milliseconds = seconds * 1000
    return f"{milliseconds:.2f} ms" if milliseconds < 1 else f"{milliseconds:.1f} ms"


def busy_seconds(spans: Iterable[Timed]) -> float:
    """The length of the union of spans (overlaps counted once)."""
    total, end = 0.0, None
    for start, stop in sorted((s.start, s.end) for s in spans):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def _device_key(device: str) -> tuple[str, int]:
    kind, _, index = device.partition(":")
    return kind, int(index) if index.isdigit() else -1


def _shape_text(inputs: tuple[TensorInfo, ...]) -> str:
    if not inputs:
        return "no tensor inputs"
    return "; ".join(f"{list(i.shape)} on {i.device}" for i in inputs)


def _counted(items: Iterable[Hashable]) -> list[tuple[Any, int]]:
    """Each distinct item with how often it came, in order of first appearance."""
    counts: dict[Hashable, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return list(counts.items())


def plural(count: int, noun: str) -> str:
    """"1 call", "2 calls", "3 passes"."""
    if count == 1:
        return f"{count} {noun}"
    return f"{count} {noun}es" if noun.endswith("s") else f"{count} {noun}s"


def _times(count: int) -> str:
    return plural(count, "call")


# ------------------------------------------------------------------ sections
def device_text(process: ObservedProcess) -> str:
    """The devices of the process's model parameters (what it trains on)."""
    for model in process.record.of_kind(Model):
        if model.devices:
            return ", ".join(sorted(set(model.devices), key=_device_key))
    for ddp in process.record.of_kind(Ddp):
        if ddp.param_devices:
            return ", ".join(sorted(ddp.param_devices, key=_device_key))
    return "not seen (no model with parameters was called)"


def title(process: ObservedProcess) -> str:
    """The block's first line: "rank 0 · local rank 0 · world size 2 · device cuda:0 · pid 4242"."""
    if process.rank is None:
        return f"process {process.pid} (not launched by torchrun) · device {device_text(process)}"
    parts = [f"rank {process.rank}"]
    if process.local_rank is not None:
        parts.append(f"local rank {process.local_rank}")
    if process.world_size is not None:
        parts.append(f"world size {process.world_size}")
    parts += [f"device {device_text(process)}", f"pid {process.pid}"]
    return " · ".join(parts)


def forward_lines(process: ObservedProcess) -> list[str]:
    """Each model's calls by input signature, then replicas, DataParallel's splits, stages."""
    forwards = [f.event for f in process.of_kind(Forward) if f.event.role is not None]
    if not forwards:
        return ["no module with parameters was called"]
    lines = []
    models = [f for f in forwards if f.role == "model"]
    for label, _ in _counted(f.label for f in models):
        signatures = _counted(_shape_text(f.inputs) for f in models if f.label == label)
        lines += [f"{label} ({_times(n)}): {s}" for s, n in signatures[:MAX_SIGNATURES]]
        if len(signatures) > MAX_SIGNATURES:
            lines.append(f"… and {len(signatures) - MAX_SIGNATURES} other input shapes")
    replicas = sorted((f for f in forwards if f.role == "replica"), key=lambda f: _device_key(_first_device(f)))
    for (label, signature), count in _counted((f.label, _shape_text(f.inputs)) for f in replicas):
        lines.append(f"  replica {label} ({_times(count)}): {signature}")
    lines += ["  " + line for line in split_lines(process)]
    stages = [f for f in forwards if f.role == "stage"]
    for label, _ in _counted(f.label for f in stages):
        group = [f for f in stages if f.label == label]
        where = f"{group[0].module} on {', '.join(group[0].devices or ())}"
        for signature, count in _counted(_shape_text(f.inputs) for f in group)[:MAX_SIGNATURES]:
            lines.append(f"  stage {label} ({where}, {_times(count)}): {signature}")
    return lines


def _first_device(event: Forward) -> str:
    return event.inputs[0].device if event.inputs else "?"


def split_lines(process: ObservedProcess) -> list[str]:
    """How DataParallel split each batch: "split of [64, 8] on cuda:0: 13, 13, 13, 13, 12 rows
    on cuda:0, cuda:1, cuda:2, cuda:3, cuda:4 (2 calls)"."""
    calls = {f.event.call: f.event for f in process.of_kind(Forward, role="model")}
    by_call: dict[int | None, list[Forward]] = {}
    for replica in process.of_kind(Forward, role="replica"):
        if replica.event.inputs:
            by_call.setdefault(replica.event.call, []).append(replica.event)
    splits = []
    for call, replicas in by_call.items():
        replicas.sort(key=lambda r: _device_key(_first_device(r)))
        rows = ", ".join(str(r.inputs[0].shape[0]) if r.inputs[0].shape else "1" for r in replicas)
        devices = ", ".join(_first_device(r) for r in replicas)
        whole = calls[call].inputs if call in calls else ()
        splits.append(f"split of {_shape_text(whole[:1]) if whole else '? on ?'}: {rows} rows on {devices}")
    return [f"{split} ({_times(count)})" for split, count in _counted(splits)]


def _steps_of(process: ObservedProcess) -> int:
    return len(process.of_kind(Optimizer))


def by_step(events: Iterable[Timed]) -> dict[int, list[Timed]]:
    """Events grouped by the optimizer steps finished before them."""
    grouped: dict[int, list[Timed]] = {}
    for event in events:
        grouped.setdefault(event.event.step, []).append(event)
    return grouped


def _bytes(events: Iterable[Timed]) -> int:
    return sum(e.event.bytes for e in events if isinstance(e.event, AllReduce))


def per_step_text(events: list[Timed], steps: int, with_bytes: bool = True) -> str:
    """"1 per step, 8.5 KiB per step", or step by step where the steps differ."""
    def amount(group: list[Timed]) -> str:
        return f"{len(group)} ({size_text(_bytes(group))})" if with_bytes else str(len(group))

    if steps == 0:
        return f"{amount(events)} in all (no optimizer step: not split by step)"
    grouped = by_step(events)
    per_step = [grouped.get(s, []) for s in range(steps)]
    after = [e for e in events if e.event.step >= steps]
    parts = []
    keys = {(len(g), _bytes(g)) for g in per_step}
    if len(keys) == 1 and not (after and keys == {(0, 0)}):
        count, total = keys.pop()
        parts.append(f"{count} per step" + (f", {size_text(total)} per step" if with_bytes else ""))
    elif len(keys) > 1:
        listed = [f"step {s}: {amount(g)}" for s, g in enumerate(per_step[:MAX_LISTED_STEPS])]
        more = f"; … {steps - MAX_LISTED_STEPS} more steps" if steps > MAX_LISTED_STEPS else ""
        parts.append("; ".join(listed) + more)
    if after:
        parts.append(f"after the last step: {amount(after)}")
    return "; ".join(parts)


def sync_pattern(process: ObservedProcess, steps: int) -> str:
    """In which backward passes of a step DDP's buckets were all-reduced."""
    passes_by_step = by_step(process.of_kind(Backward))
    buckets_by_step = by_step(process.of_kind(AllReduce, source="ddp"))
    patterns = []
    for step in range(max(steps, 1)):
        passes = sorted(passes_by_step.get(step, []), key=lambda b: b.start)
        buckets = buckets_by_step.get(step, [])
        inside = sorted({i + 1 for i, b in enumerate(passes) for a in buckets if b.start <= a.start <= b.end})
        patterns.append((tuple(inside), len(passes)))
    if len(set(patterns)) != 1:
        return "in different backward passes from step to step"
    inside, passes = patterns[0]
    if not inside or not passes:
        return "outside any backward pass"
    if len(inside) == passes:
        return "during the backward pass" if passes == 1 else f"during each of the {passes} backward passes of a step"
    if inside == (passes,):
        return f"only during the last of the {passes} backward passes of a step"
    return f"during backward passes {', '.join(map(str, inside))} of {passes} of a step"


def allreduce_lines(process: ObservedProcess) -> list[str]:
    """DDP's buckets and explicit dist.all_reduce calls: how many and how many bytes per step."""
    steps = _steps_of(process)
    lines = []
    for source, name in (("ddp", "DDP gradient buckets"), ("call", "dist.all_reduce calls")):
        events = process.of_kind(AllReduce, source=source)
        if not events:
            continue
        line = f"{name}: {per_step_text(events, steps)} · {duration_text(sum(e.end - e.start for e in events))} in all"
        if source == "ddp":
            line += f" · {sync_pattern(process, steps)}"
        elif any(e.event.async_op for e in events):
            line += " (those with async_op=True timed to their launch only)"
        lines.append(line)
    if not lines and process.of_kind(Forward, role="replica"):
        lines.append("none: DataParallel sums the replicas' gradients on its first device instead")
    elif not lines:
        lines.append("none seen" if process.of_kind(InitPg) else "none seen (no process group)")
    return lines


def step_lines(process: ObservedProcess) -> list[str]:
    """Step times: from one optimizer step's end to the next (the first from the first forward)."""
    ends = [e.end for e in process.of_kind(Optimizer)]
    if not ends:
        return ["no optimizer steps seen: step times not available"]
    spans = [e for e in process.events if isinstance(e.event, (Forward, Backward))]
    first_start = min((e.start for e in spans), default=ends[0])
    times = [ends[0] - first_start] + [b - a for a, b in zip(ends, ends[1:])]
    median = duration_text(statistics.median(times))
    if len(times) <= MAX_LISTED_STEPS:
        listed = ", ".join(duration_text(t) for t in times)
        return [f"{plural(len(times), 'optimizer step')}: {listed} · median {median} (the first includes warm-up)"]
    spread = f"min {duration_text(min(times))} · max {duration_text(max(times))} · first {duration_text(times[0])}"
    return [f"{len(times)} optimizer steps · median {median} · {spread}"]


def time_lines(process: ObservedProcess) -> list[str]:
    """Where the time of the active window (first to last recorded span) went."""
    forwards = process.of_kind(Forward, role="model")
    backwards = process.of_kind(Backward)
    reduces = process.of_kind(AllReduce)
    optimizers = process.of_kind(Optimizer)
    spans = forwards + backwards + reduces + optimizers
    if not spans:
        return ["nothing timed"]
    window = max(s.end for s in spans) - min(s.start for s in spans)
    idle = max(window - busy_seconds(spans), 0.0)

    def total(group: list[Timed]) -> str:
        return duration_text(busy_seconds(group))

    parts = [f"forward {total(forwards)}", f"backward {total(backwards)}"]
    if reduces:
        parts.append(f"all-reduce {total(reduces)}" + (" (DDP's inside backward)" if process.of_kind(AllReduce, source="ddp") else ""))
    parts += [f"optimizer {total(optimizers)}", f"idle {duration_text(idle)} of a {duration_text(window)} window"]
    return [" · ".join(parts)]


def memory_lines(process: ObservedProcess) -> list[str]:
    """Peak memory allocated per CUDA device, as torch.cuda.max_memory_allocated said at exit."""
    events = process.record.of_kind(Memory)
    if not events:
        return ["not measured: the process did not reach a normal exit"]
    event = events[-1]
    if event.peak is None:
        return [event.why or "not measured"]
    used = [f"cuda:{i} {size_text(b)}" for i, b in enumerate(event.peak) if b]
    return [" · ".join(used) if used else "0 B on every CUDA device"]


def unseen_lines(process: ObservedProcess) -> list[str]:
    """What went wrong or could not be seen in this process."""
    record = process.record
    lines = [f"uncaught {e.type}: {e.message}" for e in record.of_kind(Raised)]
    lines += [f"the script registers its own DDP communication hook ({e.name}): its buckets are timed as DDP buckets" for e in record.of_kind(CommHook)]
    lines += [e.text for e in record.of_kind(Note)]
    if record.damaged:
        lines.append(f"the event file is damaged ({record.damaged}): what follows was not read")
    if record.of_kind(Truncated):
        lines.append("the event file reached its size limit: what follows its end was not recorded")
    if not record.of_kind(Exit):
        lines.append("no normal exit recorded: the process was killed or crashed (its last events may be missing)")
    if process.header.cuda:
        lines.append("times are host times: CUDA runs asynchronously (each optimizer step's end is synchronised)")
    return lines


def process_block(process: ObservedProcess) -> list[str]:
    """The report's lines for one process."""
    sections: list[tuple[str, list[str]]] = []
    group = process.record.first(InitPg)
    if group is not None:
        asked = f" (asked for {group.requested})" if group.requested not in ("None", group.backend) else ""
        sections.append(("process group", [f"{group.backend}{asked}, rank {group.rank} of {group.world_size}"]))
    elif process.rank is not None:
        sections.append(("process group", ["none initialised"]))
    models = [
        f"{m.label}: {m.params:,} parameters on {', '.join(sorted(set(m.devices), key=_device_key)) or '?'}" for m in process.record.of_kind(Model)
    ]
    for ddp in process.record.of_kind(Ddp):
        ids = ddp.device_ids
        models.append(f"DistributedDataParallel built with device_ids={'None' if ids is None else '[' + ', '.join(ids) + ']'}")
    if models:
        sections.append(("model", models))
    backwards = process.of_kind(Backward)
    steps = _steps_of(process)
    sections += [
        ("forward", forward_lines(process)),
        ("backward", [f"{plural(len(backwards), 'pass')}, {per_step_text(backwards, steps, False)}" if backwards else "none seen"]),
        ("all-reduce", allreduce_lines(process)),
        ("step time", step_lines(process)),
        ("time spent", time_lines(process)),
        ("peak memory", memory_lines(process)),
    ]
    unseen = unseen_lines(process)
    if unseen:
        sections.append(("notes", unseen))
    lines = [title(process)]
    for label, texts in sections:
        for i, text in enumerate(texts):
            lines.append(f"  {label if i == 0 else '':<{LABEL_WIDTH}} {text}".rstrip())
    return lines


def render_report(processes: list[ObservedProcess], run: RunSummary) -> str:
    """The whole report: the run, then one block per process."""
    gpus = f" (on {run.virtual_gpus} virtual GPUs)" if run.virtual_gpus else ""
    lines = [f"== observe: {shlex.join(run.command)}{gpus}"]
    if run.start_error:
        lines.append(f"the command could not be started: {run.start_error}")
    elif run.exit_status == 0:
        lines.append("exit status 0")
    else:
        lines.append(f"the script failed: exit status {run.exit_status}; below is what was seen until it stopped")
    if processes:
        lines.append(f"{plural(len(processes), 'process')} recorded events")
    else:
        lines.append("no process recorded anything: no module with parameters, optimizer step or process group was seen")
    if run.timeline is not None:
        lines.append(f"timeline: {run.timeline}")
    elif run.timeline_missing:
        lines.append(f"timeline: not drawn ({run.timeline_missing})")
    if run.trace is not None:
        lines.append(f"trace:    {run.trace} (open it in {PERFETTO} or chrome://tracing)")
    if run.pipeline:
        lines.append(f"pipeline: {run.pipeline}")
    if run.virtual_gpus:
        lines.append("virtual GPUs: times are CPU times; memory counts the tensors on each virtual device")
    for process in processes:
        lines += ["", *process_block(process)]
    return "\n".join(terminal_line(line) for line in lines)
