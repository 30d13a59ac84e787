"""The autograd engine's Python callbacks on virtual GPUs.

torch's autograd engine calls Python code during backward — custom autograd Functions'
backward, tensor hooks, hooks on a custom Function's node, saved-tensor unpack hooks, callbacks
queued on the engine — without the caller's torch-function modes, and the gradients it hands
them are made in C++, untagged. On a virtual GPU such code would see `grad.device == cpu`, and
its `.to("cuda:k")` would reach the CPU-only build. Each of these is wrapped where it is
registered, so that it runs in the virtual mode with its incoming gradients tagged with the
device they belong to:

  * custom Functions (torch.autograd.Function.apply): the devices of the forward's inputs and
    outputs are noted on the node (`ctx`); backward (BackwardCFunction.apply) and the node's
    hooks get gradients on those devices (DTensor, tensor parallelism, DataParallel and
    pipelining are built on such Functions);
  * Tensor.register_hook / register_post_accumulate_grad_hook: the tensor's device;
  * saved_tensors_hooks (activation checkpointing) and engine callbacks (FSDP, DDP): run in the mode.

Hooks on the nodes of torch's own C++ operators are not wrapped (their classes are C types);
FSDP1's, on its flat parameters' AccumulateGrad nodes, is wrapped where FSDP defines it
(grader.probe.vgpu.dist).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, Sequence

import torch
import torch.autograd.function as autograd_function
import torch.autograd.variable

from grader.probe.vgpu.devices import VirtualCuda
from grader.probe.vgpu.errors import TAG

INPUTS = "_vcuda_inputs"  # on a custom Function's node: the devices of the forward's inputs
OUTPUTS = "_vcuda_outputs"  # ... and of its outputs
WRAPPED = "_vcuda_in_mode"


def _tags(values: Sequence[Any]) -> list[int | None]:
    """The device tag of each tensor among `values` (None for anything else)."""
    return [getattr(value, TAG, None) if isinstance(value, torch.Tensor) else None for value in values]


def _as_tuple(value: Any) -> tuple:
    return value if isinstance(value, tuple) else (value,)


Tags = Sequence[Any]  # per gradient: a device tag (or None), or the Tags of a tuple of gradients


def tag_gradients(v: VirtualCuda, grads: Sequence[Any], tags: Tags) -> None:
    """Tag each untagged gradient with the device of the tensor it belongs to."""
    for grad, tag in zip(grads, tags):
        if isinstance(grad, (tuple, list)) and isinstance(tag, (tuple, list)):
            tag_gradients(v, grad, tag)
        elif isinstance(grad, torch.Tensor) and isinstance(tag, int) and getattr(grad, TAG, None) is None:
            v.tag(grad, tag)


def in_mode(v: VirtualCuda, fn: Callable, tags_of: Callable[[tuple], Tags] | None = None) -> Callable:
    """`fn`, run in the virtual mode; `tags_of(args)` gives the devices of its gradient arguments."""
    if getattr(fn, WRAPPED, False):
        return fn

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if tags_of is not None:
            tag_gradients(v, args, tags_of(args))
        with v.active():
            return fn(*args, **kwargs)

    setattr(wrapped, WRAPPED, True)
    return wrapped


def _function_apply(original: Callable) -> classmethod:
    """Function.apply that notes the devices of the forward's tensors on the node."""

    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        outputs = original.__func__(cls, *args, **kwargs)
        node = next((t.grad_fn for t in _as_tuple(outputs) if isinstance(t, torch.Tensor) and t.grad_fn is not None), None)
        if isinstance(node, autograd_function.BackwardCFunction):
            setattr(node, INPUTS, _tags(args))
            setattr(node, OUTPUTS, _tags(_as_tuple(outputs)))
        return outputs

    return classmethod(apply)


