"""What crosses the socket between a rank's process group (grader.probe.transport.client) and
the grader's hub (grader.probe.transport.hub), defined once for both ends.

A frame is an 8-byte prefix (two little-endian uint32: the header's length, the payload's
length), a header (one JSON object of grader.probe.typed, tagged "op" from the rank, "event"
from the hub) and a payload: the raw bytes of the tensors the header lists, one after the
other, C-contiguous, in the machine's byte order. Standard library only: the client end runs
in the student's process.

The hub reads every frame strictly (`FrameReader`): a header that is not one of these, a
payload whose length is not what its tensors' dtypes and shapes make, a dtype outside
DTYPES, a frame over its bound: the rank's connection is broken with that reason, and every
collective it was part of fails for the others with it.
"""
from __future__ import annotations

import math
import socket
import struct
from dataclasses import dataclass
from types import MappingProxyType
from typing import ClassVar, Mapping, Union, cast

from grader.probe.typed import Malformed, dumps, loads, parse_tagged

PREFIX = struct.Struct("<II")
MAX_HEADER = 1 << 16  # bytes of one header
MAX_PAYLOAD = 1 << 30  # bytes of one frame's tensors
MAX_TENSORS = 4096  # tensors of one call (a coalesced all-reduce of many parameters)

# dtype name -> bytes per element: what the transport carries (the hub and client map names to torch dtypes)
DTYPES: Mapping[str, int] = MappingProxyType({
    "float32": 4, "float64": 8, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1,
    "complex64": 8, "complex128": 16,
})

KINDS = (
    "all_reduce",  # every member's tensors reduced, to every member (coalesced: several tensors)
    "broadcast",  # the root's tensors to every other member
    "all_gather",  # every member's tensor to every member, in member order
    "reduce_scatter",  # member r gets the reduction of every member's r-th tensor
    "reduce",  # the reduction to the root
    "gather",  # every member's tensor to the root
    "scatter",  # the root's r-th tensor to member r
    "all_to_all",  # member s's r-th tensor to member r
    "barrier",  # nothing but the meeting
    "send",  # to `peer`, with `tag` (answered once a recv has taken it, as gloo's send completes)
    "recv",  # from `peer` (-1: any member), with `tag`
)
REDUCTIONS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
POINT_TO_POINT = ("send", "recv")


class BadFrame(Malformed):
    """A frame is not one the other end writes; the message says why."""


@dataclass(frozen=True)
class TensorMeta:
    """A tensor in a payload: its dtype (a key of DTYPES) and shape."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPES[self.dtype]

    def describe(self) -> str:
        """'[64, 32] float32'."""
        return f"{list(self.shape)} {self.dtype}"


# ------------------------------------------------------------------ rank -> hub
@dataclass(frozen=True)
class Group:
    """A process group the rank belongs to: `ranks` are the global ranks of its members, in
    the order of their ranks in the group; `name` is c10d's (the same on every member)."""

    op: ClassVar[str] = "group"
    name: str
    ranks: tuple[int, ...]
    member: int  # the registering rank's rank in the group, as its process group says


@dataclass(frozen=True)
class Call:
    """One collective or point-to-point operation of the rank on a group; its `inputs` follow
    as the payload, `outputs` are the tensors it will fill from the answer."""

    op: ClassVar[str] = "call"
    id: int  # the rank's own numbering: the answer carries it back
    group: str
    kind: str  # one of KINDS
    reduce: str  # one of REDUCTIONS for the reducing kinds, "" otherwise
    root: int  # the root's rank in the group (broadcast, reduce, gather, scatter), -1 otherwise
    peer: int  # send/recv: the other end's rank in the group (-1: any, for recv); -1 otherwise
    tag: int
    inputs: tuple[TensorMeta, ...]
    outputs: tuple[TensorMeta, ...]


# ------------------------------------------------------------------ hub -> rank
@dataclass(frozen=True)
class Done:
    """The answer to a Call: the tensors its `outputs` are filled with follow as the payload
    (`outputs` here says which, none on error); `source`, for recv, is the sender's rank in the group."""

    event: ClassVar[str] = "done"
    id: int
    outputs: tuple[TensorMeta, ...]
    source: int
    error: str | None


Request = Union[Group, Call]
REQUESTS: Mapping[str, type] = MappingProxyType({cls.op: cls for cls in (Group, Call)})


def _valid_metas(metas: tuple[TensorMeta, ...], what: str) -> None:
    if len(metas) > MAX_TENSORS:
        raise BadFrame(f"{what} lists more than {MAX_TENSORS} tensors")
    for meta in metas:
        if meta.dtype not in DTYPES:
            raise BadFrame(f"{what} has a tensor of dtype {meta.dtype[:40]!r}, which the transport does not carry")
        if any(size < 0 for size in meta.shape) or len(meta.shape) > 16:
            raise BadFrame(f"{what} has a tensor of shape {list(meta.shape)[:17]}")
        if meta.nbytes > MAX_PAYLOAD:
            raise BadFrame(f"{what} has a tensor of more than {MAX_PAYLOAD} bytes")


def check_request(request: Request) -> Request:
    """`request`, when its values are in range; BadFrame otherwise."""
    if isinstance(request, Group):
        if not request.ranks or len(set(request.ranks)) != len(request.ranks) or min(request.ranks) < 0 or not 0 <= request.member < len(request.ranks):
            raise BadFrame(f"group {request.name[:40]!r} lists its members as {list(request.ranks)[:8]}, this one as its rank {request.member}")
        return request
    what = f"call {request.id}"
    if request.kind not in KINDS:
        raise BadFrame(f"{what} is of kind {request.kind[:40]!r}, not one of {', '.join(KINDS)}")
    if request.reduce not in ("", *REDUCTIONS):
        raise BadFrame(f"{what} reduces with {request.reduce[:40]!r}")
    _valid_metas(request.inputs, what)
    _valid_metas(request.outputs, what)
    return request


