"""The timeline of an observed run as a PNG: one block of lanes per process, on one time axis
from the first span of any process to the last. A process's main lane shows its compute (the
model's forward, backward, optimizer step, idle in between); below it one lane per
DataParallel replica device and one per stage of a model spread over devices (so replicas side
by side and a pipeline's bubbles show), and its all-reduces where it has any.

The lanes are plain data (`timeline_lanes`), drawn by `draw_timeline`; matplotlib is imported
inside `draw_timeline` only, with its Agg canvas (no display needed)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.observe.records import ObservedProcess, distinct_labels, input_device, spawn_order

COLOURS = {"forward": "#4C72B0", "backward": "#DD8452", "optimizer": "#55A868", "allreduce": "#C44E52", "idle": "#E3E3E3"}
LEGEND = {"forward": "forward", "backward": "backward", "optimizer": "optimizer step", "allreduce": "all-reduce", "idle": "idle"}
DRAWING_ORDER = ("idle", "forward", "backward", "optimizer", "allreduce")
MIN_WIDTH = 0.002  # the narrowest span drawn, as a fraction of the time axis (2 pixels or so)
MAX_LANES = 48  # lanes drawn at most; the processes that do not fit are counted in the title
LANE_INCHES = 0.3
LABEL_CHARACTERS = 60
CHARACTER_EM = 0.62  # the mean width of a character of matplotlib's font, in ems (DejaVu Sans, bold labels included)


@dataclass(frozen=True)
class Lane:
    """One row of the timeline: its label, the process it belongs to (its position in the
    drawing), whether it is the process's main lane, and (start, duration) in seconds per kind."""

    label: str
    process: int
    main: bool = False
    spans: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Timeline:
    """The lanes to draw, the time window they cover, and what did not fit."""

    lanes: list[Lane]
    start: float = 0.0
    end: float = 0.0
    processes_not_drawn: int = 0
    lanes_not_drawn: int = 0


def _span(event: dict) -> tuple[float, float]:
    return event["start"], max(event["end"] - event["start"], 0.0)


def _device_key(device: str) -> tuple[str, int]:
    kind, _, index = device.partition(":")
    return kind, int(index) if index.isdigit() else -1


def _stage_lane_label(event: dict) -> str:
    """"stage seq2 (Sequential) on cuda:1": the stage's name, its module, its parameters' device
    (else its first input's)."""
    label, module = str(event.get("label")), str(event.get("module") or "")
    devices = event.get("devices")
    on = ", ".join(map(str, devices)) if isinstance(devices, list) and devices else input_device(event)
    named = f"{label} ({module})" if module and module != label else label
    return f"stage {named} on {on}"


def lanes(process: ObservedProcess, label: str, position: int = 0) -> list[Lane]:
    """The lanes of one process: main (outermost forwards, backward, optimizer, and idle over
    its active window), one per replica device, one per stage (in order of first call), and
    all-reduce (where there is one, or where the process is one rank of several: then empty,
    and its label says so)."""
    main: dict[str, list[tuple[float, float]]] = {kind: [] for kind in ("idle", "forward", "backward", "optimizer")}
    replicas: dict[str, list[tuple[float, float]]] = {}
    stages: dict[str, list[tuple[float, float]]] = {}
    reduces: list[tuple[float, float]] = []
    for event in process.events:
        kind, role = event.get("kind"), event.get("role")
        if kind == "forward" and role == "replica":
            replicas.setdefault(input_device(event), []).append(_span(event))
        elif kind == "forward" and role == "stage":
            stages.setdefault(_stage_lane_label(event), []).append(_span(event))
        elif kind == "allreduce":
            reduces.append(_span(event))
        elif kind in ("backward", "optimizer") or (kind == "forward" and role == "model"):
            main[kind].append(_span(event))
    everything = [s for group in (*main.values(), *replicas.values(), *stages.values(), reduces) for s in group]
    if everything:
        first = min(start for start, _ in everything)
        main["idle"].append((first, max(start + length for start, length in everything) - first))
    found = [Lane(label, position, True, main)]
    for device in sorted(replicas, key=_device_key):
        found.append(Lane(f"replica on {device}", position, spans={"forward": replicas[device]}))
    found += [Lane(name, position, spans={"forward": spans}) for name, spans in stages.items()]
    if reduces:
        found.append(Lane("all-reduce", position, spans={"allreduce": reduces}))
    elif (process.world_size or 1) > 1:  # a rank of several that never all-reduced: say so
        found.append(Lane("all-reduce: none recorded", position, spans={"allreduce": []}))
    return found


def timeline_lanes(processes: list[ObservedProcess], max_lanes: int = MAX_LANES) -> Timeline:
    """The lanes of every process that fits in `max_lanes`, spawn groups together; the first
    process always (its own lanes cut to `max_lanes`)."""
    labels = distinct_labels(processes)
    drawn: list[Lane] = []
    order = spawn_order(processes)
    lanes_not_drawn = 0
    for position, index in enumerate(order):
        found = lanes(processes[index], labels[index], position)
        if position == 0 and len(found) > max_lanes:
            lanes_not_drawn = len(found) - max_lanes
            found = found[:max_lanes]
        if drawn and len(drawn) + len(found) > max_lanes:
            return _windowed(drawn, len(order) - position, lanes_not_drawn)
        drawn += found
    return _windowed(drawn, 0, lanes_not_drawn)


