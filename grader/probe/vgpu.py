"""Virtual CUDA devices on a CPU: unmodified code believes N GPUs exist.

Mechanism. Every tensor stays a plain CPU tensor; its *virtual* device is a tag on the tensor
object (`_vcuda`: k for cuda:k, -1 for an explicit CPU tensor; no tag means "made by C++ code
the mode did not see", which mixes with anything). A `TorchFunctionMode`, active in every
thread, sees each torch call and

  * answers `.device`, `.is_cuda` and `.get_device()` from the tag;
  * turns moves (`.to`, `.cuda`, `.cpu`, `device=` of factories) into CPU copies tagged with the
    target device, rejecting `cuda:k` with k ≥ N ("CUDA error: invalid device ordinal");
  * raises CUDA's error when one op mixes tensors of two devices ("Expected all tensors to be
    on the same device, but found at least two devices, cuda:0 and cuda:1!"), CPU scalars
    allowed as on CUDA;
  * tags what an op returns with the device of its inputs.

`torch.cuda` answers as a machine with N GPUs would (grader.probe.vgpu_api) and DataParallel's
scatter / broadcast / gather run on virtual devices (grader.probe.vgpu_parallel). Not emulated:
timing, memory capacity, streams and their overlap, NCCL itself (gloo does the collectives).
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from typing import Any, Callable, Iterator

import torch
from torch.overrides import TorchFunctionMode

TAG = "_vcuda"
CPU = -1

INVALID_ORDINAL = (
    "CUDA error: invalid device ordinal\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """The tensors in nested lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _property(func: Callable) -> tuple[str, str] | None:
    """('device', '__get__') for the getter of Tensor.device, and so on; None for other calls."""
    owner = getattr(func, "__self__", None)
    if type(owner).__name__ == "getset_descriptor" and getattr(func, "__name__", "") in ("__get__", "__set__"):
        return owner.__name__, func.__name__
    return None


class MemoryStats:
    """Bytes of the storages tagged on one virtual device, counted once per storage."""

    def __init__(self) -> None:
        self.allocated = 0
        self.peak = 0
        self.live: dict[int, list[int]] = {}  # storage pointer -> [bytes, tensors holding it]

    def add(self, pointer: int, size: int) -> bool:
        entry = self.live.get(pointer)
        if entry is not None:
            entry[1] += 1
            return True
        self.live[pointer] = [size, 1]
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        return True

    def release(self, pointer: int) -> None:
        entry = self.live.get(pointer)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self.live[pointer]
            self.allocated -= entry[0]


class VirtualCuda:
    """The state of N virtual CUDA devices in this process."""

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("virtual GPUs: the count must be at least 1")
        self.count = count
        self.memory = [MemoryStats() for _ in range(count)]
        self._lock = threading.Lock()
        self._local = threading.local()
        self.mode = _VirtualMode(self)

    # ------------------------------------------------------------- devices
    @property
    def current(self) -> int:
        return getattr(self._local, "current", 0)

    def set_current(self, index: int) -> None:
        self.check_index(index)
        self._local.current = index

    def check_index(self, index: int) -> None:
        if not 0 <= index < self.count:
            raise RuntimeError(INVALID_ORDINAL)

    def index_of(self, device: Any) -> int | None:
        """The tag for a device argument: k for CUDA (validated), -1 for the CPU, None if not a device."""
        if device is None:
            return None
        if isinstance(device, int) and not isinstance(device, bool):
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
        """The device `tensor` appears to live on."""
        tag = getattr(tensor, TAG, None)
        if tag is None or tag == CPU:
            return tensor.device if tag is None else torch.device("cpu")
        return torch.device("cuda", tag)

    def tag(self, tensor: torch.Tensor, index: int | None) -> torch.Tensor:
        """Put `tensor` on virtual device `index` (and count its storage there)."""
        if index is None:
            return tensor
        setattr(tensor, TAG, index)
        if index >= 0:
            try:
                storage = tensor.untyped_storage()
                pointer, size = storage.data_ptr(), storage.nbytes()
            except (RuntimeError, NotImplementedError):
                return tensor
            stats = self.memory[index]
            with self._lock:
                stats.add(pointer, size)
            weakref.finalize(tensor, self._release, index, pointer)
        return tensor

    def _release(self, index: int, pointer: int) -> None:
        with self._lock:
            self.memory[index].release(pointer)

    def active(self) -> contextlib.AbstractContextManager:
        """The mode, entered unless this thread already has it (torch's autograd engine runs
        Python backward functions without the caller's torch-function modes)."""
        if self.mode in torch.overrides._get_current_function_mode_stack():
            return contextlib.nullcontext()
        return self.mode

    def reset_peak(self, index: int) -> None:
        with self._lock:
            self.memory[index].peak = self.memory[index].allocated


def mismatch_error(first: int, second: int) -> RuntimeError:
    def name(tag: int) -> str:
        return "cpu" if tag == CPU else f"cuda:{tag}"

    return RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, {name(first)} and {name(second)}!")


