"""Comparing named parameter tensors (name -> flat list of floats) without torch."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

Named = Mapping[str, Sequence[float] | None]


@dataclass(frozen=True)
class Difference:
    """The worst element-wise difference between two sets of named tensors."""

    ok: bool
    name: str = ""
    max_abs: float = 0.0
    problem: str = ""  # a structural mismatch (missing tensor, other shape), if any

    def describe(self) -> str:
        if self.problem:
            return self.problem
        return f"max |Δ| {self.max_abs:.3g} in {self.name}"


def _value(x: float | str) -> float:
    return float(x)  # the probe writes non-finite floats as 'nan'/'inf' strings


def _diff(have: float, want: float) -> float:
    if math.isfinite(have) and math.isfinite(want):
        return abs(have - want)
    return 0.0 if have == want else math.inf


def compare(observed: Named, expected: Named, rtol: float, atol: float) -> Difference:
    """Whether every tensor of `expected` is matched in `observed` within atol + rtol·|expected|."""
    ok, worst_name, worst = True, "", -1.0
    for name, want in expected.items():
        have = observed.get(name)
        if want is None:
            continue
        if have is None:
            return Difference(ok=False, name=name, problem=f"no value for {name}")
        if len(have) != len(want):
            return Difference(ok=False, name=name, problem=f"{name} has {len(have)} elements, expected {len(want)}")
        for h, w in zip(have, want):
            diff = _diff(_value(h), _value(w))
            if diff > worst:
                worst_name, worst = name, diff
            if not diff <= atol + rtol * abs(_value(w)):
                ok = False
    return Difference(ok=ok, name=worst_name, max_abs=max(worst, 0.0))


def scale(observed: Named, expected: Named) -> float | None:
    """The factor s minimising |observed - s·expected|² (None if undefined)."""
    dot = norm = 0.0
    for name, want in expected.items():
        have = observed.get(name)
        if want is None or have is None or len(have) != len(want):
            return None
        for h, w in zip(have, want):
            dot += _value(h) * _value(w)
            norm += _value(w) ** 2
    if norm == 0.0 or not math.isfinite(dot):
        return None
    return dot / norm


def named(names: Sequence[str], values: Sequence[Sequence[float] | None] | None) -> dict[str, Sequence[float] | None]:
    """Zip the probe's parallel lists into a name -> values mapping."""
    if values is None:
        return {}
    return dict(zip(names, values))
