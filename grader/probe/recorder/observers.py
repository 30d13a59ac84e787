"""The recorder: what a process records about its own training, through public torch hooks
where torch has one. One recorder serves every command: `grade`, `check` and `run` install it
in each rank (grader.probe.rank), `observe` in every Python process of the observed command
(grader/probe/boot/sitecustomize.py, through `start_observing`).

What it records (grader.probe.recorder.events defines each event):
    process group    -- init_process_group (a timeout is added where the script gives none and
                        the options ask for one, so a hung collective ends by itself) and
                        destroy_process_group.
    DDP              -- its construction (device_ids, parameter devices) and the model it wraps;
                        a communication hook that times every gradient bucket and does what DDP
                        does by default, or calls the script's own hook (DDP takes only one),
                        also for the built-in hooks where torch has a Python equivalent.
    all-reduce       -- DDP's buckets and every explicit dist.all_reduce, as spans.
    point-to-point   -- every dist.send, recv, isend and irecv, as spans (peer and size only).
    forward          -- module calls as spans: each outermost call of a model, each DataParallel
                        replica, each one-device stage of a model spread over devices; in the
                        first `detail_steps` steps every call (with its parameters' devices).
                        Text printed inside a recorded call (OutputTap) in those steps too.
    model            -- each model when first seen: parameter names, shapes, devices; the first
                        one's values where the options ask for values.
    backward         -- torch.autograd.backward (which Tensor.backward calls), as a span.
    optimizer        -- each step as a span (CUDA synchronised at its end), the parameters after
                        it; with values, the gradients before it (opt_grads) and the values.
    globals          -- the script's setup variables the options name, at DDP's construction,
                        the first model call and the end.
    end              -- an uncaught exception, peak CUDA memory, whether a process group is left,
                        and how the script ended.
A failure of the recorder's own never stops the script: it becomes a `note` event. Devices are
read through `device_of`, which knows virtual GPUs, with torch functions disabled, so the
recorder's own reads never pass through the virtual-GPU mode. A process forked from a recorded
one (a DataLoader worker) records nothing.
"""
from __future__ import annotations

import atexit
import datetime
import itertools
import inspect
import os
import socket
import sys
import threading
import time
import warnings
import traceback
import weakref
from dataclasses import dataclass
from typing import Any, Callable, TextIO

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.nn.modules import module as nn_module
from torch.nn.parallel import DataParallel, DistributedDataParallel
from torch.optim import optimizer as optim_module

from grader.probe.recorder.events import (
    EVENTS_VERSION,
    MAX_FILE_BYTES,
    P2P_OPS,
    AllReduce,
    Backward,
    CommHook,
    Ddp,
    DdpArgs,
    DestroyPg,
    E,
    EndState,
    Event,
    ExceptionInfo,
    Exit,
    Forward,
    ForwardOutput,
    Globals,
    InitPg,
    InitPgCall,
    Memory,
    Model,
    Note,
    OptGrads,
    Optimizer,
    P2p,
    Process,
    Frame,
    Raised,
    TensorInfo,
)
from grader.probe.messages import DdpOptions
from grader.probe.patching import replace_in_torch
from grader.probe.recorder.eventfile import EventFile
from grader.probe.typed import MAX_ITEMS, clip

SOURCE_LINE_LIMIT = 200
MAX_ROWS = 4096  # the most rows of a model call whose sums are recorded (a batch of the correctness runs is far smaller)
MAX_ROW_VALUES = 1 << 17  # nor inputs larger than this: the copy must not weigh on a timed GPU run's steps
WRAPPERS = (DistributedDataParallel, DataParallel)
DeviceOf = Callable[[torch.Tensor], torch.device]
Mark = tuple[float, int, int]  # a span's start: monotonic time, sequence number, step


@dataclass(frozen=True)
class ProbeOptions:
    """What a process records beyond what `observe` shows; grading turns these on."""

    script: str | None = None  # the script's path: its module namespace is found on the stack
    watch_globals: tuple[str, ...] = ()  # the script's variables recorded (globals events)
    values: bool = False  # gradients and parameter values (opt_grads, optimizer, model)
    max_value_steps: int = 8  # steps whose values are taken
    max_values: int = 200_000  # no values of models larger than this
    detail_steps: int = 0  # steps in which every module call is recorded
    pg_timeout_s: float | None = None  # a process-group timeout where the script gives none
    virtual_gpus: int = 0  # the process runs on this many virtual GPUs
    ddp_options: DdpOptions | None = None  # every DDP is built with these options (the reference solution's timed launches take the submission's)


