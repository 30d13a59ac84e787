"""The grader's hub: the one process through which the ranks of a job communicate.

Mechanism: the job leader (grader.probe.zygote) makes a socket pair per rank before it forks
anything, forks the hub with one end of each and every rank with the other end of its own
pair only. A rank's process groups (grader.probe.transport.client) send every collective and
every send/recv through its socket; the hub matches the calls of a group's members in the
order each member made them (the k-th collective of every member of a group is one
collective: `collectives.mismatch` says when they cannot be), computes what each member
receives (`collectives.deliver`), answers, and keeps a record of what each member sent. The
ranks hold no socket to each other's transport: what the record says they sent is what they
sent, whatever they record about themselves.

What protects it, as the launcher: it is forked from the launcher, which is not dumpable, so
the submission's processes (the same uid in the same sandbox) can neither read nor write its
memory nor open its descriptors (ptrace is refused by the sandbox's seccomp filter); its report
goes to the grader through the launcher's pipe. A submission can kill it or starve it: then
its ranks' collectives fail and no report arrives, and the checks that need one fail.

Failure is always an answer, never a hang: a collective whose members disagree (another kind,
root, reduction or tensors) fails for each of them with both calls named; one that waits
longer than the plan's `wait_s` for a member, or whose member's connection ended, fails for
those that came, naming the missing rank and what it did last.

A send is answered when a recv takes it, not when it arrives: gloo's send completes only once
its receiver has received it (a rendezvous, for `send` and for `isend`'s Work alike), so a
schedule that deadlocks on gloo's sends deadlocks here too, where the grader's idle watch
names it hung. A send no recv takes within `wait_s`, or whose receiver left, fails for its
sender; the hub records a send when its recv takes it.

Where the plan says so (`CarrierPlan.substitute`, p7's checked runs), the hub delivers one
send of each step, each way between neighbouring ranks, with values it draws itself from the
kernel's randomness: a stage that computes on what it receives answers with the
gradient (or the next activation) of those values, which the grader computes again; a stage
that relays what another process computed, or replays what it computed ahead, answers for the
values it expected. The record keeps both what was sent and what was delivered.
"""
from __future__ import annotations

import base64
import hashlib
import errno
import os
import secrets
import select
import signal
import socket
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from grader.probe.transport.collectives import NAME_OF, deliver, describe_call, fits, mismatch, tensors_of
from grader.probe.transport.traffic import Carried, CarrierPlan, GroupRecord, Part, RankEnd, Substitution, TrafficReport, pack, pipeline_send
from grader.probe.transport.wire import BadFrame, Call, Done, FrameReader, Group, TensorMeta, answer_frame, parse_request

MAX_CARRIED = 1 << 16  # operations listed in a report; later ones are counted, not listed
SOCKET_BUFFER = 4 << 20  # asked for each connection's kernel buffers (the kernel may give less)
KEPT_KINDS = ("all_reduce", "reduce", "reduce_scatter", "broadcast")


@dataclass
class _Pending:
    """A collective some members of a group have called."""

    calls: dict[int, Call] = field(default_factory=dict)  # by rank in the group
    inputs: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    arrived: dict[int, float] = field(default_factory=dict)


@dataclass
class _Group:
    name: str
    ranks: tuple[int, ...]  # global ranks, in group order
    count: dict[int, int] = field(default_factory=dict)  # collectives called so far, by global rank
    pending: dict[int, _Pending] = field(default_factory=dict)  # by index in the group's sequence
    failed: dict[int, str] = field(default_factory=dict)  # abandoned collectives: a late member gets their error
    joined: list[int] = field(default_factory=list)  # the members that registered it, in order

    def member(self, rank: int) -> int:
        return self.ranks.index(rank)


@dataclass
class _Rank:
    sock: socket.socket
    reader: FrameReader = field(default_factory=FrameReader)
    out: deque = field(default_factory=deque)  # bytes to send, in order
    end: RankEnd | None = None
    last: str = "nothing yet"  # its last call, for a message about a collective it did not join
    pid: int | None = None  # the process that writes its frames (the kernel's credentials of the first)


