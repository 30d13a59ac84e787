"""What the grader's hub saw (grader.probe.transport.hub), defined once for the hub that writes
it and the grader that reads it (grader.run.local, then grader.traffic): every operation the
ranks' process groups carried, in the order the hub completed them, with each member's part,
and how each rank's connection ended.

The report travels like every answer of the launcher (grader.probe.messages): compressed,
base64-encoded and cut into `traffic` answers, each one atomic write on the launcher's pipe,
which the ranks do not hold. It is read strictly (grader.probe.typed): a report that is not one
is no report.
"""
from __future__ import annotations

import base64
import zlib
from dataclasses import dataclass
from typing import ClassVar, cast

from grader.probe.transport.wire import TensorMeta
from grader.probe.typed import Blob, Malformed, Value, dumps, loads, parse_tagged

MAX_REPORT_BYTES = 256 << 20  # of a report, unpacked
PART_CHARS = 3000  # base64 characters per `traffic` answer: a line well under PIPE_BUF
MAX_REPORT_PARTS = MAX_REPORT_BYTES * 4 // 3 // PART_CHARS + 1  # a report of MAX_REPORT_BYTES stored uncompressed: more parts are dropped as they arrive (grader/run/local.py)


FLOATING = ("float16", "bfloat16", "float32", "float64")


def pipeline_send(meta: TensorMeta, dim: int) -> bool:
    """Whether a send of the one tensor `meta` is what the pipeline checks read as an activation
    or a gradient, and so what the hub counts and may substitute (one rule for both: a send
    the hub counts is one the checks judge): floating point (bfloat16 too), at least one
    dimension, not empty, its last dimension a multiple of `dim`."""
    return meta.dtype in FLOATING and bool(meta.shape) and meta.numel > 0 and meta.shape[-1] % dim == 0


@dataclass(frozen=True)
class Substitution:
    """Sends the hub delivers with values of its own (p7: a stage must compute on what it
    receives). Between each two neighbouring ranks, in each direction, the hub counts the sends
    of one tensor that `pipeline_send` accepts (as the pipeline checks read them), in blocks
    of `micro_batches` (a step's), and replaces one send of each block: of the first `steps`
    blocks forward (to the higher rank), of the first `steps` − 1 backward (a gradient of the
    last step changes nothing that is sent after it). Which send, and the values, it draws from
    the kernel's randomness in its own memory, which the ranks cannot read. Forward: uniform in
    [-1, 1]; backward: standard normal draws times the root mean square of the values sent.
    The record keeps what was sent, and what was delivered beside it (`Carried.delivered`)."""

    dim: int
    micro_batches: int
    steps: int


@dataclass(frozen=True)
class CarrierPlan:
    """What the hub of a job is told: how long a collective may wait for its last member, and
    how many bytes of what the members sent it keeps for the grader."""

    wait_s: float  # from a collective's first member to its last, at most
    keep_bytes: int  # raw bytes of floating-point inputs of reductions (and broadcasts) kept, at most (beyond: only their sums)
    keep_broadcasts: bool = True  # broadcasts' data count too (DDP's start: whether it was built); a timed launch keeps reductions only
    keep_sends: bool = True  # sends' data count too (p7's activations and gradients); a timed launch keeps none
    substitute: Substitution | None = None  # sends delivered with the hub's own values (p7's checked runs)


@dataclass(frozen=True)
class Part:
    """One member's part in a carried operation."""

    rank: int  # global rank
    at: float  # seconds on the hub's clock when its call arrived
    inputs: tuple[TensorMeta, ...]
    data: Blob  # its inputs' bytes, one after the other; "" when not kept (beyond the plan's keep_bytes, or not floating point)
    sums: tuple[Value, ...]  # per input: the sum of its elements, in its own precision (0 for whole numbers)


@dataclass(frozen=True)
class Carried:
    """One operation the hub carried (or failed): a collective of a group, or a send/recv."""

    group: str
    index: int  # its place in the group's sequence of collectives; -1 for send and recv
    kind: str
    reduce: str
    root: int  # global rank of the root (or of the other end of a send/recv), -1 for none
    done: float  # seconds on the hub's clock when it was delivered (or failed)
    members: tuple[Part, ...]
    error: str | None
    delivered: Blob = ""  # a send the hub delivered with values of its own (CarrierPlan.substitute): their bytes, in the sent dtype


@dataclass(frozen=True)
class GroupRecord:
    """A process group as its members registered it."""

    name: str  # c10d's: "0" is the default group
    ranks: tuple[int, ...]  # its members' global ranks
    joined: tuple[int, ...]  # the members that registered it (created it in their process)


@dataclass(frozen=True)
class RankEnd:
    """How a rank's connection to the hub ended: "closed" (the process closed it: it ended),
    "broken: <why>" (it sent what the transport does not carry: the hub ended it), "lost: <why>"
    (it failed, or closed in the middle of a call: the process died), or "open" (still open when
    the hub was stopped)."""

    rank: int
    at: float
    how: str


@dataclass(frozen=True)
class TrafficReport:
    """Everything the hub carried for a job's ranks."""

    report: ClassVar[str] = "traffic"
    world: int
    groups: tuple[GroupRecord, ...]
    carried: tuple[Carried, ...]
    ends: tuple[RankEnd, ...]
    omitted: int  # operations past the report's bound, not listed
    kept_bytes: int  # of data kept, against the plan's keep_bytes
    started: float = 0.0  # the hub's clock's zero (every time above is from it) by its clock, CLOCK_MONOTONIC: the grader's too (no time namespace), so the grader can place the report's times among its own (grader/speed/measure.py quiet_steps)


def report_line(report: TrafficReport) -> str:
    return dumps(report, "report", report.report)


def parse_report(text: str | bytes) -> TrafficReport:
    """The report a line holds; Malformed when it is not one."""
    return cast(TrafficReport, parse_tagged(loads(text, "traffic report"), "report", {TrafficReport.report: TrafficReport}, "traffic report"))


def pack(report: TrafficReport) -> list[str]:
    """The report as base64 chunks of its compressed line, each under PART_CHARS."""
    line = report_line(report).encode()
    # kept tensors (base64 already) make a long line that compresses little and slowly: stored as it is
    data = base64.b64encode(zlib.compress(line, 1 if len(line) < 1 << 20 else 0)).decode()
    return [data[i : i + PART_CHARS] for i in range(0, len(data), PART_CHARS)] or [""]


def unpack(chunks: list[str]) -> TrafficReport:
    """The report from its chunks in order; Malformed when they do not make one."""
    try:
        packed = base64.b64decode("".join(chunks), validate=True)
        inflate = zlib.decompressobj()
        text = inflate.decompress(packed, MAX_REPORT_BYTES)
    except (ValueError, zlib.error) as exc:
        raise Malformed(f"the hub's report cannot be unpacked: {exc}") from None
    if inflate.unconsumed_tail:
        raise Malformed(f"the hub's report is larger than {MAX_REPORT_BYTES} bytes")
    return parse_report(text)
