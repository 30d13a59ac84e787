"""nn.DataParallel on virtual GPUs.

torch's own DataParallel, replicate and autograd functions (Scatter, Broadcast, Gather,
ReduceAddCoalesced) run unchanged; only the CUDA-only pieces underneath are replaced:

  * torch.nn.parallel.comm: scatter (torch.chunk, or the given sizes, then a copy to each
    device — so a small batch yields fewer chunks than devices, as in C++), broadcast,
    gather (a cat on the target device) and the reductions, all as copies between virtual
    devices;
  * the background copy streams (virtual streams: accepted, no overlap);
  * parallel_apply: the replicas run one after another in the calling thread with their device
    current (CUDA runs them in threads; the results are the same, the timing is not), and an
    exception in a replica is re-raised as torch does ("Caught … in replica i on device i").

The backward passes of Scatter, Broadcast, Gather and ReduceAddCoalesced (torch's own custom
autograd Functions) run in the virtual mode like every custom Function's (grader.probe.vgpu.autograd).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch._utils import ExceptionWrapper, _get_device_index

from grader.probe.vgpu.devices import CPU, VirtualCuda


def _device(index: int) -> torch.device:
    return torch.device("cpu") if index == CPU else torch.device("cuda", index)


def make_comm(v: VirtualCuda) -> dict[str, Any]:
    """Replacements for torch.nn.parallel.comm."""

    def broadcast(tensor: torch.Tensor, devices: Sequence[Any] | None = None, *, out: Any = None) -> tuple[torch.Tensor, ...]:
        return tuple(tensor.to(_device(_get_device_index(d))) for d in devices or ())

    def broadcast_coalesced(tensors: Sequence[torch.Tensor], devices: Sequence[Any], buffer_size: int = 10485760) -> list[list[torch.Tensor]]:
        return [[t.to(_device(_get_device_index(d))) for t in tensors] for d in devices]

    def reduce_add(inputs: Sequence[torch.Tensor], destination: int | None = None) -> torch.Tensor:
        target = _device(v.current if destination is None else destination)
        total = inputs[0].to(target, copy=True)
        for tensor in inputs[1:]:
            total = total + tensor.to(target)
        return total

    def reduce_add_coalesced(inputs: Sequence[Sequence[torch.Tensor]], destination: int | None = None, buffer_size: int = 10485760) -> list[torch.Tensor]:
        return [reduce_add([per_device[i] for per_device in inputs], destination) for i in range(len(inputs[0]))]

    def scatter(tensor: torch.Tensor, devices: Sequence[int] | None = None, chunk_sizes: Sequence[int] | None = None, dim: int = 0, streams: Any = None, *, out: Any = None) -> tuple[torch.Tensor, ...]:
        devices = [_get_device_index(d) for d in devices or ()]
        if not devices:
            raise RuntimeError("Expected at least one device to scatter to")
        chunks = tensor.split(list(chunk_sizes), dim) if chunk_sizes is not None else tensor.chunk(len(devices), dim)
        return tuple(chunk.to(_device(d)) for chunk, d in zip(chunks, devices))

    def gather(tensors: Sequence[torch.Tensor], dim: int = 0, destination: Any = None, *, out: Any = None) -> torch.Tensor:
        if destination is None:
            target = _device(v.current)
        elif destination == "cpu" or destination == CPU:
            target = torch.device("cpu")
        else:
            target = _device(_get_device_index(destination, True))
        return torch.cat([t.to(target) for t in tensors], dim)

    return {
        "broadcast": broadcast,
        "broadcast_coalesced": broadcast_coalesced,
        "reduce_add": reduce_add,
        "reduce_add_coalesced": reduce_add_coalesced,
        "scatter": scatter,
        "gather": gather,
    }


def _first_device(value: Any) -> int | None:
    if isinstance(value, torch.Tensor):
        return value.get_device()
    if isinstance(value, (list, tuple)):
        for item in value:
            found = _first_device(item)
            if found is not None:
                return found
    if isinstance(value, dict):
        return _first_device(list(value.values()))
    return None


def make_parallel_apply(v: VirtualCuda):
    """Replacement for torch.nn.parallel.parallel_apply (see the module docstring)."""

    def parallel_apply(modules: Sequence[torch.nn.Module], inputs: Sequence[Any], kwargs_tup: Sequence[dict] | None = None, devices: Sequence[Any] | None = None) -> list[Any]:
        if len(modules) != len(inputs):
            raise AssertionError(f"The number of modules {len(modules)} is not equal to the number of inputs {len(inputs)}")
        kwargs_tup = kwargs_tup if kwargs_tup is not None else ({},) * len(modules)
        chosen = [_get_device_index(d, True) for d in devices] if devices is not None else [None] * len(modules)
        outputs = []
        for i, (module, args, kwargs, device) in enumerate(zip(modules, inputs, kwargs_tup, chosen)):
            if device is None:
                device = _first_device(args)
            previous = v.current
            try:
                if device is not None and device >= 0:
                    v.set_current(device)
                if not isinstance(args, (list, tuple)):
                    args = (args,)
                outputs.append(module(*args, **kwargs))
            except Exception:
                ExceptionWrapper(where=f"in replica {i} on device {device}").reraise()
            finally:
                v.set_current(previous)
        return outputs

    return parallel_apply
