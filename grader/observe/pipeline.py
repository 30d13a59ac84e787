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
from typing import Any

from grader.observe.records import ObservedProcess, Timed
from grader.observe.report import by_step
from grader.observe.timeline import COLOURS, _plain, visible
from grader.probe.recorder.events import Backward, Forward, P2p

WAITING = "#F2D7A7"  # a blocking recv: the stage waits for an activation or a gradient
BLOCK_INCHES = 0.7  # height of a stage's row
MAX_SLOT_TICKS = 40  # the textbook panel numbers every slot up to this many
LABELLED = 0.018  # the narrowest block drawn, as a fraction of the time axis: wide enough for "F12"


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
    def slots(self) -> tuple[tuple[Block, ...], ...]:
        """Each stage's passes in the order they ran, every pass one unit long and sends
        free: each starts once its stage's previous pass ended and its input is there (F_i of
        stage s after F_i of stage s − 1; B_i after B_i of stage s + 1). Where the order
        cannot run (a pass waits for one that waits for it), the passes before it."""
        queues = [list(row.blocks) for row in self.rows]
        done: dict[tuple[int, str, int], float] = {}
        placed: list[list[Block]] = [[] for _ in queues]
        free = [0.0] * len(queues)
        moved = True
        while moved:
            moved = False
            for stage, queue in enumerate(queues):
                while queue:
                    block = queue[0]
                    before = stage - 1 if block.kind == "F" else stage + 1
                    needs = (before, block.kind, block.micro_batch) if 0 <= before < len(queues) else None
                    if needs is not None and needs not in done:
                        break
                    start = max(free[stage], done[needs] if needs else 0.0)
                    free[stage] = done[(stage, block.kind, block.micro_batch)] = start + 1
                    placed[stage].append(Block(block.kind, block.micro_batch, start, start + 1))
                    queue.pop(0)
                    moved = True
        return tuple(tuple(row) for row in placed)

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
            f"step {self.step}: measured bubble by stage {bubbles}, theory (S−1)/(M+S−1) = {self.theoretical_bubble:.0%}"
        )


def is_pipeline(processes: list[ObservedProcess]) -> bool:
    """Whether the processes are a pipeline's stages: ranks 0 to S − 1 (S > 1), one process
    each (one launch), one of which sent or received a tensor point to point from another."""
    ranked = [p.rank for p in processes if p.rank is not None]
    ranks = set(ranked)
    return len(ranks) > 1 and sorted(ranked) == list(range(len(ranked))) and any(e.peer in ranks - {p.rank} for p in processes for e in p.record.of_kind(P2p))


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


def _panel(axes: Any, rows: list[tuple[int, tuple[Block, ...], tuple[tuple[float, float], ...], float]], origin: float, scale: float, axis: float) -> None:
    """Draw one panel's rows (stage, blocks, waits, bubble) on `axes`, `origin` at x = 0."""
    colours = {"F": COLOURS["forward"], "B": COLOURS["backward"]}
    for y, blocks, waits, bubble in rows:
        bars = [((s - origin) * scale, (e - s) * scale) for s, e in waits]
        axes.broken_barh(bars, (y - 0.12, 0.24), facecolors=WAITING, edgecolor="none", zorder=1)
        for block in blocks:
            ((left, width),) = visible([((block.start - origin) * scale, (block.end - block.start) * scale)], axis, LABELLED)
            axes.broken_barh([(left, width)], (y - 0.38, 0.76), facecolors=colours[block.kind], edgecolor="white", linewidth=0.8, zorder=2)
            axes.text(left + width / 2, y, block.name, ha="center", va="center", color="white", fontsize=8, fontweight="bold", zorder=3, clip_on=True)
        axes.text(axis * 1.01, y, f"bubble {bubble:.0%}", ha="left", va="center", fontsize=9)
    axes.set_ylim(len(rows) - 0.5, -0.5)
    axes.tick_params(axis="y", length=0)
    axes.set_xlim(0, axis * 1.12)
    axes.grid(axis="x", alpha=0.3)


def draw_pipeline(diagram: PipelineDiagram, path: Path, heading: str = "") -> None:
    """Write `diagram` to `path` (PNG): above, the step as measured; below, the same order
    with every pass one slot long (the lecture's diagram). A row per stage, stage 0 on top."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    panel = 0.9 + BLOCK_INCHES * diagram.stages
    size = (13.0, 1.9 + 2 * panel)
    figure = Figure(figsize=size, dpi=110)
    FigureCanvasAgg(figure)
    measured, ideal = figure.subplots(2, 1, sharey=True)
    window = diagram.end - diagram.start
    scale, unit = (1000.0, "ms") if window < 2 else (1.0, "s")
    _panel(measured, [(r.stage, r.blocks, r.waits, r.bubble) for r in diagram.rows], diagram.start, scale, window * scale or 1.0)
    slots = diagram.slots
    length = max((b.end for row in slots for b in row), default=1.0)
    _panel(ideal, [(r.stage, row, (), 1 - len(row) / length) for r, row in zip(diagram.rows, slots)], 0.0, 1.0, length)
    measured.set_yticks([row.stage for row in diagram.rows], [_plain(row.label, 40) for row in diagram.rows])
    measured.set_xlabel(f"as measured: time since the step's first forward pass ({unit}); a gap is the bubble (the stage computes nothing)", fontsize=9)
    ideal.set_xlabel("the same order, every pass one time slot and sends free: the textbook diagram", fontsize=9)
    if length <= MAX_SLOT_TICKS:
        ideal.set_xticks(range(int(length) + 1))
    asked = f" (--schedule={diagram.asked})" if diagram.asked else ""
    title = [
        _plain(heading, 160),
        f"{diagram.schedule} seen{asked}: S = {diagram.stages} stages, M = {diagram.micro_batches} micro-batches, step {diagram.step} (of steps 0–{diagram.steps - 1})",
        "measured bubble (idle / the step's span): " + ", ".join(f"stage {row.stage} {row.bubble:.0%}" for row in diagram.rows)
        + f" · theory (S−1)/(M+S−1) = {diagram.theoretical_bubble:.0%}",
    ]
    measured.set_title("\n".join(line for line in title if line), fontsize=10)
    handles = [Patch(color=COLOURS["forward"], label="forward Fi of micro-batch i"), Patch(color=COLOURS["backward"], label="backward Bi"), Patch(color=WAITING, label="waiting in recv")]
    figure.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=9)
    figure.subplots_adjust(left=1.7 / size[0], right=0.98, top=1 - 0.75 / size[1], bottom=0.95 / size[1], hspace=0.9 / panel)
    figure.savefig(path, format="png")
