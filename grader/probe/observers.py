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
                            shapes and devices of its tensor inputs.
    opt_step             -- global optimizer step hooks: gradients before and parameters after
                            each optimizer step; the step counter every other event carries.
    globals              -- the values of the script's setup variables (rank, local_rank, ...),
                            read from its module frame at the first model forward.
"""
from __future__ import annotations

import datetime
import sys
import threading
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from torch.nn.modules import module as nn_module
from torch.nn.parallel import DistributedDataParallel
from torch.optim import optimizer as optim_module

from grader.probe.recorder import Recorder


def describe(value: Any) -> Any:
    """A small JSON-able description of a value from the student's namespace."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, torch.device):
        return str(value)
    if isinstance(value, torch.Tensor):
        return {"tensor": list(value.shape), "device": str(value.device)}
    return {"type": type(value).__name__, "repr": repr(value)[:120]}


def tensor_inputs(args: tuple, kwargs: dict | None = None) -> list[dict]:
    """Shapes and devices of the tensors among a call's arguments (first level only)."""
    values = list(args) + list((kwargs or {}).values())
    return [{"shape": list(v.shape), "device": str(v.device)} for v in values if isinstance(v, torch.Tensor)]


def flat_values(tensors: list[torch.Tensor | None]) -> list[list[float] | None]:
    """Exact float values of small tensors (None stays None)."""
    return [None if t is None else t.detach().to("cpu", torch.float64).reshape(-1).tolist() for t in tensors]


class Probe:
    """The observer state of one rank. `install()` puts the hooks in place; nothing is global
    beyond what torch's own hook registries hold."""

    def __init__(self, recorder: Recorder, config: dict) -> None:
        self.rec = recorder
        self.script = config["script"]
        self.watch_globals: list[str] = config.get("watch_globals", [])
        self.max_value_steps: int = config.get("max_value_steps", 8)
        self.max_values: int = config.get("max_values", 200_000)
        self.pg_timeout_s: float = config.get("pg_timeout_s", 120.0)
        self.step = 0
        self.param_names: dict[int, str] = {}
        self.model_seen = False
        self.model_forwarded = False
        self._local = threading.local()
        self._originals: dict[str, Callable] = {}

    # ------------------------------------------------------------------ install
    def install(self) -> None:
        """Wrap the torch entry points and register the global hooks."""
        self._wrap(c10d, dist, "init_process_group", self._init_process_group)
        self._wrap(c10d, dist, "destroy_process_group", self._destroy_process_group)
        self._wrap(c10d, dist, "all_reduce", self._all_reduce)
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
        nn_module.register_module_forward_pre_hook(self._forward_pre)
        nn_module.register_module_forward_hook(self._forward_post, always_call=True)
        optim_module.register_optimizer_step_pre_hook(self._step_pre)
        optim_module.register_optimizer_step_post_hook(self._step_post)

    def _wrap(self, home, alias, name: str, replacement: Callable) -> None:
        """Replace `name` in torch.distributed and its defining module by `replacement`."""
        self._originals[name] = getattr(home, name)
        setattr(home, name, replacement)
        setattr(alias, name, replacement)

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
        params = list(ddp.module.parameters())
        self.rec.emit(
            "ddp",
            device_ids=[str(d) for d in device_ids] if device_ids is not None else None,
            param_devices=sorted({str(p.device) for p in params}),
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
        buffer.div_(group.size())
        work = self._originals["all_reduce"](buffer, group=group, async_op=True)
        return work.get_future().then(lambda fut: fut.value()[0])

    # ---------------------------------------------------------------- modules
    def _forward_pre(self, module, args) -> None:
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth:
            return
        has_params = next(module.parameters(), None) is not None
        if has_params and not self.model_forwarded:
            self.model_forwarded = True
            if not self.model_seen:
                self._remember_model(module.module if isinstance(module, DistributedDataParallel) else module)
                self._emit_model(module, "first_forward")
            self._emit_globals("first_forward")
        self.rec.emit(
            "forward",
            module=type(module).__name__,
            has_params=has_params,
            inputs=tensor_inputs(args),
            step=self.step,
        )

    def _forward_post(self, module, args, output) -> None:
        self._local.depth = max(getattr(self._local, "depth", 1) - 1, 0)

    def _remember_model(self, model: torch.nn.Module) -> None:
        self.model_seen = True
        self.param_names = {id(p): name for name, p in model.named_parameters()}

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
            devices=[str(p.device) for _, p in named],
            values=flat_values([p for _, p in named]) if small else None,
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
            grads=flat_values([p.grad for p in params]) if self._record_values(params) else None,
            step=self.step,
        )

    def _step_post(self, optimizer, args, kwargs) -> None:
        params = self._optimizer_params(optimizer)
        self.rec.emit(
            "opt_params",
            names=[self.param_names.get(id(p), f"param{i}") for i, p in enumerate(params)],
            values=flat_values(params) if self._record_values(params) else None,
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
        values = {name: describe(namespace[name]) for name in self.watch_globals if name in namespace}
        self.rec.emit("globals", when=when, values=values, step=self.step)

    def finish(self, namespace: dict | None) -> None:
        """Record the end state: the script's variables and whether a process group is left."""
        self._emit_globals("end", namespace)
        self.rec.emit(
            "end_state",
            pg_initialized=bool(dist.is_available() and dist.is_initialized()),
            steps=self.step,
        )
