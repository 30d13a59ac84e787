"""Virtual CUDA devices on a CPU: unmodified code believes N GPUs exist.

Mechanism. Every tensor stays a plain CPU tensor; its *virtual* device is a tag on the tensor
object (`_vcuda`: k for cuda:k, -1 for an explicit CPU tensor; no tag means "made by C++ code
the mode did not see", which mixes with anything). A `TorchFunctionMode`, active in every
thread, sees each torch call and

  * answers `.device`, `.is_cuda` and `.get_device()` from the tag;
  * turns moves (`.to`, `.cuda`, `.cpu`, `device=` of factories and torch.set_default_device)
    into CPU copies tagged with the target device, whichever way the device is named (an int,
    "cuda:k", torch.device, positionally or by keyword; Module.to's own parsing included),
    rejecting `cuda:k` with k ≥ N as CUDA does (grader.probe.vgpu.errors);
  * raises CUDA's error when one op mixes tensors of two devices, CPU scalars allowed as on
    CUDA (the wording of the kernel CUDA would run: grader.probe.vgpu.errors);
  * tags what an op returns with the device of its inputs, and the storage a tensor hands out
    (`untyped_storage()`) with the tensor's device, so that torch.save records "cuda:k".

The number of devices is fixed at the first CUDA query, as CUDA does: a CUDA_VISIBLE_DEVICES
the program set itself before that (different from the one it inherited) picks the visible
ones. `torch.cuda` and `torch.accelerator` answer as a machine with N GPUs would
(grader.probe.vgpu.api); DataParallel's scatter / broadcast / gather run on virtual devices
(grader.probe.vgpu.parallel); checkpoints save and load per device, and tensors sent to other processes arrive on theirs
(grader.probe.vgpu.serialization);
the autograd engine's Python callbacks run in the mode (grader.probe.vgpu.autograd).

Forks. CUDA's state does not survive os.fork: torch registers a fork handler the first time it
initialises CUDA or asks the driver for the devices (`torch.cuda.is_available()`), and a child
forked after that raises "Cannot re-initialize CUDA in forked subprocess" at its first use of
CUDA. The virtual GPUs keep the same two facts (`poisoned`, `in_bad_fork`): in such a child,
making or moving a tensor onto a GPU, an op on a GPU tensor and the torch.cuda calls that
initialise CUDA raise torch's error, while work on the CPU (a DataLoader worker's) goes on.
Not emulated: timing, memory capacity, streams and their overlap, NCCL itself (gloo does the
collectives).
"""
from __future__ import annotations

import contextlib
import itertools
import os
import threading
import weakref
from typing import Any, Callable, Hashable, Iterator

import torch
import torch.utils._device as default_device
from torch.overrides import TorchFunctionMode

from grader.probe.vgpu.errors import BAD_FORK, CPU, NO_GPUS, TAG, invalid_ordinal, mismatch_error

VISIBLE = "CUDA_VISIBLE_DEVICES"


