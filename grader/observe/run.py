"""`python -m grader observe -- CMD`: run the command with every Python process observed, then
read back what they recorded, write the timeline PNG, the Chrome trace and, where the processes
are a pipeline's stages, the pipeline diagram PNG, and make the report.
The side effects of observing live here; the command itself runs unmodified."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from grader.observe.pipeline import draw_pipeline, pipeline_diagram
from grader.observe.records import ObservedProcess, read_processes
from grader.observe.report import RunSummary, render_report
from grader.observe.trace import chrome_trace
from grader.run.virtual_env import virtual_gpu_environment

OBSERVE_DIR_VARIABLE = "GRADER_OBSERVE_DIR"  # read by grader/probe/boot/sitecustomize.py
TIMELINE = "timeline.png"
PIPELINE = "pipeline.png"
TRACE = "trace.json"
EVENTS = "events"


@dataclass(frozen=True)
class Observation:
    """The outcome of observing one command."""

    exit_status: int
    report: str
    timeline: Path | None
    trace: Path
    processes: list[ObservedProcess]
    pipeline: Path | None = None


def observe_environment(events: Path, virtual_gpus: int, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """`environ` plus what makes every Python process of a command record into `events` (and
    see `virtual_gpus` virtual GPUs when that is above 0)."""
    return {**virtual_gpu_environment(virtual_gpus, environ), OBSERVE_DIR_VARIABLE: str(events.resolve())}


def run_command(command: list[str], env: Mapping[str, str]) -> tuple[int, str]:
    """Run `command` to its end; (its exit status as a shell gives it, why it could not start).
    An interrupt reaches the command too, so the first one waits for its end; a second one
    terminates it."""
    try:
        process = subprocess.Popen(command, env=dict(env))
    except FileNotFoundError:
        return 127, f"command not found: {command[0]}"
    except PermissionError:
        return 126, f"permission denied: {command[0]}"
    interrupted = False
    while True:
        try:
            code = process.wait()
            break
        except KeyboardInterrupt:
            if interrupted:
                process.terminate()
            interrupted = True
    return (128 - code if code < 0 else code), ""


def _clear_events(events: Path) -> None:
    """Remove the event files of an earlier run in the same folder (only those)."""
    events.mkdir(parents=True, exist_ok=True)
    for old in events.glob("events-*.jsonl"):
        old.unlink()


def write_pictures(processes: list[ObservedProcess], out: Path, heading: str, about: dict) -> tuple[Path, Path | None, str]:
    """Write the trace and the timeline into `out`: (trace, timeline or None, why no timeline)."""
    trace = out / TRACE
    trace.write_text(json.dumps(chrome_trace(processes, about)), encoding="utf-8")
    try:
        from grader.observe.timeline import draw_timeline

        draw_timeline(processes, out / TIMELINE, heading)
    except ImportError as exc:
        return trace, None, f"matplotlib is missing ({exc}); pip install matplotlib"
    except Exception as exc:  # noqa: BLE001 - the report and the trace are still worth having
        return trace, None, f"{type(exc).__name__}: {exc}"
    return trace, out / TIMELINE, ""


def write_pipeline(processes: list[ObservedProcess], out: Path, heading: str) -> tuple[Path | None, str]:
    """Where the processes are a pipeline's stages, write its diagram into `out`: (the PNG or
    None, the report's line about it: "" where the run is no pipeline)."""
    diagram = pipeline_diagram(processes)
    if diagram is None:
        return None, ""
    try:
        draw_pipeline(diagram, out / PIPELINE, heading)
    except ImportError as exc:
        return None, f"not drawn (matplotlib is missing: {exc}); {diagram.summary()}"
    except Exception as exc:  # noqa: BLE001 - the report and the other pictures are still worth having
        return None, f"not drawn ({type(exc).__name__}: {exc}); {diagram.summary()}"
    return out / PIPELINE, f"{out / PIPELINE}: {diagram.summary()}"


def observe_command(command: list[str], out: Path, virtual_gpus: int = 0, environ: Mapping[str, str] = os.environ) -> Observation:
    """Run `command` observed; its events go to OUT/events/, the pictures to OUT."""
    events = out / EVENTS
    _clear_events(events)
    exit_status, start_error = run_command(command, observe_environment(events, virtual_gpus, environ))
    processes = read_processes(events)
    heading = f"observe: {shlex.join(command)}"
    trace, timeline, missing = write_pictures(processes, out, heading[:120], {"command": command, "exit_status": exit_status})
    pipeline, pipeline_line = write_pipeline(processes, out, heading[:120])
    summary = RunSummary(command, exit_status, virtual_gpus, timeline, missing, trace, start_error, pipeline_line)
    return Observation(exit_status, render_report(processes, summary), timeline, trace, processes, pipeline)
