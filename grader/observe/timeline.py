"""The per-rank timeline of an observed run as a PNG: one row per process, its compute lane
(forward, backward, optimizer step, idle in between) above its communication lane (all-reduce),
from the first span of any process to the last.
matplotlib is imported inside `draw_timeline` only, with its Agg canvas (no display needed)."""
from __future__ import annotations

from pathlib import Path

from grader.observe.records import ObservedProcess

COLOURS = {"forward": "#4C72B0", "backward": "#DD8452", "optimizer": "#55A868", "allreduce": "#C44E52", "idle": "#E3E3E3"}
LEGEND = {"forward": "forward", "backward": "backward", "optimizer": "optimizer step", "allreduce": "all-reduce", "idle": "idle"}
COMPUTE_LANE = (0.1, 0.45)  # (offset from the row's top, height)
COMMUNICATION_LANE = (0.6, 0.3)


def lanes(process: ObservedProcess) -> dict[str, list[tuple[float, float]]]:
    """(start, duration) in seconds for each kind drawn: forward (outermost calls), backward,
    optimizer, allreduce, and idle (the active window, drawn beneath the rest)."""
    drawn: dict[str, list[tuple[float, float]]] = {kind: [] for kind in COLOURS}
    for event in process.events:
        kind = event.get("kind")
        if kind not in ("forward", "backward", "optimizer", "allreduce") or (kind == "forward" and event.get("role") != "model"):
            continue
        drawn[kind].append((event["start"], max(event["end"] - event["start"], 0.0)))
    spans = [s for kind, group in drawn.items() for s in group]
    if spans:
        first = min(start for start, _ in spans)
        drawn["idle"].append((first, max(start + length for start, length in spans) - first))
    return drawn


def draw_timeline(processes: list[ObservedProcess], path: Path, heading: str = "") -> None:
    """Write the timeline of `processes` to `path` (PNG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = max(len(processes), 1)
    figure = Figure(figsize=(12, 1.4 + 0.8 * rows), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    drawn = [lanes(process) for process in processes]
    windows = [span for lane in drawn for span in lane["idle"]]
    first = min((start for start, _ in windows), default=0.0)
    last = max((start + length for start, length in windows), default=0.0)
    scale, unit = (1000.0, "ms") if last - first < 2 else (1.0, "s")
    for row, lane in enumerate(drawn):
        for kind in ("idle", "forward", "backward", "optimizer", "allreduce"):
            offset, height = COMMUNICATION_LANE if kind == "allreduce" else COMPUTE_LANE
            bars = [((start - first) * scale, length * scale) for start, length in lane[kind]]
            if bars:
                axes.broken_barh(bars, (row + offset, height), facecolors=COLOURS[kind], edgecolor="none")
    if not processes:
        axes.text(0.5, 0.5, "no process recorded anything", ha="center", va="center", transform=axes.transAxes)
    axes.set_ylim(rows, 0)
    axes.set_yticks([row + 0.5 for row in range(len(processes))], [p.name for p in processes])
    if windows:
        axes.set_xlim(0, (last - first) * scale * 1.01 or 1)
    axes.set_xlabel(f"time since the first forward, backward or step of any process ({unit})")
    axes.set_title("\n".join(filter(None, [heading, "each process: compute above, all-reduce below"])), fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    handles = [Patch(color=COLOURS[k], label=LEGEND[k]) for k in LEGEND]
    axes.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25 if rows < 3 else -0.12), ncol=len(LEGEND), frameon=False)
    figure.tight_layout()
    figure.savefig(path, format="png")
