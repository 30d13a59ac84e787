"""What `torch.cuda` and `torch.accelerator` answer on a machine of N virtual GPUs.

Availability and counts, the current device (per thread, as in CUDA), device contexts,
properties, timing events (wall clock), streams (accepted, no overlap), memory statistics
(bytes of the storages on each virtual device), random-number state (the CPU generator's:
random tensors made "on" a virtual GPU come from the CPU generator, so their values differ
from a real GPU's). The calls that initialise CUDA on a GPU build (torch.cuda._lazy_init:
current_device, set_device, synchronize, device(k), streams, properties, ...) are refused in a
child forked after CUDA's first use, and `is_available` marks that use as CUDA's driver query does
(grader.probe.vgpu.devices, "Forks").

torch.accelerator's functions call torch._C._accelerator_* at each call (and torch's own code
asks torch._C._get_accelerator for the device type): `make_accelerator` replaces those, so
that the accelerator is CUDA with the virtual devices, its current index the CUDA one.
"""
from __future__ import annotations

import functools
import os
import time
import warnings
from types import SimpleNamespace
from typing import Any, Callable

import torch

from grader.probe.vgpu.devices import CPU, MemoryStats, VirtualCuda

TOTAL_MEMORY = 80 * 1024**3  # what the virtual devices claim to have (an H100's 80 GiB)
MEMORY_MODELLED = (
    "virtual GPUs count the memory of every tensor's storage on a device, the gradients backward() "
    "accumulates and DDP's gradient buckets, each rounded as CUDA's caching allocator rounds it; not "
    "counted: cuBLAS's and cuDNN's workspaces and the temporaries inside one operation, so a real GPU "
    "reports a little more (PyTorch's ZeroRedundancyOptimizer recipe without ZeRO, rank 0's peaks: "
    "335/656/992/1999 MB here, 335/656/1050/2056 MB on an H100)"
)


