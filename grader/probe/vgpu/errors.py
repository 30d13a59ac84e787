"""CUDA's exceptions, as a real GPU build of PyTorch raises them, for the virtual GPUs.

Device mismatches. CUDA reports a tensor on the wrong device in one of two wordings, and which
one depends on the kernel that meets it:

  * kernels whose inputs are checked one argument at a time, in the order of the operator's
    schema (matrix products, `index_select`, the NLL losses, `cat`, layer norm):
    "Expected all tensors to be on the same device, but got mat1 is on cuda:1, different from
    other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)" — the first
    checked argument sets the device the others must share;
  * TensorIterator kernels (elementwise ops, reductions, most losses): "Expected all tensors to
    be on the same device, but found at least two devices, cuda:0 and cpu!" — the first
    non-CPU device comes first, and a 0-dim CPU tensor is allowed.

`mismatch_error` sees the Python-level call (nn.Linear's forward calls F.linear, which CUDA
runs as `addmm(bias, input, weight.t())`), so the calls students meet most are mapped here to
the kernel CUDA runs and its argument names; every other call gets the TensorIterator wording.
Convolutions compare tensor types first ("Input type (torch.FloatTensor) and weight type
(torch.cuda.FloatTensor) should be the same ...").

An out-of-range device raises torch.AcceleratorError (a RuntimeError) with CUDA's text; CUDA
used in a child forked after the parent initialised or queried it, torch's RuntimeError.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

TAG = "_vcuda"  # the attribute that carries a tensor's (or a storage's) virtual device
CPU = -1

INVALID_ORDINAL = (
    "CUDA error: invalid device ordinal\n"
    "GPU device may be out of range, do you have enough GPUs?\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)
NO_GPUS = "No CUDA GPUs are available"
BAD_FORK = "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method"  # torch.cuda._lazy_init's
SAME_DEVICE = "Expected all tensors to be on the same device"

Checked = tuple[str, list[tuple[str, Any]]]  # (CUDA's wrapper, [(argument name, value)] in the order CUDA checks them)


def invalid_ordinal() -> RuntimeError:
    """What CUDA raises for cuda:k with k at or above the device count."""
    return torch.AcceleratorError(INVALID_ORDINAL)


def device_name(tag: int) -> str:
    return "cpu" if tag == CPU else f"cuda:{tag}"


def _tag(value: Any) -> int | None:
    return getattr(value, TAG, None) if isinstance(value, torch.Tensor) else None


def _on_gpu(value: Any) -> bool:
    tag = _tag(value)
    return tag is not None and tag >= 0


def _argument(args: tuple, kwargs: dict, position: int, name: str) -> Any:
    return args[position] if len(args) > position else kwargs.get(name)


def _linear(args: tuple, kwargs: dict) -> Checked | None:
    """F.linear: addmm(bias, input, weight.t()) with a 1-D bias and a contiguous (or 2-D) input, else mm(input, weight.t())."""
    inputs, weight, bias = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 1, "weight"), _argument(args, kwargs, 2, "bias")
    if isinstance(bias, torch.Tensor) and (inputs.dim() == 2 or (inputs.is_contiguous() and bias.dim() == 1)):
        return "wrapper_CUDA_addmm", [("self", bias), ("mat1", inputs), ("mat2", weight)]
    return "wrapper_CUDA_mm", [("self", inputs), ("mat2", weight)]


def _matmul(args: tuple, kwargs: dict) -> Checked | None:
    """matmul / @ / mm / bmm: mm for 2-D (or a batch folded onto a 2-D right side), bmm for two 3-D."""
    first, second = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 1, "other")
    if not (isinstance(first, torch.Tensor) and isinstance(second, torch.Tensor)):
        return None
    if first.dim() >= 2 and second.dim() == 2:
        return "wrapper_CUDA_mm", [("self", first), ("mat2", second)]
    if first.dim() == 3 and second.dim() == 3:
        return "wrapper_CUDA_bmm", [("self", first), ("mat2", second)]
    return None


def _embedding(func: Callable, args: tuple, kwargs: dict) -> Checked | None:
    """F.embedding(input, weight) and torch.embedding(weight, indices): weight.index_select(0, indices)."""
    if getattr(func, "__module__", "") == "torch.nn.functional":
        indices, weight = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 1, "weight")
    else:
        weight, indices = _argument(args, kwargs, 0, "weight"), _argument(args, kwargs, 1, "indices")
    return "wrapper_CUDA__index_select", [("self", weight), ("index", indices)]


def _nll(args: tuple, kwargs: dict) -> Checked | None:
    """cross_entropy / nll_loss with class indices: nll_loss_forward (≤ 2-D input) or nll_loss2d_forward."""
    inputs, target, weight = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 1, "target"), _argument(args, kwargs, 2, "weight")
    if not isinstance(target, torch.Tensor) or target.is_floating_point():
        return None
    method = "wrapper_CUDA_nll_loss_forward" if inputs.dim() <= 2 else "wrapper_CUDA__nll_loss2d_forward"
    return method, [("self", inputs), ("target", target), ("weight", weight)]


def _cat(args: tuple, kwargs: dict) -> Checked | None:
    """cat / stack: one TensorList argument, `tensors`."""
    tensors = _argument(args, kwargs, 0, "tensors")
    return "wrapper_CUDA_cat", [("tensors", t) for t in tensors or ()]


def _layer_norm(args: tuple, kwargs: dict) -> Checked | None:
    inputs, weight, bias = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 2, "weight"), _argument(args, kwargs, 3, "bias")
    return "wrapper_CUDA__native_layer_norm", [("input", inputs), ("weight", weight), ("bias", bias)]


CHECKED_KERNELS: dict[str, Callable[..., Checked | None]] = {
    "linear": lambda func, args, kwargs: _linear(args, kwargs),
    "matmul": lambda func, args, kwargs: _matmul(args, kwargs),
    "__matmul__": lambda func, args, kwargs: _matmul(args, kwargs),
    "mm": lambda func, args, kwargs: _matmul(args, kwargs),
    "bmm": lambda func, args, kwargs: _matmul(args, kwargs),
    "embedding": _embedding,
    "cross_entropy": lambda func, args, kwargs: _nll(args, kwargs),
    "nll_loss": lambda func, args, kwargs: _nll(args, kwargs),
    "cat": lambda func, args, kwargs: _cat(args, kwargs),
    "stack": lambda func, args, kwargs: _cat(args, kwargs),
    "layer_norm": lambda func, args, kwargs: _layer_norm(args, kwargs),
}
CONVOLUTIONS = frozenset({"conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"})


def _checked_kernel_error(checked: Checked) -> RuntimeError | None:
    """The argument-by-argument check of a CUDA kernel wrapper: the first defined tensor sets the device."""
    method, arguments = checked
    common = None
    for name, value in arguments:
        tag = _tag(value)
        if tag is None:
            continue
        if common is None:
            common = tag
        elif tag != common:
            return RuntimeError(
                f"{SAME_DEVICE}, but got {name} is on {device_name(tag)}, different from other tensors on {device_name(common)} "
                f"(when checking argument in method {method})"
            )
    return None


def _type_name(tensor: torch.Tensor) -> str:
    """torch.FloatTensor for a CPU float tensor, torch.cuda.FloatTensor on a GPU (Tensor.type() on CUDA)."""
    plain = tensor.type()
    return plain.replace("torch.", "torch.cuda.", 1) if _on_gpu(tensor) else plain


def _convolution_error(args: tuple, kwargs: dict) -> RuntimeError | None:
    """_convolution compares the input's and the parameters' tensor types before any kernel runs."""
    inputs, weight, bias = _argument(args, kwargs, 0, "input"), _argument(args, kwargs, 1, "weight"), _argument(args, kwargs, 2, "bias")
    on_gpu = {name: _on_gpu(t) for name, t in (("input", inputs), ("weight", weight), ("bias", bias)) if isinstance(t, torch.Tensor)}
    if on_gpu.get("weight") is not None and on_gpu["input"] != on_gpu["weight"]:
        suffix = " or input should be a MKLDNN tensor and weight is a dense tensor" if not on_gpu["input"] else ""
        return RuntimeError(f"Input type ({_type_name(inputs)}) and weight type ({_type_name(weight)}) should be the same{suffix}")
    if on_gpu.get("bias") is not None and on_gpu["input"] != on_gpu["bias"]:
        return RuntimeError(f"Input type ({_type_name(inputs)}) and bias type ({_type_name(bias)}) should be the same")
    return None


def tensor_iterator_error(tensors: list[torch.Tensor]) -> RuntimeError | None:
    """TensorIterator's check: the first non-CPU device is the common one; 0-dim CPU tensors may join it."""
    tagged = [(t, tag) for t in tensors if (tag := _tag(t)) is not None]
    common = next((tag for _, tag in tagged if tag != CPU), None)
    if common is None:
        return None
    for tensor, tag in tagged:
        if tag != common and not (tag == CPU and tensor.dim() == 0):
            return RuntimeError(f"{SAME_DEVICE}, but found at least two devices, {device_name(common)} and {device_name(tag)}!")
    return None


def mismatch_error(func: Callable, args: tuple, kwargs: dict, tensors: list[torch.Tensor]) -> RuntimeError:
    """CUDA's exception for the call `func(*args, **kwargs)`, whose tensor arguments `tensors` span two devices."""
    name = getattr(func, "__name__", "")
    error = None
    if name in CONVOLUTIONS:
        error = _convolution_error(args, kwargs)
    mapped = CHECKED_KERNELS.get(name)
    checked = mapped(func, args, kwargs) if error is None and mapped is not None else None
    if checked is not None:
        error = _checked_kernel_error(checked)
    return error or tensor_iterator_error(tensors) or RuntimeError(f"{SAME_DEVICE}, but found at least two devices")