def _node_hook(v: VirtualCuda, method: Callable, tags_of: Callable[[Any], Tags]) -> Callable:
    """A BackwardCFunction hook registration: the hook runs in the mode, its gradients tagged
    (`tags_of(node)`: a hook gets (grad_inputs, grad_outputs), a pre-hook (grad_outputs,))."""

    @functools.wraps(method)
    def register(node: Any, fn: Callable) -> Any:
        return method(node, in_mode(v, fn, lambda args: tags_of(node)))

    return register


def _tensor_hook(v: VirtualCuda, method: Callable) -> Callable:
    """Tensor.register_hook and friends: the hook runs in the mode, its gradient on the tensor's device."""

    @functools.wraps(method)
    def register(tensor: torch.Tensor, hook: Callable) -> Any:
        owner = weakref.ref(tensor)
        return method(tensor, in_mode(v, hook, lambda args: [getattr(owner(), TAG, None)] * len(args)))

    return register


def _backward(v: VirtualCuda, apply: Callable) -> Callable:
    """BackwardCFunction.apply: the custom Function's backward in the mode, gradients on the outputs' devices."""

    @functools.wraps(apply)
    def backward(node: Any, *grads: Any) -> Any:
        tag_gradients(v, grads, getattr(node, OUTPUTS, ()))
        with v.active():
            return apply(node, *grads)

    return backward


def gpu_leaves(roots: Sequence[Any]) -> list[tuple[torch.Tensor, int]]:
    """The leaves a backward from `roots` (tensors or gradient edges) accumulates gradients
    into, that live on a virtual GPU, with their devices: the variables of the AccumulateGrad
    nodes reachable from the roots' nodes."""
    stack = [getattr(root, "grad_fn", None) or getattr(root, "node", None) for root in roots]
    seen: set[Any] = set()
    found = []
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)
        if isinstance(leaf, torch.Tensor):
            tag = getattr(leaf, TAG, None)
            if isinstance(tag, int) and tag >= 0:
                found.append((leaf, tag))
            continue
        stack.extend(edge[0] for edge in node.next_functions)
    return found


class _Engine(torch._C._ImperativeEngine):
    """The autograd engine, its queued callbacks run in the virtual mode. The gradients a
    backward accumulates into leaves on virtual GPUs (made in C++) are put on the leaves'
    devices when it ends, so that the memory statistics count them as CUDA would."""

    def __init__(self, vcuda: VirtualCuda) -> None:
        super().__init__()
        self.vcuda = vcuda

    def queue_callback(self, callback: Callable[[], None]) -> None:
        return super().queue_callback(in_mode(self.vcuda, callback))

    def run_backward(self, roots: Sequence[Any], *args: Any, **kwargs: Any) -> Any:
        accumulating = kwargs.get("accumulate_grad", args[5] if len(args) > 5 else True)
        leaves = gpu_leaves(roots) if accumulating else []
        result = super().run_backward(roots, *args, **kwargs)
        for leaf, tag in leaves:
            grad = leaf.grad
            if grad is not None and getattr(grad, TAG, None) != tag:  # a gradient accumulated in place is counted already
                self.vcuda.tag(grad, tag)
        return result


def install_autograd(v: VirtualCuda) -> None:
    """Wrap the autograd engine's Python callbacks (see the module docstring)."""
    function = autograd_function.Function
    function.apply = _function_apply(function.__dict__["apply"])
    node = autograd_function.BackwardCFunction
    node.apply = _backward(v, node.apply)
    node.register_hook = _node_hook(v, node.register_hook, lambda n: (getattr(n, INPUTS, ()), getattr(n, OUTPUTS, ())))
    node.register_prehook = _node_hook(v, node.register_prehook, lambda n: (getattr(n, OUTPUTS, ()),))
    for name in ("register_hook", "register_post_accumulate_grad_hook"):
        setattr(torch.Tensor, name, _tensor_hook(v, getattr(torch.Tensor, name)))
    push = torch._C._autograd._push_saved_tensors_default_hooks
    torch._C._autograd._push_saved_tensors_default_hooks = lambda pack, unpack: push(in_mode(v, pack), in_mode(v, unpack))
    torch.autograd.variable.Variable._execution_engine = _Engine(v)