class VirtualEvent:
    """torch.cuda.Event: record() notes the wall-clock time."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False, external: bool = False) -> None:
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream: Any = None) -> None:
        self._time = time.perf_counter()

    def wait(self, stream: Any = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end_event: "VirtualEvent") -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time - self._time) * 1000.0


NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"  # "1": torch.cuda.is_available() asks NVML, which leaves forks usable


def make_api(v: VirtualCuda) -> dict[str, Any]:
    """Replacements for names of torch.cuda (and torch.cuda.memory), bound to `v`."""

    def initialising(function: Callable) -> Callable:
        """`function` after torch.cuda._lazy_init, as torch runs it."""

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            v.lazy_init()
            return function(*args, **kwargs)

        return call

    def is_available() -> bool:
        if os.environ.get(NVML_CHECK) != "1":
            v.poison_fork()
        return v.count > 0

    def index(device: Any = None) -> int:
        if device is None:
            return v.current
        if isinstance(device, torch.device) and device.type == "cuda" and device.index is None:
            return v.current
        found = v.index_of(device)
        if found is None or found == CPU:
            raise ValueError(f"Expected a cuda device, but got: {device}")
        return found

    class VirtualStream:
        """torch.cuda.Stream: accepted everywhere, never overlaps anything."""

        def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
            v.lazy_init()
            self.device = torch.device("cuda", index(device))
            self.priority = priority
            self.device_index = self.device.index
            self.cuda_stream = 0

        def wait_stream(self, stream: Any) -> None:
            return None

        def wait_event(self, event: Any) -> None:
            return None

        def record_event(self, event: VirtualEvent | None = None) -> VirtualEvent:
            event = event or VirtualEvent()
            event.record()
            return event

        def query(self) -> bool:
            return True

        def synchronize(self) -> None:
            return None

        def is_capturing(self) -> bool:
            return False

        def __enter__(self) -> "VirtualStream":
            return self

        def __exit__(self, *exc: object) -> None:
            return None

    class DeviceContext:
        """torch.cuda.device(k): makes cuda:k current inside the block."""

        def __init__(self, device: Any) -> None:
            self.idx = -1 if device is None or (isinstance(device, int) and device < 0) else index(device)
            self.prev_idx = -1

        def __enter__(self) -> None:
            self.prev_idx = v.current
            if self.idx >= 0:
                v.lazy_init()
                v.set_current(self.idx)

        def __exit__(self, *exc: object) -> bool:
            if self.idx >= 0:
                v.set_current(self.prev_idx)
            return False

    def device_of(obj: torch.Tensor) -> DeviceContext:
        return DeviceContext(obj.get_device() if obj.is_cuda else -1)

    def properties(device: Any = None) -> SimpleNamespace:
        k = device if isinstance(device, int) else index(device)
        if not 0 <= k < v.count:
            raise AssertionError("Invalid device id")
        return SimpleNamespace(
            name=f"Virtual GPU {k} (grader, CPU-backed)",
            major=9,
            minor=0,
            total_memory=TOTAL_MEMORY,
            multi_processor_count=132,
            is_integrated=0,
            is_multi_gpu_board=0,
            uuid=f"virtual-{v.visible[k]}",
            L2_cache_size=50 * 1024**2,
        )

    said: list[bool] = []  # the memory note, once a process

    def modelled() -> None:
        if not said:
            said.append(True)
            warnings.warn(MEMORY_MODELLED, stacklevel=5)

    def stats_of(device: Any) -> MemoryStats:
        modelled()
        return v.memory[index(device)]

    def reset_peak(device: Any = None) -> None:
        v.reset_peak(index(device))

    def stats(device: Any = None) -> dict[str, int]:
        m = stats_of(device)
        return {
            "allocated_bytes.all.current": m.allocated,
            "allocated_bytes.all.peak": m.peak,
            "reserved_bytes.all.current": m.reserved,
            "reserved_bytes.all.peak": m.reserved_peak,
            "active_bytes.all.current": m.allocated,
            "active_bytes.all.peak": m.peak,
            "requested_bytes.all.current": m.requested,
            "requested_bytes.all.peak": m.requested_peak,
            "allocation.all.current": len(m.blocks),
            "num_alloc_retries": 0,
            "num_ooms": 0,
        }

    def summary(device: Any = None, abbreviated: bool = False) -> str:
        k = index(device)
        m = stats_of(k)
        mib = 1024**2
        return "\n".join((
            f"|  Virtual GPU cuda:{k} memory summary (CPU-backed; counted as CUDA's caching allocator rounds)  |",
            f"|  Allocated memory      | current {m.allocated // mib:>8} MiB | peak {m.peak // mib:>8} MiB |",
            f"|  Requested memory      | current {m.requested // mib:>8} MiB | peak {m.requested_peak // mib:>8} MiB |",
            f"|  GPU reserved memory   | current {m.reserved // mib:>8} MiB | peak {m.reserved_peak // mib:>8} MiB |",
            f"|  Allocations           | current {len(m.blocks):>8}     |",
        ))

    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    def set_device(device: Any) -> None:
        k = device if isinstance(device, int) else index(device)
        if k >= 0:
            v.lazy_init()
            v.set_current(k)

    return {
        "is_available": is_available,
        "device_count": lambda: v.count,
        "_device_count_nvml": lambda: v.count,
        "_raw_device_count_nvml": lambda: v.count,
        "current_device": initialising(lambda: v.current),
        "set_device": set_device,
        "is_initialized": lambda: False,  # so torch queues its CUDA-generator seeding, never runs it
        "init": initialising(nothing),
        "_lazy_init": initialising(nothing),
        "_is_in_bad_fork": lambda: v.in_bad_fork,
        "synchronize": initialising(nothing),
        "ipc_collect": initialising(nothing),
        "empty_cache": v.empty_cache,
        "get_device_name": initialising(lambda device=None: properties(device).name),
        "get_device_properties": initialising(properties),
        "get_device_capability": initialising(lambda device=None: (9, 0)),
        "get_arch_list": lambda: ["sm_90"] if is_available() else [],
        "is_bf16_supported": initialising(lambda including_emulation=True: True),
        "device": DeviceContext,
        "device_of": device_of,
        "Event": VirtualEvent,
        "Stream": VirtualStream,
        "current_stream": lambda device=None: VirtualStream(device),
        "default_stream": lambda device=None: VirtualStream(device),
        "set_stream": nothing,
        "stream": lambda stream=None: VirtualStream() if stream is None else stream,
        "memory_allocated": lambda device=None: stats_of(device).allocated,
        "max_memory_allocated": lambda device=None: stats_of(device).peak,
        "memory_reserved": lambda device=None: stats_of(device).reserved,
        "max_memory_reserved": lambda device=None: stats_of(device).reserved_peak,
        "memory_cached": lambda device=None: stats_of(device).reserved,
        "max_memory_cached": lambda device=None: stats_of(device).reserved_peak,
        "reset_peak_memory_stats": reset_peak,
        "reset_max_memory_allocated": reset_peak,
        "reset_max_memory_cached": reset_peak,
        "reset_accumulated_memory_stats": nothing,
        "memory_stats": stats,
        "memory_summary": summary,
        "mem_get_info": initialising(lambda device=None: (TOTAL_MEMORY - stats_of(device).reserved, TOTAL_MEMORY)),
        "set_per_process_memory_fraction": nothing,
        "get_rng_state": initialising(lambda device="cuda": torch.get_rng_state()),
        "set_rng_state": lambda new_state, device="cuda": torch.set_rng_state(new_state),
        "get_rng_state_all": initialising(lambda: [torch.get_rng_state() for _ in range(v.count)]),
        "set_rng_state_all": lambda states: torch.set_rng_state(states[0]),
        "initial_seed": initialising(torch.initial_seed),
        "manual_seed": nothing,  # virtual devices draw from the CPU generator
        "manual_seed_all": nothing,
        "seed": nothing,
        "seed_all": nothing,
    }


def record_stream(tensor: torch.Tensor, stream: Any) -> None:
    """Tensor.record_stream: nothing to record, a virtual stream's work is done once queued (torch's
    argument parser refuses a virtual stream before the torch-function mode sees the call)."""


def new_generator(device: str) -> torch.Generator:
    """torch.Generator(device) as this process has it: how a pickled virtual generator comes back."""
    return torch.Generator(device=device)


def make_generator(v: VirtualCuda) -> type:
    """torch.Generator, which makes a CPU generator for torch.Generator(device="cuda:k") that says
    it is on cuda:k (values drawn "on" a virtual GPU come from CPU generators); isinstance() and
    issubclass() still accept torch's own generators."""
    base = torch.Generator

    class GeneratorType(type(base)):  # type: ignore[misc]
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, base)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, base)

    class Generator(base, metaclass=GeneratorType):  # type: ignore[misc, valid-type]
        def __new__(cls, device: Any = "cpu") -> "Generator":
            index = v.index_of(device)
            on_gpu = index is not None and index >= 0
            generator = base.__new__(cls, "cpu" if on_gpu else device)
            generator.virtual_device = torch.device("cuda", index) if on_gpu else None
            return generator

        def __init__(self, device: Any = "cpu") -> None:
            """Made by __new__."""

        @property
        def device(self) -> torch.device:
            return self.virtual_device or base.device.__get__(self)

        def __reduce__(self) -> tuple:
            state = base.__reduce__(self)[2]
            return new_generator, (str(self.device),), state

    return Generator


