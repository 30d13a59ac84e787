"""observe's pipeline diagram (grader.observe.pipeline): the blocks laid out from made-up
records of two stages, and one observed run of p7's reference."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from grader.observe.pipeline import is_pipeline, pipeline_diagram, schedule_seen
from grader.observe.records import ObservedProcess, align
from grader.observe.run import PIPELINE, observe_command
from grader.observe.views import write_run_views
from grader.probe.recorder.events import Backward, Event, Forward, P2p, TensorInfo
from grader.results.model import RunSummary
from tests.observations import header, record_of

ROOT = Path(__file__).resolve().parents[1]
# (pass, start) of each stage in one step of S = 2, M = 4, every pass 1 s: the classic diagrams
GPIPE = (
    [("F", 0), ("F", 1), ("F", 2), ("F", 3), ("B", 6), ("B", 7), ("B", 8), ("B", 9)],
    [("F", 1), ("F", 2), ("F", 3), ("F", 4), ("B", 5), ("B", 6), ("B", 7), ("B", 8)],
)
ONE_F_ONE_B = (
    [("F", 0), ("F", 1), ("B", 3), ("F", 4), ("B", 5), ("F", 6), ("B", 7), ("B", 9)],
    [("F", 1), ("B", 2), ("F", 3), ("B", 4), ("F", 5), ("B", 6), ("F", 7), ("B", 8)],
)


def _forward(t: float, seq: int, step: int) -> Forward:
    return Forward(
        t=t, seq=seq, step=step, dur=1.0, module="Sequential", name="Sequential", label="Sequential", role="model", depth=0, call=seq,
        has_params=True, replica=False, inputs=(TensorInfo(shape=(8, 16), device="cpu"),), devices=None,
    )


def stages(schedule: tuple[list[tuple[str, int]], ...], steps: int = 2, p2p: bool = True) -> list[ObservedProcess]:
    """Two stages that ran `schedule` in each of `steps` steps (20 s apart), stage 0 sending
    stage 1 its activations where `p2p`."""
    records = []
    for rank, passes in enumerate(schedule):
        events: list[Event] = []
        for step in range(steps):
            for kind, start in passes:
                t, seq = 20.0 * step + start, len(events) + 1
                events.append(_forward(t, seq, step) if kind == "F" else Backward(t=t, seq=seq, step=step, dur=1.0))
                if p2p and kind == "F":
                    events.append(P2p(t=t + 1, seq=seq + 1, step=step, dur=0.0, op="isend" if rank == 0 else "recv", peer=1 - rank, numel=128))
        head = header(rank, 2, pid=100 + rank)
        records.append(record_of(sorted(events, key=lambda e: e.t), head))
    return align(records)


def _names(processes: list[ObservedProcess]) -> list[list[str]]:
    diagram = pipeline_diagram(processes)
    assert diagram is not None
    return [[block.name for block in row.blocks] for row in diagram.rows]


def test_gpipe_runs_every_forward_of_a_stage_before_its_first_backward() -> None:
    diagram = pipeline_diagram(stages(GPIPE))
    assert diagram is not None and diagram.schedule == "GPipe"
    assert (diagram.stages, diagram.micro_batches, diagram.step, diagram.steps) == (2, 4, 1, 2)
    assert _names(stages(GPIPE)) == [["F0", "F1", "F2", "F3", "B0", "B1", "B2", "B3"]] * 2
    assert [row.bubble for row in diagram.rows] == pytest.approx([0.2, 0.2]) and diagram.theoretical_bubble == pytest.approx(0.2)
    assert [(b.start - diagram.start, b.end - diagram.start) for b in diagram.rows[1].blocks][4] == pytest.approx((5.0, 6.0))
    assert "GPipe seen, S=2 stages, M=4 micro-batches; step 1: measured bubble by stage 20%, 20%, theory (S−1)/(M+S−1) = 20%" == diagram.summary()


def test_1f1b_interleaves_forwards_and_backwards_after_the_warm_up() -> None:
    diagram = pipeline_diagram(stages(ONE_F_ONE_B))
    assert diagram is not None and diagram.schedule == "1F1B"
    assert _names(stages(ONE_F_ONE_B)) == [["F0", "F1", "B0", "F2", "B1", "F3", "B2", "B3"], ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]]
    assert [row.bubble for row in diagram.rows] == pytest.approx([0.2, 0.2])


def test_the_textbook_panel_replays_the_order_with_every_pass_one_slot() -> None:
    """Measured passes of uneven lengths and gaps; the slots are the lecture's diagrams."""
    uneven = tuple([(kind, start * 3 + stage) for kind, start in row] for stage, row in enumerate(ONE_F_ONE_B))
    slots = pipeline_diagram(stages(uneven)).slots
    assert [[(b.name, b.start) for b in row] for row in slots] == [[(k + str(i), float(t)) for (k, t), i in zip(row, _numbers(row))] for row in ONE_F_ONE_B]
    gpipe = pipeline_diagram(stages(GPIPE)).slots
    assert [[b.start for b in row] for row in gpipe] == [[float(t) for _, t in row] for row in GPIPE]


