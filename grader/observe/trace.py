"""The observed run as a Chrome trace: the "traceEvents" JSON that https://ui.perfetto.dev and
chrome://tracing open. One trace process per observed process (named as on the timeline:
rank, pid, and the spawn group or host where they tell processes apart), with the
threads "compute" (forward, stages, backward, optimizer steps), "communication" (all-reduces),
"steps" (one span per optimizer step) and one per DataParallel replica device."""
from __future__ import annotations

from grader.observe.records import ObservedProcess, distinct_labels, input_device, spawn_order

COMPUTE, COMMUNICATION, STEPS, REPLICAS = 1, 2, 3, 10


def _microseconds(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def _inputs(event: dict) -> str:
    return "; ".join(f"{i.get('shape')} on {i.get('device')}" for i in event.get("inputs", [])) or "no tensor inputs"


def _replica_thread(event: dict) -> tuple[int, str]:
    device = input_device(event)
    index = device.partition(":")[2]
    return REPLICAS + (int(index) if index.isdigit() else 0), f"replica on {device}"


def _span(pid: int, tid: int, name: str, category: str, event: dict, args: dict) -> dict:
    return {
        "name": name,
        "cat": category,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": _microseconds(event["start"]),
        "dur": _microseconds(max(event["end"] - event["start"], 0.0)),
        "args": {"step": event.get("step"), **args},
    }


def _process_events(pid: int, process: ObservedProcess, label: str, position: int) -> list[dict]:
    threads = {COMPUTE: "compute", COMMUNICATION: "communication", STEPS: "steps"}
    events = []
    step_start = None
    for event in process.events:
        kind = event.get("kind")
        if kind == "forward":
            role = event.get("role")
            tid = COMPUTE
            name = str(event.get("label"))
            if role == "replica":
                tid, threads[tid] = _replica_thread(event)
                name = f"replica {name}"
            elif role == "stage":
                name = f"stage {name} on {', '.join(event.get('devices', []))}"
            events.append(_span(pid, tid, name, f"forward/{role}", event, {"inputs": _inputs(event)}))
            if step_start is None:
                step_start = event["start"]
        elif kind == "backward":
            events.append(_span(pid, COMPUTE, "backward", "backward", event, {}))
        elif kind == "allreduce":
            name = f"all-reduce (DDP bucket {event.get('bucket')})" if event.get("source") == "ddp" else "dist.all_reduce"
            events.append(_span(pid, COMMUNICATION, name, "allreduce", event, {"bytes": event.get("bytes")}))
        elif kind == "optimizer":
            events.append(_span(pid, COMPUTE, "optimizer step", "optimizer", event, {"optimizer": event.get("optimizer")}))
            begin = event["start"] if step_start is None else step_start
            events.append(_span(pid, STEPS, f"step {event.get('step')}", "step", {**event, "start": begin}, {}))
            step_start = event["end"]
        elif kind in ("exception", "note"):
            text = f"{event.get('type')}: {event.get('message')}" if kind == "exception" else str(event.get("text"))
            at = _microseconds(event["start"])
            events.append({"name": kind, "cat": kind, "ph": "i", "s": "p", "pid": pid, "tid": COMPUTE, "ts": at, "args": {"text": text}})
    metadata = [
        {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": label}},
        {"name": "process_sort_index", "ph": "M", "pid": pid, "args": {"sort_index": position}},
    ]
    for tid, name in sorted(threads.items()):
        metadata.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}})
    return metadata + events


def chrome_trace(processes: list[ObservedProcess], about: dict | None = None) -> dict:
    """The trace document: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": about}."""
    events = []
    positions = {index: position for position, index in enumerate(spawn_order(processes))}
    for pid, (process, label) in enumerate(zip(processes, distinct_labels(processes)), start=1):
        events += _process_events(pid, process, label, positions[pid - 1])
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": about or {}}
