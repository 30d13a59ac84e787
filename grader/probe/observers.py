"""Observers installed in a rank before the student's script runs.

What is recorded, and how (all through public torch hooks where torch has one):
    init_pg / destroy_pg -- wrappers around torch.distributed.{init,destroy}_process_group; a
                            process-group timeout is added when the script gives none, so a
                            hung collective ends by itself even if the grader's kill misses it.
    ddp                  -- a wrapper around DistributedDataParallel.__init__: device_ids, the
                            devices and initial values of the parameters.
    allreduce            -- every gradient bucket DDP all-reduces (a DDP communication hook that
                            does what DDP does by default, or calls the student's own hook), and
                            every explicit torch.distributed.all_reduce call.
    forward              -- global module forward hooks: each outermost module call with the
                            shapes and devices of its tensor inputs; in the first
                            `detail_steps` steps also the nested calls (DataParallel replicas,
                            pipeline stages, layers) with their depth, name and parameter devices.
    forward_output       -- text the script printed while a module's forward was running.
    backward             -- each backward pass (a wrapper around torch.autograd.backward, which
                            Tensor.backward calls); DDP's all-reduces of a pass follow it.
    opt_grads / params   -- global optimizer step hooks: gradients before and parameters after
                            each optimizer step (after a CUDA synchronize, so the event's time
                            is the step's end); the step counter every other event carries.
    cuda_memory          -- at the end, the peak memory allocated on each CUDA device.
    globals              -- the values of the script's setup variables (rank, local_rank, ...),
                            read from its module frame at DDP construction and first forward.
Devices are read through `device_of`, which knows virtual GPUs; values are read with torch
functions disabled, so the probe's own reads never pass through the virtual-GPU mode.
"""
from __future__ import annotations

import datetime
import sys
import threading
from typing import Any, Callable, TextIO

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.nn.modules import module as nn_module
from torch.nn.parallel import DistributedDataParallel
from torch.optim import optimizer as optim_module

from grader.probe.patching import replace_in_torch
from grader.probe.recorder import Recorder

DeviceOf = Callable[[torch.Tensor], torch.device]


def _plain_device(tensor: torch.Tensor) -> torch.device:
    return tensor.device


