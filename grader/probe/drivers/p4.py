"""Practical 4's driver: the notebook's graded cells, then the grader's exercises.

The builders below make the models and inputs from the grader's seed; the grader's reference
(grader/practicals/p4.py) imports them too, so both sides build exactly the same things.
"""
from __future__ import annotations

import json
import os
import random
import sys
from typing import Any

import torch
from torch import nn

from grader.probe.drivers.notebook import Emit, run_cells
from grader.probe.recorder.events import Answers, DpCase, Mp
from grader.probe.recorder.observers import describe_exception
from grader.probe.typed import MAX_TEXT

CELLS_FILE = "cells.json"
FIXED_CASES = ((64, 2), (64, 3), (10, 4), (6, 4))  # (batch, chunks): even, uneven, fewer chunks
ANSWERS = ("easier_to_implement", "helps_large_model", "main_overhead", "chunks_of_64_by_3", "chunks_of_10_by_4")
MAX_VALUES = 4096
MAX_CALLS = 64  # model calls of one case recorded (a case has at most 6 chunks)


def _chunk_count(batch: int, parts: int) -> int:
    return -(-batch // -(-batch // parts))


def cases(seed: int) -> list[tuple[int, int]]:
    """The fixed cases (the self-check shows them) and three drawn from the seed (never known
    before the grading): one where torch.chunk gives fewer chunks than asked, one uneven split
    where it differs from tensor_split's (the remainder neither 0 nor parts - 1), one free."""
    draw = random.Random(seed)
    parts = draw.randint(3, 6)
    fewer = draw.choice([b for b in range(parts + 1, 6 * parts) if _chunk_count(b, parts) < parts])
    parts_uneven = draw.randint(3, 6)
    uneven = draw.choice([b for b in range(5, 100) if b % parts_uneven not in (0, parts_uneven - 1) and _chunk_count(b, parts_uneven) == parts_uneven])
    return [*FIXED_CASES, (fewer, parts), (uneven, parts_uneven), (draw.randint(5, 99), draw.randint(2, 6))]


def dp_case(seed: int, index: int, batch: int, dims: tuple[int, int, int]) -> tuple[nn.Module, torch.Tensor]:
    """The model and the batch of data-parallel case `index`."""
    inputs, hidden, outputs = dims
    generator = torch.Generator().manual_seed(seed * 100 + index)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 100 + index)
        model = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, outputs))
    return model, torch.randn(batch, inputs, generator=generator)


def mp_case(seed: int, batch: int, dims: tuple[int, int, int]) -> tuple[nn.Module, nn.Module, torch.Tensor]:
    """The two layers and the batch of the model-parallel exercise (on the CPU)."""
    inputs, hidden, outputs = dims
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed * 100 + 99)
        layer1, layer2 = nn.Linear(inputs, hidden), nn.Linear(hidden, outputs)
    return layer1, layer2, torch.randn(batch, inputs, generator=torch.Generator().manual_seed(seed * 100 + 98))


def values(tensor: torch.Tensor) -> tuple[float, ...] | None:
    with torch._C.DisableTorchFunction():
        flat = tensor.detach().to("cpu", torch.float64).reshape(-1)
        return tuple(flat.tolist()) if flat.numel() <= MAX_VALUES else None


def describe(value: Any, depth: int = 0) -> Any:
    """A notebook's answer as a small JSON value."""
    if isinstance(value, str):
        return value[:MAX_TEXT]
    if isinstance(value, (int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)) and depth < 4:
        return [describe(v, depth + 1) for v in value][:32]
    return repr(value)[:120]


def _missing(namespace: dict, name: str) -> dict | None:
    if callable(namespace.get(name)):
        return None
    return {"missing": name}


