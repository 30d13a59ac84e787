"""Automatic mixed precision on virtual GPUs.

torch.autocast("cuda", dtype) switches on CUDA's autocast, which acts on CUDA tensors only:
the CPU tensors behind the virtual devices would silently stay in float32. Entering an
autocast region for "cuda" also enters one for "cpu" with the same dtype and settings, so
that matrix products, linear layers and convolutions run in float16 / bfloat16 as on a GPU
(the CPU's op lists decide which ops are cast: a few differ from CUDA's).
torch.cuda.amp.autocast is the same class underneath. GradScaler needs nothing: its
unscale and update kernels exist for CPU tensors.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

CPU_REGIONS = "_vcuda_cpu_autocast"  # on an autocast object: the CPU regions it entered (a stack: one object may be re-entered)


def _entering(enter: Callable) -> Callable:
    def __enter__(self: torch.amp.autocast) -> Any:
        result = enter(self)
        if self.device == "cuda" and not torch._jit_internal.is_scripting():
            region = torch.amp.autocast("cpu", dtype=self.fast_dtype, enabled=self._enabled, cache_enabled=self._cache_enabled)
            region.__enter__()
            self.__dict__.setdefault(CPU_REGIONS, []).append(region)
        return result

    return __enter__


def _leaving(leave: Callable) -> Callable:
    def __exit__(self: torch.amp.autocast, *exc: Any) -> Any:
        regions = self.__dict__.get(CPU_REGIONS)
        if regions:
            regions.pop().__exit__(*exc)
        return leave(self, *exc)

    return __exit__


def install_autocast() -> None:
    """Make CUDA autocast regions cast the virtual devices' tensors (see the module docstring)."""
    torch.amp.autocast.__enter__ = _entering(torch.amp.autocast.__enter__)
    torch.amp.autocast.__exit__ = _leaving(torch.amp.autocast.__exit__)
