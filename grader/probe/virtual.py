"""Switching a process to N virtual GPUs: `install(n)` (see grader.probe.vgpu for how it works)."""
from __future__ import annotations

import sys
import threading

import torch
import torch.nn.parallel

from grader.probe.vgpu import VirtualCuda, parameter_new
from grader.probe.vgpu_api import make_api
from grader.probe.vgpu_parallel import backward_in_mode, make_comm, make_parallel_apply


def _own(value: object) -> object:
    """A function object of its own for each patched name: torch._dynamo refuses one object
    that stands under two torch names (it files every torch function under a rule)."""
    if isinstance(value, type) or not callable(value):
        return value

    def patched(*args: object, **kwargs: object) -> object:
        return value(*args, **kwargs)

    return patched


def _gloo_for_nccl() -> None:
    """init_process_group("nccl") runs on gloo: NCCL needs real GPUs, gloo does the same
    collectives on the CPU tensors behind the virtual devices."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    original = c10d.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        if backend is not None and "nccl" in str(backend):
            backend = "gloo"
            kwargs.pop("device_id", None)
        return original(backend, *args, **kwargs)

    c10d.init_process_group = dist.init_process_group = init_process_group


def install(count: int) -> VirtualCuda:
    """Make this process see `count` CUDA devices backed by its CPU; returns their state.

    The torch-function mode is entered in the calling thread and in every thread started
    afterwards; torch.cuda, nn.Parameter and DataParallel's CUDA-only pieces are replaced for
    the rest of the process's life; "nccl" process groups run on gloo. torch.accelerator is left alone: it keeps reporting no
    accelerator, which keeps torch's internals off their stream-based copy paths."""
    vcuda = VirtualCuda(count)
    api = make_api(vcuda)
    for name, value in api.items():
        setattr(torch.cuda, name, _own(value))
        for submodule in ("memory", "random", "streams"):
            home = getattr(torch.cuda, submodule, None)
            if home is not None and hasattr(home, name):
                setattr(home, name, _own(value))
    nvtx = getattr(torch.cuda, "nvtx", None)
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        if nvtx is not None and hasattr(nvtx, name):
            setattr(nvtx, name, lambda *args, **kwargs: 0)
    torch.nn.Parameter.__new__ = staticmethod(parameter_new(vcuda, torch.nn.Parameter.__new__))

    comm = sys.modules["torch.nn.parallel.comm"]
    for name, value in make_comm(vcuda).items():
        setattr(comm, name, value)
    functions = sys.modules["torch.nn.parallel._functions"]
    functions._get_stream = lambda device: None
    for name, device_attribute in (("Gather", "target_device"), ("Scatter", None), ("Broadcast", None), ("ReduceAddCoalesced", None)):
        function = getattr(functions, name)
        function.backward = staticmethod(backward_in_mode(vcuda, function.backward, device_attribute))
    apply = make_parallel_apply(vcuda)
    for home in (sys.modules["torch.nn.parallel.parallel_apply"], sys.modules["torch.nn.parallel.data_parallel"], torch.nn.parallel):
        home.parallel_apply = apply

    bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def bootstrap_in_mode(thread: threading.Thread) -> None:
        with vcuda.mode:
            bootstrap(thread)

    threading.Thread._bootstrap_inner = bootstrap_in_mode  # type: ignore[attr-defined]
    _gloo_for_nccl()
    vcuda.mode.__enter__()
    return vcuda
