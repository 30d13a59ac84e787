"""What a collective delivers, computed by the grader's hub from what every member sent: pure
functions of the members' calls and tensors, so that they are tested without processes.

`mismatch` says why calls made by the members at the same point of a group's sequence cannot
be one collective (another kind, another root or reduction, tensors that do not fit);
`deliver` gives each member the tensors its call's outputs are filled with. Tensors are CPU
tensors; reductions run in member order, in the members' dtype (AVG divides the sum).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from grader.probe.transport.wire import Call, TensorMeta

DTYPE_OF: Mapping[str, torch.dtype] = {
    "float32": torch.float32, "float64": torch.float64, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8,
    "bool": torch.bool, "complex64": torch.complex64, "complex128": torch.complex128,
}
NAME_OF: Mapping[torch.dtype, str] = {dtype: name for name, dtype in DTYPE_OF.items()}
WITH_ROOT = ("broadcast", "reduce", "gather", "scatter")
REDUCING = ("all_reduce", "reduce_scatter", "reduce")


def meta_of(tensor: torch.Tensor) -> TensorMeta:
    """A tensor's dtype and shape."""
    return TensorMeta(NAME_OF[tensor.dtype], tuple(tensor.shape))


def tensors_of(payload: bytes | bytearray | memoryview, metas: Sequence[TensorMeta]) -> list[torch.Tensor]:
    """The tensors a payload holds, as `metas` lists them (views of a copy of the payload)."""
    data = bytearray(payload) if not isinstance(payload, bytearray) else payload
    out, at = [], 0
    for meta in metas:
        chunk = memoryview(data)[at : at + meta.nbytes]
        flat = torch.frombuffer(chunk, dtype=DTYPE_OF[meta.dtype]) if meta.nbytes else torch.empty(0, dtype=DTYPE_OF[meta.dtype])
        out.append(flat.reshape(meta.shape))
        at += meta.nbytes
    return out


def _described(call: Call) -> str:
    what = ", ".join(meta.describe() for meta in (call.inputs or call.outputs))
    extra = f" {call.reduce}" if call.reduce else ""
    root = f" from root {call.root}" if call.kind in ("broadcast", "scatter") else f" to root {call.root}" if call.root >= 0 else ""
    return f"{call.kind}{extra}({what}){root}"


def describe_call(call: Call) -> str:
    """'all_reduce SUM([2177] float32)'; 'broadcast([6] float32) from root 0'."""
    return _described(call)


def _expected(call: Call, member: int, size: int) -> str | None:
    """Why one member's call is not well formed for its kind in a group of `size`."""
    if call.kind in WITH_ROOT and not 0 <= call.root < size:
        return f"its root {call.root} is not a member of the group of {size}"
    if call.kind == "broadcast":
        ins = len(call.inputs) if member == call.root else len(call.outputs)
        return None if ins else "it broadcasts no tensor"
    if call.kind in ("all_gather", "gather") and len(call.inputs) != 1:
        return f"it gathers {len(call.inputs)} tensors, not 1"
    if call.kind in ("reduce_scatter", "all_to_all") and len(call.inputs) != size:
        return f"it gives {len(call.inputs)} tensors, not one per member ({size})"
    if call.kind == "scatter" and member == call.root and len(call.inputs) != size:
        return f"its root gives {len(call.inputs)} tensors, not one per member ({size})"
    if call.reduce == "AVG" and any(not DTYPE_OF[m.dtype].is_floating_point and not DTYPE_OF[m.dtype].is_complex for m in call.inputs):
        return "it averages whole numbers"
    if call.reduce in ("BAND", "BOR", "BXOR") and any(DTYPE_OF[m.dtype].is_floating_point or DTYPE_OF[m.dtype].is_complex for m in call.inputs):
        return f"it takes the bitwise {call.reduce[1:]} of floating-point numbers"
    return None


