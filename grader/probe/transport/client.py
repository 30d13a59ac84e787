"""A rank's process groups, carried by the grader's hub (grader.probe.transport.hub).

`install(fd)` makes every process group the script creates — init_process_group's default
group with whatever backend it names, new_group, DeviceMesh's — a `CarriedGroup`: a
torch.distributed.ProcessGroup written in Python whose collectives and point-to-point
operations go to the hub over the rank's socket (`fd`, inherited from the job leader) as
frames of grader.probe.transport.wire. c10d builds the group as it builds any other: it calls
its `_new_process_group_helper`, which is replaced here by one that names this module's
backend for every device and then puts back, in c10d's tables, the backend the script asked
for (so `dist.get_backend()` answers "gloo" or "nccl" as it would under torchrun).

Each call sends its inputs at once and returns a Work whose future a reader thread completes
when the hub's answer arrives (copying what it carries into the call's output tensors), the
way gloo's worker threads complete theirs: DDP's buckets, async_op=True, irecv and the futures
of comm hooks behave as on gloo. An error the hub answers (members that disagree, a rank that
left) is raised from the Work as torch's DistBackendError, with the hub's sentence.

Tensors are read and written as CPU memory with torch functions disabled (virtual GPUs tag CPU
tensors; real CUDA tensors are staged through host memory). Standard library and torch only:
this runs in the student's process.
"""
from __future__ import annotations

import _thread
import datetime
import socket
import threading
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from grader.probe.patching import replace_in_torch
from grader.probe.transport import wire
from grader.probe.transport.wire import Call, Done, FrameReader, Group, TensorMeta, parse_answer, request_frame

BACKEND = "carrier"
REDUCE_NAMES = {getattr(dist.ReduceOp.RedOpType, name): name for name in wire.REDUCTIONS}
DTYPE_NAMES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16", torch.bfloat16: "bfloat16",
    torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
    torch.bool: "bool", torch.complex64: "complex64", torch.complex128: "complex128",
}
DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}


def _meta(tensor: torch.Tensor) -> TensorMeta:
    name = DTYPE_NAMES.get(tensor.dtype)
    if name is None:
        raise TypeError(f"torch.distributed cannot send a tensor of dtype {tensor.dtype} here")
    return TensorMeta(name, tuple(tensor.shape))


def _bytes(tensor: torch.Tensor) -> memoryview:
    """A tensor's elements as host bytes (a copy where it is not contiguous host memory)."""
    with torch._C.DisableTorchFunction():
        flat = tensor.detach()
        if flat.device.type != "cpu":
            flat = flat.cpu()
        flat = flat.contiguous().reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.view(torch.uint8)
        return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def _fill(targets: Sequence[torch.Tensor], metas: Sequence[TensorMeta], payload: bytearray) -> None:
    """Copy the tensors of an answer's payload into `targets`, in order, as gloo writes them: into
    their memory, unseen by autograd (a leaf that requires grad may receive, as
    torch.distributed.pipelining's stages do from their second step on)."""
    at = 0
    with torch._C.DisableTorchFunction():
        for given, meta in zip(targets, metas):
            if meta.nbytes:
                target = given.data
                dtype = DTYPES[meta.dtype]
                source = torch.frombuffer(payload, dtype=torch.uint8 if dtype == torch.bool else dtype, count=meta.numel, offset=at)
                target.copy_(source.view(torch.bool) if dtype == torch.bool else source, non_blocking=False) if target.shape == source.shape else target.copy_(source.reshape(target.shape))
            at += meta.nbytes


class _Work(dist._Work):
    """A carried operation under way: its future completes with the hub's answer."""

    def __init__(self, future: torch.futures.Future) -> None:
        super().__init__()
        self._future = future
        self._source = -1

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self._future.wait()
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001 - an error answer is "not a success"
            return False
        return True

    def exception(self) -> Any:
        try:
            self._future.value()
        except Exception as exc:  # noqa: BLE001 - the answer's error, as torch's Work gives it
            return exc
        return None

    def source_rank(self) -> int:
        return self._source

    def result(self) -> Any:
        return self._future.value()