def _windowed(drawn: list[Lane], processes_not_drawn: int, lanes_not_drawn: int) -> Timeline:
    windows = [span for lane in drawn if lane.main for span in lane.spans.get("idle", [])]
    start = min((s for s, _ in windows), default=0.0)
    end = max((s + length for s, length in windows), default=0.0)
    return Timeline(drawn, start, end, processes_not_drawn, lanes_not_drawn)


def visible(spans: list[tuple[float, float]], axis: float, fraction: float = MIN_WIDTH) -> list[tuple[float, float]]:
    """The spans as drawn on an axis `axis` long: each at least `fraction` of it wide."""
    return [(start, max(length, axis * fraction)) for start, length in spans]


def _plain(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, its dollar signs escaped (matplotlib reads $...$ as maths)."""
    cut = text if len(text) <= limit else text[: limit - 1] + "…"
    return cut.replace("$", r"\$")


def _not_drawn_text(timeline: Timeline) -> str:
    parts = []
    if timeline.processes_not_drawn:
        parts.append(f"{timeline.processes_not_drawn} more processes not drawn")
    if timeline.lanes_not_drawn:
        parts.append(f"{timeline.lanes_not_drawn} more lanes of the first process not drawn")
    return " · ".join(parts) + " (the report and trace.json have them)" if parts else ""


def draw_timeline(processes: list[ObservedProcess], path: Path, heading: str = "") -> None:
    """Write the timeline of `processes` to `path` (PNG)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    timeline = timeline_lanes(processes)
    rows = max(len(timeline.lanes), 1)
    size = (13.0, max(2.8, 1.5 + LANE_INCHES * rows))
    figure = Figure(figsize=size, dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    window = timeline.end - timeline.start
    scale, unit = (1000.0, "ms") if window < 2 else (1.0, "s")
    axis = window * scale or 1.0
    kinds = set()
    for row, lane in enumerate(timeline.lanes):
        if lane.process % 2:
            axes.axhspan(row - 0.5, row + 0.5, color="#F4F6FA", zorder=0, linewidth=0)
        height = 0.7 if lane.main else 0.5
        for kind in DRAWING_ORDER:
            bars = [((start - timeline.start) * scale, length * scale) for start, length in lane.spans.get(kind, [])]
            if bars:
                kinds.add(kind)
                axes.broken_barh(visible(bars, axis), (row - height / 2, height), facecolors=COLOURS[kind], edgecolor="none", zorder=2)
        if lane.main and row:
            axes.axhline(row - 0.5, color="#B0B0B0", linewidth=0.6, zorder=1)
    if not timeline.lanes:
        axes.text(0.5, 0.5, "no process recorded anything", ha="center", va="center", transform=axes.transAxes)
    axes.set_ylim(rows - 0.5, -0.5)
    axes.set_yticks(range(len(timeline.lanes)), [_plain(lane.label, LABEL_CHARACTERS) for lane in timeline.lanes])
    for tick, lane in zip(axes.get_yticklabels(), timeline.lanes):
        tick.set_fontweight("bold" if lane.main else "normal")
        tick.set_fontsize(9 if lane.main else 8)
        tick.set_color("black" if lane.main else "#444444")
    axes.tick_params(axis="y", length=0)
    axes.set_xlim(0, axis * 1.01)
    axes.set_xlabel(f"time since the first forward, backward, all-reduce or step of any process ({unit})")
    about = "each process: compute (bold), then DataParallel replicas and model stages, then all-reduces"
    title = [line for line in (_plain(heading, 160), about, _not_drawn_text(timeline)) if line]
    axes.set_title("\n".join(title), fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    legend = [kind for kind in LEGEND if kind in kinds]
    if legend:
        handles = [Patch(color=COLOURS[kind], label=LEGEND[kind]) for kind in legend]
        axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9)
    figure.subplots_adjust(**_margins([_plain(lane.label, LABEL_CHARACTERS) for lane in timeline.lanes], len(title), [LEGEND[kind] for kind in legend], size))
    figure.savefig(path, format="png")


def _margins(labels: list[str], title_lines: int, legend: list[str], size: tuple[float, float]) -> dict[str, float]:
    """The axes' place in the figure, from the widths of its texts: the lane labels (9 pt) on
    the left, the legend (9 pt, with its patches) on the right, the title's lines (10 pt) above,
    the ticks and the axis label below. Computed, not solved: a layout engine would draw the
    figure twice (about 0.3 s a picture, five pictures a grading)."""
    width, height = size
    inch = 1 / 72  # a point
    left = 0.2 + max((len(label) for label in labels), default=4) * 9 * CHARACTER_EM * inch
    right = 0.25 + ((max(len(label) for label in legend) * 9 * CHARACTER_EM + 34) * inch if legend else 0)
    top = 0.12 + title_lines * 10 * 1.3 * inch
    bottom = 0.6
    return {"left": min(left / width, 0.45), "right": 1 - right / width, "top": 1 - top / height, "bottom": bottom / height}