def _numbers(row: list[tuple[str, int]]) -> list[int]:
    """The micro-batch of each pass of a row: the k-th F (and the k-th B) is micro-batch k."""
    seen = {"F": 0, "B": 0}
    numbers = []
    for kind, _ in row:
        numbers.append(seen[kind])
        seen[kind] += 1
    return numbers


def test_a_stage_holding_more_than_1f1b_allows_is_neither_schedule() -> None:
    mixed = (ONE_F_ONE_B[0], [("F", 1), ("F", 2), ("B", 3), ("F", 4), ("B", 5), ("F", 6), ("B", 7), ("B", 8)])
    assert pipeline_diagram(stages(mixed)).schedule == "neither GPipe nor 1F1B"
    assert schedule_seen([]) == "GPipe"


def test_no_point_to_point_traffic_no_diagram() -> None:
    processes = stages(GPIPE, p2p=False)
    assert not is_pipeline(processes) and pipeline_diagram(processes) is None
    assert pipeline_diagram(stages(GPIPE)[:1]) is None  # one stage alone
    assert pipeline_diagram(stages(GPIPE) + stages(GPIPE)) is None  # two launches of the same ranks


def test_a_step_that_did_not_finish_is_not_drawn() -> None:
    processes = stages(GPIPE)
    unfinished = align([processes[0].record, record_of([e.event for e in processes[1].events if e.start < 26], processes[1].header)])
    diagram = pipeline_diagram(unfinished)
    assert diagram is not None and diagram.step == 0


def test_a_graded_run_of_stages_gets_its_diagram_beside_its_timeline_and_others_do_not(tmp_path: Path) -> None:
    def written(processes: list[ObservedProcess], name: str) -> tuple[str, tuple[str, ...]]:
        return write_run_views(RunSummary(name, "1 node × 2 ranks", 1.0, "ok", records=tuple(p.record for p in processes)), tmp_path / name)

    text, names = written(stages(GPIPE), "gpipe")
    assert names[-1] == PIPELINE and (tmp_path / "gpipe" / PIPELINE).is_file() and "pipeline: pipeline.png: GPipe seen" in text
    text, names = written(stages(GPIPE, p2p=False), "ddp")
    assert PIPELINE not in names and not (tmp_path / "ddp" / PIPELINE).exists() and "pipeline" not in text


@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None, reason="torchrun is not installed beside this Python")
def test_observing_p7_draws_its_1f1b_schedule(tmp_path: Path) -> None:
    torchrun = str(Path(sys.executable).parent / "torchrun")
    script = str(ROOT / "solutions" / "p7" / "p7_pipeline.py")
    observation = observe_command([torchrun, "--nproc_per_node", "2", script, "--schedule=1f1b", "--steps=2"], tmp_path)
    assert observation.exit_status == 0
    assert observation.pipeline == tmp_path / PIPELINE and observation.pipeline.stat().st_size > 10_000
    assert f"pipeline: {tmp_path / PIPELINE}: 1F1B seen (--schedule=1f1b asked), S=2 stages, M=4 micro-batches; step 1" in observation.report
    diagram = pipeline_diagram(observation.processes)
    assert diagram is not None and [b.name for b in diagram.rows[1].blocks] == ["F0", "B0", "F1", "B1", "F2", "B2", "F3", "B3"]