class _VirtualMode(TorchFunctionMode):
    """The torch-function mode that keeps up the illusion (see the module docstring)."""

    # calls that may take tensors of different devices (besides torch's private helpers)
    CROSS_DEVICE = frozenset({"copy_", "to", "cuda", "cpu", "type", "__setitem__", "set_", "is_same_size", "is_set_to"})

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
        if special is not None and getattr(func, "__qualname__", "").startswith(("TensorBase.", "Tensor.")):
            return special(func, args, kwargs)
        target = None
        if "device" in kwargs:
            target = self.v.index_of(kwargs["device"])
            if target is not None:
                kwargs = {**kwargs, "device": "cpu"}
        inputs = [*_tensors(args), *_tensors(kwargs)]
        private = name.startswith("_") and not name.startswith("__")
        common = self._common(inputs, check=not private and name not in self.CROSS_DEVICE)
        result = func(*args, **kwargs)
        if target is None:
            target = common if inputs else CPU
        return self._tag_outputs(result, target, inputs)

    # -------------------------------------------------------------- helpers
    def _common(self, tensors: list[torch.Tensor], check: bool) -> int | None:
        """The one device the tagged inputs share (CPU scalars aside); raise if two differ."""
        found = None
        for tensor in tensors:
            tag = getattr(tensor, TAG, None)
            if tag is None:
                continue
            if tag == CPU and tensor.dim() == 0:
                continue  # a CPU scalar may meet CUDA tensors, as on a real GPU
            if found is None:
                found = tag
            elif tag != found and check:
                raise mismatch_error(found, tag)
        return found

    def _foreach(self, func, args, kwargs):
        """torch._foreach_* ops work position by position: the i-th tensors of the lists must
        share a device (the lists may span devices: the optimizers group by the real device,
        which is the CPU for every virtual one); the i-th output gets their device."""
        lists = [a for a in args if isinstance(a, (list, tuple)) and a and isinstance(a[0], torch.Tensor)]
        devices = [self._common([t for t in items if isinstance(t, torch.Tensor)], check=True) for items in zip(*lists)]
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
        for tensor in _tensors(result):
            if id(tensor) not in seen or getattr(tensor, TAG, None) is None:
                self.v.tag(tensor, target)
        return result

    def _move(self, tensor: torch.Tensor, target: int, *, dtype=None, non_blocking=False, memory_format=None) -> torch.Tensor:
        """A copy of `tensor` on virtual device `target` (or `tensor` itself if already there)."""
        source = getattr(tensor, TAG, None)
        source = CPU if source is None else source
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
    def _on___repr__(self, func, args, kwargs):
        """CUDA tensors print their device: tensor([...], device='cuda:0', …)."""
        text = func(*args, **kwargs)
        tag = getattr(args[0], TAG, None)
        if tag is None or tag == CPU or not text.startswith("tensor("):
            return text
        body_end = text.rfind("]") + 1 if "]" in text else len("tensor(")
        rest = text[body_end:]
        cut = rest.find(", ")
        cut = rest.rfind(")") if cut == -1 else cut
        return f"{text[:body_end + cut]}, device='cuda:{tag}'{text[body_end + cut:]}"

    def _on_get_device(self, func, args, kwargs):
        tag = getattr(args[0], TAG, None)
        return -1 if tag is None or tag == CPU else tag

    def _on_to(self, func, args, kwargs):
        tensor, rest = args[0], args[1:]
        if rest and isinstance(rest[0], torch.Tensor):
            other = rest[0]
            target = getattr(other, TAG, CPU)
            return self._move(tensor, CPU if target is None else target, dtype=kwargs.get("dtype", other.dtype), non_blocking=kwargs.get("non_blocking", False))
        device = kwargs.get("device")
        positional = [a for a in rest if isinstance(a, (str, torch.device, int)) and not isinstance(a, bool)]
        if device is None and positional:
            device = positional[0]
        target = self.v.index_of(device)
        dtype = kwargs.get("dtype") or next((a for a in rest if isinstance(a, torch.dtype)), None)
        non_blocking = kwargs.get("non_blocking", next((a for a in rest if isinstance(a, bool)), False))
        if target is None:
            result = func(*args, **kwargs)
            return self._tag_outputs(result, getattr(tensor, TAG, None), [tensor])
        if kwargs.get("copy"):
            return self.v.tag(tensor.to(device="cpu", copy=True, dtype=dtype), target)
        return self._move(tensor, target, dtype=dtype, non_blocking=non_blocking, memory_format=kwargs.get("memory_format"))

    def _on_cuda(self, func, args, kwargs):
        device = args[1] if len(args) > 1 else kwargs.get("device")
        target = self.v.current if device is None else self.v.index_of(device if not isinstance(device, int) else torch.device("cuda", device))
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

    def _on_record_stream(self, func, args, kwargs):
        return None


def parameter_new(vcuda: VirtualCuda, original: Callable) -> Callable:
    """nn.Parameter(data) keeps the device of `data` (torch makes it in C++, unseen by the mode)."""

    def __new__(cls, data=None, requires_grad=True):
        parameter = original(cls, data, requires_grad)
        if isinstance(data, torch.Tensor) and getattr(data, TAG, None) is not None:
            vcuda.tag(parameter, getattr(data, TAG))
        return parameter

    return __new__
