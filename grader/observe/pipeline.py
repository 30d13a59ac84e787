"""The classic pipeline diagram of an observed run whose processes are the stages of a
pipeline (they send each other tensors point to point): one row per stage, time along x, each
micro-batch's forward pass (F0, F1, ...) and backward pass (B0, B1, ...) as a numbered block,
the bubble as the gaps between them, for one training step.

`pipeline_diagram` is a pure function from the observed processes to the diagram's blocks;
`draw_pipeline` draws it (matplotlib imported there, with its Agg canvas). The blocks rest on
what each process recorded about itself (its model's forward calls, its autograd backward
calls, its point-to-point calls): an explanation for the student, never a verdict."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.observe.records import ObservedProcess, Timed
from grader.observe.report import by_step
from grader.observe.timeline import COLOURS, _plain, visible
from grader.probe.recorder.events import Backward, Forward, P2p

WAITING = "#F2D7A7"  # a blocking recv: the stage waits for an activation or a gradient
BLOCK_INCHES = 0.9  # height of a stage's row


@dataclass(frozen=True)
class Block:
    """One micro-batch's forward ("F") or backward ("B") pass on one stage, in seconds on
    the run's time axis."""

    kind: str
    micro_batch: int
    start: float
    end: float

    @property
    def name(self) -> str:
        """"F0", "B3"."""
        return f"{self.kind}{self.micro_batch}"


@dataclass(frozen=True)
class StageRow:
    """One stage (process) of the diagram: its blocks in time order, its blocking receives
    (start, end), and its bubble: the fraction of the step's window it was not computing."""

    stage: int
    label: str
    blocks: tuple[Block, ...]
    waits: tuple[tuple[float, float], ...]
    bubble: float


@dataclass(frozen=True)
class PipelineDiagram:
    """The diagram of one step: the schedule its order shows ("GPipe", "1F1B" or "neither
    GPipe nor 1F1B"), the one the command line asked for ("" where none), S stages, M
    micro-batches, the step drawn (of `steps`), its window and the stages' rows."""

    schedule: str
    asked: str
    stages: int
    micro_batches: int
    step: int
    steps: int
    start: float
    end: float
    rows: tuple[StageRow, ...]

    @property
    def theoretical_bubble(self) -> float:
        """(S − 1) / (M + S − 1): the bubble with equal forward and backward passes on every
        stage and communication for free."""
        return (self.stages - 1) / (self.micro_batches + self.stages - 1)

    def summary(self) -> str:
        """One line for the report: the schedule, S, M and the bubbles."""
        asked = f" (--schedule={self.asked} asked)" if self.asked else ""
        bubbles = ", ".join(f"{row.bubble:.0%}" for row in self.rows)
        return (
            f"{self.schedule} seen{asked}, S={self.stages} stages, M={self.micro_batches} micro-batches; "
            f"step {self.step}: bubble by stage {bubbles}, theory (S−1)/(M+S−1) = {self.theoretical_bubble:.0%}"
        )


def is_pipeline(processes: list[ObservedProcess]) -> bool:
    """Whether the processes are a pipeline's stages: two ranked processes or more, one of
    which sent or received a tensor point to point from another rank."""
    ranks = {p.rank for p in processes if p.rank is not None}
    return len(ranks) > 1 and any(e.peer in ranks - {p.rank} for p in processes for e in p.record.of_kind(P2p))


def _passes(process: ObservedProcess) -> tuple[dict[int, list[Timed]], dict[int, list[Timed]]]:
    """The outermost model forward calls and the backward calls of one process, by step."""
    forwards = [e for e in process.of_kind(Forward) if e.event.role == "model" and e.event.depth == 0]
    return by_step(forwards), by_step(process.of_kind(Backward))


def _blocks(forwards: list[Timed], backwards: list[Timed]) -> tuple[Block, ...]:
    """A stage's blocks of one step. Both schedules run a stage's micro-batches in order, so
    the k-th forward (and the k-th backward) of the step is micro-batch k."""
    found = [Block("F", k, e.start, e.end) for k, e in enumerate(forwards)]
    found += [Block("B", k, e.start, e.end) for k, e in enumerate(backwards)]
    return tuple(sorted(found, key=lambda b: b.start))


def schedule_seen(rows: list[tuple[Block, ...]]) -> str:
    """"GPipe" where every stage ran all its forward passes before its first backward; "1F1B"
    where stage s never held more than S − s micro-batches (forwarded, not yet backwarded) and
    some stage interleaved them; else "neither GPipe nor 1F1B"."""
    if all("".join(b.kind for b in blocks).find("BF") < 0 for blocks in rows):
        return "GPipe"
    for stage, blocks in enumerate(rows):
        held = 0
        for block in blocks:
            held += 1 if block.kind == "F" else -1
            if held > len(rows) - stage or held < 0:
                return "neither GPipe nor 1F1B"
    return "1F1B"


