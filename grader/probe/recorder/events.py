"""Every event the recorder writes (grader.probe.recorder.observers), defined once: one frozen
dataclass per kind, the writer's `to_json` and the reader's strict `parse_event`.

This module runs inside the student's processes too, so it uses the standard library only.

The format (version EVENTS_VERSION): one JSON object per line, its "kind" naming the class
(EVENTS maps kinds to classes) and every other key a field of it. The first line of a file is
the `process` header, which carries the version. Every event has
    t     -- seconds since the file was opened (a span's start),
    seq   -- the order in which events began (a span is written at its end, so the file's
             order is the order they ended),
    step  -- the optimizer steps finished before it began;
a span (forward, backward, allreduce, p2p, optimizer) also has `dur`, its length in seconds.

Reading is strict: an unknown kind, a missing, unexpected or ill-typed field, a text or a list
beyond its bound, or a header of another version raises DamagedRecords with a one-sentence
reason. The files are written next to the student's code, which can write into them too: what
they hold explains a verdict, it is never trusted more than that.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Mapping, TypeVar

from grader.probe import typed
from grader.probe.typed import JsonValue, Malformed, Value, dumps, loads, parse_tagged

EVENTS_VERSION = 3  # 3: point-to-point sends and receives (p2p)
MAX_FILE_BYTES = 64 << 20  # the largest event file the recorder writes (grading asks for less)


class DamagedRecords(Malformed):
    """An event file holds something the recorder does not write; the message says what."""


# ------------------------------------------------------------------ parts of events
@dataclass(frozen=True)
class TensorInfo:
    """A tensor argument of a call: its shape and device."""

    shape: tuple[int, ...]
    device: str


@dataclass(frozen=True)
class Frame:
    """One line of a trimmed stack or traceback, relative to the submission."""

    file: str
    line: int | None
    func: str
    code: str = ""

    def describe(self) -> str:
        """'main.py:7 in <module>: boom()'."""
        where = f"{self.file}:{self.line} in {self.func}"
        return f"{where}: {self.code}" if self.code else where


@dataclass(frozen=True, kw_only=True)
class ExceptionInfo:
    """An exception: its type and message, the student's frames (outermost first) and the
    innermost library frame where it was raised, if any."""

    type: str
    message: str
    frames: tuple[Frame, ...] = ()
    library_frame: Frame | None = None


# ------------------------------------------------------------------ events
@dataclass(frozen=True, kw_only=True)
class Event:
    """What every event has (see the module's docstring)."""

    kind: ClassVar[str] = ""
    t: float
    seq: int
    step: int


@dataclass(frozen=True, kw_only=True)
class Span(Event):
    """An event with a length: it began at `t` and lasted `dur` seconds."""

    dur: float

    @property
    def end(self) -> float:
        return self.t + self.dur


@dataclass(frozen=True, kw_only=True)
class Process(Event):
    """The header, the first line of every file: who wrote it."""

    kind: ClassVar[str] = "process"
    version: int
    pid: int
    ppid: int  # the parent: torchrun's launcher, mp.spawn's caller, the grader's job leader
    host: str
    argv: tuple[str, ...]
    rank: int | None  # torchrun's RANK, LOCAL_RANK and WORLD_SIZE where it set them
    local_rank: int | None
    world_size: int | None
    virtual_gpus: int
    cuda: bool  # real CUDA devices are in use (times are host times)
    wall: float  # wall-clock time at `t` = 0, so the files of several processes line up
    torch: str


@dataclass(frozen=True, kw_only=True)
class InitPgCall(Event):
    """init_process_group was called (written before the call): the backend asked for and the
    names of the keyword arguments (a timeout among them, the recorder's default if none)."""

    kind: ClassVar[str] = "init_pg_call"
    backend: str
    kwargs: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class InitPg(Event):
    """init_process_group returned: the backend asked for and the one used, rank and size."""

    kind: ClassVar[str] = "init_pg"
    requested: str
    backend: str
    rank: int
    world_size: int


@dataclass(frozen=True, kw_only=True)
class DestroyPg(Event):
    """destroy_process_group was called, for the default group or another one."""

    kind: ClassVar[str] = "destroy_pg"
    default_group: bool


@dataclass(frozen=True, kw_only=True)
class Ddp(Event):
    """A DistributedDataParallel was built: its device_ids, its parameters' devices and the
    current CUDA device."""

    kind: ClassVar[str] = "ddp"
    device_ids: tuple[str, ...] | None
    param_devices: tuple[str, ...]
    current_device: str | None = None  # the current CUDA device as DDP was built (None without CUDA)


@dataclass(frozen=True, kw_only=True)
class DdpArgs(Event):
    """A DistributedDataParallel is about to be built with these options (the reference's
    timed launches take on the costly ones the traffic confirms: grader/speed/measure.py)."""

    kind: ClassVar[str] = "ddp_args"
    find_unused_parameters: bool
    static_graph: bool
    gradient_as_bucket_view: bool
    bucket_cap_mb: float | None


@dataclass(frozen=True, kw_only=True)
class CommHook(Event):
    """The script registered a DDP communication hook of its own (the recorder's hook calls
    it, so its buckets are still seen)."""

    kind: ClassVar[str] = "comm_hook"
    name: str


@dataclass(frozen=True, kw_only=True)
class Model(Event):
    """A model seen for the first time (at DDP's construction or its first call): its label,
    its parameters (names, shapes, devices, count) and, for the first model where the
    recorder takes values, their initial values."""

    kind: ClassVar[str] = "model"
    when: str  # "ddp" or "first_forward"
    label: str  # "DistributedDataParallel(Net)" for a wrapper, "Net" for a plain model
    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    devices: tuple[str, ...]  # one per parameter
    params: int
    values: tuple[tuple[Value, ...], ...] | None


@dataclass(frozen=True, kw_only=True)
class Globals(Event):
    """The script's setup variables the grader asked for, read from its module namespace."""

    kind: ClassVar[str] = "globals"
    when: str  # "ddp", "first_forward" or "end"
    values: dict[str, JsonValue]


@dataclass(frozen=True, kw_only=True)
class Forward(Span):
    """A module call. `role`: "model" (an outermost call of a module with parameters),
    "replica" (a DataParallel replica), "stage" (a one-device part of a model spread over
    several devices) or None (another call, recorded in the first detail steps only)."""

    kind: ClassVar[str] = "forward"
    module: str  # the class name
    name: str | None  # the module's name inside the model, where known
    label: str
    role: str | None
    depth: int  # module calls around it in its thread
    call: int | None  # the outermost model call it belongs to
    has_params: bool
    replica: bool
    inputs: tuple[TensorInfo, ...]
    devices: tuple[str, ...] | None  # its parameters' devices, where recorded
    rows: tuple[Value, ...] | None = None  # a model call's first input, each row summed (values steps, gradients on)


@dataclass(frozen=True, kw_only=True)
class ForwardOutput(Event):
    """Text the script printed while a recorded module call ran (first detail steps)."""

    kind: ClassVar[str] = "forward_output"
    text: str
    module: str
    depth: int
    inputs: tuple[TensorInfo, ...]


@dataclass(frozen=True, kw_only=True)
class Backward(Span):
    """torch.autograd.backward (which Tensor.backward calls)."""

    kind: ClassVar[str] = "backward"


@dataclass(frozen=True, kw_only=True)
class AllReduce(Span):
    """An all-reduce: a DDP gradient bucket (source "ddp", from its communication hook until
    the reduction completed) or an explicit dist.all_reduce (source "call")."""

    kind: ClassVar[str] = "allreduce"
    source: str
    numel: int
    bytes: int
    bucket: int | None
    async_op: bool


P2P_OPS = ("send", "recv", "isend", "irecv")  # the point-to-point calls the recorder times


@dataclass(frozen=True, kw_only=True)
class P2p(Span):
    """A point-to-point call of the script's: dist.send or dist.recv (the span lasts until the
    tensor went or came), dist.isend or dist.irecv (the span is the posting only), with the peer
    rank and the tensor's element count."""

    kind: ClassVar[str] = "p2p"
    op: str  # "send", "recv", "isend" or "irecv"
    peer: int | None  # dst or src; None for a recv from any source
    numel: int


@dataclass(frozen=True, kw_only=True)
class OptGrads(Event):
    """Before an optimizer step: the gradients of its parameters (None once values are no
    longer taken)."""

    kind: ClassVar[str] = "opt_grads"
    names: tuple[str, ...]
    grads: tuple[tuple[Value, ...] | None, ...] | None


@dataclass(frozen=True, kw_only=True)
class Optimizer(Span):
    """An optimizer step (CUDA synchronised at its end) and its parameters after it."""

    kind: ClassVar[str] = "optimizer"
    optimizer: str
    names: tuple[str, ...]
    values: tuple[tuple[Value, ...], ...] | None


@dataclass(frozen=True, kw_only=True)
class Memory(Event):
    """At the end: the peak memory allocated on each CUDA device, or why it was not measured."""

    kind: ClassVar[str] = "memory"
    peak: tuple[int, ...] | None
    why: str | None


@dataclass(frozen=True, kw_only=True)
class Raised(Event, ExceptionInfo):
    """The exception the script ended with (uncaught in its main thread)."""

    kind: ClassVar[str] = "exception"


@dataclass(frozen=True, kw_only=True)
class Note(Event):
    """Something the recorder could not see, in one sentence."""

    kind: ClassVar[str] = "note"
    text: str


@dataclass(frozen=True, kw_only=True)
class Exit(Event):
    """How the script ended: "returned", "system_exit" or "exception" (with its exit code),
    or "atexit" (Python ran its exit handlers; the code is not known there)."""

    kind: ClassVar[str] = "exit"
    how: str
    code: int | None


@dataclass(frozen=True, kw_only=True)
class EndState(Event):
    """At the end: whether a default process group is still initialised, and the steps taken."""

    kind: ClassVar[str] = "end_state"
    pg_initialized: bool
    steps: int


@dataclass(frozen=True, kw_only=True)
class Truncated(Event):
    """The file reached its size limit: nothing after this was recorded."""

    kind: ClassVar[str] = "truncated"


@dataclass(frozen=True, kw_only=True)
class Cell(Event):
    """A notebook's graded cell ran (grader.probe.drivers.notebook)."""

    kind: ClassVar[str] = "cell"
    index: int
    ok: bool
    exception: ExceptionInfo | None = None
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class DpCase(Event):
    """p4's driver ran simulate_data_parallel on one case of the grader's."""

    kind: ClassVar[str] = "dp_case"
    index: int
    batch: int
    parts: int
    missing: str | None = None  # the function the notebook does not define
    chunks: tuple[tuple[int, ...], ...] | None = None
    output_shape: tuple[int, ...] | None = None
    output: tuple[Value, ...] | None = None
    exception: ExceptionInfo | None = None
    returned: str | None = None  # what came back, when it was not (chunks, output)
    calls: tuple[int, ...] | None = None  # the rows of each call of the model during the case


@dataclass(frozen=True, kw_only=True)
class Mp(Event):
    """p4's driver ran place_layers ("place") and model_parallel_forward ("forward")."""

    kind: ClassVar[str] = "mp"
    missing: str | None = None
    stage: str | None = None
    devices: tuple[tuple[str, ...], ...] | None = None
    inputs: dict[str, str] | None = None  # layer -> the device of its input
    output_device: str | None = None
    output_shape: tuple[int, ...] | None = None
    output: tuple[Value, ...] | None = None
    exception: ExceptionInfo | None = None
    layer1_grad: tuple[Value, ...] | None = None  # layer 1's weight gradient after output.sum().backward() (None: it got none)


@dataclass(frozen=True, kw_only=True)
class Answers(Event):
    """p4's driver read the notebook's answer variables."""

    kind: ClassVar[str] = "answers"
    values: dict[str, JsonValue]


EVENTS: Mapping[str, type[Event]] = MappingProxyType({
    cls.kind: cls
    for cls in (
        Process, InitPgCall, InitPg, DestroyPg, DdpArgs, Ddp, CommHook, Model, Globals, Forward, ForwardOutput, Backward,
        AllReduce, P2p, OptGrads, Optimizer, Memory, Raised, Note, Exit, EndState, Truncated, Cell, DpCase, Mp, Answers,
    )
})
E = TypeVar("E", bound=Event)


# ------------------------------------------------------------------ writing and reading
def to_json(event: Event) -> str:
    """The line (without its newline) that stands for `event` in an event file."""
    return dumps(event, "kind", event.kind)


def plain(value: Any) -> Any:
    """An event, or a part of one, as the JSON values its line holds (dicts, lists, ...)."""
    if isinstance(value, Event):
        return {"kind": value.kind, **typed.plain(value)}
    return typed.plain(value)


def parse_event(obj: Any) -> Event:
    """The event a parsed JSON line stands for; DamagedRecords when it is not one the recorder
    writes (unknown kind, missing, unexpected or ill-typed field, a bound exceeded, a header
    of another format version)."""
    try:
        event = parse_tagged(obj, "kind", EVENTS, "event")
    except Malformed as exc:
        raise DamagedRecords(str(exc)) from None
    if isinstance(event, Process) and event.version != EVENTS_VERSION:
        raise DamagedRecords(f"the records are of format version {event.version}, this grader reads version {EVENTS_VERSION}")
    return event


def parse_line(line: str | bytes) -> Event:
    """`parse_event` of one line of an event file (the recorder writes ASCII JSON only)."""
    try:
        obj = loads(line, "record")
    except Malformed as exc:
        raise DamagedRecords(str(exc)) from None
    return parse_event(obj)