CAPABILITY = {"supported_dtypes": {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
                                   torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool}}


def make_accelerator(v: VirtualCuda, api: dict[str, Any]) -> dict[str, Any]:
    """Replacements for the torch._C functions behind torch.accelerator, bound to `v` and to
    the torch.cuda replacements `api`."""

    def set_index(index: int) -> None:
        if index >= 0:
            v.lazy_init()
            v.set_current(index)

    def exchange(index: int) -> int:
        previous = v.current
        set_index(index)
        return previous

    def stats(index: int) -> dict[str, int]:
        return api["memory_stats"](index)

    return {
        "_get_accelerator": lambda: torch.device("cuda"),
        "_accelerator_getAccelerator": lambda: torch.device("cuda"),
        "_accelerator_getDeviceIndex": lambda: api["current_device"](),
        "_accelerator_setDeviceIndex": set_index,
        "_accelerator_exchangeDevice": exchange,
        "_accelerator_maybeExchangeDevice": exchange,
        "_accelerator_synchronizeDevice": lambda index=-1: api["synchronize"](),
        "_accelerator_getStream": lambda index=-1: api["current_stream"](None if index < 0 else index),
        "_accelerator_setStream": lambda stream: None,
        "_accelerator_getDeviceCapability": lambda index=-1: CAPABILITY,
        "_accelerator_isAllocatorInitialized": lambda: True,
        "_accelerator_emptyCache": lambda: None,
        "_accelerator_emptyHostCache": lambda: None,
        "_accelerator_getDeviceStats": stats,
        "_accelerator_resetPeakStats": api["reset_peak_memory_stats"],
        "_accelerator_resetAccumulatedStats": api["reset_accumulated_memory_stats"],
        "_accelerator_getMemoryInfo": api["mem_get_info"],
    }