class Probe:
    """The observer state of one rank. `install()` puts the hooks in place; nothing is global
    beyond what torch's own hook registries hold."""

    def __init__(self, recorder: Recorder, config: dict, device_of: DeviceOf | None = None) -> None:
        self.rec = recorder
        self.script = config["script"]
        self.watch_globals: list[str] = config.get("watch_globals", [])
        self.max_value_steps: int = config.get("max_value_steps", 8)
        self.max_values: int = config.get("max_values", 200_000)
        self.detail_steps: int = config.get("detail_steps", 2)
        self.pg_timeout_s: float = config.get("pg_timeout_s", 120.0)
        self.device_of = device_of or _plain_device
        self.step = 0
        self.param_names: dict[int, str] = {}
        self.module_names: dict[int, str] = {}
        self.model_seen = False
        self.model_forwarded = False
        self._local = threading.local()
        self._originals: dict[str, Callable] = {}

    # ---------------------------------------------------------------- values
    def device_name(self, tensor: torch.Tensor) -> str:
        return str(self.device_of(tensor))

    def inputs(self, args: tuple) -> list[dict]:
        """Shapes and devices of the tensors among a call's arguments (first level only)."""
        return [{"shape": list(v.shape), "device": self.device_name(v)} for v in args if isinstance(v, torch.Tensor)]

    def describe(self, value: Any) -> Any:
        """A small JSON-able description of a value from the student's namespace."""
        if isinstance(value, (bool, int, float, str)) or value is None:
            return value
        if isinstance(value, torch.device):
            return str(value)
        if isinstance(value, torch.Tensor):
            return {"tensor": list(value.shape), "device": self.device_name(value)}
        return {"type": type(value).__name__, "repr": repr(value)[:120]}

    @staticmethod
    def flat_values(tensors: list[torch.Tensor | None]) -> list[list[float] | None]:
        """Exact float values of small tensors (None stays None)."""
        with torch._C.DisableTorchFunction():
            return [None if t is None else t.detach().to("cpu", torch.float64).reshape(-1).tolist() for t in tensors]

    # ------------------------------------------------------------------ install
    def install(self) -> None:
        """Wrap the torch entry points and register the global hooks."""
        self._wrap("init_process_group", self._init_process_group)
        self._wrap("destroy_process_group", self._destroy_process_group)
        self._wrap("all_reduce", self._all_reduce)
        self._originals["ddp_init"] = DistributedDataParallel.__init__
        self._originals["ddp_register_comm_hook"] = DistributedDataParallel.register_comm_hook
        probe = self

        def ddp_init(ddp_self, *args, **kwargs):
            probe._originals["ddp_init"](ddp_self, *args, **kwargs)
            probe._after_ddp_init(ddp_self, args, kwargs)

        def register_comm_hook(ddp_self, state, hook):
            hook_state = getattr(ddp_self, "_grader_hook_state", None)
            if hook_state is None:
                return probe._originals["ddp_register_comm_hook"](ddp_self, state, hook)
            hook_state["user"] = (state, hook)  # ours stays registered and calls theirs
            probe.rec.emit("comm_hook", name=getattr(hook, "__qualname__", repr(hook)), step=probe.step)
            return None

        DistributedDataParallel.__init__ = ddp_init
        DistributedDataParallel.register_comm_hook = register_comm_hook
        self._originals["backward"] = torch.autograd.backward

        def backward(*args, **kwargs):  # Tensor.backward() calls torch.autograd.backward
            probe.rec.emit("backward", step=probe.step)
            return probe._originals["backward"](*args, **kwargs)

        torch.autograd.backward = backward
        nn_module.register_module_forward_pre_hook(self._forward_pre)
        nn_module.register_module_forward_hook(self._forward_post, always_call=True)
        optim_module.register_optimizer_step_pre_hook(self._step_pre)
        optim_module.register_optimizer_step_post_hook(self._step_post)

    def _wrap(self, name: str, replacement: Callable) -> None:
        """Replace torch.distributed's `name` by `replacement` wherever torch holds it (DeviceMesh
        calls init_process_group by its own name)."""
        self._originals[name] = replace_in_torch(c10d, name, replacement)

    def tap(self, stream: TextIO) -> "OutputTap":
        """A stand-in for sys.stdout / sys.stderr that notes text printed inside a forward."""
        return OutputTap(stream, self)

    # -------------------------------------------------------- process groups
    def _init_process_group(self, backend=None, *args, **kwargs):
        requested = backend
        if kwargs.get("timeout") is None and len(args) < 2:
            kwargs["timeout"] = datetime.timedelta(seconds=self.pg_timeout_s)
        self.rec.emit("init_pg_call", backend=str(requested), kwargs=sorted(kwargs), step=self.step)
        result = self._originals["init_process_group"](backend, *args, **kwargs)
        self.rec.emit(
            "init_pg",
            requested=str(requested),
            backend=str(dist.get_backend()),
            rank=dist.get_rank(),
            world_size=dist.get_world_size(),
            step=self.step,
        )
        return result

    def _destroy_process_group(self, *args, **kwargs):
        group = args[0] if args else kwargs.get("group")
        self.rec.emit("destroy_pg", default_group=group is None, step=self.step)
        return self._originals["destroy_process_group"](*args, **kwargs)

    def _all_reduce(self, tensor, *args, **kwargs):
        if isinstance(tensor, torch.Tensor):
            self.rec.emit("allreduce", source="dist.all_reduce", numel=tensor.numel(), step=self.step)
        return self._originals["all_reduce"](tensor, *args, **kwargs)

    # -------------------------------------------------------------------- DDP
    def _after_ddp_init(self, ddp, args: tuple, kwargs: dict) -> None:
        device_ids = kwargs.get("device_ids", args[1] if len(args) > 1 else None)
        self._remember_model(ddp.module)
        self.rec.emit(
            "ddp",
            device_ids=[str(d) for d in device_ids] if device_ids is not None else None,
            param_devices=sorted({self.device_name(p) for p in ddp.module.parameters()}),
            step=self.step,
        )
        self._emit_model(ddp.module, "ddp")
        self._emit_globals("ddp")
        hook_state: dict = {"user": None, "group": ddp.process_group}
        ddp._grader_hook_state = hook_state
        self._originals["ddp_register_comm_hook"](ddp, hook_state, self._comm_hook)

    def _comm_hook(self, hook_state, bucket):  # unannotated: DDP rejects string annotations
        """Count the bucket, then do what DDP does without a hook (average over the group)."""
        buffer = bucket.buffer()
        self.rec.emit("allreduce", source="ddp", numel=buffer.numel(), step=self.step)
        if hook_state["user"] is not None:
            user_state, user_hook = hook_state["user"]
            return user_hook(user_state, bucket)
        group = hook_state["group"]
        with torch._C.DisableTorchFunction():
            buffer.div_(group.size())
            work = self._originals["all_reduce"](buffer, group=group, async_op=True)
            return work.get_future().then(lambda fut: fut.value()[0])

    # ---------------------------------------------------------------- modules
    def _stack(self) -> list:
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def _forward_pre(self, module, args) -> None:
        stack = self._stack()
        depth = len(stack)
        stack.append(None)
        if depth and self.step >= self.detail_steps:
            return
        has_params = next(module.parameters(), None) is not None
        if depth == 0 and has_params and not self.model_forwarded:
            self.model_forwarded = True
            if not self.model_seen:
                self._remember_model(module.module if isinstance(module, DistributedDataParallel) else module)
                self._emit_model(module, "first_forward")
            self._emit_globals("first_forward")
        event = {
            "module": type(module).__name__,
            "name": self.module_names.get(id(module)),
            "depth": depth,
            "has_params": has_params,
            "replica": bool(getattr(module, "_is_replica", False)),
            "inputs": self.inputs(args),
            "step": self.step,
        }
        if has_params and self.step < self.detail_steps:
            event["param_devices"] = sorted({self.device_name(p) for p in module.parameters()})
        stack[-1] = event
        self.rec.emit("forward", **event)

    def _forward_post(self, module, args, output) -> None:
        stack = self._stack()
        if stack:
            stack.pop()

    def current_forward(self) -> dict | None:
        """The innermost recorded forward running in this thread, if any."""
        for event in reversed(self._stack()):
            if event is not None:
                return event
        return None

    def _remember_model(self, model: torch.nn.Module) -> None:
        self.model_seen = True
        self.param_names = {id(p): name for name, p in model.named_parameters()}
        self.module_names.update({id(m): name or type(model).__name__ for name, m in model.named_modules()})

    def _emit_model(self, module: torch.nn.Module, when: str) -> None:
        if isinstance(module, DistributedDataParallel):
            module = module.module
        named = list(module.named_parameters())
        small = sum(p.numel() for _, p in named) <= self.max_values
        self.rec.emit(
            "model",
            when=when,
            names=[n for n, _ in named],
            shapes=[list(p.shape) for _, p in named],
            devices=[self.device_name(p) for _, p in named],
            values=self.flat_values([p for _, p in named]) if small else None,
            step=self.step,
        )

    # -------------------------------------------------------------- optimizer
    def _optimizer_params(self, optimizer) -> list[torch.Tensor]:
        return [p for group in optimizer.param_groups for p in group["params"]]

    def _record_values(self, params: list[torch.Tensor]) -> bool:
        return self.step < self.max_value_steps and sum(p.numel() for p in params) <= self.max_values

    def _step_pre(self, optimizer, args, kwargs) -> None:
        params = self._optimizer_params(optimizer)
        self.rec.emit(
            "opt_grads",
            names=[self.param_names.get(id(p), f"param{i}") for i, p in enumerate(params)],
            grads=self.flat_values([p.grad for p in params]) if self._record_values(params) else None,
            step=self.step,
        )

    def _step_post(self, optimizer, args, kwargs) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # so the event's time is when the GPUs finished the step
        params = self._optimizer_params(optimizer)
        self.rec.emit(
            "opt_params",
            names=[self.param_names.get(id(p), f"param{i}") for i, p in enumerate(params)],
            values=self.flat_values(params) if self._record_values(params) else None,
            step=self.step,
        )
        self.step += 1

    # ---------------------------------------------------------------- globals
    def script_globals(self) -> dict | None:
        """The module namespace of the running script, found on the call stack."""
        frame = sys._getframe()
        while frame is not None:
            if frame.f_code.co_filename == self.script and frame.f_code.co_name == "<module>":
                return frame.f_globals
            frame = frame.f_back
        return None

    def _emit_globals(self, when: str, namespace: dict | None = None) -> None:
        namespace = namespace if namespace is not None else self.script_globals()
        if namespace is None:
            return
        values = {name: self.describe(namespace[name]) for name in self.watch_globals if name in namespace}
        self.rec.emit("globals", when=when, values=values, step=self.step)

    def finish(self, namespace: dict | None) -> None:
        """Record the end state: the script's variables and whether a process group is left."""
        self._emit_globals("end", namespace)
        if torch.cuda.is_available():
            self.rec.emit("cuda_memory", peak=[torch.cuda.max_memory_allocated(i) for i in range(torch.cuda.device_count())], step=self.step)
        self.rec.emit(
            "end_state",
            pg_initialized=bool(dist.is_available() and dist.is_initialized()),
            steps=self.step,
        )


class OutputTap:
    """Writes through to a stream and notes what was written inside a module's forward (the
    first `detail_steps` steps, 300 characters a write at most)."""

    def __init__(self, stream: TextIO, probe: Probe) -> None:
        self._stream = stream
        self._probe = probe

    def write(self, text: str) -> int:
        written = self._stream.write(text)
        forward = self._probe.current_forward()
        if forward is not None and text.strip() and self._probe.step < self._probe.detail_steps:
            self._probe.rec.emit(
                "forward_output",
                text=text[:300],
                module=forward["module"],
                depth=forward["depth"],
                inputs=forward["inputs"],
                step=self._probe.step,
            )
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
