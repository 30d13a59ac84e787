"""torch.save and torch.load on virtual GPUs, as on CUDA: each storage is saved with the
location of its device ("cuda:1") and loaded back onto the device `map_location` says.

Mechanism. A tensor's virtual device is a tag on the tensor object; the storage it hands out
(`untyped_storage()`, which torch.save calls) gets the same tag (grader.probe.vgpu.devices). Then

  * saving: a tagger registered with torch.serialization (ahead of the CPU's) names a tagged
    storage's location "cuda:k"; the tag itself is left out of the tensor's pickled state, so
    the file is the one CUDA writes (it loads on a real GPU, and on a CPU-only machine fails as
    a CUDA checkpoint does unless mapped to the CPU);
  * loading: torch.load resolves `map_location` in every form (None, "cuda:1", torch.device,
    a dict, a function) with its own code, ending in the CUDA deserializer, which validates the
    index against the virtual devices (CUDA's messages) and moves the storage there with
    `storage.to(device)`: that move (also behind `storage.cuda(k)` in a map_location
    function) is replaced to give a CPU copy tagged k; each tensor rebuilt on a tagged storage
    is tagged with its device.

Sending to another process. torch.multiprocessing pickles a CUDA tensor as a CUDA IPC handle,
which the receiving process opens on the same GPU; a tensor on a virtual GPU is a CPU tensor,
which torch shares through shared memory, as the same memory in both processes (writes in
one are seen in the other, as with IPC), and rebuilds as a CPU tensor. Its reduction is
wrapped to carry the device too: the receiver (on the same virtual GPUs) rebuilds it with
torch's own `_rebuild_from_type_v2`, which sets the tag as the tensor's state. The tensor is
not counted in the receiver's memory statistics (IPC memory is not its allocator's either).
"""

from __future__ import annotations

import multiprocessing.reduction
from typing import Any, Callable

import torch
import torch._tensor
import torch._utils
import torch.multiprocessing.reductions
import torch.serialization
import torch.storage

from grader.probe.patching import dressed
from grader.probe.vgpu.devices import VirtualCuda
from grader.probe.vgpu.errors import CPU, TAG

PRIORITY = 9  # taggers run in priority order: before the CPU's (10), which would call every storage "cpu"


def _untyped(storage: Any) -> Any:
    return getattr(storage, "_untyped_storage", storage)


def _location(storage: Any) -> str | None:
    tag = getattr(_untyped(storage), TAG, None)
    return f"cuda:{tag}" if tag is not None and tag >= 0 else None


def _without_tag(get_state: Callable) -> Callable:
    """torch._utils._get_obj_state minus the device tag (a tensor's __dict__ is its pickled state)."""

    def state_of(obj: Any) -> Any:
        state = get_state(obj)
        if isinstance(state, tuple) and isinstance(state[0], dict) and TAG in state[0]:
            return ({k: v for k, v in state[0].items() if k != TAG}, *state[1:])
        if isinstance(state, dict) and TAG in state:
            return {k: v for k, v in state.items() if k != TAG}
        return state

    return state_of


def _storage_to(v: VirtualCuda, move: Callable) -> Callable:
    """torch.storage._to for CUDA targets: a CPU copy tagged with the device (validated as CUDA does)."""

    def to(storage: Any, device: torch.device, non_blocking: bool = False) -> Any:
        if device.type != "cuda":
            return move(storage, device, non_blocking)
        index = v.index_of(device)
        if getattr(storage, TAG, None) == index:
            return storage
        copy = torch.UntypedStorage(storage.nbytes())
        copy.copy_(storage)
        setattr(copy, TAG, index)
        return copy

    return to


def _rebuild_on_device(v: VirtualCuda, rebuild: Callable) -> Callable:
    """torch._utils._rebuild_tensor: a tensor rebuilt on a tagged storage lives on its device."""

    def rebuild_tensor(storage: Any, storage_offset: int, size: Any, stride: Any) -> torch.Tensor:
        tensor = rebuild(storage, storage_offset, size, stride)
        tag = getattr(_untyped(storage), TAG, None)
        return v.tag(tensor, tag) if tag is not None and tag != CPU else tensor

    return rebuild_tensor


def _reduce_on_device(reduce: Callable) -> Callable:
    """torch.multiprocessing's reduce_tensor for a tensor on a virtual GPU: rebuilt there."""

    def reduce_tensor(tensor: torch.Tensor) -> tuple[Callable, tuple]:
        rebuild, args = reduce(tensor)
        tag = getattr(tensor, TAG, None)
        if tag is None or tag == CPU:
            return rebuild, args
        return torch._tensor._rebuild_from_type_v2, (rebuild, type(tensor), args, {TAG: tag})

    return reduce_tensor


def _install_sharing() -> None:
    """Tensors sent to other processes keep their virtual device (see the module docstring)."""
    reductions = torch.multiprocessing.reductions
    original = reductions.reduce_tensor
    replacement = dressed(_reduce_on_device(original), original)
    pickler = multiprocessing.reduction.ForkingPickler
    for cls, reduce in list(pickler._extra_reducers.items()):  # type: ignore[attr-defined]
        if reduce is original:
            pickler.register(cls, replacement)
    reductions.reduce_tensor = replacement


def install_serialization(v: VirtualCuda) -> None:
    """Make torch.save / torch.load, and tensors sent to other processes, keep the virtual
    devices (see the module docstring)."""
    _install_sharing()
    torch.serialization.register_package(PRIORITY, _location, lambda storage, location: None)
    torch._utils._get_obj_state = _without_tag(torch._utils._get_obj_state)
    torch._utils._rebuild_tensor = _rebuild_on_device(v, torch._utils._rebuild_tensor)
    torch.storage._to = _storage_to(v, torch.storage._to)