class Channel:
    """The rank's connection to the hub: sends frames in program order (under a lock), and a
    reader thread that completes each call's future as its answer arrives."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            try:
                sock.setsockopt(socket.SOL_SOCKET, option, 4 << 20)
            except OSError:
                pass
        self._lock = threading.Lock()  # the socket's sending side, in program order
        self._table = threading.Lock()  # the calls waiting for their answers
        self._next = 0
        self._waiting: dict[int, tuple[torch.futures.Future, list[torch.Tensor], Any, _Work | None]] = {}
        self._lost: str | None = None
        self._started = False

    def register(self, name: str, ranks: Sequence[int], member: int) -> None:
        with self._lock:
            self._send(request_frame(Group(name, tuple(ranks), member)), ())

    def call(self, group: str, kind: str, inputs: Sequence[torch.Tensor] = (), outputs: Sequence[torch.Tensor] = (), *, reduce: str = "", root: int = -1, peer: int = -1, tag: int = 0, result: Any = None) -> _Work:
        """Send one operation; the Work's future completes with `result` (the outputs when None)
        once `outputs` hold what the hub answered."""
        future: torch.futures.Future = torch.futures.Future()
        work = _Work(future)
        with self._lock:
            if not self._started:
                self._started = True
                _thread.start_new_thread(self._read, ())
            ident = self._next
            self._next += 1
            request = Call(ident, group, kind, reduce, root, peer, tag, tuple(_meta(t) for t in inputs), tuple(_meta(t) for t in outputs))
            with self._table:
                lost = self._lost
                if not lost:
                    self._waiting[ident] = (future, list(outputs), list(outputs) if result is None else result, work)
            if lost:
                future.set_exception(dist.DistBackendError(lost))
                return work
            self._send(request_frame(request), [_bytes(t) for t in inputs])
        return work

    def _send(self, head: bytes, payloads: Sequence[memoryview]) -> None:
        try:
            self.sock.sendall(head)
            for payload in payloads:
                if len(payload):
                    self.sock.sendall(payload)
        except OSError as exc:
            self._lose(f"the connection to the other ranks was lost ({exc.strerror or exc})")

    def _lose(self, why: str) -> None:
        with self._table:
            self._lost = self._lost or why
            waiting, self._waiting = self._waiting, {}
        for future, _, _, _ in waiting.values():
            if not future.done():
                future.set_exception(dist.DistBackendError(self._lost))

    def _read(self) -> None:
        """The reader thread: never dies with calls waiting (they would wait forever)."""
        try:
            reader = FrameReader()
            while True:
                try:
                    still_open = reader.read_from(self.sock)
                except (OSError, wire.BadFrame):
                    still_open = False
                for header, payload in reader.frames():
                    self._answered(parse_answer(header), payload)
                if not still_open:
                    self._lose("the connection to the other ranks was lost")
                    return
        except BaseException as exc:  # noqa: BLE001 - every waiting call learns it, none hangs
            self._lose(f"the connection to the other ranks failed: {type(exc).__name__}: {exc}")

    def _answered(self, done: Done, payload: bytearray) -> None:
        with self._table:
            entry = self._waiting.pop(done.id, None)
        if entry is None:
            return
        future, targets, result, work = entry
        if done.error:
            future.set_exception(dist.DistBackendError(done.error))
            return
        try:
            _fill(targets, done.outputs, payload)
        except Exception as exc:  # noqa: BLE001 - a tensor the answer cannot fill fails its call
            future.set_exception(dist.DistBackendError(f"the answer could not be stored: {exc}"))
            return
        if work is not None:
            work._source = done.source
        future.set_result(result)


def _reduce_name(opts: Any) -> str:
    op = getattr(opts, "reduceOp", None)
    name = REDUCE_NAMES.get(getattr(op, "op", op))
    if name is None:
        raise ValueError(f"the reduction {op} is not carried here (PREMUL_SUM needs NCCL)")
    return name


class CarriedGroup(dist.ProcessGroup):
    """A process group whose operations the grader's hub carries (the module docstring)."""

    def __init__(self, rank: int, size: int, name: str, channel: Channel, devices: frozenset[str]) -> None:
        super().__init__(rank, size)
        self._name = name
        self._channel = channel
        self._devices = devices  # the device types the script's backend serves

    def getBackendName(self) -> str:
        return BACKEND

    @property
    def group_name(self) -> str:  # c10d's name of the group (the C++ group keeps it with backends this group has none of)
        return self._name

    @property
    def pg_name(self) -> str:
        return self._name

    def _call(self, kind: str, inputs: Sequence[torch.Tensor] = (), outputs: Sequence[torch.Tensor] = (), **how: Any) -> _Work:
        with torch._C.DisableTorchFunction():
            refused = next((t.device.type for t in (*inputs, *outputs) if t.device.type not in self._devices), None)
        if refused is not None:  # as c10d refuses it where the backend has nothing for that device (NCCL and a CPU tensor)
            raise RuntimeError(f"No backend type associated with device type {refused}")
        return self._channel.call(self._name, kind, inputs, outputs, **how)

    # collectives
    def allreduce(self, tensors, opts=None):  # type: ignore[no-untyped-def,override]
        return self._call("all_reduce", tensors, tensors, reduce=_reduce_name(opts or dist.AllreduceOptions()))

    def allreduce_coalesced(self, tensors, opts=None):  # type: ignore[no-untyped-def,override]
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts=None):  # type: ignore[no-untyped-def,override]
        root = (opts or dist.BroadcastOptions()).rootRank
        mine = self.rank() == root
        return self._call("broadcast", tensors if mine else (), () if mine else tensors, root=root, result=list(tensors))

    def allgather(self, output_tensors, input_tensors, opts=None):  # type: ignore[no-untyped-def,override]
        return self._call("all_gather", input_tensors, output_tensors[0], result=output_tensors)

    def _allgather_base(self, output, input, opts=None):  # type: ignore[no-untyped-def,override]
        pieces = list(output.chunk(self.size()))
        return self._call("all_gather", [input], pieces, result=[output])

    def all_gather_single(self, output, input, opts=None):  # type: ignore[no-untyped-def,override]
        return self._allgather_base(output, input, opts)

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):  # type: ignore[no-untyped-def,override]
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return works[-1] if works else self.barrier()

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):  # type: ignore[no-untyped-def,override]
        return self.allgather_into_tensor_coalesced(outputs, inputs, opts)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):  # type: ignore[no-untyped-def,override]
        return self._call("reduce_scatter", input_tensors[0], output_tensors, reduce=_reduce_name(opts or dist.ReduceScatterOptions()))

    def _reduce_scatter_base(self, output, input, opts=None):  # type: ignore[no-untyped-def,override]
        pieces = list(input.chunk(self.size()))
        return self._call("reduce_scatter", pieces, [output], reduce=_reduce_name(opts or dist.ReduceScatterOptions()))

    def reduce_scatter_single(self, output, input, opts=None):  # type: ignore[no-untyped-def,override]
        return self._reduce_scatter_base(output, input, opts)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):  # type: ignore[no-untyped-def,override]
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        return works[-1] if works else self.barrier()

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):  # type: ignore[no-untyped-def,override]
        return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts)

    def reduce(self, tensors, opts=None):  # type: ignore[no-untyped-def,override]
        opts = opts or dist.ReduceOptions()
        mine = self.rank() == opts.rootRank
        return self._call("reduce", tensors, tensors if mine else (), reduce=_reduce_name(opts), root=opts.rootRank, result=list(tensors))

    def gather(self, output_tensors, input_tensors, opts=None):  # type: ignore[no-untyped-def,override]
        root = (opts or dist.GatherOptions()).rootRank
        mine = self.rank() == root
        return self._call("gather", input_tensors, output_tensors[0] if mine else (), root=root, result=output_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):  # type: ignore[no-untyped-def,override]
        root = (opts or dist.ScatterOptions()).rootRank
        mine = self.rank() == root
        return self._call("scatter", input_tensors[0] if mine else (), output_tensors, root=root)

    def alltoall(self, output_tensors, input_tensors, opts=None):  # type: ignore[no-untyped-def,override]
        return self._call("all_to_all", input_tensors, output_tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # type: ignore[no-untyped-def,override]
        def split(tensor: torch.Tensor, sizes: Sequence[int]) -> list[torch.Tensor]:
            return list(tensor.split(list(sizes))) if sizes else list(tensor.chunk(self.size()))

        return self._call("all_to_all", split(input, input_split_sizes), split(output, output_split_sizes), result=[output])

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):  # type: ignore[no-untyped-def,override]
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def barrier(self, opts=None):  # type: ignore[no-untyped-def,override]
        return self._call("barrier", result=[])

    # point to point
    def send(self, tensors, dst, tag=0):  # type: ignore[no-untyped-def,override]
        return self._call("send", tensors, (), peer=dst, tag=tag, result=list(tensors))

    def recv(self, tensors, src, tag=0):  # type: ignore[no-untyped-def,override]
        return self._call("recv", (), tensors, peer=src, tag=tag)

    def recv_anysource(self, tensors, tag=0):  # type: ignore[no-untyped-def,override]
        return self._call("recv", (), tensors, peer=-1, tag=tag)