def _plain_device(tensor: torch.Tensor) -> torch.device:
    return tensor.device


def _with_options(build: Any, ddp: Any, args: tuple, kwargs: dict, options: DdpOptions) -> tuple[tuple, dict]:
    """DistributedDataParallel's arguments `args`, `kwargs` with `options` in their place."""
    bound = inspect.signature(build).bind(ddp, *args, **kwargs)
    bound.arguments.update(options.as_kwargs())
    return bound.args[1:], bound.kwargs


def _environment_number(name: str) -> int | None:
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def _frame(filename: str, lineno: int | None, func: str, line: str | None, cwd: str) -> Frame:
    rel = os.path.relpath(filename, cwd) if os.path.isabs(filename) else filename
    return Frame(file=clip(rel), line=lineno, func=clip(func), code=(line or "").strip()[:SOURCE_LINE_LIMIT])


def describe_exception(exc: BaseException, cwd: str) -> ExceptionInfo:
    """The exception's type and message, and its frames split into the student's (files under
    `cwd`) and the innermost library frame where it was raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    prefix = os.path.join(cwd, "")
    student = [_frame(f.filename, f.lineno, f.name, f.line, cwd) for f in frames if f.filename.startswith(prefix)]
    if isinstance(exc, SyntaxError) and exc.filename and str(exc.filename).startswith(prefix):
        student.append(_frame(exc.filename, exc.lineno, "<module>", exc.text, cwd))
    library = None
    if frames and not frames[-1].filename.startswith(prefix):
        last = frames[-1]
        library = _frame(last.filename, last.lineno, last.name, last.line, cwd)
    message = str(exc)
    if isinstance(exc, SyntaxError):
        message = exc.msg or message
    return ExceptionInfo(type=clip(type(exc).__name__), message=message[:2000], frames=tuple(student[-8:]), library_frame=library)


def wrapped_label(module: torch.nn.Module) -> str:
    """"DistributedDataParallel(Net)" for a wrapper, "Net" for a plain model."""
    name = type(module).__name__
    inner = getattr(module, "module", None)
    if isinstance(module, WRAPPERS) and isinstance(inner, torch.nn.Module):
        return f"{name}({type(inner).__name__})"
    return name


def _is_replica(module: torch.nn.Module) -> bool:
    """Whether torch's replicate() made this module (a DataParallel replica's): it sets the
    attribute on the instance (read from its __dict__: nn.Module's __getattr__ is slow to fail)."""
    return bool(vars(module).get("_is_replica", False))


class _Frame:
    """One running module call in a thread's call stack: its event's fields and start, if
    it is recorded."""

    __slots__ = ("module", "fields", "mark")

    def __init__(self, module: torch.nn.Module, fields: dict | None, mark: Mark | None) -> None:
        self.module = module
        self.fields = fields
        self.mark = mark


class Probe:
    """The recorder of one process. `install()` puts the hooks in place; the state lives here
    (nothing is global beyond what torch's own hook registries hold). The file `path` is
    opened at the first event (a process that records nothing leaves none) or by `open()`."""

    def __init__(self, path: str, options: ProbeOptions = ProbeOptions(), device_of: DeviceOf | None = None, max_bytes: int = MAX_FILE_BYTES) -> None:
        self.path = path
        self.options = options
        self.device_of = device_of or _plain_device
        self.max_bytes = max_bytes
        self.pid = os.getpid()
        self.step = 0
        self._t0 = time.monotonic()
        self._seq = itertools.count()
        self._file: EventFile | None = None
        self._disabled = False
        self._finished = False
        self._lock = threading.Lock()
        self._local = threading.local()
        self._originals: dict[str, Callable] = {}
        self._calls = 0
        self._open_call: int | None = None
        self._noted: set[str] = set()
        self._devices: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._stage_names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._models_seen: weakref.WeakSet = weakref.WeakSet()
        self._step_starts: dict[int, Mark] = {}
        self._step_depth = 0  # optimizer steps under way: a step inside a step (ZeroRedundancyOptimizer's inner optimizer) is part of it, not one more
        self._allreduce_hook: Callable | None = None
        self.param_names: dict[int, str] = {}
        self.module_names: dict[int, str] = {}
        self.model_seen = False
        self.values_taken = False
        self.first_call_seen = False

    # ------------------------------------------------------------ writing
    def open(self) -> None:
        """Open the file and write the header now (else it happens at the first event)."""
        with self._lock:
            self._ensure_open()

    def _ensure_open(self) -> None:
        if self._file is not None:
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._file = EventFile(self.path, self.max_bytes)
        self._file.write(
            Process(
                t=self._now(),
                seq=next(self._seq),
                step=self.step,
                version=EVENTS_VERSION,
                pid=self.pid,
                ppid=os.getppid(),
                host=clip(socket.gethostname()),
                argv=tuple(clip(a) for a in sys.argv[:MAX_ITEMS]),
                rank=_environment_number("RANK"),
                local_rank=_environment_number("LOCAL_RANK"),
                world_size=_environment_number("WORLD_SIZE"),
                virtual_gpus=self.options.virtual_gpus,
                cuda=self.options.virtual_gpus == 0 and torch.cuda.device_count() > 0,  # not is_available(): it would start CUDA's driver, after which a forked child cannot use CUDA
                wall=time.time(),
                torch=torch.__version__,
            )
        )

    def _now(self) -> float:
        return round(time.monotonic() - self._t0, 6)

    def _write(self, event: Event) -> None:
        if self._disabled or os.getpid() != self.pid:  # a forked child (a DataLoader worker) writes nothing
            return
        with self._lock:
            try:
                self._ensure_open()
                assert self._file is not None
                self._file.write(event)
            except OSError as exc:
                self._disabled = True
                sys.stderr.write(f"grader: stopped recording this process: {exc}\n")

    def emit(self, kind: type[E], **fields: Any) -> None:
        """Write an event of `kind` that happens now."""
        self._write(kind(t=self._now(), seq=next(self._seq), step=self.step, **fields))

    def begin(self) -> Mark:
        """The start of a span, for `span`."""
        return time.monotonic(), next(self._seq), self.step

    def span(self, kind: type[E], mark: Mark, end: float | None = None, **fields: Any) -> None:
        """Write a span of `kind` that began at `mark` and ends now (or at monotonic `end`)."""
        start, seq, step = mark
        stop = time.monotonic() if end is None else end
        self._write(kind(t=round(start - self._t0, 6), seq=seq, step=step, dur=round(stop - start, 6), **fields))

    def note(self, text: str) -> None:
        """Say once what could not be observed."""
        if text not in self._noted:
            self._noted.add(text)
            self.emit(Note, text=clip(text))

    def _failed(self, where: str, exc: Exception) -> None:
        self.note(f"observer error in {where} ({type(exc).__name__}: {exc}); what it records may be incomplete")

    # ------------------------------------------------------------ values
    def device_name(self, tensor: torch.Tensor) -> str:
        return str(self.device_of(tensor))

    def inputs(self, args: tuple) -> tuple[TensorInfo, ...]:
        """Shape and device of each tensor among a call's arguments (first level)."""
        with torch._C.DisableTorchFunction():
            return tuple(TensorInfo(shape=tuple(a.shape), device=self.device_name(a)) for a in args if isinstance(a, torch.Tensor))

    def row_sums(self, args: tuple) -> tuple[float, ...] | None:
        """Each row of a model call's first tensor argument summed, in float64: which samples
        of the grader's batch the call fed (batch_shard). Taken while values are, with
        gradients on (an evaluation pass is not training), for inputs of at most MAX_ROWS rows
        and MAX_ROW_VALUES values."""
        options = self.options
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        if not (options.values and self.step < options.max_value_steps and torch.is_grad_enabled()) or first is None:
            return None
        try:
            with torch._C.DisableTorchFunction():
                if first.dim() == 0 or not first.is_floating_point() or first.shape[0] > MAX_ROWS or first.numel() > MAX_ROW_VALUES:
                    return None
                rows = first.detach().to("cpu", torch.float64)
                return tuple((rows.flatten(1).sum(1) if rows.dim() > 1 else rows).tolist())
        except Exception as exc:  # noqa: BLE001 -- the call is recorded without its rows
            self._failed("reading a model call's rows", exc)
            return None

    def describe(self, value: Any) -> Any:
        """A small JSON value describing a value from the script's namespace."""
        if value is None or isinstance(value, (bool, float)) or (isinstance(value, int) and abs(value) < 1 << 63):
            return value
        if isinstance(value, str):
            return clip(value)
        if isinstance(value, torch.device):
            return str(value)
        if isinstance(value, torch.Tensor):
            return {"tensor": list(value.shape), "device": self.device_name(value)}
        return {"type": type(value).__name__, "repr": repr(value)[:120]}

    @staticmethod
    def flat_values(tensors: list[torch.Tensor | None]) -> tuple[tuple[float, ...] | None, ...]:
        """Exact float values of small tensors (None stays None)."""
        with torch._C.DisableTorchFunction():
            return tuple(None if t is None else tuple(t.detach().to("cpu", torch.float64).reshape(-1).tolist()) for t in tensors)

    def _parameter_devices(self, module: torch.nn.Module) -> tuple[str, ...]:
        with torch._C.DisableTorchFunction():
            return tuple(sorted({self.device_name(p) for p in module.parameters()}))

    def _devices_of(self, module: torch.nn.Module) -> tuple[str, ...]:
        """The devices of a module's parameters, found once per module."""
        devices = self._devices.get(module)
        if devices is None:
            devices = self._devices[module] = self._parameter_devices(module)
        return devices

    # ------------------------------------------------------------ install
    def install(self) -> None:
        """Wrap torch's entry points, register the global hooks and the exit handler."""
        for name, replacement in (
            ("init_process_group", self._init_process_group),
            ("destroy_process_group", self._destroy_process_group),
            ("all_reduce", self._all_reduce),
            *((op, self._point_to_point(op)) for op in P2P_OPS),
        ):
            # wherever torch holds it: DeviceMesh calls init_process_group by its own name
            self._originals[name] = replace_in_torch(c10d, name, replacement)
        self._wrap_ddp()
        self._originals["backward"] = torch.autograd.backward
        self._originals["excepthook"] = sys.excepthook
        probe = self

        def backward(*args, **kwargs):  # Tensor.backward() calls torch.autograd.backward
            mark = probe.begin()
            try:
                return probe._originals["backward"](*args, **kwargs)
            finally:
                probe.span(Backward, mark)

        def excepthook(kind, value, traceback):
            try:
                probe.emit(Raised, **vars(describe_exception(value, os.getcwd())))
            finally:
                probe._originals["excepthook"](kind, value, traceback)

        optim_module.register_optimizer_step_pre_hook(self._step_pre)
        optim_module.register_optimizer_step_post_hook(self._step_post)
        nn_module.register_module_forward_pre_hook(self._forward_pre)
        nn_module.register_module_forward_hook(self._forward_post, always_call=True)
        torch.autograd.backward = backward
        sys.excepthook = excepthook
        atexit.register(self.finish)

    def _wrap_ddp(self) -> None:
        """Register the recorder's hook on each DDP right after it is built; a hook the script
        registers later is called by ours instead of replacing it (DDP takes only one)."""
        build = DistributedDataParallel.__init__
        register = DistributedDataParallel.register_comm_hook
        register_builtin = DistributedDataParallel._register_builtin_comm_hook
        self._originals["ddp_register_comm_hook"] = register
        probe = self

        def built_and_hooked(ddp_self, *args, **kwargs):
            if probe.options.ddp_options is not None:
                args, kwargs = _with_options(build, ddp_self, args, kwargs, probe.options.ddp_options)
            probe._before_ddp_init(build, ddp_self, args, kwargs)
            build(ddp_self, *args, **kwargs)
            probe._after_ddp_init(ddp_self, args, kwargs)

        def routed_to_ours(ddp_self, state, hook):
            routed = getattr(ddp_self, "_comm_hook_routes", None)
            if routed is None:
                return register(ddp_self, state, hook)
            routed["user"] = (state, hook)
            probe.emit(CommHook, name=clip(getattr(hook, "__qualname__", repr(hook))))
            return None

        def builtin_routed_to_ours(ddp_self, comm_hook_type):
            routed = getattr(ddp_self, "_comm_hook_routes", None)
            if routed is None:
                return register_builtin(ddp_self, comm_hook_type)
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            python_hooks = {"ALLREDUCE": default_hooks.allreduce_hook, "FP16_COMPRESS": default_hooks.fp16_compress_hook}
            same = python_hooks.get(getattr(comm_hook_type, "name", ""))
            if same is None:
                probe.note(f"DDP's built-in communication hook {comm_hook_type} was not applied: the observer's own hook stays")
                return None
            return routed_to_ours(ddp_self, routed["group"], same)

        DistributedDataParallel.__init__ = built_and_hooked
        DistributedDataParallel.register_comm_hook = routed_to_ours
        DistributedDataParallel._register_builtin_comm_hook = builtin_routed_to_ours

    def tap(self, stream: TextIO) -> "OutputTap":
        """A stand-in for sys.stdout / sys.stderr that notes text printed inside a forward."""
        return OutputTap(stream, self)

    # ----------------------------------------------------- process groups
    def _init_process_group(self, backend=None, *args, **kwargs):
        if self.options.pg_timeout_s is not None and kwargs.get("timeout") is None and len(args) < 2:
            kwargs["timeout"] = datetime.timedelta(seconds=self.options.pg_timeout_s)
        self.emit(InitPgCall, backend=clip(str(backend)), kwargs=tuple(sorted(kwargs)))
        result = self._originals["init_process_group"](backend, *args, **kwargs)
        try:
            self.emit(InitPg, requested=clip(str(backend)), backend=str(dist.get_backend()), rank=dist.get_rank(), world_size=dist.get_world_size())
        except Exception as exc:  # noqa: BLE001 - the script goes on whatever the recorder meets
            self._failed("init_process_group", exc)
        return result

    def _destroy_process_group(self, *args, **kwargs):
        group = args[0] if args else kwargs.get("group")
        self.emit(DestroyPg, default_group=group is None)
        return self._originals["destroy_process_group"](*args, **kwargs)

    def _all_reduce(self, tensor, *args, **kwargs):
        """An all-reduce the script calls itself, timed. One call is one record: inside DDP's
        hook, and where torch (or the virtual GPUs) calls all_reduce again by its module-level
        name, the call passes straight through."""
        local = self._local
        if getattr(local, "in_ddp_hook", False) or getattr(local, "in_all_reduce", False) or not isinstance(tensor, torch.Tensor):
            return self._originals["all_reduce"](tensor, *args, **kwargs)
        mark = self.begin()
        local.in_all_reduce = True
        try:
            return self._originals["all_reduce"](tensor, *args, **kwargs)
        finally:
            local.in_all_reduce = False
            asynchronous = bool(kwargs.get("async_op") or (len(args) > 2 and args[2]))
            numel = tensor.numel()
            self.span(AllReduce, mark, source="call", numel=numel, bytes=numel * tensor.element_size(), bucket=None, async_op=asynchronous)

    def _point_to_point(self, op: str) -> Callable[..., Any]:
        """dist.<op> timed: one P2p span per call of the script's (a call torch makes inside
        it passes straight through)."""
        peer_name = "dst" if "send" in op else "src"

        def timed(tensor, *args, **kwargs):
            local = self._local
            if getattr(local, "in_point_to_point", False) or not isinstance(tensor, torch.Tensor):
                return self._originals[op](tensor, *args, **kwargs)
            mark = self.begin()
            local.in_point_to_point = True
            try:
                return self._originals[op](tensor, *args, **kwargs)
            finally:
                local.in_point_to_point = False
                peer = args[0] if args else kwargs.get(peer_name)
                self.span(P2p, mark, op=op, peer=peer if isinstance(peer, int) else None, numel=tensor.numel())

        return timed

    # ---------------------------------------------------------------- DDP
    def _before_ddp_init(self, build: Any, ddp: DistributedDataParallel, args: tuple, kwargs: dict) -> None:
        try:
            given = inspect.signature(build).bind(ddp, *args, **kwargs).arguments
            cap = given.get("bucket_cap_mb")
            self.emit(
                DdpArgs,
                find_unused_parameters=bool(given.get("find_unused_parameters", False)),
                static_graph=bool(given.get("static_graph", False)),
                gradient_as_bucket_view=bool(given.get("gradient_as_bucket_view", False)),
                bucket_cap_mb=float(cap) if isinstance(cap, (int, float)) else None,
            )
        except Exception as exc:  # noqa: BLE001 - DDP is built whatever the recorder meets
            self._failed("DistributedDataParallel options", exc)

    def _after_ddp_init(self, ddp: DistributedDataParallel, args: tuple, kwargs: dict) -> None:
        try:
            device_ids = kwargs.get("device_ids", args[1] if len(args) > 1 else None)
            self._remember_model(ddp.module)
            self._models_seen.add(ddp)
            devices = self._parameter_devices(ddp.module)
            # the current device only where the model is on a GPU: asking would start CUDA in a process that has not
            current = f"cuda:{torch.cuda.current_device()}" if any(device.startswith("cuda") for device in devices) else None
            self.emit(Ddp, device_ids=tuple(str(d) for d in device_ids) if device_ids is not None else None, param_devices=devices, current_device=current)
            self._emit_model(ddp, "ddp")
            self._emit_globals("ddp")
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

            self._allreduce_hook = allreduce_hook
            routed: dict = {"user": None, "group": ddp.process_group}
            self._originals["ddp_register_comm_hook"](ddp, routed, self._comm_hook)
            ddp._comm_hook_routes = routed
        except Exception as exc:  # noqa: BLE001 - DDP keeps working without the hook
            self.note(f"all-reduces inside DDP not visible: its communication hook could not be registered ({type(exc).__name__}: {exc})")

    def _comm_hook(self, routed, bucket):  # unannotated: DDP rejects string annotations
        """Time one bucket: from the hook's call until its all-reduce completed. Without a hook
        of the script's, do what DDP does by default (torch's allreduce_hook)."""
        mark = self.begin()
        buffer = bucket.buffer()
        numel = buffer.numel()
        size = numel * buffer.element_size()
        self._local.in_ddp_hook = True
        try:
            if routed["user"] is not None:
                user_state, user_hook = routed["user"]
                future = user_hook(user_state, bucket)
            else:
                with torch._C.DisableTorchFunction():
                    future = self._allreduce_hook(routed["group"], bucket)
        finally:
            self._local.in_ddp_hook = False

        def completed(done):
            self.span(AllReduce, mark, source="ddp", numel=numel, bytes=size, bucket=bucket.index(), async_op=True)
            return done.value()

        return future.then(completed)

    # ------------------------------------------------------------ modules
    def _stack(self) -> list[_Frame]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _classify(self, module: torch.nn.Module, stack: list[_Frame]) -> dict | None:
        """Role, label and call of a call worth showing (a model, a replica or a stage), else None."""
        if _is_replica(module):  # replicate() marks every module of a replica: only its root counts
            inside = bool(stack) and _is_replica(stack[-1].module)
            return None if inside else {"role": "replica", "label": type(module).__name__, "call": self._open_call}
        if not stack:
            if next(module.parameters(), None) is None:
                return None  # a loss function, an activation: not a model
            self._calls += 1
            self._open_call = self._calls
            self._first_sight(module)
            return {"role": "model", "label": wrapped_label(module), "call": self._calls}
        parent = stack[-1].module
        if _is_replica(parent) or isinstance(parent, WRAPPERS) or len(self._devices_of(parent)) < 2:
            return None
        devices = self._devices_of(module)
        name = next((n for n, child in parent.named_children() if child is module), type(module).__name__)
        prefix = self._stage_names.get(parent)
        self._stage_names[module] = f"{prefix}.{name}" if prefix else name
        if len(devices) != 1:
            return None  # spread itself: its one-device parts are the stages
        return {"role": "stage", "label": self._stage_names[module], "call": self._open_call, "devices": devices}

    def _first_sight(self, model: torch.nn.Module) -> None:
        """At a model's outermost call: its `model` event when it is new, the script's
        variables at the first call of all."""
        if model not in self._models_seen:
            self._models_seen.add(model)
            if not self.model_seen:
                self._remember_model(model.module if isinstance(model, DistributedDataParallel) else model)
            self._emit_model(model, "first_forward")
        if not self.first_call_seen:
            self.first_call_seen = True
            self._emit_globals("first_forward")

    def _call_fields(self, module: torch.nn.Module, stack: list[_Frame], args: tuple) -> dict | None:
        """The fields of the forward event of this call, or None when it is not recorded."""
        shown = self._classify(module, stack)
        detail = self.step < self.options.detail_steps
        if shown is None and not detail:
            return None
        has_params = next(module.parameters(), None) is not None
        devices = shown.get("devices") if shown else None
        if devices is None and detail and has_params:
            devices = self._parameter_devices(module)
        return {
            "module": type(module).__name__,
            "name": self.module_names.get(id(module)),
            "label": shown["label"] if shown else type(module).__name__,
            "role": shown["role"] if shown else None,
            "depth": len(stack),
            "call": shown["call"] if shown else self._open_call,
            "has_params": has_params,
            "replica": _is_replica(module),
            "inputs": self.inputs(args),
            "devices": devices,
            "rows": self.row_sums(args) if shown and shown["role"] == "model" else None,
        }

    def _forward_pre(self, module, args) -> None:
        if torch.compiler.is_compiling():  # torch.compile traces the script's modules: the recorder stays out of its graph
            return
        stack = self._stack()
        fields = None
        try:
            fields = self._call_fields(module, stack, args)
        except Exception as exc:  # noqa: BLE001
            self._failed("a forward hook", exc)
        stack.append(_Frame(module, fields, self.begin() if fields is not None else None))

    def _forward_post(self, module, args, output) -> None:
        if torch.compiler.is_compiling():
            return
        stack = self._stack()
        if not stack:
            return
        frame = stack.pop()
        if frame.fields is None or frame.mark is None:
            return
        if frame.fields["role"] == "model":
            self._open_call = None
        self.span(Forward, frame.mark, **frame.fields)

    def current_forward(self) -> dict | None:
        """The fields of the call a print in this thread belongs to: the innermost running call
        with a role (a model's, a DataParallel replica's, a stage's), which a print from any of
        its children belongs to as well (a student's `ShowInput` layer first in the model);
        else the innermost recorded call, if any."""
        recorded = [frame.fields for frame in self._stack() if frame.fields is not None]
        return next((fields for fields in reversed(recorded) if fields["role"] is not None), recorded[-1] if recorded else None)

    def _remember_model(self, model: torch.nn.Module) -> None:
        self.model_seen = True
        self.param_names = {id(p): name for name, p in model.named_parameters()}
        self.module_names.update({id(m): name or type(model).__name__ for name, m in model.named_modules()})

    def _emit_model(self, module: torch.nn.Module, when: str) -> None:
        inner = module.module if isinstance(module, DistributedDataParallel) else module
        named = list(inner.named_parameters())
        size = sum(p.numel() for _, p in named)
        take = self.options.values and not self.values_taken
        self.values_taken = self.values_taken or take
        with torch._C.DisableTorchFunction():
            devices = tuple(self.device_name(p) for _, p in named)
        self.emit(
            Model,
            when=when,
            label=wrapped_label(module),
            names=tuple(n for n, _ in named),
            shapes=tuple(tuple(p.shape) for _, p in named),
            devices=devices,
            params=size,
            values=self.flat_values([p for _, p in named]) if take and size <= self.options.max_values else None,
        )

    # ---------------------------------------------------------- optimizer
    def _optimizer_params(self, optimizer) -> list[torch.Tensor]:
        return [p for group in optimizer.param_groups for p in group["params"]]

    def _names(self, params: list[torch.Tensor]) -> tuple[str, ...]:
        return tuple(self.param_names.get(id(p), f"param{i}") for i, p in enumerate(params))

    def _take_values(self, params: list[torch.Tensor]) -> bool:
        options = self.options
        return options.values and self.step < options.max_value_steps and sum(p.numel() for p in params) <= options.max_values

    def _step_pre(self, optimizer, args, kwargs) -> None:
        self._step_depth += 1
        if self._step_depth > 1:
            return
        if self.options.values:
            params = self._optimizer_params(optimizer)
            grads = self.flat_values([p.grad for p in params]) if self._take_values(params) else None
            self.emit(OptGrads, names=self._names(params), grads=grads)
        self._step_starts[id(optimizer)] = self.begin()

    def _step_post(self, optimizer, args, kwargs) -> None:
        self._step_depth = max(self._step_depth - 1, 0)
        if self._step_depth:
            return
        try:
            if self.options.virtual_gpus == 0 and torch.cuda.is_initialized():
                torch.cuda.synchronize()  # so the step ends when the GPUs finished it
        except RuntimeError as exc:
            self._failed("the optimizer step hook", exc)
        end = time.monotonic()
        mark = self._step_starts.pop(id(optimizer), None) or self.begin()
        params = self._optimizer_params(optimizer)
        values = self.flat_values(params) if self._take_values(params) else None
        self.span(Optimizer, mark, end, optimizer=type(optimizer).__name__, names=self._names(params), values=values)
        self.step += 1

    # ------------------------------------------------------------ globals
    def script_namespace(self) -> dict | None:
        """The running script's variables, found on the call stack: its module namespace, with
        the locals of its functions under way on top (the innermost wins), so that a script
        that keeps its setup in main() is seen as one that keeps it at module level."""
        frames = []
        frame = sys._getframe()
        while frame is not None:
            if frame.f_code.co_filename == self.options.script:
                frames.append(frame)
            frame = frame.f_back
        if not frames:
            return None
        namespace = dict(frames[-1].f_globals)
        for found in reversed(frames):
            if found.f_code.co_name != "<module>":
                namespace.update(found.f_locals)
        return namespace

    def _emit_globals(self, when: str, namespace: dict | None = None) -> None:
        if not self.options.watch_globals:
            return
        namespace = namespace if namespace is not None else self.script_namespace()
        if namespace is None:
            return
        values = {name: self.describe(namespace[name]) for name in self.options.watch_globals if name in namespace}
        self.emit(Globals, when=when, values=values)

    # ---------------------------------------------------------------- end
    def finish(self, namespace: dict | None = None, how: str = "atexit", code: int | None = None) -> None:
        """The end (once, and only where anything was recorded): the script's variables, peak
        memory per CUDA device, whether a process group is left, and how the script ended."""
        if self._finished or self._file is None:
            return
        self._finished = True
        self._emit_globals("end", namespace)
        try:
            if self.options.virtual_gpus or torch.cuda.is_initialized():
                with warnings.catch_warnings():  # the virtual GPUs' warning is for the script's own readings
                    warnings.simplefilter("ignore")
                    peaks = tuple(torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count()))
                self.emit(Memory, peak=peaks, why=None)
            elif torch.cuda.device_count() > 0:
                self.emit(Memory, peak=None, why="CUDA not used by this process: memory not measured")
            else:
                self.emit(Memory, peak=None, why="no CUDA device: memory not measured")
        except Exception as exc:  # noqa: BLE001
            self._failed("the memory reading at exit", exc)
        self.emit(EndState, pg_initialized=bool(dist.is_available() and dist.is_initialized()), steps=self.step)
        self.emit(Exit, how=how, code=code)

    def close(self) -> None:
        """Close the file (nothing is recorded afterwards)."""
        with self._lock:
            self._disabled = True
            if self._file is not None:
                self._file.close()


