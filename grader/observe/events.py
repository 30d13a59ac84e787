"""Recording inside an observed process (`python -m grader observe`).

grader/probe/boot/sitecustomize.py calls `start_observing` at the start-up of every Python
process of the observed command (torchrun's launcher and each worker alike) when
GRADER_OBSERVE_DIR names a folder. Each process appends JSON lines to a file of its own in that
folder, events-HOST-PID.jsonl, opened at its first event: a process that runs no model, no
optimizer and no process group (torchrun's launcher) leaves no file. This module runs next to
the user's code, so it depends on the standard library and torch only (the recorder it shares
with the grader's probe is standard library only), and a failure of its own never stops the
script: it becomes a `note` event.

Events (each with `t`, seconds since the file was opened, and `step`, the optimizer steps
finished before it; a span is written at its end and carries its duration `dur`):
    process    -- the first line: pid, ppid (the parent: torchrun's launcher, mp.spawn's
                  caller), host, argv, torchrun's RANK / LOCAL_RANK / WORLD_SIZE, the
                  wall-clock time `wall` (so files of several processes line up).
    init_pg    -- after init_process_group: the backend asked for and the one used, rank, size.
    ddp        -- a DistributedDataParallel was built: its device_ids and parameter devices.
    model      -- the first call of a model with parameters: its label, size, parameter devices.
    forward    -- span: a module call. role "model" (the outermost call), "replica" (a
                  DataParallel replica) or "stage" (a one-device part of a model spread over
                  several devices); label, inputs (shape and device of each tensor argument)
                  and call (the number of the outermost call it belongs to).
    backward   -- span: torch.autograd.backward, which Tensor.backward calls.
    allreduce  -- span: a DDP gradient bucket (source "ddp", from a communication hook, until
                  its all-reduce completed) or an explicit dist.all_reduce (source "call").
    optimizer  -- span: one optimizer step (CUDA synchronised at its end).
    exception  -- an uncaught exception of the main thread: its type and message.
    note       -- something the observer could not see, in one sentence.
    memory     -- at exit: the peak memory allocated on each CUDA device, or why not measured.
    exit       -- at exit, when Python ran its exit handlers.
"""
from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
import weakref
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.nn.modules import module as nn_module
from torch.nn.parallel import DataParallel, DistributedDataParallel
from torch.optim import optimizer as optim_module

from grader.probe.patching import replace_in_torch
from grader.probe.recorder import Recorder

MAX_EVENT_BYTES = 64 << 20
WRAPPERS = (DistributedDataParallel, DataParallel)

DeviceOf = Callable[[torch.Tensor], torch.device]


def _plain_device(tensor: torch.Tensor) -> torch.device:
    return tensor.device


def _wrapped_label(module: torch.nn.Module) -> str:
    """"DistributedDataParallel(Net)" for a wrapper, "Net" for a plain model."""
    name = type(module).__name__
    inner = getattr(module, "module", None)
    if isinstance(module, WRAPPERS) and isinstance(inner, torch.nn.Module):
        return f"{name}({type(inner).__name__})"
    return name


class _Frame:
    """One running module call in a thread's call stack."""

    __slots__ = ("module", "event", "start")

    def __init__(self, module: torch.nn.Module, event: dict | None, start: float) -> None:
        self.module = module
        self.event = event
        self.start = start