def mismatch(calls: Mapping[int, Call]) -> str | None:
    """Why the calls of the members (by rank in the group) at one point of the group's sequence
    are not one collective; None when they are."""
    ranks = sorted(calls)
    first = calls[ranks[0]]
    size = len(ranks)
    for member in ranks:
        problem = _expected(calls[member], member, size)
        if problem:
            return f"rank {member} called {_described(calls[member])}: {problem}"
    shapes = {"all_reduce": lambda c: c.inputs, "reduce": lambda c: c.inputs, "all_gather": lambda c: tuple(m.dtype for m in c.inputs),
              "reduce_scatter": lambda c: c.inputs, "gather": lambda c: tuple(m.dtype for m in c.inputs)}
    for member in ranks[1:]:
        call = calls[member]
        same = (call.kind, call.reduce, call.root) == (first.kind, first.reduce, first.root)
        if same and call.kind in shapes:
            same = shapes[call.kind](call) == shapes[first.kind](first)
        if not same:
            return f"rank {ranks[0]} called {_described(first)} where rank {member} called {_described(call)}"
    if first.kind == "broadcast":
        sent = calls[first.root].inputs
        for member in ranks:
            if member != first.root and calls[member].outputs != sent:
                return f"rank {first.root} broadcast {', '.join(m.describe() for m in sent)} where rank {member} expected {', '.join(m.describe() for m in calls[member].outputs)}"
    if first.kind == "all_to_all":
        for sender in ranks:
            for receiver in ranks:
                if calls[sender].inputs[receiver].dtype != calls[receiver].inputs[sender].dtype:
                    return f"rank {sender} sends rank {receiver} {calls[sender].inputs[receiver].dtype} in an all_to_all of {calls[receiver].inputs[sender].dtype}"
    return None


def _reduce(tensors: Sequence[torch.Tensor], op: str) -> torch.Tensor:
    """The reduction of `tensors` (into the first of them, whose buffer the hub owns)."""
    result = tensors[0]
    for more in tensors[1:]:
        if op in ("SUM", "AVG"):
            result += more
        elif op == "PRODUCT":
            result *= more
        elif op == "MIN":
            result = torch.minimum(result, more)
        elif op == "MAX":
            result = torch.maximum(result, more)
        elif op == "BAND":
            result &= more
        elif op == "BOR":
            result |= more
        else:
            result ^= more
    if op == "AVG":
        result /= len(tensors)
    return result


def deliver(calls: Mapping[int, Call], inputs: Mapping[int, Sequence[torch.Tensor]]) -> dict[int, list[torch.Tensor]]:
    """What each member (by rank in the group) receives from one well-formed collective (no
    `mismatch`), given every member's input tensors. A reduction is made in the first member's
    input tensors (the hub's own copy of what it sent): read them before, not after."""
    ranks = sorted(calls)
    first = calls[ranks[0]]
    kind, op, root = first.kind, first.reduce, first.root
    out: dict[int, list[Any]] = {member: [] for member in ranks}
    if kind == "all_reduce":
        reduced = [_reduce([inputs[m][i] for m in ranks], op) for i in range(len(first.inputs))]
        out = {member: reduced for member in ranks}
    elif kind == "reduce":
        out[root] = [_reduce([inputs[m][i] for m in ranks], op) for i in range(len(first.inputs))]
    elif kind == "broadcast":
        out = {member: ([] if member == root else list(inputs[root])) for member in ranks}
    elif kind == "all_gather":
        gathered = [inputs[m][0] for m in ranks]
        out = {member: gathered for member in ranks}
    elif kind == "gather":
        out[root] = [inputs[m][0] for m in ranks]
    elif kind == "scatter":
        out = {member: [inputs[root][index]] for index, member in enumerate(ranks)}
    elif kind == "reduce_scatter":
        out = {member: [_reduce([inputs[m][index] for m in ranks], op)] for index, member in enumerate(ranks)}
    elif kind == "all_to_all":
        out = {member: [inputs[sender][index] for sender in ranks] for index, member in enumerate(ranks)}
    return out


def fits(received: Sequence[TensorMeta], expected: Sequence[TensorMeta]) -> str | None:
    """Why tensors delivered to a member do not fit the outputs its call expects."""
    if len(received) != len(expected):
        return f"it expected {len(expected)} tensors and would receive {len(received)}"
    for got, want in zip(received, expected):
        if got.numel != want.numel or got.dtype != want.dtype:
            return f"it expected {want.describe()} and would receive {got.describe()}"
    return None