class OutputTap:
    """Writes through to a stream and notes what was written inside a recorded module call
    (the first `detail_steps` steps, 300 characters a write at most)."""

    def __init__(self, stream: TextIO, probe: Probe) -> None:
        self._stream = stream
        self._probe = probe

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        probe = self._probe
        forward = probe.current_forward() if probe.step < probe.options.detail_steps else None
        if forward is not None and text.strip():
            probe.emit(ForwardOutput, text=text[:300], module=forward["module"], depth=forward["depth"], inputs=forward["inputs"])
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def start_observing(folder: str, virtual: Any = None) -> Probe | None:
    """Install the recorder in this process for `observe`, writing events-HOST-PID.jsonl into
    `folder`. `virtual` is the state of the process's virtual GPUs (grader.probe.vgpu.VirtualCuda)
    if it has them. Never raises: a failure is one line on stderr and the script runs unobserved."""
    try:
        path = os.path.join(folder, f"events-{socket.gethostname()}-{os.getpid()}.jsonl")
        options = ProbeOptions(virtual_gpus=virtual.machine if virtual is not None else 0)
        probe = Probe(path, options, virtual.device_of if virtual is not None else None)
        probe.install()
        return probe
    except Exception as exc:  # noqa: BLE001 - the user's script must run anyway
        sys.stderr.write(f"grader observe: not observing this process ({type(exc).__name__}: {exc})\n")
        return None