class Observer:
    """What one process records. `install()` puts the hooks in place; the state lives here."""

    def __init__(self, folder: str, virtual_gpus: int = 0, device_of: DeviceOf | None = None, max_bytes: int = MAX_EVENT_BYTES) -> None:
        self.folder = folder
        self.virtual_gpus = virtual_gpus
        self.device_of = device_of or _plain_device
        self.max_bytes = max_bytes
        self.pid = os.getpid()
        self.step = 0
        self._recorder: Recorder | None = None
        self._disabled = False
        self._lock = threading.Lock()
        self._local = threading.local()
        self._originals: dict[str, Callable] = {}
        self._calls = 0
        self._open_call: int | None = None
        self._noted: set[str] = set()
        self._devices: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._stage_names: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._models_seen: weakref.WeakSet = weakref.WeakSet()
        self._step_starts: dict[int, float] = {}

    # ------------------------------------------------------------ writing
    def emit(self, kind: str, **fields: Any) -> None:
        """Write one event; the file is opened at the first one. Never raises."""
        if self._disabled or os.getpid() != self.pid:  # a forked child (a DataLoader worker) writes nothing
            return
        with self._lock:
            try:
                if self._recorder is None:
                    self._open()
                self._recorder.emit(kind, step=self.step, **fields)
            except OSError as exc:
                self._disabled = True
                sys.stderr.write(f"grader observe: stopped recording this process: {exc}\n")

    def _open(self) -> None:
        os.makedirs(self.folder, exist_ok=True)
        path = os.path.join(self.folder, f"events-{socket.gethostname()}-{self.pid}.jsonl")
        self._recorder = Recorder(path, self.max_bytes)
        env = os.environ
        self._recorder.emit(
            "process",
            pid=self.pid,
            ppid=os.getppid(),
            host=socket.gethostname(),
            argv=list(sys.argv),
            rank=int(env["RANK"]) if env.get("RANK", "").isdigit() else None,
            local_rank=int(env["LOCAL_RANK"]) if env.get("LOCAL_RANK", "").isdigit() else None,
            world_size=int(env["WORLD_SIZE"]) if env.get("WORLD_SIZE", "").isdigit() else None,
            virtual_gpus=self.virtual_gpus,
            cuda=self.virtual_gpus == 0 and torch.cuda.is_available(),
            wall=time.time(),
            step=0,
        )

    def span(self, kind: str, start: float, **fields: Any) -> None:
        """Write a span that began at monotonic time `start` and ends now."""
        self.emit(kind, dur=round(time.monotonic() - start, 6), **fields)

    def note(self, text: str) -> None:
        """Say once what could not be observed."""
        if text not in self._noted:
            self._noted.add(text)
            self.emit("note", text=text)

    def _failed(self, where: str, exc: Exception) -> None:
        self.note(f"observer error in {where} ({type(exc).__name__}: {exc}); what it records may be incomplete")

    # ------------------------------------------------------------ install
    def install(self) -> None:
        """Wrap torch's entry points, register the global hooks and the exit handler."""
        for name, replacement in (("init_process_group", self._init_process_group), ("all_reduce", self._all_reduce)):
            self._originals[name] = replace_in_torch(c10d, name, replacement)
        self._wrap_ddp()
        self._originals["backward"] = torch.autograd.backward
        self._originals["excepthook"] = sys.excepthook
        observer = self

        def backward(*args, **kwargs):
            start = time.monotonic()
            try:
                return observer._originals["backward"](*args, **kwargs)
            finally:
                observer.span("backward", start)

        def excepthook(kind, value, traceback):
            observer.emit("exception", type=kind.__name__, message=str(value)[:500])
            observer._originals["excepthook"](kind, value, traceback)

        optim_module.register_optimizer_step_pre_hook(self._step_pre)
        optim_module.register_optimizer_step_post_hook(self._step_post)
        nn_module.register_module_forward_pre_hook(self._forward_pre)
        nn_module.register_module_forward_hook(self._forward_post, always_call=True)
        torch.autograd.backward = backward
        sys.excepthook = excepthook
        atexit.register(self.finish)

    def _wrap_ddp(self) -> None:
        """Register the timing hook on each DDP right after it is built; a hook the script
        registers later is called by ours instead of replacing it (DDP takes only one)."""
        build = DistributedDataParallel.__init__
        register = DistributedDataParallel.register_comm_hook
        register_builtin = DistributedDataParallel._register_builtin_comm_hook
        self._originals["ddp_register_comm_hook"] = register
        observer = self

        def built_and_hooked(ddp_self, *args, **kwargs):
            build(ddp_self, *args, **kwargs)
            observer._after_ddp_init(ddp_self, args, kwargs)

        def routed_to_ours(ddp_self, state, hook):
            routed = getattr(ddp_self, "_grader_observe_hook", None)
            if routed is None:
                return register(ddp_self, state, hook)
            routed["user"] = (state, hook)
            name = getattr(hook, "__qualname__", repr(hook))
            observer.note(f"the script registers its own DDP communication hook ({name}): its buckets are timed as DDP buckets")
            return None

        def builtin_routed_to_ours(ddp_self, comm_hook_type):
            routed = getattr(ddp_self, "_grader_observe_hook", None)
            if routed is None:
                return register_builtin(ddp_self, comm_hook_type)
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            python_hooks = {"ALLREDUCE": default_hooks.allreduce_hook, "FP16_COMPRESS": default_hooks.fp16_compress_hook}
            same = python_hooks.get(getattr(comm_hook_type, "name", ""))
            if same is None:
                observer.note(f"DDP's built-in communication hook {comm_hook_type} was not applied: the observer's own hook stays")
                return None
            return routed_to_ours(ddp_self, routed["group"], same)

        DistributedDataParallel.__init__ = built_and_hooked
        DistributedDataParallel.register_comm_hook = routed_to_ours
        DistributedDataParallel._register_builtin_comm_hook = builtin_routed_to_ours

    # ----------------------------------------------------- process groups
    def _init_process_group(self, backend=None, *args, **kwargs):
        result = self._originals["init_process_group"](backend, *args, **kwargs)
        try:
            used = str(dist.get_backend())
            self.emit("init_pg", requested=str(backend), backend=used, rank=dist.get_rank(), world_size=dist.get_world_size())
        except Exception as exc:  # noqa: BLE001 - the script goes on whatever the observer meets
            self._failed("init_process_group", exc)
        return result

    def _all_reduce(self, tensor, *args, **kwargs):
        if getattr(self._local, "in_ddp_hook", False) or not isinstance(tensor, torch.Tensor):
            return self._originals["all_reduce"](tensor, *args, **kwargs)
        start = time.monotonic()
        try:
            return self._originals["all_reduce"](tensor, *args, **kwargs)
        finally:
            asynchronous = bool(kwargs.get("async_op") or (len(args) > 2 and args[2]))
            self.span("allreduce", start, source="call", bytes=tensor.numel() * tensor.element_size(), async_op=asynchronous)

    # ---------------------------------------------------------------- DDP
    def _after_ddp_init(self, ddp: DistributedDataParallel, args: tuple, kwargs: dict) -> None:
        try:
            device_ids = kwargs.get("device_ids", args[1] if len(args) > 1 else None)
            self.emit(
                "ddp",
                device_ids=[str(d) for d in device_ids] if device_ids is not None else None,
                param_devices=self._parameter_devices(ddp.module),
            )
            routed: dict = {"user": None, "group": ddp.process_group}
            self._originals["ddp_register_comm_hook"](ddp, routed, self._comm_hook)
            ddp._grader_observe_hook = routed
        except Exception as exc:  # noqa: BLE001 - DDP keeps working without the hook
            self.note(f"all-reduces inside DDP not visible: its communication hook could not be registered ({type(exc).__name__}: {exc})")

    def _comm_hook(self, routed, bucket):  # unannotated: DDP rejects string annotations
        """Time one bucket: from the hook's call until its all-reduce completed. Without a hook
        of the script's, do what DDP does by default (torch's allreduce_hook)."""
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        start = time.monotonic()
        buffer = bucket.buffer()
        size = buffer.numel() * buffer.element_size()
        self._local.in_ddp_hook = True
        try:
            if routed["user"] is not None:
                user_state, user_hook = routed["user"]
                future = user_hook(user_state, bucket)
            else:
                with torch._C.DisableTorchFunction():
                    future = allreduce_hook(routed["group"], bucket)
        finally:
            self._local.in_ddp_hook = False

        def completed(done):
            self.span("allreduce", start, source="ddp", bytes=size, bucket=bucket.index())
            return done.value()

        return future.then(completed)

    # ------------------------------------------------------------ modules
    def _stack(self) -> list[_Frame]:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _parameter_devices(self, module: torch.nn.Module) -> list[str]:
        with torch._C.DisableTorchFunction():
            return sorted({str(self.device_of(p)) for p in module.parameters()})

    def _devices_of(self, module: torch.nn.Module) -> list[str]:
        """The devices of a module's parameters, found once per module."""
        devices = self._devices.get(module)
        if devices is None:
            devices = self._devices[module] = self._parameter_devices(module)
        return devices

    def inputs(self, args: tuple) -> list[dict]:
        """Shape and device of each tensor among a call's arguments (first level)."""
        with torch._C.DisableTorchFunction():
            return [{"shape": list(a.shape), "device": str(self.device_of(a))} for a in args if isinstance(a, torch.Tensor)]

    def _classify(self, module: torch.nn.Module, stack: list[_Frame]) -> dict | None:
        """The event of a call worth showing (a model, a replica or a stage), else None."""
        if getattr(module, "_is_replica", False):  # replicate() marks every module of a replica: only its root counts
            inside = bool(stack) and getattr(stack[-1].module, "_is_replica", False)
            return None if inside else {"role": "replica", "label": type(module).__name__, "call": self._open_call}
        if not stack:
            if next(module.parameters(), None) is None:
                return None  # a loss function, an activation: not a model
            self._calls += 1
            self._open_call = self._calls
            event = {"role": "model", "label": _wrapped_label(module), "call": self._calls}
            if module not in self._models_seen:
                self._models_seen.add(module)
                size = sum(p.numel() for p in module.parameters())
                self.emit("model", label=event["label"], params=size, devices=self._devices_of(module))
            return event
        parent = stack[-1].module
        if getattr(parent, "_is_replica", False) or isinstance(parent, WRAPPERS) or len(self._devices_of(parent)) < 2:
            return None
        devices = self._devices_of(module)
        name = next((n for n, child in parent.named_children() if child is module), type(module).__name__)
        prefix = self._stage_names.get(parent)
        self._stage_names[module] = f"{prefix}.{name}" if prefix else name
        if len(devices) != 1:
            return None  # spread itself: its one-device parts are the stages
        label = self._stage_names[module]
        return {"role": "stage", "label": label, "module": type(module).__name__, "devices": devices, "call": self._open_call}

    def _forward_pre(self, module, args) -> None:
        stack = self._stack()
        event = None
        try:
            event = self._classify(module, stack)
            if event is not None:
                event["inputs"] = self.inputs(args)
        except Exception as exc:  # noqa: BLE001
            self._failed("a forward hook", exc)
        stack.append(_Frame(module, event, time.monotonic()))

    def _forward_post(self, module, args, output) -> None:
        stack = self._stack()
        if not stack:
            return
        frame = stack.pop()
        if frame.event is None:
            return
        if frame.event["role"] == "model":
            self._open_call = None
        self.span("forward", frame.start, **frame.event)

    # ---------------------------------------------------------- optimizer
    def _step_pre(self, optimizer, args, kwargs) -> None:
        self._step_starts[id(optimizer)] = time.monotonic()

    def _step_post(self, optimizer, args, kwargs) -> None:
        try:
            if self.virtual_gpus == 0 and torch.cuda.is_available() and torch.cuda.is_initialized():
                torch.cuda.synchronize()  # so the step ends when the GPUs finished it
        except RuntimeError as exc:
            self._failed("the optimizer step hook", exc)
        self.span("optimizer", self._step_starts.pop(id(optimizer), time.monotonic()), optimizer=type(optimizer).__name__)
        self.step += 1

    # ---------------------------------------------------------------- end
    def finish(self) -> None:
        """At exit: peak memory per CUDA device, then the end mark (only if anything was recorded)."""
        if self._recorder is None:
            return
        try:
            if self.virtual_gpus or (torch.cuda.is_available() and torch.cuda.is_initialized()):
                self.emit("memory", peak=[torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())])
            elif torch.cuda.is_available():
                self.emit("memory", peak=None, why="CUDA not used by this process: memory not measured")
            else:
                self.emit("memory", peak=None, why="no CUDA device: memory not measured")
        except Exception as exc:  # noqa: BLE001
            self._failed("the memory reading at exit", exc)
        self.emit("exit")


def start_observing(folder: str, virtual: Any = None) -> Observer | None:
    """Install an observer in this process, writing into `folder`. `virtual` is the state of
    the process's virtual GPUs (grader.probe.vgpu.VirtualCuda) if it has them. Never raises:
    a failure is one line on stderr and the script runs unobserved."""
    try:
        observer = Observer(folder, virtual.machine if virtual is not None else 0, virtual.device_of if virtual is not None else None)
        observer.install()
        return observer
    except Exception as exc:  # noqa: BLE001 - the user's script must run anyway
        sys.stderr.write(f"grader observe: not observing this process ({type(exc).__name__}: {exc})\n")
        return None