def is_index(value: Any) -> bool:
    """An int naming a device (cuda:k on a CUDA build), not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def tensors_in(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in nested lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


def _property(func: Callable) -> tuple[str, str] | None:
    """('device', '__get__') for the getter of Tensor.device, and so on; None for other calls."""
    owner = getattr(func, "__self__", None)
    if type(owner).__name__ == "getset_descriptor" and getattr(func, "__name__", "") in ("__get__", "__set__"):
        return owner.__name__, func.__name__
    return None


SMALL_REQUEST = 1 << 20  # kSmallSize: requests up to 1 MiB share 2 MiB segments
LARGE_REQUEST = 10 << 20  # kMinLargeAlloc: from 10 MiB a request gets a segment of its own
SEGMENT_ROUNDING = 2 << 20  # kRoundLarge: such a segment is rounded up to 2 MiB


def block_size(nbytes: int) -> int:
    """The bytes CUDA's caching allocator counts as allocated for a request of `nbytes`: the
    request rounded up to 512 bytes, or, from 10 MiB, its whole segment (rounded up to 2 MiB)
    when what would be left of it is at most 1 MiB, too little to split off
    (c10/cuda/CUDACachingAllocator.cpp: round_size, get_allocation_size, should_split)."""
    if nbytes <= 0:
        return 0
    size = max(512, -(-nbytes // 512) * 512)
    if size >= LARGE_REQUEST:
        segment = -(-size // SEGMENT_ROUNDING) * SEGMENT_ROUNDING
        if segment - size <= SMALL_REQUEST:
            return segment
    return size


class MemoryStats:
    """One virtual device's memory as CUDA's caching allocator reports it: each block (a storage,
    or memory torch's C++ code holds) counted once, at its block size; reserved memory kept, as
    the allocator keeps freed blocks, until empty_cache()."""

    def __init__(self) -> None:
        self.allocated = 0
        self.peak = 0
        self.requested = 0  # the bytes asked for, before rounding
        self.requested_peak = 0
        self.reserved = 0
        self.reserved_peak = 0
        self.blocks: dict[Hashable, tuple[int, int]] = {}  # a storage (its id) or memory torch's C++ code holds -> (block, requested)

    def add(self, key: Hashable, nbytes: int) -> bool:
        """Count a block of `nbytes` requested (False: `key` is counted already)."""
        if key in self.blocks:
            return False
        self._put(key, nbytes)
        return True

    def resize(self, key: Hashable, nbytes: int) -> None:
        """A counted storage resized in place (FSDP frees and refills its flat parameters so)."""
        if key in self.blocks:
            self.release(key)
            self._put(key, nbytes)

    def _put(self, key: Hashable, nbytes: int) -> None:
        block = block_size(nbytes)
        self.blocks[key] = (block, nbytes)
        self.allocated += block
        self.requested += nbytes
        self.peak = max(self.peak, self.allocated)
        self.requested_peak = max(self.requested_peak, self.requested)
        if self.allocated > self.reserved:
            self.reserved = -(-self.allocated // SEGMENT_ROUNDING) * SEGMENT_ROUNDING
            self.reserved_peak = max(self.reserved_peak, self.reserved)

    def release(self, key: Hashable) -> None:
        block, nbytes = self.blocks.pop(key, (0, 0))
        self.allocated -= block
        self.requested -= nbytes

    def reset_peak(self) -> None:
        self.peak, self.requested_peak, self.reserved_peak = self.allocated, self.requested, self.reserved

    def empty_cache(self) -> None:
        self.reserved = -(-self.allocated // SEGMENT_ROUNDING) * SEGMENT_ROUNDING


def visible_devices(machine: int, value: str | None) -> list[int]:
    """The virtual GPUs a CUDA_VISIBLE_DEVICES value shows, in its order (None: all of them).
    As in CUDA, the list ends at the first entry that names no device or repeats one."""
    if value is None:
        return list(range(machine))
    chosen: list[int] = []
    for token in value.split(","):
        token = token.strip()
        if not token.isdigit() or int(token) >= machine or int(token) in chosen:
            break
        chosen.append(int(token))
    return chosen


class VirtualCuda:
    """The state of the virtual CUDA devices in this process: `machine` of them exist, and the
    ones CUDA_VISIBLE_DEVICES shows are visible, fixed at the first query (`count`). A value
    equal to `inherited` (what the process found at start-up) is the real machine's business
    and shows every virtual device."""

    def __init__(self, machine: int, inherited: str | None = None) -> None:
        if machine < 1:
            raise ValueError("virtual GPUs: the count must be at least 1")
        self.machine = machine
        self.inherited = inherited
        self._visible: list[int] | None = None
        self.memory = [MemoryStats() for _ in range(machine)]
        self.poisoned = False  # a child forked from now on cannot use CUDA (torch's fork handler is in place)
        self.in_bad_fork = False  # this process is such a child
        self._lock = threading.Lock()
        self._held = itertools.count()  # keys of the blocks torch's C++ code holds
        self._local = threading.local()
        self.mode = _VirtualMode(self)

    # --------------------------------------------------------------- forks
    def poison_fork(self) -> None:
        """What asking the CUDA driver for its devices does (torch.cuda.is_available()): a child
        forked from now on cannot use CUDA."""
        self.poisoned = True

    def lazy_init(self) -> None:
        """torch.cuda._lazy_init, which CUDA's first use in a process runs: torch's error in a
        child forked after CUDA was initialised or queried, else the fork handler is in place."""
        if self.in_bad_fork:
            raise RuntimeError(BAD_FORK)
        self.poisoned = True

    def forked_child(self) -> None:
        """Run in every child of os.fork (the fork handler CUDA's first use registers)."""
        self.in_bad_fork = self.in_bad_fork or self.poisoned

    # ------------------------------------------------------------- devices
    @property
    def visible(self) -> list[int]:
        """The virtual GPUs this process sees, as cuda:0, cuda:1, ... (resolved once, at the first query)."""
        if self._visible is None:
            value = os.environ.get(VISIBLE)
            self._visible = visible_devices(self.machine, None if value == self.inherited else value)
        return self._visible

    @property
    def count(self) -> int:
        return len(self._visible if self._visible is not None else self.visible)

    @property
    def current(self) -> int:
        return getattr(self._local, "current", 0)

    def set_current(self, index: int) -> None:
        self.check_index(index)
        self._local.current = index

    def check_index(self, index: int) -> None:
        count = self.count
        if count == 0:
            raise RuntimeError(NO_GPUS)
        if not 0 <= index < count:
            raise invalid_ordinal()

    def index_of(self, device: Any) -> int | None:
        """The tag for a device argument: k for CUDA (validated; an int k means cuda:k, as on a
        CUDA build), -1 for the CPU, None if not a device."""
        if device is None:
            return None
        if is_index(device):
            self.check_index(device)
            return device
        if isinstance(device, str):
            device = torch.device(device)
        if not isinstance(device, torch.device):
            return None
        if device.type == "cuda":
            index = self.current if device.index is None else device.index
            self.check_index(index)
            return index
        return CPU if device.type == "cpu" else None

    @staticmethod
    def tag_of(tensor: torch.Tensor) -> int | None:
        return getattr(tensor, TAG, None)

    def device_of(self, tensor: torch.Tensor) -> torch.device:
        """The device `tensor` appears to live on (its own for the CPU, the meta device, ...). A
        DTensor of a "cuda" mesh (made in C++, untagged) is on its local tensor's GPU, which is
        the current one where that is untagged too."""
        tag = getattr(tensor, TAG, None)
        if tag is None:
            spec = getattr(tensor, "_spec", None)
            if spec is not None and getattr(spec.mesh, "device_type", None) == "cuda":
                local = getattr(tensor._local_tensor, TAG, None)
                return torch.device("cuda", self.current if local is None or local == CPU else local)
        if tag is None or tag == CPU:
            return tensor.device
        return torch.device("cuda", tag)

    def tag(self, tensor: torch.Tensor, index: int | None) -> torch.Tensor:
        """Put `tensor` on virtual device `index` (and count its storage there)."""
        if index is None:
            return tensor
        setattr(tensor, TAG, index)
        if index >= 0:
            self.count_storage(tensor, index)
        return tensor

    def count_storage(self, tensor: torch.Tensor, index: int) -> None:
        """Count the storage behind `tensor` on virtual device `index`, once, until the storage
        itself is freed (a storage's Python object is one per storage and lives as long as it:
        its id is the key)."""
        try:
            storage = tensor.untyped_storage()
            size = storage.nbytes()
        except (RuntimeError, NotImplementedError):
            return
        with self._lock:
            counted = self.memory[index].add(id(storage), size)
        if counted:
            weakref.finalize(storage, self.release, index, id(storage))

    def resized(self, storage: Any) -> None:
        """`storage` was resized in place: its block follows (on the device that counts it)."""
        with self._lock:
            for stats in self.memory:
                stats.resize(id(storage), storage.nbytes())

    def count_block(self, owner: Any, index: int, nbytes: int) -> None:
        """Count `nbytes` that torch's C++ code holds for `owner` on device `index` (DDP's gradient
        buckets), until `owner` is freed."""
        key = ("held", next(self._held))
        with self._lock:
            self.memory[index].add(key, nbytes)
        weakref.finalize(owner, self.release, index, key)

    def release(self, index: int, key: Hashable) -> None:
        with self._lock:
            self.memory[index].release(key)

    def active(self) -> contextlib.AbstractContextManager:
        """The mode, entered unless this thread already has it (torch's autograd engine runs
        Python backward functions without the caller's torch-function modes)."""
        if self.mode in torch.overrides._get_current_function_mode_stack():
            return contextlib.nullcontext()
        return self.mode

    def reset_peak(self, index: int) -> None:
        with self._lock:
            self.memory[index].reset_peak()

    def empty_cache(self) -> None:
        with self._lock:
            for stats in self.memory:
                stats.empty_cache()


class _VirtualMode(TorchFunctionMode):
    """The torch-function mode that keeps up the illusion (see the module docstring)."""

    # calls that may take tensors of different devices (besides torch's private helpers)
    CROSS_DEVICE = frozenset({"copy_", "to", "cuda", "cpu", "type", "__setitem__", "set_", "is_same_size", "is_set_to"})
    # calls other than Tensor methods that have an `_on_<name>` handler
    FUNCTIONS = frozenset({"_parse_to"})
    # Tensor methods that read a GPU tensor's metadata: CUDA does not run (so a forked child may call them)
    METADATA = frozenset({"size", "dim", "ndimension", "numel", "nelement", "stride", "storage_offset", "is_contiguous", "element_size",
                          "data_ptr", "__len__", "__hash__", "is_floating_point", "is_complex", "is_signed", "requires_grad_", "detach",
                          "detach_", "register_hook", "retain_grad", "is_shared"})

    def __init__(self, vcuda: VirtualCuda) -> None:
        super().__init__()
        self.v = vcuda

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        prop = _property(func)
        if prop is not None:
            return self._property(func, prop, args)
        name = getattr(func, "__name__", "")
        if name.startswith("_foreach"):
            return self._foreach(func, args, kwargs)
        special = getattr(self, f"_on_{name}", None)
        if special is not None and (name in self.FUNCTIONS or getattr(func, "__qualname__", "").startswith(("TensorBase.", "Tensor."))):
            return special(func, args, kwargs)
        if kwargs.get("device") is None and default_device.CURRENT_DEVICE is not None and func in default_device._device_constructors():
            kwargs = {**kwargs, "device": default_device.CURRENT_DEVICE}  # torch.set_default_device's, which acts below this mode
        target = None
        device = kwargs.get("device")
        if device is not None:
            target = self.v.index_of(device)  # None for a device other than cpu and cuda (meta): left untagged
            if target is not None and target != CPU:
                self.v.lazy_init()
                kwargs = {**kwargs, "device": "cpu"}
        inputs = [*tensors_in(args), *tensors_in(kwargs)]
        private = name.startswith("_") and not name.startswith("__")
        common, mixed = self._common(inputs)
        if common not in (None, CPU) and name not in self.METADATA:
            self.v.lazy_init()
        if mixed and not private and name not in self.CROSS_DEVICE:
            raise mismatch_error(func, args, kwargs, inputs)
        result = func(*args, **kwargs)
        if device is None:
            target = common if inputs else CPU
        return self._tag_outputs(result, target, inputs)

    # -------------------------------------------------------------- helpers
    @staticmethod
    def _common(tensors: list[torch.Tensor]) -> tuple[int | None, bool]:
        """The device the tagged inputs share (CPU scalars aside), and whether two differ."""
        found = None
        for tensor in tensors:
            tag = getattr(tensor, TAG, None)
            if tag is None:
                continue
            if tag == CPU and tensor.dim() == 0:
                continue  # a CPU scalar may meet CUDA tensors, as on a real GPU
            if found is None:
                found = tag
            elif tag != found:
                return found, True
        return found, False

    def _foreach(self, func, args, kwargs):
        """torch._foreach_* ops work position by position: the i-th tensors of the lists must
        share a device (the lists may span devices: the optimizers group by the real device,
        which is the CPU for every virtual one); the i-th output gets their device."""
        lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
        devices = []
        for items in zip(*lists):
            tensors = [t for t in items if isinstance(t, torch.Tensor)]
            common, mixed = self._common(tensors)
            if mixed:
                raise mismatch_error(func, args, kwargs, tensors)
            devices.append(common)
        if any(device is not None and device >= 0 for device in devices):
            self.v.lazy_init()
        result = func(*args, **kwargs)
        if isinstance(result, (list, tuple)):
            for output, device in zip(result, devices):
                if isinstance(output, torch.Tensor) and getattr(output, TAG, None) is None:
                    self.v.tag(output, device)
        return result

    def _tag_outputs(self, result: Any, target: int | None, inputs: list[torch.Tensor]) -> Any:
        if target is None:
            return result
        seen = {id(t) for t in inputs}
        for tensor in tensors_in(result):
            if id(tensor) not in seen or getattr(tensor, TAG, None) is None:
                self.v.tag(tensor, target)
        return result

    def _move(self, tensor: torch.Tensor, target: int, *, dtype=None, non_blocking=False, memory_format=None) -> torch.Tensor:
        """A copy of `tensor` on virtual device `target` (or `tensor` itself if already there)."""
        source = getattr(tensor, TAG, None)
        source = CPU if source is None else source
        if max(source, target) >= 0:
            self.v.lazy_init()
        options = {"dtype": dtype, "non_blocking": non_blocking}
        if memory_format is not None:
            options["memory_format"] = memory_format
        if source == target:
            return tensor.to(**{k: v for k, v in options.items() if v is not None})
        return self.v.tag(tensor.to(device="cpu", copy=True, **{k: v for k, v in options.items() if v is not None}), target)

    # ----------------------------------------------------------- properties
    def _property(self, func, prop: tuple[str, str], args: tuple):
        name, kind = prop
        owner = args[0]
        if kind == "__get__" and name == "device":
            return self.v.device_of(owner)
        if kind == "__get__" and name == "is_cuda":
            return self.v.device_of(owner).type == "cuda"
        if kind == "__get__" and name == "is_cpu":
            return self.v.device_of(owner).type == "cpu"
        result = func(*args)
        if kind == "__get__" and name in ("data", "grad") and isinstance(result, torch.Tensor) and getattr(result, TAG, None) is None:
            self.v.tag(result, getattr(owner, TAG, None))
        elif kind == "__set__" and name == "data" and isinstance(args[1], torch.Tensor):
            self.v.tag(owner, getattr(args[1], TAG, None))
        return result

    # ----------------------------------------------------- tensor methods
    def _on___getitem__(self, func, args, kwargs):
        """x[idx]: CUDA takes index tensors (and masks) on the CPU too, moving them to x's device;
        an index on another GPU, or a GPU index into a CPU tensor, is refused as CUDA refuses it."""
        tensor = args[0]
        indices = [t for t in tensors_in(args[1:]) if getattr(t, TAG, None) not in (None, CPU)]
        common, mixed = self._common([tensor, *indices])
        if mixed:
            raise mismatch_error(func, args, kwargs, [tensor, *indices])
        if common not in (None, CPU):
            self.v.lazy_init()
        return self._tag_outputs(func(*args, **kwargs), common, [tensor])

    def _on___repr__(self, func, args, kwargs):
        """CUDA tensors print their device: tensor([...], device='cuda:0', …)."""
        tag = getattr(args[0], TAG, None)
        if tag not in (None, CPU):
            self.v.lazy_init()  # CUDA copies the values to the host to print them
        text = func(*args, **kwargs)
        if tag is None or tag == CPU or not text.startswith("tensor("):
            return text
        body_end = text.rfind("]") + 1 if "]" in text else len("tensor(")
        rest = text[body_end:]
        cut = rest.find(", ")
        cut = rest.rfind(")") if cut == -1 else cut
        return f"{text[:body_end + cut]}, device='cuda:{tag}'{text[body_end + cut:]}"

    def _on_get_device(self, func, args, kwargs):
        device = self.v.device_of(args[0])
        return device.index if device.type == "cuda" else -1

    def _on__parse_to(self, func, args, kwargs):
        """Module.to's parsing: an int device means cuda:k (C++ would ask the accelerator, which is
        absent); the device is returned as given, so that each tensor's .to moves it."""
        if args and is_index(args[0]):
            args = (torch.device("cuda", args[0]), *args[1:])
        if is_index(kwargs.get("device")):
            kwargs = {**kwargs, "device": torch.device("cuda", kwargs["device"])}
        return func(*args, **kwargs)

    def _on_untyped_storage(self, func, args, kwargs):
        """The storage carries the tensor's device, for torch.save's location tags."""
        storage = func(*args, **kwargs)
        tag = getattr(args[0], TAG, None)
        if tag is not None:
            setattr(storage, TAG, tag)
        return storage

    def _on_to(self, func, args, kwargs):
        tensor, rest = args[0], args[1:]
        if rest and isinstance(rest[0], torch.Tensor):
            other = rest[0]
            target = getattr(other, TAG, CPU)
            return self._move(tensor, CPU if target is None else target, dtype=kwargs.get("dtype", other.dtype), non_blocking=kwargs.get("non_blocking", False))
        device = kwargs.get("device")
        positional = [a for a in rest if isinstance(a, (str, torch.device)) or is_index(a)]
        if device is None and positional:
            device = positional[0]
        target = self.v.index_of(device)
        dtype = kwargs.get("dtype") or next((a for a in rest if isinstance(a, torch.dtype)), None)
        non_blocking = kwargs.get("non_blocking", next((a for a in rest if isinstance(a, bool)), False))
        if target is None:
            if getattr(tensor, TAG, None) not in (None, CPU):
                self.v.lazy_init()
            result = func(*args, **kwargs)
            return self._tag_outputs(result, getattr(tensor, TAG, None), [tensor])
        if kwargs.get("copy"):
            return self.v.tag(tensor.to(device="cpu", copy=True, dtype=dtype), target)
        return self._move(tensor, target, dtype=dtype, non_blocking=non_blocking, memory_format=kwargs.get("memory_format"))

    def _on_cuda(self, func, args, kwargs):
        device = args[1] if len(args) > 1 else kwargs.get("device")
        target = self.v.index_of(torch.device("cuda") if device is None else device)
        return self._move(args[0], target, non_blocking=kwargs.get("non_blocking", False), memory_format=kwargs.get("memory_format"))

    def _on_cpu(self, func, args, kwargs):
        return self._move(args[0], CPU, memory_format=kwargs.get("memory_format"))

    def _on_numpy(self, func, args, kwargs):
        tag = getattr(args[0], TAG, None)
        if tag is not None and tag >= 0:
            raise TypeError(f"can't convert cuda:{tag} device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
        return func(*args, **kwargs)

    def _on_pin_memory(self, func, args, kwargs):
        return self.v.tag(args[0].clone(), CPU)

    def _on_is_pinned(self, func, args, kwargs):
        return False


def parameter_new(vcuda: VirtualCuda, original: Callable) -> Callable:
    """nn.Parameter(data) keeps the device of `data` (torch makes it in C++, unseen by the mode)."""

    def __new__(cls, data=None, requires_grad=True):
        parameter = original(cls, data, requires_grad)
        if isinstance(data, torch.Tensor) and getattr(data, TAG, None) is not None:
            vcuda.tag(parameter, getattr(data, TAG))
        return parameter

    return __new__