def request_frame(request: Request) -> bytes:
    """The prefix and header of a request (its payload, if any, is sent after it)."""
    header = dumps(request, "op", request.op).encode()
    payload = sum(meta.nbytes for meta in request.inputs) if isinstance(request, Call) else 0
    return PREFIX.pack(len(header), payload) + header


def answer_frame(answer: Done) -> bytes:
    """The prefix and header of an answer (its payload is sent after it)."""
    header = dumps(answer, "event", answer.event).encode()
    return PREFIX.pack(len(header), sum(meta.nbytes for meta in answer.outputs)) + header


def parse_request(header: bytes, payload_bytes: int) -> Request:
    """The request a header holds, checked against its payload's length; BadFrame otherwise."""
    try:
        request = cast(Request, parse_tagged(loads(header, "frame"), "op", REQUESTS, "request"))
    except Malformed as exc:
        raise BadFrame(str(exc)) from None
    request = check_request(request)
    declared = sum(meta.nbytes for meta in request.inputs) if isinstance(request, Call) else 0
    if declared != payload_bytes:
        raise BadFrame(f"a {request.op!r} frame carries {payload_bytes} bytes where its tensors make {declared}")
    return request


def parse_answer(header: bytes) -> Done:
    """The answer a header holds; BadFrame otherwise."""
    try:
        answer = cast(Done, parse_tagged(loads(header, "frame"), "event", {Done.event: Done}, "answer"))
    except Malformed as exc:
        raise BadFrame(str(exc)) from None
    _valid_metas(answer.outputs, f"answer {answer.id}")
    return answer


SCM_CREDENTIALS = getattr(socket, "SCM_CREDENTIALS", 2)  # Linux's: struct ucred (pid, uid, gid), attached by the kernel
CREDENTIALS_SPACE = socket.CMSG_SPACE(12)


def pass_credentials(sock: socket.socket) -> None:
    """Have the kernel attach its sender's credentials to everything sent to `sock` from now on
    (SO_PASSCRED): set before the other end can send, so that nothing arrives without them."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)


class FrameReader:
    """Frames out of a socket, read straight into buffers of their size (`read_from`), whole
    ones out of `frames`. A prefix that announces more than MAX_HEADER or MAX_PAYLOAD bytes
    raises BadFrame at once, before the bytes are waited for."""

    def __init__(self) -> None:
        self._prefix = bytearray(PREFIX.size)
        self._header = bytearray()
        self._payload = bytearray()
        self._part = 0  # 0: the prefix, 1: the header, 2: the payload
        self._got = 0  # bytes of the current part received
        self._done: list[tuple[bytes, bytearray]] = []
        self.senders: set[int] = set()  # pids that sent what `read_from(credentials=True)` received

    def _target(self) -> bytearray:
        return (self._prefix, self._header, self._payload)[self._part]

    def _advance(self) -> None:
        """The current part is whole: on to the next (or the frame is)."""
        self._got = 0
        if self._part == 0:
            head, body = PREFIX.unpack(self._prefix)
            if head > MAX_HEADER or body > MAX_PAYLOAD:
                raise BadFrame(f"a frame announces a {head}-byte header and a {body}-byte payload, over the transport's bounds")
            self._header, self._payload = bytearray(head), bytearray(body)
            self._part = 1
        elif self._part == 1:
            self._part = 2
        else:
            self._done.append((bytes(self._header), self._payload))
            self._part = 0
        if self._part and not len(self._target()):
            self._advance()

    def feed(self, data: bytes) -> None:
        """Take bytes received some other way (tests, a stream that is not a socket)."""
        view = memoryview(data)
        while len(view):
            target = self._target()
            take = min(len(target) - self._got, len(view))
            target[self._got : self._got + take] = view[:take]
            self._got += take
            view = view[take:]
            if self._got == len(target):
                self._advance()

    def read_from(self, sock: socket.socket, credentials: bool = False) -> bool:
        """Receive what `sock` has (all of it, on a non-blocking socket; at least a little, on a
        blocking one); False once it is closed. BlockingIOError ends a non-blocking read. With
        `credentials` (a Unix socket with SO_PASSCRED set before anything was sent on it), the
        pid of the process that sent each piece, as the kernel attaches it, goes into
        `senders` (a stream's read never joins two senders' data)."""
        while True:
            target = self._target()
            try:
                if credentials:
                    count, ancillary, _, _ = sock.recvmsg_into([memoryview(target)[self._got :]], CREDENTIALS_SPACE)
                    self.senders.update(pid for level, kind, data in ancillary if level == socket.SOL_SOCKET and kind == SCM_CREDENTIALS and len(data) >= 12 for pid in struct.unpack_from("i", data) if pid > 0)
                else:
                    count = sock.recv_into(memoryview(target)[self._got :])
            except BlockingIOError:
                return True
            if count == 0:
                return False
            self._got += count
            if self._got == len(target):
                self._advance()
            if sock.getblocking() and self._done:
                return True

    def frames(self) -> list[tuple[bytes, bytearray]]:
        """The (header, payload) of every whole frame received so far."""
        done, self._done = self._done, []
        return done

    @property
    def pending(self) -> int:
        """Bytes received of a frame not whole yet."""
        return self._got + sum(len(part) for part in (self._prefix, self._header)[: self._part])