def exercise_dp(namespace: dict, seed: int, dims: tuple[int, int, int], emit: Emit) -> None:
    for index, (batch, parts) in enumerate(cases(seed)):
        model, x = dp_case(seed, index, batch, dims)
        record: dict = {"index": index, "batch": batch, "parts": parts}
        problem = _missing(namespace, "simulate_data_parallel")
        if problem:
            emit(DpCase, **record, **problem)
            continue
        calls: list[int] = []  # the rows of each call of the model's first layer: model(x), model.forward(x) and a copy of the model all run it
        model[0].register_forward_pre_hook(lambda module, args: calls.append(int(args[0].shape[0]) if args and isinstance(args[0], torch.Tensor) and args[0].dim() else 0))
        try:
            result = namespace["simulate_data_parallel"](model, x, parts)
        except Exception as exc:  # noqa: BLE001 - the student's error is the observation
            record["exception"] = describe_exception(exc, os.getcwd())
        else:
            record["calls"] = tuple(calls[:MAX_CALLS])
            returned = unexpected_return(result)
            if returned:
                record["returned"] = returned
            else:
                chunks, output = result
                record["chunks"] = tuple(tuple(c.shape) for c in chunks)
                record["output_shape"] = tuple(output.shape)
                record["output"] = values(output)
        emit(DpCase, **record)


def unexpected_return(result: Any) -> str | None:
    """What simulate_data_parallel returned, when it is not (a sequence of tensors, a tensor)."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        return f"{type(result).__name__[:40]}" + (f" of {len(result)} values" if isinstance(result, (tuple, list)) else "")
    chunks, output = result
    if not isinstance(chunks, (tuple, list)) or not all(isinstance(c, torch.Tensor) for c in chunks):
        return f"({type(chunks).__name__[:40]}, {type(output).__name__[:40]}) whose first value is not a list of tensors (the chunks)"
    if not isinstance(output, torch.Tensor):
        return f"(chunks, {type(output).__name__[:40]}) whose second value is not a tensor (the output)"
    return None


def exercise_mp(namespace: dict, seed: int, batch: int, dims: tuple[int, int, int], emit: Emit) -> None:
    layer1, layer2, x = mp_case(seed, batch, dims)
    for name in ("place_layers", "model_parallel_forward"):
        problem = _missing(namespace, name)
        if problem:
            emit(Mp, **problem)
            return
    cwd = os.getcwd()
    try:
        placed = namespace["place_layers"](layer1, layer2)
        first, second = placed if placed is not None else (layer1, layer2)
    except Exception as exc:  # noqa: BLE001
        emit(Mp, stage="place", exception=describe_exception(exc, cwd))
        return
    devices = tuple(tuple(sorted({str(p.device) for p in layer.parameters()})) for layer in (first, second))
    seen: dict[str, str] = {}

    def note_input(label: str):
        def hook(module: nn.Module, args: tuple) -> None:  # must return None: a value would replace the input
            seen.setdefault(label, str(args[0].device))

        return hook

    for label, layer in (("layer1", first), ("layer2", second)):
        layer.register_forward_pre_hook(note_input(label))
    try:
        output = namespace["model_parallel_forward"](first, second, x.to("cuda:0"))
        shape, where, out = tuple(output.shape), str(output.device), values(output)
    except Exception as exc:  # noqa: BLE001
        emit(Mp, stage="forward", devices=devices, inputs=seen, exception=describe_exception(exc, cwd))
        return
    emit(Mp, stage="forward", devices=devices, inputs=seen, output_device=where, output_shape=shape, output=out, layer1_grad=layer1_gradient(output, first))


def layer1_gradient(output: Any, layer1: nn.Module) -> tuple[float, ...] | None:
    """Layer 1's weight gradient after output.sum().backward(): None when none reaches it (an
    activation detached between the devices, an output that needs no gradient)."""
    weight = getattr(layer1, "weight", None)
    if not isinstance(weight, torch.Tensor):
        return None
    weight.grad = None
    try:
        output.sum().backward()
    except Exception:  # noqa: BLE001 - no graph back to layer 1: no gradient, which the check reports
        return None
    return values(weight.grad) if weight.grad is not None else None


def main(emit: Emit, argv: list[str] | None = None) -> None:
    """Run the graded cells, then the exercises, with the grader's arguments (--name=value)."""
    args = dict(a.removeprefix("--").split("=", 1) for a in (argv if argv is not None else sys.argv[1:]) if "=" in a)
    seed = int(args["seed"])
    dims = (int(args["in_features"]), int(args["hidden"]), int(args["out_features"]))
    with open(CELLS_FILE, encoding="utf-8") as handle:
        notebook = json.load(handle)
    namespace = run_cells(notebook["cells"], notebook["name"], emit)
    exercise_dp(namespace, seed, dims, emit)
    exercise_mp(namespace, seed, int(args["mp_batch"]), dims, emit)
    emit(Answers, values={name: describe(namespace.get(name)) for name in ANSWERS if name in namespace})