NAME_CHARS = 64  # of a process group's name in the report: each operation names its group (a name of 8,000 characters and 14,000 barriers made a report that took the grader to 837 MiB)


def report_name(name: str) -> str:
    """A group's name as the report writes it: whole up to NAME_CHARS, else cut and told apart
    from every other cut name by a digest of the whole ("0" stays the default group's)."""
    if len(name) <= NAME_CHARS:
        return name
    return f"{name[:NAME_CHARS - 16]}…{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:15]}"


def _parent_of(pid: int) -> int | None:
    """The parent of process `pid` (/proc's stat, after the command's closing parenthesis), or
    None where it has ended already or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return int(stat.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


class Hub:
    """Serves the collectives of `world` ranks over their sockets (rank -> socket); `serve`
    returns the report once every connection has ended or `stop` was called."""

    def __init__(self, sockets: dict[int, socket.socket], plan: CarrierPlan, clock: Callable[[], float] = time.monotonic, launcher: int | None = None) -> None:
        self.launcher = launcher  # the process that forked the ranks: each connection's writer must be its child (None: not checked)
        self.world = len(sockets)
        self.plan = plan
        self._clock = clock
        self._start = clock()
        self._ranks = {rank: _Rank(sock) for rank, sock in sockets.items()}
        for sock in sockets.values():
            sock.setblocking(False)
            _widen(sock)
        self._groups: dict[str, _Group] = {}
        self._mail: dict[tuple[str, int, int, int], deque] = {}  # (group, from, to, tag) -> sends not received yet
        self._receiving: list[tuple[int, Call, float]] = []  # recvs waiting for a send: (rank, call, arrived)
        self._carried: list[Carried] = []
        self._omitted = 0
        self._kept = 0
        self._full = False  # the keep_bytes are spent
        self._stopped = False
        self._substitutes = _Substitutes(plan.substitute) if plan.substitute is not None else None

    # ---------------------------------------------------------------- the loop
    def now(self) -> float:
        return self._clock() - self._start

    def stop(self) -> None:
        """End `serve` at its next turn (a signal handler may call it)."""
        self._stopped = True

    def serve(self) -> TrafficReport:
        """Carry until every connection has ended (or, once `stop` was called, until nothing
        more is waiting to be read); the report."""
        while any(r.end is None or r.out for r in self._ranks.values()):
            stopping = self._stopped
            live = {r.sock.fileno(): rank for rank, r in self._ranks.items() if r.end is None}
            writing = {r.sock.fileno(): rank for rank, r in self._ranks.items() if r.out and r.sock.fileno() >= 0}
            try:
                readable, writable, _ = select.select(list(live), list(writing), [], 0 if stopping else self._next_deadline())
            except InterruptedError:
                continue
            except OSError as exc:
                if exc.errno == errno.EINTR:
                    continue
                raise
            for fd in writable:
                self._flush(writing[fd])
            for fd in readable:
                self._read(live[fd])
            self._expire()
            if stopping and not readable:
                break
        return self.report()

    def _next_deadline(self) -> float:
        firsts = [min(p.arrived.values()) for g in self._groups.values() for p in g.pending.values() if p.arrived]
        firsts += [arrived for _, _, arrived in self._receiving]
        firsts += [sends[0][2] for sends in self._mail.values() if sends]
        if not firsts:
            return 0.5
        return max(0.0, min(firsts) + self.plan.wait_s - self.now()) + 0.001

    def _read(self, rank: int) -> None:
        state = self._ranks[rank]
        try:
            still_open = state.reader.read_from(state.sock, credentials=True)
        except BadFrame as exc:
            self._end(rank, f"broken: {exc}")
            return
        except OSError as exc:
            self._end(rank, f"lost: its connection failed ({exc.strerror or exc})")
            return
        handed = self._handed_on(rank)
        if handed:
            self._end(rank, f"broken: {handed}")
            return
        try:
            for header, payload in state.reader.frames():
                request = parse_request(header, len(payload))
                if isinstance(request, Group):
                    self._join(rank, request)
                else:
                    state.last = describe_call(request) + (f" on group {request.group!r}" if request.group != "0" else "")
                    self._call(rank, request, payload)
        except BadFrame as exc:
            self._end(rank, f"broken: {exc}")
            return
        if not still_open:
            self._end(rank, "closed" if not state.reader.pending else "lost: it closed its connection in the middle of a call")

    def _handed_on(self, rank: int) -> str | None:
        """Why the frames just read on `rank`'s connection are not its own (None: they are): the
        kernel names the process that sent each (SO_PASSCRED, set before any rank existed). A
        connection is its first writer's; another process writing on it, or one process writing
        on two ranks' connections, is a socket handed on (SCM_RIGHTS), whose traffic would be
        credited to a rank that did not make it."""
        state = self._ranks[rank]
        senders, state.reader.senders = state.reader.senders, set()
        for pid in sorted(senders):
            if state.pid is None:
                other = next((r for r, s in self._ranks.items() if r != rank and s.pid == pid), None)
                if other is not None:
                    return f"rank {rank}'s connection to the grader's hub was written by rank {other}'s process: a rank must make its own calls (was its socket handed to another process?)"
                parent = _parent_of(pid)
                if self.launcher is not None and parent is not None and parent != self.launcher:
                    return f"rank {rank}'s connection to the grader's hub was written by a process the launcher did not start as a rank: a rank must make its own calls (was its socket handed to another process?)"
                state.pid = pid
            elif pid != state.pid:
                return f"rank {rank}'s connection to the grader's hub was written by another process than the one that used it first: a rank must make its own calls (was its socket handed to another process?)"
        return None

    def _flush(self, rank: int) -> None:
        state = self._ranks[rank]
        while state.out:
            chunk = state.out[0]
            try:
                sent = state.sock.send(chunk)
            except BlockingIOError:
                return
            except OSError:
                state.out.clear()
                if state.end is None:
                    self._end(rank, "closed")
                return
            if sent < len(chunk):
                state.out[0] = chunk[sent:]
                return
            state.out.popleft()

    # ---------------------------------------------------------------- groups and calls
    def _join(self, rank: int, request: Group) -> None:
        if rank not in request.ranks or any(r >= self.world for r in request.ranks):
            raise BadFrame(
                f"rank {rank} registered group {request.name[:40]!r} of ranks {list(request.ranks)[:8]}, of a world of {self.world} "
                "(init_process_group's rank and world size must be the launcher's RANK and WORLD_SIZE)"
            )
        if request.ranks[request.member] != rank:
            raise BadFrame(
                f"rank {rank}'s process group {request.name[:40]!r} says it is rank {request.member} of {len(request.ranks)} "
                "(init_process_group's rank must be the launcher's RANK)"
            )
        known = self._groups.get(request.name)
        if known is None:
            known = self._groups[request.name] = _Group(request.name, request.ranks)
        elif known.ranks != request.ranks:
            raise BadFrame(f"group {request.name[:40]!r} has ranks {list(known.ranks)[:8]} for its other members, {list(request.ranks)[:8]} for rank {rank}")
        if rank not in known.joined:
            known.joined.append(rank)

    def _call(self, rank: int, call: Call, payload: bytearray) -> None:
        group = self._groups.get(call.group)
        if group is None or rank not in group.ranks:
            self._answer(rank, Done(call.id, (), -1, f"process group {call.group[:40]!r} is not one of rank {rank}'s"), [])
            return
        if call.kind in ("send", "recv"):
            self._point_to_point(rank, group, call, payload)
            return
        index = group.count.get(rank, 0)
        group.count[rank] = index + 1
        if index in group.failed:
            self._answer(rank, Done(call.id, (), -1, group.failed[index]), [])
            return
        pending = group.pending.setdefault(index, _Pending())
        member = group.member(rank)
        pending.calls[member] = call
        pending.inputs[member] = tensors_of(payload, call.inputs)
        pending.arrived[member] = self.now()
        gone = [r for r in group.ranks if self._ranks[r].end is not None and group.count.get(r, 0) <= index]
        if gone:
            self._fail(group, index, self._left(gone[0], group))
        elif len(pending.calls) == len(group.ranks):
            self._complete(group, index)

    def _complete(self, group: _Group, index: int) -> None:
        pending = group.pending.pop(index)
        problem = mismatch(pending.calls)
        parts = self._parts(group, pending, keep=problem is None)  # before delivering: a reduction works in the first sender's buffer
        outputs: dict[int, list[torch.Tensor]] = {}
        if problem is None:
            outputs = deliver(pending.calls, pending.inputs)
            for member, call in pending.calls.items():
                wrong = fits([TensorMeta(_name(t), tuple(t.shape)) for t in outputs[member]], call.outputs)
                if wrong:
                    problem = f"rank {group.ranks[member]} called {describe_call(call)}: {wrong}"
                    break
        error = f"collective {index + 1} of {_group_text(group)}: {problem}" if problem else None
        self._log(group, index, pending, parts, error)
        if error:
            group.failed[index] = error
        for member, call in pending.calls.items():
            self._answer(group.ranks[member], Done(call.id, () if error else call.outputs, -1, error), [] if error else outputs[member])

    def _fail(self, group: _Group, index: int, error: str) -> None:
        """Abandon a collective: its members that came get `error`, as will those that come later."""
        text = f"collective {index + 1} of {_group_text(group)}: {error}"
        group.failed[index] = text
        pending = group.pending.pop(index, None)
        if pending is None:
            return
        self._log(group, index, pending, self._parts(group, pending, keep=False), text)
        for member, call in pending.calls.items():
            self._answer(group.ranks[member], Done(call.id, (), -1, text), [])

    def _point_to_point(self, rank: int, group: _Group, call: Call, payload: bytearray) -> None:
        me = group.member(rank)
        if not (-1 if call.kind == "recv" else 0) <= call.peer < len(group.ranks) or call.peer == me:
            self._answer(rank, Done(call.id, (), -1, f"{call.kind} with rank {call.peer}, which is not another member of {_group_text(group)}"), [])
            return
        if call.kind == "send":  # answered when a recv takes it, as gloo's send completes (a rendezvous)
            key = (group.name, me, call.peer, call.tag)
            self._mail.setdefault(key, deque()).append((call, tensors_of(payload, call.inputs), self.now()))
        else:
            self._receiving.append((rank, call, self.now()))
        self._match_mail()

    def _match_mail(self) -> None:
        waiting = []
        for rank, call, arrived in self._receiving:
            group = self._groups[call.group]
            me = group.member(rank)
            senders = [call.peer] if call.peer >= 0 else range(len(group.ranks))
            key = next((k for k in ((group.name, s, me, call.tag) for s in senders) if self._mail.get(k)), None)
            if key is None:
                waiting.append((rank, call, arrived))
                continue
            sent, tensors, at = self._mail[key].popleft()
            source = key[1]
            received = [TensorMeta(_name(t), tuple(t.shape)) for t in tensors]
            wrong = fits(received, call.outputs)
            error = f"rank {rank} received from rank {group.ranks[source]}: {wrong}" if wrong else None
            delivered = tensors if error or self._substitutes is None else self._substitutes.deliver(group.ranks[source], rank, tensors)
            self._log_p2p(group, group.ranks[source], rank, sent, tensors, at, arrived, error, delivered)
            self._answer(rank, Done(call.id, () if error else call.outputs, source, error), [] if error else delivered)
            self._answer(group.ranks[source], Done(sent.id, (), -1, error), [])
        self._receiving = waiting

    # ---------------------------------------------------------------- time and ends
    def _expire(self) -> None:
        now = self.now()
        for group in list(self._groups.values()):
            for index, pending in list(group.pending.items()):
                if pending.arrived and now - min(pending.arrived.values()) > self.plan.wait_s:
                    missing = [r for m, r in enumerate(group.ranks) if m not in pending.calls]
                    self._fail(group, index, f"rank {missing[0]} did not join within {self.plan.wait_s:g} s (its last call: {self._ranks[missing[0]].last})")
        waiting = []
        for rank, call, arrived in self._receiving:
            if now - arrived > self.plan.wait_s:
                group = self._groups[call.group]
                peer = f"rank {group.ranks[call.peer]}" if call.peer >= 0 else "any rank"
                self._answer(rank, Done(call.id, (), -1, f"recv from {peer} of {_group_text(group)}: nothing was sent within {self.plan.wait_s:g} s"), [])
            else:
                waiting.append((rank, call, arrived))
        self._receiving = waiting
        for key, sends in self._mail.items():
            while sends and now - sends[0][2] > self.plan.wait_s:
                self._unsent(key, sends.popleft()[0], f"it was not received within {self.plan.wait_s:g} s")

    def _unsent(self, key: tuple[str, int, int, int], call: Call, why: str) -> None:
        """Fail a send no recv took: its sender learns `why`; it is not recorded."""
        group = self._groups[key[0]]
        self._answer(group.ranks[key[1]], Done(call.id, (), -1, f"send to rank {group.ranks[key[2]]} of {_group_text(group)}: {why}"), [])

    def _left(self, rank: int, group: _Group) -> str:
        how = self._ranks[rank].end
        assert how is not None
        reason = "its process ended" if how.how == "closed" else how.how
        return f"rank {rank} left ({reason}) before it joined; its last call: {self._ranks[rank].last}"

    def _end(self, rank: int, how: str) -> None:
        state = self._ranks[rank]
        if state.end is not None:
            return
        state.end = RankEnd(rank, self.now(), how)
        state.out.clear()
        try:
            state.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for group in self._groups.values():
            if rank not in group.ranks:
                continue
            done = group.count.get(rank, 0)
            for index in [i for i in group.pending if i >= done]:
                self._fail(group, index, self._left(rank, group))
        waiting = []
        for other, call, arrived in self._receiving:
            group = self._groups[call.group]
            if call.peer >= 0 and group.ranks[call.peer] == rank and not self._mail.get((group.name, call.peer, group.member(other), call.tag)):
                self._answer(other, Done(call.id, (), -1, f"recv from rank {rank}: {self._left(rank, group).split(' before')[0]} without sending it"), [])
            else:
                waiting.append((other, call, arrived))
        self._receiving = waiting
        for key, sends in self._mail.items():
            group = self._groups[key[0]]
            if group.ranks[key[2]] == rank:
                while sends:
                    self._unsent(key, sends.popleft()[0], f"{self._left(rank, group).split(' before')[0]} without receiving it")

    # ---------------------------------------------------------------- answers and the record
    def _answer(self, rank: int, done: Done, tensors: list[torch.Tensor]) -> None:
        state = self._ranks[rank]
        if state.end is not None:
            return
        state.out.append(answer_frame(done))
        for tensor in tensors:
            if tensor.numel():
                state.out.append(_raw(tensor))
        self._flush(rank)

    def _part(self, rank: int, call: Call, tensors: list[torch.Tensor], at: float, keep: bool) -> Part:
        floating = [t.is_floating_point() for t in tensors]
        sums = tuple(float(t.sum()) if f and t.numel() else 0.0 for t, f in zip(tensors, floating))  # in the tensor's own precision: float64 costs a copy
        size = sum(t.numel() * t.element_size() for t in tensors)
        data = ""
        if keep and all(floating) and tensors and not self._full:
            if self._kept + size <= self.plan.keep_bytes:
                self._kept += size
                data = base64.b64encode(b"".join(_raw(t) for t in tensors)).decode()
            else:
                self._full = True  # the first keep_bytes of the run, whole: no later one, small as it may be
        return Part(rank, at, call.inputs, data, sums)

    def _parts(self, group: _Group, pending: _Pending, keep: bool) -> tuple[Part, ...]:
        """Each member's part in a collective, for the record (its data kept where `keep` and the
        kind is one whose data the grader reads)."""
        if len(self._carried) >= MAX_CARRIED:
            return ()
        kind = next(iter(pending.calls.values())).kind
        keep = keep and kind in KEPT_KINDS and (kind != "broadcast" or self.plan.keep_broadcasts)
        return tuple(self._part(group.ranks[member], call, pending.inputs[member], pending.arrived[member], keep) for member, call in sorted(pending.calls.items()))

    def _log(self, group: _Group, index: int, pending: _Pending, parts: tuple[Part, ...], error: str | None) -> None:
        if len(self._carried) >= MAX_CARRIED:
            self._omitted += 1
            return
        first = next(iter(pending.calls.values()))
        root = group.ranks[first.root] if 0 <= first.root < len(group.ranks) else -1
        self._carried.append(Carried(report_name(group.name), index, first.kind, first.reduce, root, self.now(), parts, error))

    def _log_p2p(self, group: _Group, source: int, target: int, call: Call, tensors: list[torch.Tensor], sent: float, asked: float, error: str | None, delivered: list[torch.Tensor]) -> None:
        if len(self._carried) >= MAX_CARRIED:
            self._omitted += 1
            return
        part = self._part(source, call, tensors, sent, self.plan.keep_sends and error is None)
        own = "" if delivered is tensors else base64.b64encode(b"".join(_raw(t) for t in delivered)).decode()
        self._carried.append(Carried(report_name(group.name), -1, "send", "", target, self.now(), (part,), error, own))

    def report(self) -> TrafficReport:
        now = self.now()
        ends = tuple(r.end or RankEnd(rank, now, "open") for rank, r in sorted(self._ranks.items()))
        groups = tuple(GroupRecord(report_name(g.name), g.ranks, tuple(g.joined)) for g in self._groups.values())
        return TrafficReport(self.world, groups, tuple(self._carried), ends, self._omitted, self._kept, self._start)


class _Substitutes:
    """The sends this hub delivers with values of its own (CarrierPlan.substitute: which, and
    how the values are drawn); drawn here, from the kernel's randomness, as the hub goes."""

    def __init__(self, plan: Substitution) -> None:
        self.plan = plan
        self.sent: dict[tuple[int, int], int] = {}  # (from, to) -> qualifying sends so far
        self.chosen: dict[tuple[int, int, int], int] = {}  # (from, to, block) -> the place in the block of the one replaced
        self.generator = torch.Generator().manual_seed(secrets.randbits(63))

    def deliver(self, source: int, target: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """What the receiver gets for a send of `tensors` from `source` to `target`: the tensors,
        or for the chosen send of a block, new ones of the same shape and dtype."""
        if abs(source - target) != 1 or len(tensors) != 1:
            return tensors
        sent = tensors[0]
        if not pipeline_send(TensorMeta(_name(sent), tuple(sent.shape)), self.plan.dim):
            return tensors
        size = max(self.plan.micro_batches, 1)
        number = self.sent.get((source, target), 0)
        self.sent[source, target] = number + 1
        block, place = divmod(number, size)
        if block >= (self.plan.steps if target > source else self.plan.steps - 1):
            return tensors
        if place != self.chosen.setdefault((source, target, block), secrets.randbelow(size)):
            return tensors
        if target > source:
            values = torch.rand(sent.shape, generator=self.generator, dtype=torch.float64) * 2 - 1
        else:
            scale = float(sent.double().pow(2).mean().sqrt()) or 1.0
            values = torch.randn(sent.shape, generator=self.generator, dtype=torch.float64) * scale
        return [values.to(sent.dtype)]


def _widen(sock: socket.socket) -> None:
    """Ask for large kernel buffers: a gradient bucket then crosses in few system calls."""
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        try:
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER)
        except OSError:
            pass


def _group_text(group: _Group) -> str:
    return "the default process group" if group.name == "0" else f"process group {group.name[:40]!r} (ranks {', '.join(map(str, group.ranks[:8]))})"


def _name(tensor: torch.Tensor) -> str:
    return NAME_OF[tensor.dtype]


def _raw(tensor: torch.Tensor) -> memoryview:
    """A CPU tensor's bytes, C-contiguous (a view of it where it is contiguous already)."""
    flat = tensor.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.to(torch.uint8)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def run_hub(job: str, sockets: dict[int, socket.socket], plan: CarrierPlan, say: Callable[[str, int, int, str], None]) -> None:
    """Become the job's hub: serve until every rank's connection ended or SIGTERM came, then
    `say(job, part, parts, chunk)` for each chunk of the report; never returns."""
    try:
        hub = Hub(sockets, plan, launcher=os.getppid())  # the launcher forked the hub, then the ranks
        signal.signal(signal.SIGTERM, lambda *_: hub.stop())
        chunks = pack(hub.serve())
        for index, chunk in enumerate(chunks):
            say(job, index, len(chunks), chunk)
    finally:
        os._exit(0)