def _asked(process: ObservedProcess) -> str:
    """The value of --schedule=... on the process's command line, "" where there is none."""
    return next((arg.partition("=")[2][:20] for arg in process.header.argv if arg.startswith("--schedule=")), "")


def pipeline_diagram(processes: list[ObservedProcess]) -> PipelineDiagram | None:
    """The diagram of the last step in which every stage ran the same number M of forward and
    of backward passes; None where the processes are no pipeline or no step is complete."""
    if not is_pipeline(processes):
        return None
    stages = sorted((p for p in processes if p.rank is not None), key=lambda p: p.rank or 0)
    passes = [_passes(p) for p in stages]
    counts = [{step: (len(f.get(step, [])), len(b.get(step, []))) for step in f.keys() | b.keys()} for f, b in passes]
    complete = [step for step in counts[0] if counts[0][step][0] > 0 and all(c.get(step) == (counts[0][step][0],) * 2 for c in counts)]
    if not complete:
        return None
    step = max(complete)
    blocks = [_blocks(f[step], b[step]) for f, b in passes]
    start = min(b.start for row in blocks for b in row)
    end = max(b.end for row in blocks for b in row)
    window = end - start or 1.0
    rows = []
    for process, row in zip(stages, blocks):
        waits = tuple((max(e.start, start), min(e.end, end)) for e in process.of_kind(P2p, op="recv", step=step) if e.end > start and e.start < end)
        busy = sum(b.end - b.start for b in row)
        rows.append(StageRow(process.rank or 0, f"stage {process.rank} · pid {process.pid}", row, waits, max(0.0, 1 - busy / window)))
    return PipelineDiagram(
        schedule_seen(blocks), _asked(stages[0]), len(stages), counts[0][step][0], step, max(counts[0]) + 1, start, end, tuple(rows)
    )


def draw_pipeline(diagram: PipelineDiagram, path: Path, heading: str = "") -> None:
    """Write `diagram` to `path` (PNG): a row per stage, stage 0 on top, each block labelled."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    size = (13.0, 2.4 + BLOCK_INCHES * diagram.stages)
    figure = Figure(figsize=size, dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    window = diagram.end - diagram.start
    scale, unit = (1000.0, "ms") if window < 2 else (1.0, "s")
    axis = window * scale or 1.0
    colours = {"F": COLOURS["forward"], "B": COLOURS["backward"]}
    for row in diagram.rows:
        y = row.stage
        waits = [((s - diagram.start) * scale, (e - s) * scale) for s, e in row.waits]
        axes.broken_barh(waits, (y - 0.12, 0.24), facecolors=WAITING, edgecolor="none", zorder=1)
        for block in row.blocks:
            left = (block.start - diagram.start) * scale
            ((left, width),) = visible([(left, (block.end - block.start) * scale)], axis, 0.01)
            axes.broken_barh([(left, width)], (y - 0.38, 0.76), facecolors=colours[block.kind], edgecolor="white", linewidth=0.8, zorder=2)
            if width >= axis * 0.012:
                axes.text(left + width / 2, y, block.name, ha="center", va="center", color="white", fontsize=8, fontweight="bold", zorder=3, clip_on=True)
        axes.text(axis * 1.005, y, f"bubble {row.bubble:.0%}", ha="left", va="center", fontsize=9)
    axes.set_ylim(diagram.stages - 0.5, -0.5)
    axes.set_yticks([row.stage for row in diagram.rows], [_plain(row.label, 40) for row in diagram.rows])
    axes.tick_params(axis="y", length=0)
    axes.set_xlim(0, axis * 1.12)
    axes.set_xlabel(f"time since the step's first forward pass ({unit}); a gap is the bubble: the stage computes nothing")
    asked = f" (--schedule={diagram.asked})" if diagram.asked else ""
    title = [
        _plain(heading, 160),
        f"{diagram.schedule}{asked}: S = {diagram.stages} stages, M = {diagram.micro_batches} micro-batches, step {diagram.step} of {diagram.steps}",
        "bubble (idle / the step's span) by stage: " + ", ".join(f"stage {row.stage} {row.bubble:.0%}" for row in diagram.rows)
        + f" · theory (S−1)/(M+S−1) = {diagram.theoretical_bubble:.0%} (equal passes, free communication)",
    ]
    axes.set_title("\n".join(line for line in title if line), fontsize=10)
    axes.grid(axis="x", alpha=0.3)
    handles = [Patch(color=colours["F"], label="forward Fi"), Patch(color=colours["B"], label="backward Bi"), Patch(color=WAITING, label="waiting in recv")]
    figure.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=9)
    figure.subplots_adjust(left=1.7 / size[0], right=0.98, top=1 - 0.75 / size[1], bottom=1.0 / size[1])
    figure.savefig(path, format="png")