CarriedGroup.__module__, CarriedGroup.__name__, CarriedGroup.__qualname__ = dist.ProcessGroup.__module__, "ProcessGroup", "ProcessGroup"  # as gloo's is (grader/probe/cloak.py)
for _name, _method in list(vars(CarriedGroup).items()):  # torch.compile calls them as it calls gloo's: as they are, not traced
    if callable(_method) and not _name.startswith("__") and _name not in ("group_name", "pg_name"):
        setattr(CarriedGroup, _name, torch.compiler.disable(_method))


def _creator(channel: Channel, asked: list[frozenset[str]]) -> Callable[..., CarriedGroup]:
    """c10d's constructor of a carried group; `asked[-1]`: the device types the backend the
    script asked for serves (set by the group helper just before c10d calls this)."""

    def create(options: Any, backend_options: Any = None) -> CarriedGroup:
        ranks = list(options.global_ranks_in_group) or list(range(options.group_size))
        name = str(options.group_id)
        channel.register(name, ranks, options.group_rank)
        return CarriedGroup(options.group_rank, options.group_size, name, channel, asked[-1])

    return create


def _as_asked(backend: Any) -> tuple[str, str, frozenset[str]]:
    """The backend and the backend config c10d would show for what the script asked (after
    virtual GPUs turned NCCL into gloo), and the device types that backend serves (NCCL's:
    CUDA alone); raises as c10d does for a backend this build lacks."""
    config = c10d.BackendConfig(backend)
    served = config.get_device_backend_map()
    for name in served.values():
        if name == dist.Backend.NCCL and not dist.is_nccl_available():
            raise RuntimeError("Distributed package doesn't have NCCL built in")
        if name == dist.Backend.MPI and not dist.is_mpi_available():
            raise RuntimeError("Distributed package doesn't have MPI built in. MPI is only included if you build PyTorch from source on a host that has MPI installed.")
    return str(backend), str(config), frozenset(served) or frozenset(("cpu", "cuda"))


def install(fd: int) -> Channel:
    """Carry every process group this process creates over the hub socket `fd`."""
    channel = Channel(socket.socket(fileno=fd))
    original = c10d._new_process_group_helper
    asked: list[frozenset[str]] = [frozenset(("cpu", "cuda"))]
    plugin = dist.Backend._BackendPlugin(_creator(channel, asked), True)

    def _new_process_group_helper(group_size, group_rank, global_ranks_in_group, backend, store, *args, **kwargs):  # type: ignore[no-untyped-def]
        shown, config, devices = _as_asked(backend)
        asked[:] = [devices]
        dist.Backend._plugins[BACKEND.upper()] = plugin
        try:
            pg, prefix_store = original(group_size, group_rank, global_ranks_in_group, f"cpu:{BACKEND},cuda:{BACKEND}", store, *args, **kwargs)
        finally:
            dist.Backend._plugins.pop(BACKEND.upper(), None)
        if pg is not None and pg in c10d._world.pg_map:
            c10d._world.pg_map[pg] = (shown, c10d._world.pg_map[pg][1])
            c10d._world.pg_backend_config[pg] = config
        return pg, prefix_store

    replace_in_torch(c10d, "_new_process_group_helper", _new_process_group_helper)
    return channel
