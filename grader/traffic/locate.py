"""Where a parameter's gradient lies in what an all-reduce delivered.

DDP all-reduces flat buckets (each parameter's gradient a contiguous run of them, in an order
DDP chooses and rebuilds after the first step); a script of its own may all-reduce each
gradient alone, or one flattened tensor of them all. `locate` finds each parameter's gradient
in a delivered vector by its values, whatever the layout: the run of the vector that equals
the expected gradient times one scale (a mean or a summed loss, averaged or summed over the
ranks). The usual layouts are tried first (the parameters in their order or in reverse, one
after the other from the start: a flattened copy, DDP's first buckets; or one alone); where
they do not fit, every offset is tried at once, anchored at the gradient's two largest
elements, and the runs that fit the anchors compared whole (a one-element gradient, which
other elements may match by chance, next to a gradient already found, or else where it fits
best).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Located:
    offset: int
    scale: float


def _close(observed: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float) -> bool:
    return float((observed - expected).norm()) <= rtol * float(expected.norm()) + atol * observed.numel() ** 0.5


def locate(delivered: torch.Tensor, expected: Mapping[str, torch.Tensor], rtol: float, atol: float = 0.0, scale: float | None = None) -> dict[str, Located]:
    """Each parameter (name -> its expected gradient, flat float64) whose gradient, times one
    scale shared by all of them (`scale`, or the one the largest found gradient shows), is a
    contiguous run of `delivered` that no other found one overlaps; its offset and that scale.
    A gradient of zeros is never located (it would be found anywhere), nor a one-element one
    before a larger one has shown the scale (any single value fits it with a scale of its own).
    Each element may also be off by `rtol` times the typical element of all of them (`floor`):
    a gradient that sums terms to nearly zero (a bias) keeps float32's error of the terms."""
    import torch

    atol = max(atol, floor(expected, rtol))
    found: dict[str, Located] = {}
    taken: list[tuple[int, int]] = []
    length = delivered.numel()
    by_size = sorted(expected, key=lambda name: -expected[name].numel())
    for order in (list(expected), list(reversed(expected))):
        offsets, start = {}, 0
        for name in order:
            offsets[name] = start
            start += expected[name].numel()
        fits: dict[str, Located] = {}
        shared = scale
        for name in by_size:
            want, offset = expected[name], offsets[name]
            if offset + want.numel() > length or not bool(want.abs().max() > 0) or (want.numel() == 1 and shared is None):
                continue
            first = int(want.abs().argmax())
            s = shared if shared is not None else float(delivered[offset + first] / want[first])
            if s and _close(delivered[offset : offset + want.numel()], s * want, rtol, atol * abs(s)):
                fits[name] = Located(offset, s)
                shared = s
        if len(fits) > len(found):
            found = fits
        if len(found) == len(expected):
            return found
    if found:
        scale = next(iter(found.values())).scale
        taken = [(at.offset, at.offset + expected[name].numel()) for name, at in found.items()]
    for name, want in sorted(expected.items(), key=lambda item: -item[1].numel()):
        if name in found:
            continue
        n = want.numel()
        if n == 0 or n > length or not bool(want.abs().max() > 0) or (n == 1 and scale is None):
            continue
        order = want.abs().argsort(descending=True)
        first, second = int(order[0]), int(order[min(1, n - 1)])
        starts = torch.arange(0, length - n + 1)
        anchor = delivered[starts + first]
        ratio = anchor / want[first] if scale is None else torch.full_like(anchor, scale)
        keep = (anchor != 0) & ((delivered[starts + second] - ratio * want[second]).abs() <= rtol * ratio.abs() * want[second].abs() + atol * ratio.abs())
        if scale is not None:
            keep &= (anchor - scale * want[first]).abs() <= (rtol * want[first].abs() + atol) * abs(scale)
        free = [start for start in starts[keep].tolist() if not any(start < end and begin < start + n for begin, end in taken)]
        if n == 1:
            free = _likeliest(free, delivered, float(scale * want[0]), taken)
        for start in free:
            s = float(delivered[start + first] / want[first]) if scale is None else scale
            if _close(delivered[start : start + n], s * want, rtol, atol * abs(s)):
                found[name] = Located(start, s)
                taken.append((start, start + n))
                scale = s
                break
    return found


def floor(expected: Mapping[str, torch.Tensor], rtol: float) -> float:
    """`rtol` times the root mean square of every element of `expected`."""
    numel = sum(want.numel() for want in expected.values())
    return rtol * (sum(float(want.pow(2).sum()) for want in expected.values()) / numel) ** 0.5 if numel else 0.0


def _likeliest(starts: list[int], delivered: torch.Tensor, value: float, taken: list[tuple[int, int]]) -> list[int]:
    """A one-element gradient's candidate offsets, likeliest first: within rtol of its value, one
    of a large bucket's other elements may be too, by chance; the element next to a gradient
    already found comes first (a bucket holds its parameters side by side), then the closest."""
    edges = {end for _, end in taken} | {begin - 1 for begin, _ in taken}
    return sorted(starts, key=lambda start: (start not in edges, abs(float(delivered[start]) - value)))
