"""Switching a process to N virtual GPUs: `install(n)` (see grader.probe.vgpu.devices for how it works)."""
from __future__ import annotations

import atexit
import functools
import gc
import os
import sys
import threading
import warnings
from typing import Any, Callable

import torch
import torch.nn.parallel

from grader.probe.patching import dressed, own_function
from grader.probe.vgpu.devices import VISIBLE, VirtualCuda, parameter_new
from grader.probe.vgpu.amp import install_autocast
from grader.probe.vgpu.api import make_accelerator, make_api, make_generator, record_stream
from grader.probe.vgpu.autograd import install_autograd
from grader.probe.vgpu.dist import install_distributed
from grader.probe.vgpu.parallel import make_comm, make_parallel_apply
from grader.probe.vgpu.serialization import install_serialization

# CUDA_VISIBLE_DEVICES as the first process of the command found it ("(unset)": not set),
# passed on to its children: a program's own setting is told apart from the machine's.
INHERITED_VISIBLE = "VIRTUAL_GPUS_INHERITED_VISIBLE_DEVICES"  # the emulation's, as under `grader run`: no name of the grader's (grader/probe/cloak.py)
UNSET = "(unset)"


def _inherited_visible() -> str | None:
    value = os.environ.setdefault(INHERITED_VISIBLE, os.environ.get(VISIBLE, UNSET))
    return None if value == UNSET else value


def _patch_cuda(vcuda: VirtualCuda) -> dict:
    """torch.cuda (and its submodules that define the same names), torch.accelerator,
    torch.Generator and Tensor.record_stream; returns the torch.cuda replacements."""
    api = make_api(vcuda)
    for name, value in api.items():
        setattr(torch.cuda, name, own_function(value))
        for submodule in ("memory", "random", "streams"):
            home = getattr(torch.cuda, submodule, None)
            if home is not None and hasattr(home, name):
                setattr(home, name, own_function(value))
    nvtx = getattr(torch.cuda, "nvtx", None)
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        if nvtx is not None and hasattr(nvtx, name):
            setattr(nvtx, name, lambda *args, **kwargs: 0)
    for name, value in make_accelerator(vcuda, api).items():
        setattr(torch._C, name, own_function(value))
    torch.Generator = make_generator(vcuda)
    torch.Tensor.record_stream = dressed(record_stream, torch.Tensor.record_stream)
    return api


def _patch_data_parallel(vcuda: VirtualCuda, api: dict) -> None:
    """DataParallel's CUDA-only pieces (grader.probe.vgpu.parallel)."""
    comm = sys.modules["torch.nn.parallel.comm"]
    for name, value in make_comm(vcuda).items():
        setattr(comm, name, value)
    sys.modules["torch.nn.parallel._functions"]._get_stream = lambda device: api["Stream"](device)
    apply = make_parallel_apply(vcuda)
    for home in (sys.modules["torch.nn.parallel.parallel_apply"], sys.modules["torch.nn.parallel.data_parallel"], torch.nn.parallel):
        home.parallel_apply = apply


EAGER = (
    "torch.compile on virtual GPUs: the model runs eagerly (compiling for CUDA, into Triton kernels, is not emulated); "
    "its results are the same, its speed is not"
)


def _eager_compile(compile_: Callable) -> Callable:
    """torch.compile that returns what it is given, with a warning: inductor would compile the
    virtual devices' work for CUDA, which this machine cannot run."""

    @functools.wraps(compile_)
    def compile(model: Callable | None = None, *args: Any, **kwargs: Any) -> Any:
        warnings.warn(EAGER, stacklevel=2)
        return (lambda fn: fn) if model is None else model

    return compile


def _count_resized_storages(vcuda: VirtualCuda) -> None:
    """UntypedStorage.resize_, after which the storage's block in the memory statistics
    follows its new size (FSDP frees a flat parameter by resizing its storage to 0)."""
    resize = torch.UntypedStorage.resize_

    def resize_(storage: Any, size: int) -> Any:
        result = resize(storage, size)
        vcuda.resized(storage)
        return result

    torch.UntypedStorage.resize_ = dressed(resize_, resize)


def install(count: int) -> VirtualCuda:
    """Make this process see `count` CUDA devices backed by its CPU; returns their state.

    The torch-function mode is entered in the calling thread and in every thread started
    afterwards; torch.cuda, torch.accelerator, nn.Parameter, serialization, the autograd
    engine's callbacks, CUDA autocast, torch.compile (eager, with a warning) and DataParallel's
    CUDA-only pieces are replaced for the rest of the process's life; process groups that would
    use NCCL run on gloo (barriers bound to a GPU included), RPC's remote functions see the GPUs,
    tensors sent to other processes keep their device, and a child forked after CUDA's first use
    cannot use CUDA."""
    vcuda = VirtualCuda(count, _inherited_visible())
    os.register_at_fork(after_in_child=vcuda.forked_child)
    api = _patch_cuda(vcuda)
    torch.nn.Parameter.__new__ = staticmethod(parameter_new(vcuda, torch.nn.Parameter.__new__))
    _patch_data_parallel(vcuda, api)
    install_serialization(vcuda)
    _count_resized_storages(vcuda)
    install_autograd(vcuda)
    install_autocast()
    install_distributed(vcuda)
    torch.compile = _eager_compile(torch.compile)

    bootstrap = threading.Thread._bootstrap_inner  # type: ignore[attr-defined]

    def bootstrap_in_mode(thread: threading.Thread) -> None:
        with vcuda.mode:
            bootstrap(thread)

    threading.Thread._bootstrap_inner = bootstrap_in_mode  # type: ignore[attr-defined]
    vcuda.mode.__enter__()
    # Every gloo work keeps the thread-local state of the call that made it, this mode among it,
    # and gloo's worker thread drops it when the work is destroyed. A process group kept alive
    # by a reference cycle (a DDP model's) is otherwise destroyed by Python's final garbage
    # collection, and a worker that then needs the interpreter to drop the mode aborts the
    # process ("terminate called without an active exception"). Collecting at exit, while
    # the interpreter still runs, ends them first.
    atexit.register(gc.collect)
    return vcuda
